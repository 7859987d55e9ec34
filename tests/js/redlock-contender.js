'use strict'
// A process that contends for one Redlock lock over several real masters (forked by
// redlock.test.js, like a separate service would be). Arguments: the masters' URLs
// (comma-separated), the log server's URL (a Redis of its own, not a master), key prefix,
// lock name, rounds, client ('ioredis' | 'node-redis').
//
// It connects, tells the parent it is ready, waits for 'go', then `rounds` times: takes the
// lock, holds it a moment, checks the lease, and appends [start_ns, end_ns, token, pid,
// client] to a list on the log server. Times are process.hrtime.bigint(): CLOCK_MONOTONIC,
// one clock for every process on Linux. Exits non-zero on any failure.

const { fencepost, devRequire, sleep } = require('./impl')

const HOLD_MS = 2 // inside the critical section
const PAUSE_MS = 5 // at most, between sections: lets the others in

async function connect (url, kind) {
  if (kind === 'ioredis') {
    const client = new (devRequire('ioredis'))(url, { maxRetriesPerRequest: 2 })
    return { client, close: () => client.quit() }
  }
  const client = devRequire('redis').createClient({ url })
  await client.connect()
  return { client, close: () => client.quit() }
}

async function main () {
  const [urls, logUrl, prefix, name, roundsText, kind] = process.argv.slice(2)
  const rounds = Number(roundsText)
  const masters = await Promise.all(urls.split(',').map((u) => connect(u, kind)))
  const log = await connect(logUrl, 'ioredis')
  const backend = new fencepost.RedlockBackend(masters.map((m) => m.client), { keyPrefix: prefix })
  const lock = new fencepost.Lock(backend, name, { ttlMs: 2_000, acquireTimeoutMs: 40_000, retryBaseMs: 2, retryMaxMs: 30 })
  const go = new Promise((resolve) => process.once('message', resolve))
  process.send('ready')
  await go
  for (let i = 0; i < rounds; i++) {
    await lock.using(async (signal, lease) => {
      const start = process.hrtime.bigint()
      await sleep(HOLD_MS)
      lease.check()
      const end = process.hrtime.bigint()
      await log.client.rpush(`${prefix}log`, JSON.stringify([String(start), String(end), String(lease.token), process.pid, kind]))
    })
    await sleep(Math.random() * PAUSE_MS)
  }
  await backend.close()
  await Promise.all([...masters, log].map((m) => m.close()))
}

main().then(
  () => { process.exitCode = 0; process.disconnect?.() },
  (error) => { console.error(`redlock contender ${process.pid}:`, error); process.exitCode = 1; process.disconnect?.() }
)
