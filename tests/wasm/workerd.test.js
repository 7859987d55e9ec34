'use strict'
// fencepost-wasm in workerd (Cloudflare's Workers runtime, npm `workerd`): the worker in
// worker.mjs takes a lock over HTTP, through the project's Redis REST proxy (Upstash
// protocol; rest-proxy.js) or through etcd's v3 JSON gateway, writes a fenced record and
// releases; two concurrent requests contend and the fenced log shows no overlap (on both
// backends); a lease still expires across awaited I/O.
//
// `workerd serve` runs on a free 127.0.0.1 port with a config written here (the package's
// files embedded as modules under the names the workerd entry imports), started before
// the tests and stopped after, by PID. Needs a built package (bindings-wasm: npm run
// build); the Redis tests need $FENCEPOST_REDIS_URL, the etcd tests $FENCEPOST_ETCD_URL
// (scripts/test starts both servers on loopback and sets them).

const { test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const { spawn } = require('node:child_process')
const crypto = require('node:crypto')
const fs = require('node:fs')
const net = require('node:net')
const os = require('node:os')
const path = require('node:path')
const { createRequire } = require('node:module')

const { startRestProxy } = require('../js/rest-proxy')

const REPO = path.resolve(__dirname, '..', '..')
const PKG = path.join(REPO, 'bindings-wasm')
const pkgRequire = createRequire(path.join(PKG, 'package.json'))
const IORedis = createRequire(path.join(REPO, 'bindings-node', 'package.json'))('ioredis')

const URL = process.env.FENCEPOST_REDIS_URL
const skip = URL ? false : 'FENCEPOST_REDIS_URL is not set (scripts/test starts Redis and sets it)'
const ETCD = process.env.FENCEPOST_ETCD_URL
const skipEtcd = ETCD ? false : 'FENCEPOST_ETCD_URL is not set (scripts/test starts etcd and sets it; or scripts/services/etcd.sh start)'

/** The package files the worker imports, under the module names workerd resolves. */
const MODULES = [
  ['fencepost-wasm/workerd.mjs', 'workerd.mjs', 'esModule'],
  ['fencepost-wasm/web.mjs', 'web.mjs', 'esModule'],
  ['fencepost-wasm/dist/web/fencepost_wasm.js', 'dist/web/fencepost_wasm.js', 'esModule'],
  ['fencepost-wasm/dist/web/fencepost_api.mjs', 'dist/web/fencepost_api.mjs', 'esModule'],
  ['fencepost-wasm/dist/web/fencepost_wasm_bg.wasm', 'dist/web/fencepost_wasm_bg.wasm', 'wasm']
]

const freePort = () => new Promise((resolve, reject) => {
  const s = net.createServer()
  s.once('error', reject)
  s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)) })
})

function config ({ port, restUrl, restToken, etcdUrl }) {
  const q = JSON.stringify
  // `embed` reads paths relative to the config: the files are copied beside it
  const modules = [
    '(name = "worker.mjs", esModule = embed "worker.mjs")',
    ...MODULES.map(([name, , kind]) => `(name = ${q(name)}, ${kind} = embed ${q(name)})`)
  ]
  return `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [
    (name = "main", worker = .worker),
    # the REST proxy and etcd are on loopback: workerd's default outbound allows public addresses only
    (name = "loopback", network = (allow = ["local"])),
  ],
  sockets = [ (name = "http", address = "127.0.0.1:${port}", http = (), service = "main") ],
);
const worker :Workerd.Worker = (
  modules = [
    ${modules.join(',\n    ')}
  ],
  compatibilityDate = "2025-09-01",
  globalOutbound = "loopback",
  bindings = [
    (name = "REST_URL", text = ${q(restUrl)}),
    (name = "REST_TOKEN", text = ${q(restToken)}),
    (name = "ETCD_URL", text = ${q(etcdUrl)}),
  ],
);
`
}

let proxy = null
let redis = null
let workerd = null
let base = null
let dir = null
let output = ''

async function waitForWorkerd (port, deadlineMs) {
  const until = performance.now() + deadlineMs
  for (;;) {
    if (workerd.exitCode !== null) throw new Error(`workerd exited with ${workerd.exitCode}:\n${output}`)
    const up = await new Promise((resolve) => {
      const s = net.connect(port, '127.0.0.1', () => { s.end(); resolve(true) })
      s.once('error', () => resolve(false))
    })
    if (up) return
    if (performance.now() > until) throw new Error(`workerd did not listen within ${deadlineMs} ms:\n${output}`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

before(async () => {
  if (!URL && !ETCD) return
  for (const [, file] of MODULES) {
    if (!fs.existsSync(path.join(PKG, file))) throw new Error(`bindings-wasm/${file} is missing: build the package (cd bindings-wasm && npm run build)`)
  }
  const token = crypto.randomBytes(12).toString('hex')
  if (URL) {
    proxy = await startRestProxy({ redisUrl: URL, token })
    redis = new IORedis(URL, { maxRetriesPerRequest: 2 })
  }
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fencepost-workerd-'))
  const port = await freePort()
  fs.copyFileSync(path.join(__dirname, 'worker.mjs'), path.join(dir, 'worker.mjs'))
  for (const [name, file] of MODULES) {
    fs.mkdirSync(path.dirname(path.join(dir, name)), { recursive: true })
    fs.copyFileSync(path.join(PKG, file), path.join(dir, name))
  }
  fs.writeFileSync(path.join(dir, 'config.capnp'), config({ port, restUrl: proxy === null ? '' : proxy.url, restToken: token, etcdUrl: ETCD ?? '' }))
  const binary = pkgRequire('workerd').default
  const started = performance.now()
  workerd = spawn(binary, ['serve', path.join(dir, 'config.capnp')], { stdio: ['ignore', 'pipe', 'pipe'] })
  workerd.stdout.on('data', (d) => { output += d })
  workerd.stderr.on('data', (d) => { output += d })
  await waitForWorkerd(port, 15_000)
  console.log(`# workerd listening on 127.0.0.1:${port} after ${(performance.now() - started).toFixed(0)} ms`)
  base = `http://127.0.0.1:${port}`
})

after(async () => {
  if (workerd !== null && workerd.exitCode === null) {
    const exited = new Promise((resolve) => workerd.once('exit', resolve))
    process.kill(workerd.pid, 'SIGTERM')
    await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 5_000))])
    if (workerd.exitCode === null && workerd.signalCode === null) process.kill(workerd.pid, 'SIGKILL')
  }
  if (proxy !== null) await proxy.close()
  if (redis !== null) await redis.quit()
  if (dir !== null) fs.rmSync(dir, { recursive: true, force: true })
})

async function call (route) {
  const response = await fetch(`${base}${route}`, { method: 'POST' })
  const body = await response.json()
  assert.equal(response.status, 200, `${route}: ${JSON.stringify(body)}\nworkerd output:\n${output}`)
  return body
}

async function cleanup (prefix) {
  const keys = await redis.keys(`${prefix}*`)
  if (keys.length) await redis.del(...keys)
}

test('workerd: owner ids come from Web Crypto inside a handler; at module scope the error says so', { skip: URL || ETCD ? false : skip }, async () => {
  const body = await call('/entropy')
  assert.equal(body.implementation, 'wasm')
  assert.match(body.inHandler.owner, /^[0-9a-f]{32}$/)
  assert.equal(body.inHandler.requests, 1)
  assert.equal(body.atModuleScope.ok, false)
  assert.equal(body.atModuleScope.code, 'ERR_BACKEND')
  assert.match(body.atModuleScope.message, /inside a request handler/)
})

test('workerd: one request takes the lock, writes a fenced record, releases', { skip }, async () => {
  const prefix = `fpwd:${crypto.randomBytes(6).toString('hex')}:`
  try {
    const body = await call(`/critical?prefix=${prefix}&name=solo&holdMs=50`)
    assert.equal(body.lost, false)
    assert.match(body.ownerId, /^[0-9a-f]{32}$/)
    assert.deepEqual(await redis.lrange(`${prefix}log`, 0, -1), [`start solo ${body.token}`, `end solo ${body.token}`])
    assert.equal(await redis.get(`${prefix}data`), 'solo')
    assert.equal(await redis.get(`${prefix}fence`), body.token)
    assert.equal(await redis.get(`${prefix}{shared}:lock`), null, 'released')
  } finally {
    await cleanup(prefix)
  }
})

test('workerd: two concurrent requests contend; the fenced log shows no overlap', { skip, timeout: 30_000 }, async () => {
  const prefix = `fpwd:${crypto.randomBytes(6).toString('hex')}:`
  try {
    const results = await Promise.all(['A', 'B'].map((name) => call(`/critical?prefix=${prefix}&name=${name}&holdMs=300`)))
    const log = (await redis.lrange(`${prefix}log`, 0, -1)).map((line) => line.split(' '))
    assert.equal(log.length, 4, `log: ${JSON.stringify(log)}`)
    // start X, end X, start Y, end Y: the second holder started after the first ended
    const [[s1, n1, t1], [e1, n1b, t1b], [s2, n2, t2], [e2, n2b, t2b]] = log
    assert.deepEqual([s1, e1, s2, e2], ['start', 'end', 'start', 'end'])
    assert.equal(n1, n1b)
    assert.equal(n2, n2b)
    assert.notEqual(n1, n2)
    assert.equal(t1, t1b)
    assert.equal(t2, t2b)
    assert.ok(BigInt(t2) > BigInt(t1), `tokens rise: ${t1}, ${t2}`)
    // both fenced writes landed in token order: the record is the last holder's
    assert.equal(await redis.get(`${prefix}data`), n2)
    assert.equal(await redis.get(`${prefix}fence`), t2)
    assert.deepEqual(new Set(results.map((r) => r.name)), new Set(['A', 'B']))
  } finally {
    await cleanup(prefix)
  }
})

test('workerd: a lease that cannot renew expires across awaited I/O (loss from the timer, signal aborted)', { skip }, async () => {
  const prefix = `fpwd:${crypto.randomBytes(6).toString('hex')}:`
  try {
    const body = await call(`/expire?prefix=${prefix}`)
    assert.ok(body.validForAtStart > 0 && body.validForAtStart <= 300 * 0.99 - 2, `valid for ${body.validForAtStart} ms`)
    assert.ok(body.elapsedMs >= 500, `performance.now() advanced ${body.elapsedMs} ms across the awaited I/O`)
    assert.equal(body.lostAfterIo, true, 'lost by its timer while the request awaited I/O')
    assert.equal(body.lostReason, 'expired')
    assert.equal(body.signalAborted, true)
    assert.equal(body.checkThrew, 'ERR_LOCK_LOST')
    assert.equal(body.releaseError, 'expired')
    assert.equal(body.validForAtEnd, 0)
  } finally {
    await cleanup(prefix)
  }
})

// ---- etcd through its v3 JSON gateway --------------------------------------------------

const b64 = (s) => Buffer.from(s, 'utf8').toString('base64')

/** One raw gateway call from the test (int64 fields stay strings). */
async function etcd (route, body) {
  const response = await fetch(`${ETCD}${route}`, { method: 'POST', body: JSON.stringify(body) })
  const doc = JSON.parse((await response.text()).split('\n', 1)[0])
  return doc.result ?? doc
}

/** Every key under `prefix` in the order etcd wrote them (mod revision), less the locks'
 * previous-holder records (`{keyPrefix}\0released/{name}`, `{keyPrefix}\0joined/{name}`). */
async function etcdKeys (prefix) {
  const doc = await etcd('/v3/kv/range', { key: b64(prefix), range_end: b64(prefix.slice(0, -1) + String.fromCharCode(prefix.charCodeAt(prefix.length - 1) + 1)) })
  return (doc.kvs ?? [])
    .filter((kv) => !Buffer.from(kv.key, 'base64').toString().includes('\0'))
    .map((kv) => ({ key: Buffer.from(kv.key, 'base64').toString(), value: Buffer.from(kv.value ?? '', 'base64').toString(), create: BigInt(kv.create_revision), mod: BigInt(kv.mod_revision) }))
    .sort((a, b) => (a.mod < b.mod ? -1 : a.mod > b.mod ? 1 : 0))
}

async function etcdCleanup (prefix) {
  await etcd('/v3/kv/deleterange', { key: b64(prefix), range_end: b64(prefix.slice(0, -1) + '0') })
}

test('workerd + etcd: one request takes a correctness lock through the gateway, writes fenced, releases', { skip: skipEtcd }, async () => {
  const prefix = `fpwd/${crypto.randomBytes(6).toString('hex')}/`
  try {
    const body = await call(`/etcd-critical?prefix=${prefix}&name=solo&holdMs=50`)
    assert.equal(body.lost, false)
    assert.match(body.ownerId, /^[0-9a-f]{32}$/)
    assert.equal(body.holderKey, `${prefix}locks/shared/${BigInt(body.leaseId).toString(16).padStart(16, '0')}`)
    const token = BigInt(body.token)
    const [start, end] = body.revisions.map(BigInt)
    assert.ok(token < start && start < end, `token ${token}, writes at ${start}, ${end}`)
    const t = body.token.padStart(20, '0')
    assert.deepEqual((await etcdKeys(prefix)).map((k) => [k.key, k.value, k.mod]), [
      [`${prefix}data`, 'solo', start],
      [`${prefix}log/${t}-1`, 'start solo', start],
      [`${prefix}log/${t}-2`, 'end solo', end]
    ].sort((a, b) => (a[2] < b[2] ? -1 : a[2] > b[2] ? 1 : a[0] < b[0] ? -1 : 1)))
    assert.deepEqual(await etcdKeys(`${prefix}locks/`), [], 'released: the holder key is gone')
    const lease = await etcd('/v3/lease/timetolive', { ID: body.leaseId })
    assert.equal(lease.TTL, '-1', 'the lease was revoked')
  } finally {
    await etcdCleanup(prefix)
  }
})

test('workerd + etcd: two concurrent requests contend; the fenced log shows no overlap', { skip: skipEtcd, timeout: 30_000 }, async () => {
  const prefix = `fpwd/${crypto.randomBytes(6).toString('hex')}/`
  try {
    const results = await Promise.all(['A', 'B'].map((name) => call(`/etcd-critical?prefix=${prefix}&name=${name}&holdMs=300`)))
    // the log in the order etcd applied the writes: start X, end X, start Y, end Y
    const log = (await etcdKeys(`${prefix}log/`)).map((k) => [k.value, k.key.slice(`${prefix}log/`.length), k.mod])
    assert.equal(log.length, 4, `log: ${JSON.stringify(log, (_, v) => typeof v === 'bigint' ? String(v) : v)}`)
    const [[s1, k1], [e1, k1b], [s2, k2], [e2, k2b]] = log
    const [n1, n2] = [s1.split(' ')[1], s2.split(' ')[1]]
    assert.deepEqual([s1, e1, s2, e2], [`start ${n1}`, `end ${n1}`, `start ${n2}`, `end ${n2}`])
    assert.notEqual(n1, n2)
    // each holder's two entries carry its token; the second holder's token is higher
    const token = (k) => BigInt(k.split('-')[0])
    assert.equal(token(k1), token(k1b))
    assert.equal(token(k2), token(k2b))
    assert.ok(token(k2) > token(k1), `tokens rise: ${token(k1)}, ${token(k2)}`)
    assert.deepEqual(new Set(results.map((r) => r.name)), new Set(['A', 'B']))
    assert.deepEqual(results.map((r) => BigInt(r.token)).sort((a, b) => (a < b ? -1 : 1)), [token(k1), token(k2)])
    // the record is the last holder's, and nothing of the lock is left
    assert.equal((await etcdKeys(`${prefix}data`))[0].value, n2)
    assert.deepEqual(await etcdKeys(`${prefix}locks/`), [])
  } finally {
    await etcdCleanup(prefix)
  }
})
