// Many held leases in one Node process (scripts/bench): the requests their renewals send
// to Redis and the client CPU they cost, fencepost beside node-redlock's using().
//
// usage: node many_leases.mjs --redis redis://127.0.0.1:PORT [--leases N] [--ttl-ms MS]
//                             [--seconds S] [--case NAME] [--json FILE]
//
// Each case runs in a process of its own: it takes N leases (TTL --ttl-ms) on distinct
// names, holds them --seconds while they renew, and counts what reached the server in
// that window from Redis' own INFO commandstats, as bench/python/many_leases.py does:
// requests (script calls: every library here renews with a Lua script), commands (every
// command the server ran, those inside scripts included) and the process's CPU time.
//
//   fencepost        new Lock(new RedisBackend(ioredis), name, { ttlMs }).acquire() × N: the
//                    lock machine renews on its own (every ttl/3), batching leases due
//                    together into renew_many script calls
//   redlock-using    redlock 5.0.0-beta.2 on one ioredis client, redlock.using([name], ttlMs,
//                    routine) × N: its automatic extension extends each lock once less than
//                    automaticExtensionThreshold (500 ms) is left, one request a lock
//
// At the end each case checks that every lease is still held on the server, then
// releases them.

import { spawnSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const require = createRequire(import.meta.url)
const HERE = path.dirname(fileURLToPath(import.meta.url))
const FILE = fileURLToPath(import.meta.url)
const SCRIPT_CALLS = ['eval', 'evalsha', 'eval_ro', 'evalsha_ro']
const CASES = [
  ['fencepost', 'fencepost', '`Lock(RedisBackend(ioredis))`, `acquire()`: renewals by the lock machine'],
  ['redlock-using', 'peer', 'node-redlock `using()` on one client: automatic extension, one request a lock']
]

function args () {
  const a = { leases: 10_000, ttlMs: 30_000, seconds: 60 }
  const argv = process.argv.slice(2)
  for (let i = 0; i < argv.length; i += 2) {
    const [k, v] = [argv[i], argv[i + 1]]
    if (k === '--redis') a.redis = v
    else if (k === '--leases') a.leases = Number(v)
    else if (k === '--ttl-ms') a.ttlMs = Number(v)
    else if (k === '--seconds') a.seconds = Number(v)
    else if (k === '--case') a.case = v
    else if (k === '--json') a.json = v
    else throw new Error(`many_leases.mjs: unknown argument ${k}`)
  }
  if (!a.redis) throw new Error('many_leases.mjs: --redis URL is required')
  return a
}

async function client (url) {
  const { Redis } = await import('ioredis')
  const c = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 })
  await c.connect()
  return c
}

/** INFO commandstats as { command: calls }. */
async function commandCounts (admin) {
  const counts = {}
  for (const line of (await admin.info('commandstats')).split('\n')) {
    const m = /^cmdstat_([^:]+):calls=(\d+)/.exec(line)
    if (m) counts[m[1]] = Number(m[2])
  }
  return counts
}

/** The server's command counts and this process's CPU over `seconds`. */
async function measure (admin, seconds) {
  const before = await commandCounts(admin)
  const cpu0 = process.cpuUsage()
  const t0 = performance.now()
  await new Promise((resolve) => setTimeout(resolve, seconds * 1000))
  const after = await commandCounts(admin)
  const cpu = process.cpuUsage(cpu0)
  const elapsed = (performance.now() - t0) / 1000
  const delta = {}
  for (const k of Object.keys(after)) delta[k] = after[k] - (before[k] || 0)
  delta.info = (delta.info || 0) - 1 // the INFO that read `before`
  const requests = SCRIPT_CALLS.reduce((n, k) => n + (delta[k] || 0), 0)
  const commands = Object.entries(delta).reduce((n, [k, v]) => k === 'info' ? n : n + v, 0)
  return {
    seconds: Math.round(elapsed * 100) / 100,
    requests_per_s: requests / elapsed,
    commands_per_s: commands / elapsed,
    cpu_ms_per_s: (cpu.user + cpu.system) / 1000 / elapsed
  }
}

/** How many of [key, owner] still hold that owner. */
async function heldOnServer (admin, keysAndOwners) {
  let held = 0
  for (let i = 0; i < keysAndOwners.length; i += 1000) {
    const chunk = keysAndOwners.slice(i, i + 1000)
    const values = await admin.pipeline(chunk.map(([key]) => ['get', key])).exec()
    chunk.forEach(([, owner], j) => { if (values[j][1] === owner) held++ })
  }
  return held
}

async function hold ({ redis: url, case: name, leases, ttlMs, seconds }) {
  const admin = await client(url)
  const prefix = `fpbench:many:${randomBytes(4).toString('hex')}:`
  const names = Array.from({ length: leases }, (_, i) => `job:${i}`)
  const started = performance.now()
  let acquired, window, owners, release
  if (name === 'fencepost') {
    const { Lock, RedisBackend } = require(process.env.FENCEPOST_NODE_PACKAGE || path.join(HERE, '..', '..', 'bindings-node'))
    const c = await client(url)
    const backend = new RedisBackend(c, { keyPrefix: prefix })
    const held = []
    for (const n of names) held.push(await new Lock(backend, n, { ttlMs }).acquire())
    acquired = performance.now()
    window = await measure(admin, seconds)
    owners = names.map((n, i) => [backend.lockKey(n), held[i].ownerId])
    release = async () => {
      await Promise.all(held.map((l) => l.release()))
      await backend.close()
      await c.quit()
    }
  } else if (name === 'redlock-using') {
    const { default: Redlock } = await import('redlock')
    const c = await client(url)
    const redlock = new Redlock([c], { retryCount: 0 })
    let stop
    const stopped = new Promise((resolve) => { stop = resolve })
    const locks = []
    const done = []
    for (const n of names) {
      let taken
      const got = new Promise((resolve) => { taken = resolve })
      done.push(redlock.using([prefix + n], ttlMs, async (signal) => {
        taken(signal)
        await stopped
        if (signal.aborted) throw signal.error
      }))
      locks.push(await got)
    }
    acquired = performance.now()
    window = await measure(admin, seconds)
    // using() keeps its Lock to itself: the value is its random id, read back by key
    const values = await admin.pipeline(names.map((n) => ['get', prefix + n])).exec()
    owners = names.map((n, i) => [prefix + n, values[i][1] ?? 'gone'])
    if (locks.some((signal) => signal.aborted)) owners = owners.map(([k]) => [k, 'lost'])
    release = async () => {
      stop()
      await Promise.all(done)
      await c.quit()
    }
  } else {
    throw new Error(`many_leases.mjs: unknown case ${name}`)
  }
  window.held_at_end = await heldOnServer(admin, owners)
  await release()
  await admin.quit()
  return { ...window, case: name, leases, ttl_s: ttlMs / 1000, acquire_s: Math.round((acquired - started) / 10) / 100 }
}

const a = args()
if (a.case) {
  console.log(JSON.stringify(await hold(a)))
} else {
  const rows = []
  const absent = []
  for (const [name, kind, what] of CASES) {
    const run = spawnSync(process.execPath, [FILE, '--redis', a.redis, '--case', name, '--leases', String(a.leases), '--ttl-ms', String(a.ttlMs), '--seconds', String(a.seconds)],
      { encoding: 'utf8', timeout: (a.seconds * 3 + 600) * 1000, env: process.env })
    if (run.status !== 0) {
      absent.push({ lib: name, why: ((run.stderr || 'failed').trim().split('\n').pop() || 'failed').slice(0, 200) })
      console.error(`many_leases.mjs: ${name} failed:\n${run.stderr}`)
      continue
    }
    const row = { ...JSON.parse(run.stdout.trim().split('\n').pop()), lib: name, kind, what }
    rows.push(row)
    console.log(`${name.padEnd(18)} ${row.leases} leases, ttl ${row.ttl_s} s, ${row.seconds} s: ${row.requests_per_s.toFixed(1).padStart(9)} requests/s, ` +
      `${row.commands_per_s.toFixed(1).padStart(9)} commands/s, cpu ${row.cpu_ms_per_s.toFixed(1).padStart(6)} ms/s, held at end ${row.held_at_end}`)
  }
  const doc = { lang: 'node', leases: a.leases, ttl_s: a.ttlMs / 1000, seconds: a.seconds, rows, absent }
  if (a.json) writeFileSync(a.json, JSON.stringify(doc, null, 1))
}
