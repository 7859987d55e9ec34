'use strict'
// ZooKeeperBackend (node-zookeeper-client, the Node package only) against the real
// ZooKeeper 3.8 at $FENCEPOST_ZK_HOSTS (scripts/test starts one server with
// scripts/services/zookeeper.sh). The WebAssembly package has no ZooKeeperBackend: its
// machines refuse the kind (scenarios.test.js checks that).
//
// The disconnection test pauses the server (SIGSTOP through scripts/services/zookeeper.sh,
// resumed in `finally`), only when that script started the server at $FENCEPOST_ZK_HOSTS
// under this $FENCEPOST_STATE; a file's tests run one after another. The kazoo test runs
// kazoo's own Lock from the repository's .venv (scripts/setup python).

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { execFileSync, fork, spawn } = require('node:child_process')
const crypto = require('node:crypto')
const fs = require('node:fs')
const path = require('node:path')
const readline = require('node:readline')

const { fencepost, IMPL, REPO, devRequire, sleep, waitUntil } = require('./impl')

const { Lock, ZooKeeperBackend, ConfigError, BackendError, StaleTokenError, LockLostError } = fencepost

const HOSTS = process.env.FENCEPOST_ZK_HOSTS
const skip = IMPL !== 'napi'
  ? 'ZooKeeper is the Node package\'s alone (WebAssembly workers have no sockets)'
  : HOSTS
    ? false
    : 'FENCEPOST_ZK_HOSTS is not set (scripts/test starts ZooKeeper and sets it; or run scripts/services/zookeeper.sh start and export FENCEPOST_ZK_HOSTS=$(cat .state/zookeeper/hosts))'
const STATE = path.join(process.env.FENCEPOST_STATE || path.join(REPO, '.state'), 'zookeeper')
const ownServer = HOSTS && fs.existsSync(path.join(STATE, 'hosts')) && fs.readFileSync(path.join(STATE, 'hosts'), 'utf8').trim() === HOSTS
const skipPause = skip || (!ownServer && 'the server at FENCEPOST_ZK_HOSTS was not started by scripts/services/zookeeper.sh under this FENCEPOST_STATE')
const PYTHON = path.join(REPO, '.venv', 'bin', 'python')
const skipKazoo = skip || (!fs.existsSync(PYTHON) && 'no .venv with kazoo (scripts/setup python)')

const unique = (prefix) => `${prefix}-${crypto.randomBytes(4).toString('hex')}`
const server = (action) => execFileSync(path.join(REPO, 'scripts', 'services', 'zookeeper.sh'), [action], { stdio: 'ignore' })

/** A raw client for the tests' own view of ZooKeeper. */
async function raw () {
  const zk = devRequire('node-zookeeper-client')
  const client = zk.createClient(HOSTS, { sessionTimeout: 4_000 })
  await new Promise((resolve) => { client.once('connected', resolve); client.connect() })
  const op = (fn) => new Promise((resolve, reject) => fn((e, ...r) => e ? reject(e) : resolve(r)))
  return {
    client,
    children: async (p) => (await op((cb) => client.getChildren(p, cb)).catch((e) => e.getCode && e.getCode() === -101 ? [[]] : Promise.reject(e)))[0],
    data: async (p) => (await op((cb) => client.getData(p, cb)))[0].toString(),
    exists: async (p) => (await op((cb) => client.exists(p, cb)))[0],
    mkdirp: (p) => op((cb) => client.mkdirp(p, cb)),
    close: () => client.close()
  }
}

/** `backend` with every call it runs counted by name (`calls`). */
function counted (backend) {
  const calls = []
  const execute = backend.execute.bind(backend)
  backend.execute = (request, options) => {
    calls.push(request.call)
    return execute(request, options)
  }
  return calls
}

function noOverlap (spans) {
  const sorted = [...spans].sort((a, b) => (a[0] < b[0] ? -1 : 1))
  for (let i = 1; i < sorted.length; i++) {
    assert.ok(sorted[i - 1][1] <= sorted[i][0], `critical sections overlap: ${sorted[i - 1]} and ${sorted[i]}`)
  }
}

test('configuration: a client that is not connected, bad settings, a ttl above the negotiated session timeout', { skip, timeout: 20_000 }, async () => {
  const zk = devRequire('node-zookeeper-client')
  assert.throws(() => new ZooKeeperBackend({}), (e) => e instanceof ConfigError && /node-zookeeper-client Client/.test(e.message))
  const idle = zk.createClient(HOSTS)
  assert.throws(() => new ZooKeeperBackend(idle), (e) => e instanceof ConfigError && /must be connected/.test(e.message))
  await assert.rejects(ZooKeeperBackend.connect(HOSTS, { root: 'locks' }), (e) => e instanceof ConfigError && e.option === 'root')
  await assert.rejects(ZooKeeperBackend.connect(HOSTS, { naming: 'zk' }), (e) => e instanceof ConfigError && e.option === 'naming')
  const backend = await ZooKeeperBackend.connect(HOSTS, { sessionTimeoutMs: 3_000 })
  try {
    // the server negotiates within [1 s, 30 s] (scripts/services/zookeeper.sh)
    assert.equal(backend.sessionTimeoutMs, 3_000)
    assert.ok(backend.sessionId > 0n)
    assert.throws(() => new Lock(backend, 'x', { ttlMs: 3_001 }), (e) => e instanceof ConfigError && e.option === 'ttlMs' && /session timeout the server negotiated \(3000 ms\)/.test(e.message))
    assert.equal(backend.lockPath('report'), '/fencepost/report')
    assert.equal(backend.nodePrefix('report', 'ab'.repeat(16)), `${'ab'.repeat(16)}__lock__`)
  } finally {
    await backend.close()
  }
  const slow = await ZooKeeperBackend.connect(HOSTS, { sessionTimeoutMs: 60_000, naming: 'curator', root: '/locks' })
  try {
    assert.equal(slow.sessionTimeoutMs, 30_000, 'clamped to the server\'s maxSessionTimeout')
    assert.equal(slow.nodePrefix('r', 'ab'.repeat(16)), `_c_${'ab'.repeat(4)}-${'ab'.repeat(2)}-${'ab'.repeat(2)}-${'ab'.repeat(2)}-${'ab'.repeat(6)}-lock-`)
  } finally {
    await slow.close()
  }
})

test('token is the holder node\'s czxid; renewals keep it; release deletes the node', { skip, timeout: 20_000 }, async () => {
  const backend = await ZooKeeperBackend.connect(HOSTS, { sessionTimeoutMs: 2_000 })
  const view = await raw()
  const name = unique('token')
  try {
    const lease = await new Lock(backend, name, { ttlMs: backend.sessionTimeoutMs }).acquire()
    const [node] = await view.children(backend.lockPath(name))
    assert.ok(node.startsWith(backend.nodePrefix(name, lease.ownerId)), node)
    const stat = await view.exists(`${backend.lockPath(name)}/${node}`)
    assert.equal(lease.token, stat.czxid.readBigInt64BE(0))
    assert.equal(stat.ephemeralOwner.readBigInt64BE(0), backend.sessionId)
    assert.equal(await view.data(`${backend.lockPath(name)}/${node}`), lease.ownerId)
    await sleep(2_500) // past the ttl: renewed by `exists` of the own node
    lease.check()
    await lease.release()
    assert.deepEqual(await view.children(backend.lockPath(name)), [])
  } finally {
    await backend.close()
    view.close()
  }
})

test('three waiters are granted in FIFO order; each watches its predecessor, no polling', { skip, timeout: 30_000 }, async () => {
  const name = unique('fifo')
  const backends = await Promise.all([0, 1, 2, 3].map(() => ZooKeeperBackend.connect(HOSTS, { sessionTimeoutMs: 4_000 })))
  const counts = backends.map(counted)
  const view = await raw()
  try {
    const first = await new Lock(backends[0], name, { ttlMs: 4_000 }).acquire()
    const order = []
    const waiters = []
    for (const [i, label] of ['B', 'C', 'D'].entries()) {
      const lock = new Lock(backends[i + 1], name, { ttlMs: 4_000, acquireTimeoutMs: 20_000 })
      waiters.push(lock.using(async (signal, lease) => {
        order.push([label, lease.token, performance.now()])
        await sleep(50)
      }))
      // queued in this order: each waiter's node exists before the next starts
      assert.ok(await waitUntil(async () => (await view.children(backends[0].lockPath(name))).length === i + 2, 5_000))
    }
    await sleep(1_000) // under a renew interval (4000 / 3 ms): parked on one watch each
    for (const calls of counts.slice(1)) {
      // the create's reply carries the listing sent right behind it: queued once, then parked on a watch
      assert.deepEqual(calls, ['create', 'watch'], 'queued once, then parked on a watch')
    }
    const released = performance.now()
    await first.release()
    await Promise.all(waiters)
    assert.deepEqual(order.map(([label]) => label), ['B', 'C', 'D'])
    const tokens = [first.token, ...order.map(([, token]) => token)]
    assert.deepEqual([...tokens].sort((a, b) => (a < b ? -1 : 1)), tokens)
    // woken by the watch, not a backoff
    assert.ok(order[0][2] - released < 500, `B acquired ${(order[0][2] - released).toFixed(0)} ms after the release`)
    for (const calls of counts.slice(1)) {
      // each waiter: its own create, a listing when queued and after each wake-up, at most
      // one watch per predecessor's change, its release
      assert.ok(calls.filter((c) => c === 'watch').length <= 3, JSON.stringify(calls))
    }
    assert.deepEqual(await view.children(backends[0].lockPath(name)), [])
  } finally {
    await Promise.all(backends.map((b) => b.close()))
    view.close()
  }
})

test('a fenced commit after the lease ended is refused (StaleTokenError); a write of its own that fails is a BackendError', { skip, timeout: 20_000 }, async () => {
  const backend = await ZooKeeperBackend.connect(HOSTS, { sessionTimeoutMs: 4_000 })
  const view = await raw()
  const name = unique('fence')
  const log = `/log/${name}`
  try {
    await view.mkdirp(log)
    const lease = await new Lock(backend, name, { ttlMs: 4_000 }).acquire()
    const ops = await backend.fencedCommit(lease, (txn) => txn.create(`${log}/a`, Buffer.from('1')))
    assert.equal(ops.length, 1)
    await assert.rejects(backend.fencedCommit(lease, (txn) => txn.create(`${log}/a`, Buffer.from('2'))),
      (e) => e instanceof BackendError && /node_exists/.test(e.message))
    await lease.release()
    await assert.rejects(backend.fencedCommit(lease, (txn) => txn.create(`${log}/b`, Buffer.from('3'))),
      (e) => e instanceof StaleTokenError && e.token === lease.token && e.highest === 0n && e.resource === backend.lockPath(name))
    assert.deepEqual(await view.children(log), ['a'])
  } finally {
    await backend.close()
    view.close()
  }
})

/** Forks `n` zk-contender.js processes in `rounds` mode; resolves to their spans. */
async function contend (name, log, n, rounds, extra = []) {
  const spans = []
  const ready = []
  const children = []
  for (let i = 0; i < n; i++) {
    const child = fork(path.join(__dirname, 'zk-contender.js'), [HOSTS, name, 'rounds', log, String(rounds)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
    children.push(child)
    ready.push(new Promise((resolve) => child.on('message', (m) => m === 'ready' ? resolve() : spans.push(m.map((x, k) => k < 3 ? BigInt(x) : x)))))
  }
  const exits = children.map((c) => new Promise((resolve) => c.on('exit', resolve)))
  await Promise.all([...ready, ...extra.map((e) => e.ready)])
  for (const c of children) c.send('go')
  for (const e of extra) e.go()
  const codes = await Promise.all([...exits, ...extra.map((e) => e.exit)])
  assert.deepEqual(codes, codes.map(() => 0), 'every contender exits 0')
  return spans
}

test('8 processes with a fenced log: sections never overlap, the log is in token order', { skip, timeout: 120_000 }, async () => {
  const name = unique('eight')
  const log = `/log/${name}`
  const view = await raw()
  try {
    await view.mkdirp(log)
    const spans = await contend(name, log, 8, 5)
    assert.equal(spans.length, 40)
    noOverlap(spans)
    const entries = (await view.children(log)).sort()
    const tokens = await Promise.all(entries.map(async (e) => BigInt(await view.data(`${log}/${e}`))))
    assert.equal(tokens.length, 40)
    assert.deepEqual(tokens, [...spans].sort((a, b) => (a[0] < b[0] ? -1 : 1)).map((s) => s[2]), 'the log is in grant order')
    assert.equal(new Set(tokens).size, 40)
    assert.deepEqual([...tokens].sort((a, b) => (a < b ? -1 : 1)), tokens, 'tokens rise')
  } finally {
    view.close()
  }
})

test('a kazoo Lock and a fencepost lock on one path exclude each other (two processes of each)', { skip: skipKazoo, timeout: 120_000 }, async () => {
  const name = unique('mix')
  const log = `/log/${name}`
  const view = await raw()
  const kazooSpans = []
  const kazoo = [0, 1].map(() => {
    const child = spawn(PYTHON, [path.join(__dirname, 'zk_kazoo_contender.py'), HOSTS, name, '10'], { stdio: ['pipe', 'pipe', 'inherit'] })
    let readyResolve
    const ready = new Promise((resolve) => { readyResolve = resolve })
    readline.createInterface({ input: child.stdout }).on('line', (line) => {
      if (line === 'ready') readyResolve()
      else kazooSpans.push(JSON.parse(line).map(BigInt))
    })
    return { ready, go: () => child.stdin.write('go\n'), exit: new Promise((resolve) => child.on('exit', resolve)) }
  })
  try {
    await view.mkdirp(log)
    const spans = await contend(name, log, 2, 10, kazoo)
    assert.equal(spans.length, 20)
    assert.equal(kazooSpans.length, 20)
    noOverlap([...spans, ...kazooSpans])
  } finally {
    view.close()
  }
})

test('a holder SIGSTOPped past its session is replaced; on resume its work is cancelled and its fenced write refused', { skip, timeout: 60_000 }, async () => {
  const backend = await ZooKeeperBackend.connect(HOSTS, { root: '/locks', sessionTimeoutMs: 2_000 })
  const view = await raw()
  const name = unique('stop')
  const log = `/log/${name}`
  await view.mkdirp(log)
  const child = fork(path.join(__dirname, 'zk-contender.js'), [HOSTS, name, 'hold', log], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
  const messages = []
  const held = new Promise((resolve) => child.on('message', (m) => m === 'held' ? resolve() : messages.push(m)))
  const exit = new Promise((resolve) => child.on('exit', resolve))
  try {
    await held
    child.kill('SIGSTOP')
    const t0 = performance.now()
    // the paused holder's session (2 s) expires on the server; another takes over
    await new Lock(backend, name, { ttlMs: backend.sessionTimeoutMs, acquireTimeoutMs: 15_000 }).using(async (signal, lease) => {
      const took = performance.now() - t0
      assert.ok(took > 1_500 && took < 8_000, `took over after ${took.toFixed(0)} ms`)
      child.kill('SIGCONT')
      assert.ok(await waitUntil(() => messages.length > 0, 20_000), 'the resumed holder reports')
      lease.check()
    })
    assert.deepEqual(messages[0], ['lost', true], 'its work was cancelled and its write refused')
    assert.deepEqual(await view.children(log), [], 'nothing written by the stale holder')
    assert.equal(await exit, 0)
  } finally {
    child.kill('SIGCONT')
    await backend.close()
    view.close()
  }
})

test('a disconnection shorter than the session keeps the lock; a longer one loses it by the validity deadline', { skip: skipPause, timeout: 40_000 }, async () => {
  const backend = await ZooKeeperBackend.connect(HOSTS, { sessionTimeoutMs: 4_000 })
  let paused = false
  try {
    const lease = await new Lock(backend, unique('cut'), { ttlMs: backend.sessionTimeoutMs }).acquire()
    const lost = new Promise((resolve) => lease.signal.addEventListener('abort', () => resolve(performance.now()), { once: true }))
    server('pause'); paused = true
    await sleep(1_000) // a quarter of the session
    server('resume'); paused = false
    await sleep(2_000)
    lease.check()
    server('pause'); paused = true
    const t0 = performance.now()
    const at = await Promise.race([lost, sleep(8_000).then(() => null)])
    assert.ok(at !== null, 'lost')
    // by the validity deadline: at most ttl × 0.99 after the last answered send
    assert.ok(at - t0 < 4_000 * 0.99, `lost ${(at - t0).toFixed(0)} ms after the cut`)
    assert.throws(() => lease.check(), LockLostError)
  } finally {
    if (paused) server('resume')
    await backend.close()
  }
})

// ---- holder metadata, inspection, followers (mirrors tests/python/test_inspect_kz.py) ----

test('inspect: metadata round-trips in the node data; waiters are the contenders behind; free is null', { skip, timeout: 30_000 }, async () => {
  const backend = await ZooKeeperBackend.connect(HOSTS, { sessionTimeoutMs: 4_000 })
  const operator = await ZooKeeperBackend.connect(HOSTS, { sessionTimeoutMs: 4_000 })
  const view = await raw()
  const name = unique('zkinsp')
  const ttlMs = backend.sessionTimeoutMs
  try {
    assert.equal(await operator.inspect(name), null) // no lock path yet
    const meta = fencepost.standardMetadata('nightly report')
    const lease = await new Lock(backend, name, { ttlMs, metadata: meta }).acquire()
    const found = await operator.inspect(name)
    assert.deepEqual({ ...found, metadata: { ...found.metadata } }, { name, owner: lease.ownerId, token: lease.token, ttlLeftMs: null, waiters: 0, metadata: meta })
    const [node] = await view.children(backend.lockPath(name))
    assert.deepEqual(JSON.parse(await view.data(`${backend.lockPath(name)}/${node}`)), meta)
    const waiting = new Lock(operator, name, { ttlMs, acquireTimeoutMs: 1_000 }).acquire().catch((e) => e)
    await waitUntil(async () => (await operator.inspect(name))?.waiters === 1, 1_000)
    assert.equal((await operator.inspect(name)).owner, lease.ownerId)
    assert.ok((await waiting) instanceof fencepost.AcquireTimeoutError)
    await lease.release()
    assert.equal(await operator.inspect(name), null)
    await assert.rejects(operator.inspect(7), (e) => e instanceof ConfigError)
  } finally {
    await backend.close()
    await operator.close()
    view.close()
  }
})

test('list: the root\'s names with the prefix, at most the limit, sorted; free paths left out', { skip, timeout: 30_000 }, async () => {
  const backend = await ZooKeeperBackend.connect(HOSTS, { sessionTimeoutMs: 4_000, root: `/${unique('zkroot')}` })
  const ttlMs = backend.sessionTimeoutMs
  const prefix = unique('job')
  try {
    const names = ['a', 'b', 'c'].map((i) => `${prefix}-${i}`)
    const leases = []
    for (const n of names) leases.push(await new Lock(backend, n, { ttlMs, metadata: { i: n } }).acquire())
    const other = await new Lock(backend, unique('other'), { ttlMs }).acquire()
    await (await new Lock(backend, `${prefix}-free`, { ttlMs }).acquire()).release()
    const found = await backend.list(prefix)
    assert.deepEqual(found.map((h) => h.name), names)
    assert.deepEqual(found.map((h) => h.metadata.i), names)
    assert.deepEqual(found.map((h) => h.token), leases.map((l) => l.token))
    assert.deepEqual((await backend.list(prefix, { limit: 2 })).map((h) => h.name), names.slice(0, 2))
    assert.deepEqual((await backend.list()).map((h) => h.name), [...names, other.name].sort())
    await assert.rejects(backend.list(prefix, { limit: 0 }), (e) => e instanceof ConfigError)
    for (const l of [...leases, other]) await l.release()
    assert.deepEqual(await backend.list(prefix), [])
  } finally {
    await backend.close()
  }
})

test('followers read each leader from its node data, in order', { skip, timeout: 30_000 }, async () => {
  const backend = await ZooKeeperBackend.connect(HOSTS, { sessionTimeoutMs: 4_000 })
  const ttlMs = backend.sessionTimeoutMs
  const name = unique('zkelect')
  try {
    const follower = new fencepost.Election(backend, name, 'follower', { ttlMs })
    assert.equal(await follower.leader(), null)
    const controller = new AbortController()
    const seen = []
    const watching = (async () => {
      for await (const leader of follower.observe({ intervalMs: 20, signal: controller.signal })) seen.push(leader)
    })()
    await sleep(150) // the watcher has seen nobody leading
    const expect = [null]
    for (const who of ['pod-a', 'pod-b', 'pod-c']) {
      const leadership = await new fencepost.Election(backend, name, who, { value: `addr-${who}`, ttlMs }).campaign()
      assert.deepEqual(await follower.leader(), { identity: who, value: `addr-${who}`, token: leadership.token })
      await sleep(250) // terms longer than the observation interval
      await leadership.resign()
      await sleep(250)
      expect.push({ identity: who, value: `addr-${who}`, token: leadership.token }, null)
    }
    controller.abort()
    await watching
    assert.deepEqual(seen, expect)
  } finally {
    await backend.close()
  }
})
