'use strict'
// Leader election (Election, Leadership) on the in-memory backend: terms and their
// callbacks exactly once and in order under resign, loss, cancel and close; and 8
// candidates in separate processes on etcd ($FENCEPOST_ETCD_URL) with a fenced log in
// token order. Mirrors tests/python/test_election.py.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { fork } = require('node:child_process')
const crypto = require('node:crypto')
const path = require('node:path')

const { fencepost, sleep } = require('./impl')

const { Election, Leadership, MemoryBackend, EtcdBackend, ConfigError, LockLostError, AcquireTimeoutError, STOP_REASONS } = fencepost

/** The callbacks of an election, in order. */
function recorder () {
  const seen = []
  return {
    seen,
    onStartedLeading: (l) => seen.push(['started', l.token]),
    onStoppedLeading: (l, reason) => seen.push(['stopped', l.token, reason])
  }
}

const callbacks = (r) => ({ onStartedLeading: r.onStartedLeading, onStoppedLeading: r.onStoppedLeading })

test('resign ends the term once and frees the lock at once', async () => {
  const backend = new MemoryBackend()
  const r = recorder()
  const a = new Election(backend, 'jobs', 'pod-a', { value: '10.0.0.1', ttlMs: 30_000, ...callbacks(r) })
  const b = new Election(backend, 'jobs', 'pod-b', { ttlMs: 30_000 })
  const leadership = await a.campaign()
  assert.ok(leadership instanceof Leadership)
  assert.deepEqual([leadership.identity, leadership.value, leadership.token], ['pod-a', '10.0.0.1', 1n])
  assert.deepEqual(r.seen, [['started', 1n]])
  await assert.rejects(b.campaign({ timeoutMs: 0 }), AcquireTimeoutError) // one leader at a time
  await leadership.resign()
  await leadership.resign() // idempotent
  assert.equal(leadership.stopReason, 'resigned')
  assert.equal(leadership.signal.aborted, true)
  assert.throws(() => leadership.check(), ConfigError)
  const start = performance.now()
  const other = await b.campaign({ timeoutMs: 1_000 })
  assert.ok(performance.now() - start < 500, 'released, not left to expire')
  assert.equal(other.token, 2n)
  await other.resign()
  assert.deepEqual(r.seen, [['started', 1n], ['stopped', 1n, 'resigned']])
  await backend.close()
})

test('a lost lease ends the term, aborts the work and rejects run with LockLostError', async () => {
  const backend = new MemoryBackend()
  const r = recorder()
  const election = new Election(backend, 'jobs', 'pod-a', { ttlMs: 300, ...callbacks(r) })
  let aborted = null
  await assert.rejects(election.run(async (signal) => {
    assert.ok(backend.server.deleteLock('jobs')) // someone deleted the key
    await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }))
    aborted = signal.reason
  }), (e) => e instanceof LockLostError && e.code === 'ERR_LOCK_LOST' && e.reason === 'renew_rejected')
  assert.ok(aborted instanceof LockLostError)
  assert.deepEqual(r.seen, [['started', 1n], ['stopped', 1n, 'renew_rejected']])
  await backend.close()
})

test('run with again campaigns after a loss and resolves with the work result', async () => {
  const backend = new MemoryBackend()
  const r = recorder()
  const election = new Election(backend, 'jobs', 'pod-a', { ttlMs: 300, ...callbacks(r) })
  const result = await election.run(async (signal, leadership) => {
    if (leadership.token === 1n) {
      backend.server.deleteLock('jobs')
      await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }))
      return 'lost'
    }
    return leadership.token * 10n
  }, { again: true })
  assert.equal(result, 20n)
  assert.deepEqual(r.seen, [['started', 1n], ['stopped', 1n, 'renew_rejected'], ['started', 2n], ['stopped', 2n, 'resigned']])
  await backend.close()
})

test('aborting run resigns at once, with reason cancelled', async () => {
  const backend = new MemoryBackend()
  const r = recorder()
  const election = new Election(backend, 'jobs', 'pod-a', { ttlMs: 30_000, ...callbacks(r) })
  const controller = new AbortController()
  let started
  const isStarted = new Promise((resolve) => { started = resolve })
  const running = election.run(async (signal) => {
    started()
    await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }))
  }, { signal: controller.signal })
  await isStarted
  controller.abort(new Error('shutting down'))
  await assert.rejects(running, /shutting down/)
  await sleep(10)
  assert.equal(await backend.isLocked('jobs'), false, 'released, not left for its 30 s TTL')
  assert.deepEqual(r.seen, [['started', 1n], ['stopped', 1n, 'cancelled']])
  await backend.close()
})

test('an aborted campaign calls nothing and leaves nothing held', async () => {
  const backend = new MemoryBackend()
  const r = recorder()
  const holder = await new Election(backend, 'jobs', 'pod-a', { ttlMs: 30_000 }).campaign()
  const controller = new AbortController()
  const waiting = new Election(backend, 'jobs', 'pod-b', { ttlMs: 30_000, ...callbacks(r) }).campaign({ signal: controller.signal })
  await sleep(30)
  controller.abort(new Error('stop'))
  await assert.rejects(waiting, /stop/)
  await holder.resign()
  assert.equal(await backend.isLocked('jobs'), false)
  assert.deepEqual(r.seen, [])
  await backend.close()
})

test('closing the backend ends the term with closed', async () => {
  const backend = new MemoryBackend()
  const r = recorder()
  const leadership = await new Election(backend, 'jobs', 'pod-a', { ttlMs: 30_000, ...callbacks(r) }).campaign()
  await backend.close()
  assert.equal(leadership.stopReason, 'closed')
  assert.ok(leadership.signal.reason instanceof LockLostError)
  await leadership.resign() // after the end: nothing
  assert.deepEqual(r.seen, [['started', 1n], ['stopped', 1n, 'closed']])
})

test('bad arguments are refused with ConfigError when the election is built', async () => {
  const backend = new MemoryBackend()
  const refuses = (fn, pattern) => assert.throws(fn, (e) => e instanceof ConfigError && e.code === 'ERR_CONFIG' && pattern.test(e.message))
  refuses(() => new Election(backend, 'jobs', ''), /identity/)
  refuses(() => new Election(backend, 'jobs', 3), /identity/)
  refuses(() => new Election(backend, 'jobs', 'a', { value: 3 }), /value/)
  refuses(() => new Election(backend, 'jobs', 'a', { onStartedLeading: 3 }), /onStartedLeading/)
  refuses(() => new Election(backend, 'jobs', 'a', { autoRenew: false }), /autoRenew/)
  refuses(() => new Election(backend, 'jobs', 'a', { ttl: 3 }), /ttl/)
  refuses(() => new Election(backend, 'jobs', 'a', { purpose: 'correctness' }), /correctness|unsafe/)
  // a fair Redis hand-off stores no metadata, hence no leader's record
  const fair = new MemoryBackend({ fair: true })
  await assert.rejects(new Election(fair, 'jobs', 'a').leader(), (e) => e instanceof ConfigError && e.kind === 'unsupported')
  await fair.close()
  assert.deepEqual([...STOP_REASONS], ['resigned', 'cancelled', 'expired', 'renew_rejected', 'not_held_at_release', 'closed'])
  await backend.close()
})

const ETCD = process.env.FENCEPOST_ETCD_URL

test('8 candidate processes on etcd lead one at a time, with a fenced log in token order', { skip: ETCD ? false : 'FENCEPOST_ETCD_URL is not set', timeout: 180_000 }, async () => {
  const prefix = `fp-elect-${crypto.randomBytes(5).toString('hex')}/`
  const terms = 3
  const spans = []
  const children = []
  for (let i = 0; i < 8; i++) {
    const child = fork(path.join(__dirname, 'election-contender.js'), [ETCD, prefix, 'leader', String(terms)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
    children.push({
      child,
      ready: new Promise((resolve) => child.once('message', resolve)),
      exited: new Promise((resolve) => child.once('exit', resolve))
    })
    child.on('message', (m) => { if (Array.isArray(m)) spans.push(m) })
  }
  await Promise.all(children.map((c) => c.ready))
  for (const c of children) c.child.send('go')
  const codes = await Promise.all(children.map((c) => c.exited))
  assert.deepEqual(codes, Array(8).fill(0))
  assert.equal(spans.length, 8 * terms)
  spans.sort((a, b) => (BigInt(a[0]) < BigInt(b[0]) ? -1 : 1))
  for (let i = 1; i < spans.length; i++) {
    assert.ok(BigInt(spans[i - 1][1]) <= BigInt(spans[i][0]), `two leaders at once: ${spans[i - 1]} and ${spans[i]}`)
  }
  const tokens = spans.map((s) => BigInt(s[2]))
  assert.deepEqual(tokens, [...tokens].sort((a, b) => (a < b ? -1 : 1)))
  for (const s of spans) assert.deepEqual(s[4], [['started', s[2]], ['stopped', s[2], 'resigned']])
  // the fenced log, read back in key order (the token, zero-padded)
  const backend = new EtcdBackend({ endpoints: ETCD })
  const b64 = (s) => Buffer.from(s, 'utf8').toString('base64')
  const key = `${prefix}log/`
  const end = key.slice(0, -1) + String.fromCharCode(key.charCodeAt(key.length - 1) + 1)
  const doc = JSON.parse(await (await fetch(ETCD + '/v3/kv/range', { method: 'POST', body: JSON.stringify({ key: b64(key), range_end: b64(end) }) })).text())
  const logged = doc.kvs.map((kv) => BigInt(Buffer.from(kv.key, 'base64').toString('utf8').slice(key.length)))
  assert.deepEqual(logged, tokens)
  await backend.close()
})

for (const which of ['memory', 'ioredis']) {
  const skip = which === 'memory' || process.env.FENCEPOST_REDIS_URL ? false : 'FENCEPOST_REDIS_URL is not set'
  test(`followers on plain ${which} read the leader from its lease's metadata, in order`, { skip, timeout: 30_000 }, async () => {
    let backend
    if (which === 'memory') {
      backend = new MemoryBackend()
    } else {
      const IORedis = require('./impl').devRequire('ioredis')
      const client = new IORedis(process.env.FENCEPOST_REDIS_URL, { maxRetriesPerRequest: 2 })
      backend = new fencepost.RedisBackend(client)
      backend._testClient = client
    }
    const name = `follow-${crypto.randomBytes(5).toString('hex')}`
    const follower = new Election(backend, name, 'follower')
    assert.equal(await follower.leader(), null)
    const controller = new AbortController()
    const seen = []
    const watching = (async () => {
      for await (const leader of follower.observe({ intervalMs: 20, signal: controller.signal })) seen.push(leader)
    })()
    await sleep(100) // the watcher has seen nobody leading
    const expect = [null]
    for (const who of ['pod-a', 'pod-b']) {
      const leadership = await new Election(backend, name, who, { value: `addr-${who}`, ttlMs: 3_000 }).campaign()
      assert.deepEqual(await follower.leader(), { identity: who, value: `addr-${who}`, token: leadership.token })
      await sleep(200) // terms longer than the observation interval
      await leadership.resign()
      await sleep(200)
      expect.push({ identity: who, value: `addr-${who}`, token: leadership.token }, null)
    }
    controller.abort()
    await watching
    assert.deepEqual(seen, expect)
    await backend.close()
    if (backend._testClient) await backend._testClient.quit()
  })
}

test('followers on etcd observe every change of leader in order', { skip: ETCD ? false : 'FENCEPOST_ETCD_URL is not set', timeout: 60_000 }, async () => {
  const backend = new EtcdBackend({ endpoints: ETCD })
  const name = `observe-${crypto.randomBytes(5).toString('hex')}`
  const follower = new Election(backend, name, 'follower')
  const controller = new AbortController()
  const seen = []
  const watching = (async () => {
    for await (const leader of follower.observe({ intervalMs: 20, signal: controller.signal })) seen.push(leader)
  })()
  const expect = [null]
  for (const who of ['pod-a', 'pod-b', 'pod-c']) {
    const leadership = await new Election(backend, name, who, { value: `addr-${who}`, ttlMs: 3_000, purpose: 'correctness' }).campaign()
    assert.deepEqual(await follower.leader(), { identity: who, value: `addr-${who}`, token: leadership.token })
    await sleep(200) // terms longer than the observation interval
    await leadership.resign()
    await sleep(200)
    expect.push({ identity: who, value: `addr-${who}`, token: leadership.token }, null)
  }
  controller.abort()
  await watching
  assert.deepEqual(seen, expect)
  await backend.close()
})

test('etcdctl elect (etcd\'s own concurrency.Election) and fencepost exclude each other and read each other\'s leader', { skip: ETCD ? false : 'FENCEPOST_ETCD_URL is not set', timeout: 60_000 }, async (t) => {
  const { spawn, spawnSync } = require('node:child_process')
  if (spawnSync('etcdctl', ['version']).status !== 0) return t.skip('no etcdctl')
  const backend = new EtcdBackend({ endpoints: ETCD })
  const name = `interop-${crypto.randomBytes(5).toString('hex')}`
  const etcdName = `${backend.keyPrefix ?? 'fencepost/'}${name}`
  const leadership = await new Election(backend, name, 'pod-a', { value: 'v1', ttlMs: 3_000 }).campaign()
  const env = { ...process.env, ETCDCTL_API: '3' }
  const get = spawnSync('etcdctl', [`--endpoints=${ETCD}`, 'get', '--prefix', `${etcdName}/`, '--sort-by=CREATE', '--order=ASCEND', '--print-value-only'], { env, encoding: 'utf8' })
  assert.equal(get.stdout.split('\n')[0], '{"identity":"pod-a","value":"v1"}')
  const elect = spawn('etcdctl', [`--endpoints=${ETCD}`, 'elect', etcdName, 'etcdctl-value'], { env, stdio: ['ignore', 'pipe', 'inherit'] })
  try {
    await sleep(1_000)
    assert.equal(elect.exitCode, null, 'etcdctl waits while fencepost leads')
    const elected = new Promise((resolve) => elect.stdout.once('data', resolve))
    await leadership.resign()
    assert.match(String(await elected), new RegExp(`^${etcdName}/`))
    const leader = await new Election(backend, name, 'follower').leader()
    assert.equal(leader.identity, null)
    assert.equal(leader.value, 'etcdctl-value')
    assert.ok(leader.token > leadership.token)
    await assert.rejects(new Election(backend, name, 'pod-b', { ttlMs: 3_000 }).campaign({ timeoutMs: 500 }), AcquireTimeoutError)
  } finally {
    elect.kill('SIGINT') // etcdctl resigns on interrupt
    await new Promise((resolve) => elect.exitCode !== null ? resolve() : elect.once('exit', resolve))
  }
  const next = await new Election(backend, name, 'pod-b', { ttlMs: 3_000 }).campaign({ timeoutMs: 10_000 })
  await next.resign()
  await backend.close()
})

test('a leader stopped past its lease is replaced; on resume its work is aborted and its fenced write refused', { skip: ETCD ? false : 'FENCEPOST_ETCD_URL is not set', timeout: 60_000 }, async () => {
  const prefix = `fp-elect-${crypto.randomBytes(5).toString('hex')}/`
  const child = fork(path.join(__dirname, 'election-contender.js'), ['lead', ETCD, prefix, 'leader'], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
  const messages = []
  let notify = null
  child.on('message', (m) => { messages.push(m); notify?.() })
  const next = () => new Promise((resolve) => {
    notify = () => { if (messages.length > 0) resolve(messages.shift()) }
    notify()
  })
  const exited = new Promise((resolve) => child.once('exit', resolve))
  const backend = new EtcdBackend({ endpoints: ETCD, keyPrefix: prefix })
  try {
    assert.equal(await next(), 'leading')
    process.kill(child.pid, 'SIGSTOP') // a GC pause, a frozen VM
    const r = recorder()
    const leadership = await new Election(backend, 'leader', 'new', { ttlMs: 2_000, purpose: 'correctness', ...callbacks(r) }).campaign({ timeoutMs: 15_000 })
    await backend.fencedTxn(leadership.lease, { puts: [[`${prefix}log/new`, 'new']] })
    process.kill(child.pid, 'SIGCONT')
    const outcome = await next()
    assert.equal(outcome.aborted, true, 'the old leader\'s work saw its signal abort')
    assert.equal(outcome.refused, true, 'the old leader\'s fenced write was refused')
    assert.equal(outcome.stopped.length, 1)
    assert.ok(['expired', 'renew_rejected'].includes(outcome.stopped[0]), outcome.stopped[0])
    assert.ok(leadership.token > BigInt(outcome.token))
    await leadership.resign()
    assert.deepEqual(r.seen, [['started', leadership.token], ['stopped', leadership.token, 'resigned']])
  } finally {
    try { process.kill(child.pid, 'SIGCONT') } catch {}
    assert.equal(await exited, 0)
    await backend.close()
  }
})

test('a resign that finds the lease gone is a lost term, not a result', async () => {
  const backend = new MemoryBackend()
  const r = recorder()
  const election = new Election(backend, 'jobs', 'pod-a', { ttlMs: 30_000, ...callbacks(r) })
  await assert.rejects(election.run(async () => {
    backend.server.deleteLock('jobs') // gone before any renewal noticed
    return 'done'
  }), (e) => e instanceof LockLostError && e.reason === 'not_held_at_release')
  assert.deepEqual(r.seen, [['started', 1n], ['stopped', 1n, 'not_held_at_release']])
  await backend.close()
})
