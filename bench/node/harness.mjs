// Node side of scripts/bench: one case per run, one JSON line on stdout.
//
// usage: node harness.mjs uncontended --lib LIB --redis URL --key KEY --cycles N [--warmup N]
//        node harness.mjs contended   --lib LIB --redis URL --key KEY --workers W --seconds S [--hold-ms H]
//        node harness.mjs libs
//
// Every library is used as its documentation shows, with its default retry behaviour, a
// 10 s lease and no acquire timeout (each waits until it gets the lock):
//
//   fencepost        new Lock(new RedisBackend(ioredis), key, { ttlMs: 10000 }): await lock.acquire(), await lease.release()
//                    (the package in bindings-node; the addon from NAPI_RS_NATIVE_LIBRARY_PATH)
//   fencepost-fair   the same with fair hand-off on ({ fair: true }), listed by `libs` only once the
//                    package offers the option
//   raw-ioredis      SET key owner PX 10000 NX, retried at once while taken; release: owner-checked
//                    DEL script (EVALSHA) — the floor: 2 round trips
//   fencepost-scripts  fencepost's acquire/release Lua scripts by hand (EVALSHA), no machine, no
//                    driver: the protocol's floor
//   redlock          redlock 5.0.0-beta.2, one client, retryCount -1 (the default 10 gives up)
//   fencepost-redlock3 new Lock(new RedlockBackend([ioredis] × 3), key, { ttlMs: 10000 }) on the first three
//                    masters of $FENCEPOST_BENCH_MASTERS (the Redlock rows are listed only when it is set)
//   fencepost-redlock5 the same on five masters
//   redlock-redlock3 redlock 5.0.0-beta.2 on the same three masters' clients, retryCount -1
//   redlock-redlock5 the same on five masters
//   redis-semaphore  Mutex(client, key, { lockTimeout: 10000, acquireTimeout: 600000 }) (polls every 10 ms)
//   baton            not a lock, contended runs only: one baton passed round robin (RPUSH onto the
//                    next worker's list, which it BLPOPs) — the wake-up floor of a notified hand-off
//                    on this machine (one round trip, no lock logic), as the Python harness's row
//
// The measurement is the one the Python harness makes (see bench/python/harness.py):
// timestamps are process.hrtime.bigint() (CLOCK_MONOTONIC on Linux, the clock Python's
// time.monotonic_ns() reads); the hold is a blocking Atomics.wait, like time.sleep.

import { fork } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { createRequire } from 'node:module'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const require = createRequire(import.meta.url)
const HERE = path.dirname(fileURLToPath(import.meta.url))
const LEASE_MS = 10_000
const RELEASE_LUA = `if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`

const now = () => process.hrtime.bigint()

/** A contended worker's acquire found the round over (the baton floor only). */
class RoundOver extends Error {}
const sleeper = new Int32Array(new SharedArrayBuffer(4))
function holdUntil (t) {
  const ms = Number(t - now()) / 1e6
  if (ms > 0) Atomics.wait(sleeper, 0, 0, ms)
}

async function client (url) {
  const { Redis } = await import('ioredis')
  const c = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 })
  await c.connect()
  return c
}

// ---- the libraries ------------------------------------------------------------------------

function fencepostPackage () {
  return require(process.env.FENCEPOST_NODE_PACKAGE || path.join(HERE, '..', '..', 'bindings-node'))
}

// Where this build takes the fair hand-off switch (the core's RedisBackend.fair):
// 'backend' (new RedisBackend(client, { fair: true })), 'lock' (Lock option) or null while
// the package refuses it — the fencepost-fair row appears by itself once it is offered.
async function fairOption () {
  const { Lock, RedisBackend } = fencepostPackage()
  const { Redis } = await import('ioredis')
  const c = new Redis({ lazyConnect: true }) // never connects
  try {
    try { new RedisBackend(c, { fair: true }).close(); return 'backend' } catch { }
    try { new Lock(new RedisBackend(c), 'probe', { fair: true }); return 'lock' } catch { }
    return null
  } finally { c.disconnect() }
}

async function fencepost (url, key, fair) {
  const { Lock, RedisBackend } = fencepostPackage()
  const where = fair ? await fairOption() : null
  if (fair && where === null) throw new Error('this fencepost build has no fair hand-off option')
  const c = await client(url)
  const backend = new RedisBackend(c, where === 'backend' ? { fair: true } : undefined)
  const lock = new Lock(backend, key, where === 'lock' ? { ttlMs: LEASE_MS, fair: true } : { ttlMs: LEASE_MS })
  let lease = null
  return {
    async acquire () { lease = await lock.acquire() },
    async release () { await lease.release() },
    close () { backend.close(); c.disconnect() }
  }
}

/** The first `n` Redlock master URLs of $FENCEPOST_BENCH_MASTERS. */
function benchMasters (n) {
  const urls = (process.env.FENCEPOST_BENCH_MASTERS || '').split(',').filter((u) => u !== '')
  if (urls.length < n) throw new Error(`FENCEPOST_BENCH_MASTERS names ${urls.length} masters, ${n} needed`)
  return urls.slice(0, n)
}

async function fencepostRedlock (key, n) {
  const { Lock, RedlockBackend } = fencepostPackage()
  const clients = await Promise.all(benchMasters(n).map(client))
  const backend = new RedlockBackend(clients)
  const lock = new Lock(backend, key, { ttlMs: LEASE_MS })
  let lease = null
  return {
    async acquire () { lease = await lock.acquire() },
    async release () { await lease.release() },
    close () { backend.close(); for (const c of clients) c.disconnect() }
  }
}

async function redlockOn (key, n) {
  const { default: Redlock } = await import('redlock')
  const clients = await Promise.all(benchMasters(n).map(client))
  const redlock = new Redlock(clients, { retryCount: -1 })
  let lease = null
  return {
    async acquire () { lease = await redlock.acquire([key], LEASE_MS) },
    async release () { await lease.release() },
    close () { for (const c of clients) c.disconnect() }
  }
}

const LIBS = {
  fencepost: (url, key) => fencepost(url, key, false),
  'fencepost-fair': (url, key) => fencepost(url, key, true),

  async 'raw-ioredis' (url, key) {
    const c = await client(url)
    c.defineCommand('fpRelease', { numberOfKeys: 1, lua: RELEASE_LUA })
    let owner = ''
    return {
      async acquire () {
        const mine = randomBytes(16).toString('hex')
        while ((await c.set(key, mine, 'PX', LEASE_MS, 'NX')) !== 'OK') { /* busy retry */ }
        owner = mine
      },
      async release () {
        if ((await c.fpRelease(key, owner)) !== 1) throw new Error('raw release: not the owner')
      },
      close () { c.disconnect() }
    }
  },

  // fencepost's own scripts by hand, no machine, no driver: the protocol's floor
  async 'fencepost-scripts' (url, key) {
    const fp = fencepostPackage()
    const scripts = fp.redisScripts()
    const c = await client(url)
    c.defineCommand('fpAcquire', { numberOfKeys: 2, lua: scripts.acquire.source })
    c.defineCommand('fpRel', { numberOfKeys: 1, lua: scripts.release.source })
    const keys = [`fencepost:{${key}}:lock`, `fencepost:{${key}}:token`]
    let owner = ''
    return {
      async acquire () {
        const mine = randomBytes(16).toString('hex')
        while (Number((await c.fpAcquire(keys[0], keys[1], mine, LEASE_MS))[0]) !== 1) { /* busy retry */ }
        owner = mine
      },
      async release () {
        if ((await c.fpRel(keys[0], owner)) !== 1) throw new Error('scripts release: not the owner')
      },
      close () { c.disconnect() }
    }
  },

  async redlock (url, key) {
    const { default: Redlock } = await import('redlock')
    const c = await client(url)
    const redlock = new Redlock([c], { retryCount: -1 })
    let lease = null
    return {
      async acquire () { lease = await redlock.acquire([key], LEASE_MS) },
      async release () { await lease.release() },
      close () { c.disconnect() }
    }
  },

  'fencepost-redlock3': (url, key) => fencepostRedlock(key, 3),
  'fencepost-redlock5': (url, key) => fencepostRedlock(key, 5),
  'redlock-redlock3': (url, key) => redlockOn(key, 3),
  'redlock-redlock5': (url, key) => redlockOn(key, 5),

  async 'redis-semaphore' (url, key) {
    const { Mutex } = await import('redis-semaphore')
    const c = await client(url)
    const mutex = new Mutex(c, key, { lockTimeout: LEASE_MS, acquireTimeout: 600_000 })
    return {
      async acquire () { await mutex.acquire() },
      async release () { await mutex.release() },
      close () { c.disconnect() }
    }
  },

  // Not a lock: the workers pass one baton round robin. "acquire" BLPOPs the worker's own
  // list, "release" RPUSHes onto the next worker's: one round trip per hand-off, fair and
  // exclusive by construction. `bind` runs in each worker before it says it is ready
  // (worker 0 holds the baton first), `stopAt` once the start is known; contended runs
  // only (run.py's CONTENDED_ONLY).
  async baton (url, key) {
    const c = await client(url)
    let mine = `${key}:baton:0`
    let next = mine
    let stopNs = 0n
    return {
      async bind (index, workers) {
        mine = `${key}:baton:${index}`
        next = `${key}:baton:${(index + 1) % workers}`
        await c.del(mine)
        if (index === 0) await c.rpush(mine, 'baton')
      },
      stopAt (stop) { stopNs = stop },
      async acquire () {
        while ((await c.blpop(mine, 0.05)) === null) {
          if (now() >= stopNs) throw new RoundOver('round over')
        }
      },
      async release () { await c.rpush(next, 'baton') },
      close () { c.disconnect() }
    }
  }
}

// ---- cases --------------------------------------------------------------------------------

async function uncontended (args) {
  const lib = await LIBS[args.lib](args.redis, args.key)
  for (let i = 0; i < args.warmup; i++) { await lib.acquire(); await lib.release() }
  const times = []
  for (let i = 0; i < args.cycles; i++) {
    const t0 = now()
    await lib.acquire()
    await lib.release()
    times.push(Number(now() - t0) / 1e3)
  }
  lib.close()
  return JSON.stringify({ lib: args.lib, cycle_us: times })
}

async function worker (args) {
  const lib = await LIBS[args.lib](args.redis, args.key)
  const occ = await client(args.redis)
  const occKey = args.key + ':occupancy'
  if (lib.bind) await lib.bind(args.index, args.workers)
  const start = await new Promise((resolve) => {
    process.once('message', (m) => resolve(BigInt(m.start_ns)))
    process.send({ ready: true })
  })
  const stop = start + BigInt(Math.round(args.seconds * 1e9))
  if (lib.stopAt) lib.stopAt(stop)
  const hold = BigInt(Math.round(args.holdMs * 1e6))
  const grants = []
  let overlaps = 0
  let errors = 0
  let firstError = null
  const error = (e) => { errors++; firstError ??= `${e?.name}: ${e?.message}` }
  holdUntil(start)
  while (now() < stop) {
    try { await lib.acquire() } catch (e) { if (e instanceof RoundOver) break; error(e); continue }
    const tAcq = now()
    if ((await occ.incr(occKey)) !== 1) overlaps++
    if (tAcq < stop) holdUntil(tAcq + hold)
    await occ.decr(occKey)
    const tRel = now()
    try { await lib.release() } catch (e) { error(e) }
    grants.push(`[${tAcq},${tRel}]`)
  }
  lib.close()
  occ.disconnect()
  // BigInt nanoseconds as exact JSON integers
  const report = `{"worker":${args.index},"grants":[${grants.join(',')}],"overlaps":${overlaps},` +
    `"errors":${errors},"first_error":${JSON.stringify(firstError)}}`
  process.send({ report }, () => process.exit(0))
}

async function contended (args) {
  const file = fileURLToPath(import.meta.url)
  const children = []
  const reports = []
  const ready = []
  for (let i = 0; i < args.workers; i++) {
    const child = fork(file, ['worker', JSON.stringify({ ...args, index: i })], { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] })
    children.push(child)
    ready.push(new Promise((resolve, reject) => {
      child.once('message', resolve)
      child.once('exit', (code) => reject(new Error(`worker ${i} exited (${code}) before it was ready`)))
    }))
    reports.push(new Promise((resolve) => {
      child.on('message', (m) => { if (m.report) resolve(m.report) }) // kept as text: exact integers
      // 'close' comes after the IPC channel is drained ('exit' can overtake the last message)
      child.on('close', (code) => resolve(JSON.stringify({ worker: i, crash: `exited with ${code} before reporting` })))
    }))
  }
  const bound = (ms, what) => new Promise((resolve, reject) => setTimeout(() => reject(new Error(what)), ms).unref())
  await Promise.race([Promise.all(ready), bound(60_000, 'workers not ready in 60 s')])
  const start = now() + 100_000_000n // everyone starts together, 0.1 s from now
  for (const child of children) child.send({ start_ns: start.toString() })
  const killer = setTimeout(() => { for (const c of children) if (c.exitCode === null) c.kill('SIGKILL') },
    100 + args.seconds * 1000 + 30_000) // a waiter may still be in a retry sleep
  const got = await Promise.all(reports)
  clearTimeout(killer)
  const stop = start + BigInt(Math.round(args.seconds * 1e9))
  return `{"lib":${JSON.stringify(args.lib)},"start_ns":${start},"stop_ns":${stop},"workers":${args.workers},` +
    `"reports":[${got.join(',')}]}`
}

// ---- main ---------------------------------------------------------------------------------

function parse (argv) {
  const args = { mode: argv[0], lib: null, redis: 'redis://127.0.0.1:6379/0', key: 'bench', cycles: 1000, warmup: 100, workers: 8, seconds: 5, holdMs: 1 }
  const names = { '--lib': 'lib', '--redis': 'redis', '--key': 'key', '--cycles': 'cycles', '--warmup': 'warmup', '--workers': 'workers', '--seconds': 'seconds', '--hold-ms': 'holdMs' }
  for (let i = 1; i < argv.length; i += 2) {
    const name = names[argv[i]]
    if (!name || argv[i + 1] === undefined) usage(`bad argument ${argv[i]}`)
    args[name] = typeof args[name] === 'number' ? Number(argv[i + 1]) : argv[i + 1]
  }
  return args
}

function usage (why) {
  process.stderr.write(`harness.mjs: ${why}\nusage: node harness.mjs uncontended|contended --lib LIB --redis URL --key KEY [--cycles N --warmup N | --workers W --seconds S --hold-ms H]\n`)
  process.exit(2)
}

const argv = process.argv.slice(2)
if (argv[0] === 'worker') {
  await worker(JSON.parse(argv[1]))
} else {
  const args = parse(argv)
  if (args.mode === 'libs') {
    const fair = await fairOption().catch(() => null)
    // the Redlock rows need the masters, and fencepost's a build with RedlockBackend
    const masters = Boolean(process.env.FENCEPOST_BENCH_MASTERS)
    const redlock = fencepostPackage().RedlockBackend !== undefined
    console.log(Object.keys(LIBS).filter((name) => (fair !== null || !name.endsWith('-fair')) &&
      (!name.includes('-redlock') || (masters && (redlock || !name.startsWith('fencepost-'))))).join('\n'))
  } else {
    if (!(args.lib in LIBS)) usage(`--lib must be one of ${Object.keys(LIBS).join(', ')}`)
    if (args.mode === 'uncontended' && args.lib === 'baton') usage('baton is a contended-only row (one worker passing a baton to itself measures nothing)')
    if (!args.redis.startsWith('redis://127.0.0.1:')) usage('benchmarks talk to a Redis on 127.0.0.1 only')
    const out = args.mode === 'uncontended' ? await uncontended(args) : args.mode === 'contended' ? await contended(args) : usage(`unknown mode ${args.mode}`)
    process.stdout.write(out + '\n', () => process.exit(0))
  }
}
