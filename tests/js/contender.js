'use strict'
// A process that contends for one Redis lock (forked by redis.test.js, like a separate
// service would be). Arguments: url, key prefix, lock name, rounds, client
// ('ioredis' | 'node-redis' | 'ioredis-cluster': url is then a Redis Cluster node, and the
// fenced keys share a hash tag, one script touching both), and optionally 'fair' for fair hand-off and the longest pause
// between sections in ms (default 4; 0 asks again at once).
//
// It connects, tells the parent it is ready, waits for 'go', then `rounds` times: takes the
// lock, writes through the Redis fenced-SET script with the lease's token, holds it a
// moment, checks the lease, and appends [start_ns, end_ns, token, pid, client] to a Redis
// list. Times are process.hrtime.bigint(): CLOCK_MONOTONIC, one clock for every process
// on Linux. Exits non-zero on any failure.

const { fencepost, devRequire, sleep } = require('./impl')

const HOLD_MS = 1 // inside the critical section
const PAUSE_MS = 4 // at most, between sections by default: lets the others in

async function connect (url, kind) {
  if (kind === 'ioredis-cluster') {
    const { hostname, port } = new URL(url)
    const client = new (devRequire('ioredis').Cluster)([{ host: hostname, port: Number(port) }])
    return { client, log: (key, value) => client.rpush(key, value), close: () => client.quit() }
  }
  if (kind === 'ioredis') {
    const IORedis = devRequire('ioredis')
    const client = new IORedis(url, { maxRetriesPerRequest: 2 })
    return { client, log: (key, value) => client.rpush(key, value), close: () => client.quit() }
  }
  const client = devRequire('redis').createClient({ url })
  await client.connect()
  return { client, log: (key, value) => client.rPush(key, value), close: () => client.quit() }
}

async function main () {
  const [url, prefix, name, roundsText, kind, mode, pauseText] = process.argv.slice(2)
  const rounds = Number(roundsText)
  const pauseMs = pauseText === undefined ? PAUSE_MS : Number(pauseText)
  const { client, log, close } = await connect(url, kind)
  const backend = new fencepost.RedisBackend(client, { keyPrefix: prefix, fair: mode === 'fair' })
  const lock = new fencepost.Lock(backend, name, { ttlMs: 2_000, acquireTimeoutMs: 30_000, retryBaseMs: 2, retryMaxMs: 20 })
  const go = new Promise((resolve) => process.once('message', resolve))
  process.send('ready')
  await go
  for (let i = 0; i < rounds; i++) {
    await lock.using(async (signal, lease) => {
      const start = process.hrtime.bigint()
      const tag = kind === 'ioredis-cluster' ? '{fenced}' : ''
      await backend.fencedSet(`${prefix}${tag}data`, `${prefix}${tag}fence`, lease.token, `${process.pid}:${i}`)
      await sleep(HOLD_MS)
      lease.check()
      const end = process.hrtime.bigint()
      await log(`${prefix}log`, JSON.stringify([String(start), String(end), String(lease.token), process.pid, kind]))
    })
    if (pauseMs > 0) await sleep(Math.random() * pauseMs) // 0: ask again at once
  }
  backend.close()
  await close()
}

main().then(
  () => { process.exitCode = 0; process.disconnect?.() },
  (error) => { console.error(`contender ${process.pid}:`, error); process.exitCode = 1; process.disconnect?.() }
)
