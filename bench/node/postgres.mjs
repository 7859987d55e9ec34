// PostgreSQL rows of scripts/bench, Node side: fencepost's PostgresBackend beside a raw
// pg_advisory_lock floor.
//
// usage: node postgres.mjs --pg URL [--cycles N] [--workers W] [--seconds S] [--md FILE] [--json FILE]
//
//   fencepost-pg-lease      new Lock(new PostgresBackend(pg.Pool), key, { ttlMs: 10000 }):
//                           await lock.acquire(), await lease.release() (lease rows)
//   fencepost-pg-lease-pjs  the same on postgres.js (postgres(url))
//   fencepost-pg-session    PostgresBackend(null, { mode: 'session', connect }) with a pg.Client
//                           per lock (connected once per acquisition: its cost is in the row)
//   fencepost-pg-xact       xactLock(pg.Pool, key, work): BEGIN, the lock statement, COMMIT
//                           (tries once: a contended worker retries at once)
//   raw-pg-advisory         SELECT pg_advisory_lock(key) / pg_advisory_unlock(key) on one
//                           pg.Client per worker — the floor: 2 round trips, the server queues
//                           the waiters, no token, no lease
//
// uncontended: one process, 50 warm-up then `cycles` acquire+release cycles, timed with
// process.hrtime.bigint(): p50 / p99 in µs. contended: `workers` forked processes on one
// lock for `seconds`, each holding 1 ms per grant (a blocking Atomics.wait): grants per
// second (all workers), the p50 of hand-offs (release → the next worker's grant) and the
// overlaps of the grant intervals (two holders at once fail the run). --json: the markdown and
// the rows for bench/report.py's --backend (the performance goals).

import { fork } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { createRequire } from 'node:module'
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const require = createRequire(import.meta.url)
const HERE = path.dirname(fileURLToPath(import.meta.url))
const LEASE_MS = 10_000
const LIBS = ['fencepost-pg-lease', 'fencepost-pg-lease-pjs', 'fencepost-pg-session', 'fencepost-pg-xact', 'raw-pg-advisory']

const now = () => process.hrtime.bigint()
const sleeper = new Int32Array(new SharedArrayBuffer(4))
const holdFor = (ms) => Atomics.wait(sleeper, 0, 0, ms)

const fencepost = () => require(process.env.FENCEPOST_NODE_PACKAGE || path.join(HERE, '..', '..', 'bindings-node'))

/** { acquire, release, close } of `lib` on lock `key`. */
async function make (lib, url, key) {
  const pg = require('pg')
  const fp = fencepost()
  if (lib === 'raw-pg-advisory') {
    const c = new pg.Client({ connectionString: url })
    await c.connect()
    const k = fp.advisoryKey(key).toString()
    return {
      acquire: () => c.query('SELECT pg_advisory_lock($1::bigint)', [k]),
      async release () {
        const { rows } = await c.query('SELECT pg_advisory_unlock($1::bigint) AS ok', [k])
        if (!rows[0].ok) throw new Error('raw release: not held')
      },
      close: () => c.end()
    }
  }
  if (lib === 'fencepost-pg-xact') {
    const pool = new pg.Pool({ connectionString: url, max: 2 })
    let release = null
    let holding = null
    return {
      async acquire () {
        for (;;) {
          let granted
          const got = new Promise((resolve) => { granted = resolve })
          holding = fp.xactLock(pool, key, () => { granted(true); return new Promise((resolve) => { release = resolve }) })
            .catch((e) => { if (!(e instanceof fp.AcquireTimeoutError)) throw e; granted(false) })
          if (await got) return
          await holding
        }
      },
      async release () { release(); await holding },
      close: () => pool.end()
    }
  }
  let client, end
  if (lib === 'fencepost-pg-lease-pjs') {
    client = require('postgres')(url, { max: 2, onnotice: () => {} })
    end = () => client.end()
  } else if (lib === 'fencepost-pg-lease') {
    client = new pg.Pool({ connectionString: url, max: 2 })
    end = () => client.end()
  } else {
    client = null
    end = async () => {}
  }
  const backend = lib === 'fencepost-pg-session'
    ? new fp.PostgresBackend(null, { mode: 'session', connect: () => new pg.Client({ connectionString: url }) })
    : new fp.PostgresBackend(client)
  const lock = new fp.Lock(backend, key, { ttlMs: LEASE_MS })
  let lease = null
  return {
    async acquire () { lease = await lock.acquire() },
    async release () { await lease.release() },
    async close () { backend.close(); await end() }
  }
}

async function uncontended (lib, url, cycles) {
  const l = await make(lib, url, `bench-u-${randomUUID().slice(0, 8)}`)
  for (let i = 0; i < 50; i++) { await l.acquire(); await l.release() }
  const times = []
  for (let i = 0; i < cycles; i++) {
    const t0 = now()
    await l.acquire()
    await l.release()
    times.push(Number(now() - t0) / 1e3)
  }
  await l.close()
  return times.sort((a, b) => a - b)
}

async function worker ({ lib, url, key, seconds }) {
  const l = await make(lib, url, key)
  const start = await new Promise((resolve) => {
    process.once('message', (m) => resolve(BigInt(m.start)))
    process.send({ ready: true })
  })
  const stop = start + BigInt(Math.round(seconds * 1e9))
  while (now() < start) holdFor(1)
  const grants = []
  while (now() < stop) {
    await l.acquire()
    const tAcq = now()
    holdFor(1)
    const tRel = now()
    await l.release()
    grants.push(`[${tAcq},${tRel}]`)
  }
  await l.close()
  process.send({ report: `[${grants.join(',')}]` }, () => process.exit(0))
}

async function contended (lib, url, workers, seconds) {
  const key = `bench-c-${randomUUID().slice(0, 8)}`
  const children = Array.from({ length: workers }, () => fork(fileURLToPath(import.meta.url), ['worker', JSON.stringify({ lib, url, key, seconds })], { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] }))
  const reports = children.map((child) => new Promise((resolve, reject) => {
    child.on('message', (m) => { if (m.report) resolve(JSON.parse(m.report)) })
    child.on('close', (code) => reject(new Error(`${lib} worker exited (${code}) before reporting`)))
  }))
  await Promise.all(children.map((child) => new Promise((resolve) => child.once('message', resolve))))
  const start = now() + 200_000_000n
  for (const child of children) child.send({ start: start.toString() })
  const killer = setTimeout(() => { for (const c of children) if (c.exitCode === null) c.kill('SIGKILL') }, seconds * 1000 + 60_000)
  const got = await Promise.all(reports)
  clearTimeout(killer)
  // nanoseconds as numbers: exact below 2^53 ns of uptime (104 days), within 1 µs for years
  const grants = got.flatMap((g, w) => g.map(([a, r]) => [a, r, w])).sort((x, y) => x[0] - y[0])
  let overlaps = 0
  const handoffs = []
  for (let i = 1; i < grants.length; i++) {
    if (grants[i][0] < grants[i - 1][1]) overlaps++
    if (grants[i][2] !== grants[i - 1][2]) handoffs.push((grants[i][0] - grants[i - 1][1]) / 1e3)
  }
  handoffs.sort((a, b) => a - b)
  return { rate: grants.length / seconds, overlaps, handoffP50: handoffs[Math.floor(handoffs.length / 2)] ?? NaN }
}

function parse (argv) {
  const args = { pg: null, cycles: 500, workers: 8, seconds: 5, md: null, json: null }
  for (let i = 0; i < argv.length; i += 2) {
    const name = argv[i].replace(/^--/, '')
    if (!(name in args) || argv[i + 1] === undefined) throw new Error(`bad argument ${argv[i]}`)
    args[name] = typeof args[name] === 'number' ? Number(argv[i + 1]) : argv[i + 1]
  }
  if (!args.pg || !/^postgres(ql)?:\/\/[^@]*@?127\.0\.0\.1:/.test(args.pg)) throw new Error('--pg must be a PostgreSQL URL on 127.0.0.1')
  return args
}

const argv = process.argv.slice(2)
if (argv[0] === 'worker') {
  await worker(JSON.parse(argv[1]))
} else {
  const args = parse(argv)
  const pg = require('pg')
  const setup = new pg.Client({ connectionString: args.pg })
  await setup.connect()
  for (const sql of fencepost().postgresMigration().split(';').map((s) => s.trim()).filter(Boolean)) await setup.query(sql)
  await setup.end()
  const lines = [
    `| library | uncontended p50 (µs) | uncontended p99 (µs) | ${args.workers} workers, grants/s | hand-off p50 (µs) | overlaps |`,
    '| --- | --- | --- | --- | --- | --- |'
  ]
  const rows = []
  for (const lib of LIBS) {
    const t = await uncontended(lib, args.pg, args.cycles)
    const p50 = t[Math.floor(t.length / 2)]
    const p99 = t[Math.min(t.length - 1, Math.floor(t.length * 0.99))]
    const c = await contended(lib, args.pg, args.workers, args.seconds)
    lines.push(`| ${lib} | ${p50.toFixed(0)} | ${p99.toFixed(0)} | ${c.rate.toFixed(0)} | ${c.handoffP50.toFixed(0)} | ${c.overlaps} |`)
    rows.push({ lib, kind: lib.startsWith('raw-') ? 'floor' : 'fencepost', uncontended_p50_us: p50, uncontended_p99_us: p99, grants_per_s: c.rate, handoff_p50_us: Number.isNaN(c.handoffP50) ? null : c.handoffP50, overlaps: c.overlaps })
    console.log(lines[lines.length - 1])
  }
  const text = '## PostgreSQL from Node\n\nOne PostgreSQL 15 on 127.0.0.1 (scripts/services/postgres.sh), ' +
    `${args.cycles} uncontended cycles; ${args.workers} processes on one lock for ${args.seconds} s, each holding 1 ms ` +
    `(bench/node/postgres.mjs). raw-pg-advisory is the floor: a bare session advisory lock, no token, no lease.\n\n${lines.join('\n')}\n`
  if (args.md) fs.writeFileSync(args.md, text)
  if (args.json) fs.writeFileSync(args.json, JSON.stringify({ backend: 'postgres', lang: 'node', title: 'PostgreSQL from Node', markdown: text, rows, absent: [], workers: args.workers }, null, 1) + '\n')
  process.exit(0)
}
