'use strict'
// What a new user meets first: an unreachable server is told as process warnings (at once,
// then rate limited, then its recovery), token 0 refused before anything is sent, the
// unsafe-purpose message in JavaScript words, and backends from a URL or the environment
// (real Redis and etcd on 127.0.0.1, as scripts/test starts them). Mirrors
// tests/python/test_surface.py.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const net = require('node:net')
const crypto = require('node:crypto')

const { fencepost, devRequire, waitUntil } = require('./impl')

const { Lock, MemoryBackend, RedisBackend, EtcdBackend, ConfigError, AcquireTimeoutError, backendFromUrl, backendFromEnv, redisFencedSet, etcdFencedTxn } = fencepost

const REDIS = process.env.FENCEPOST_REDIS_URL
const ETCD = process.env.FENCEPOST_ETCD_URL
const IORedis = devRequire('ioredis')

/** A 127.0.0.1 port nothing listens on (bound, then closed: refused on connect). */
async function deadPort () {
  const server = net.createServer()
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address()
  await new Promise((resolve) => server.close(resolve))
  return port
}

/** Collects the process warnings fencepost emits while `fn` runs. */
async function warningsDuring (fn) {
  const seen = []
  const listener = (w) => { if (w.name === 'FencepostWarning') seen.push(w) }
  process.on('warning', listener)
  try {
    await fn(seen)
    await new Promise((resolve) => setImmediate(resolve)) // warnings are emitted on nextTick
  } finally {
    process.off('warning', listener)
  }
  return seen
}

const prefix = (sep) => `fptest${sep}${crypto.randomUUID().slice(0, 12)}${sep}`

// ---- an unreachable server ----------------------------------------------------------------

test('an unreachable etcd is warned of at once, then at most every reportEveryMs', async () => {
  const backend = new EtcdBackend({ endpoints: `http://127.0.0.1:${await deadPort()}`, requestTimeoutMs: 500 })
  backend._reachability.reportEveryMs = 400
  const started = performance.now()
  const warnings = await warningsDuring(async () => {
    await assert.rejects(
      new Lock(backend, 'ledger', { ttlMs: 5_000, acquireTimeoutMs: 1_000, retryMaxMs: 50, purpose: 'correctness' }).acquire(),
      (e) => e instanceof AcquireTimeoutError && /no etcd endpoint reachable/.test(e.message))
  })
  assert.ok(performance.now() - started < 3_000)
  assert.equal(warnings[0].code, 'FENCEPOST_UNREACHABLE')
  assert.match(warnings[0].message, /^EtcdBackend cannot reach its server: .*acquireTimeoutMs/)
  const later = warnings.slice(1)
  assert.ok(later.length >= 1 && later.length <= 4, warnings.map((w) => w.message).join('\n'))
  for (const w of later) assert.match(w.message, /^EtcdBackend still cannot reach its server: \d+ failed requests in /)
  assert.ok(backend._reachability.failures > warnings.length) // many more failures than reports
  backend.close()
})

test('an unreachable Redis (ioredis) is warned of, and a server that answers again too', { skip: REDIS ? false : 'FENCEPOST_REDIS_URL is not set' }, async () => {
  const real = new URL(REDIS)
  const port = await deadPort()
  // maxRetriesPerRequest: 0 fails queued commands at the first failed connect (ioredis's
  // default offline queue holds them until the request deadline, which is reported then)
  const client = new IORedis({ host: '127.0.0.1', port, maxRetriesPerRequest: 0, retryStrategy: () => 20 })
  client.on('error', () => {})
  const backend = new RedisBackend(client, { keyPrefix: prefix(':') })
  let forwarder = null
  try {
    const warnings = await warningsDuring(async (seen) => {
      const acquiring = new Lock(backend, 'comeback', { ttlMs: 5_000, acquireTimeoutMs: 10_000, retryMaxMs: 50 }).acquire()
      assert.ok(await waitUntil(() => seen.length > 0, 5_000))
      assert.equal(seen[0].code, 'FENCEPOST_UNREACHABLE')
      assert.match(seen[0].message, /^RedisBackend cannot reach its server: /)
      // the port starts answering: a forwarder to the real server
      forwarder = net.createServer((socket) => {
        const upstream = net.connect(Number(real.port), real.hostname)
        socket.pipe(upstream).pipe(socket)
        socket.on('error', () => upstream.destroy())
        upstream.on('error', () => socket.destroy())
      })
      await new Promise((resolve) => forwarder.listen(port, '127.0.0.1', resolve))
      const lease = await acquiring
      assert.ok(lease.token >= 1n)
      await lease.release()
    })
    const back = warnings.filter((w) => w.code === 'FENCEPOST_REACHABLE')
    assert.equal(back.length, 1, warnings.map((w) => w.message).join('\n'))
    assert.match(back[0].message, /^RedisBackend reaches its server again, after \d+ failed requests in /)
  } finally {
    backend.close()
    client.disconnect()
    if (forwarder !== null) await new Promise((resolve) => { forwarder.close(resolve); forwarder.unref() })
  }
})

test('an ioredis client with its default offline queue: the first failed connect warns at once', { skip: REDIS ? false : 'FENCEPOST_REDIS_URL is not set' }, async () => {
  const port = await deadPort()
  // no 'error' listener of our own: the backend's keeps ioredis from logging
  const client = new IORedis({ host: '127.0.0.1', port, retryStrategy: () => 50 })
  const backend = new RedisBackend(client, { keyPrefix: prefix(':') })
  try {
    const started = performance.now()
    const warnings = await warningsDuring(async (seen) => {
      const acquiring = new Lock(backend, 'queued', { ttlMs: 30_000, acquireTimeoutMs: 3_000 }).acquire()
      assert.ok(await waitUntil(() => seen.length > 0, 2_000), 'no warning within 2 s')
      assert.ok(performance.now() - started < 2_000)
      await assert.rejects(acquiring, AcquireTimeoutError)
    })
    assert.equal(warnings[0].code, 'FENCEPOST_UNREACHABLE')
    assert.match(warnings[0].message, /^RedisBackend cannot reach its server: .*ECONNREFUSED/)
  } finally {
    backend.close()
    assert.equal(client.listenerCount('error'), 0) // close() took its listeners back
    client.disconnect()
  }
})

test('requests that get replies warn of nothing', async () => {
  const backend = new MemoryBackend()
  const warnings = await warningsDuring(() => new Lock(backend, 'fine', { ttlMs: 1_000 }).using(() => null))
  assert.deepEqual(warnings, [])
  backend.close()
})

// ---- token 0 and the unsafe-purpose message ------------------------------------------------

test('the fenced helpers refuse token 0n before anything is sent', async () => {
  const range = /token must be a fencing token of a lease \(a bigint in 1n \.\.= 2n \*\* 64n - 1n\), got /
  for (const bad of [0n, -1n, 2n ** 64n]) { // 0n is refused, so the range the message quotes starts at 1n
    assert.throws(() => redisFencedSet('d', 'f', bad, 'v'), (e) => e instanceof ConfigError && range.test(e.message) && e.message.endsWith(`got ${bad}n`))
  }
  assert.throws(() => etcdFencedTxn('fencepost/', 'ledger', '0'.repeat(31) + '1', 0n, [['k', 'v']]), ConfigError)
  assert.equal(redisFencedSet('d', 'f', 1n, 'v').args[0], '1')
  const backend = new MemoryBackend()
  let sent = 0
  const execute = backend.execute.bind(backend)
  backend.execute = (...args) => { sent += 1; return execute(...args) }
  await assert.rejects(backend.fencedSet('d', 'f', 0n, 'v'), ConfigError)
  assert.equal(sent, 0)
  await backend.fencedSet('d', 'f', 1n, 'v')
  assert.equal(sent, 1)
  backend.close()
})

test('the unsafe-purpose error names the backend and the JavaScript option', () => {
  const client = new IORedis({ lazyConnect: true }) // never connects: the check sends nothing
  const cases = [[new MemoryBackend(), 'MemoryBackend (an in-process stand-in for Redis'], [new RedisBackend(client), 'RedisBackend']]
  for (const [backend, label] of cases) {
    assert.throws(() => new Lock(backend, 'money', { purpose: 'correctness' }), (e) => {
      assert.ok(e instanceof ConfigError)
      assert.equal(e.kind, 'unsafe_purpose')
      assert.ok(e.message.startsWith(`a correctness lock on ${label}`), e.message)
      assert.match(e.message, / is unsafe: its fencing tokens can go backwards when a replica is promoted/)
      assert.doesNotMatch(e.message, /redis fencing tokens/)
      assert.match(e.message, /acceptFailoverRisk: true/)
      assert.doesNotMatch(e.message, /ZooKeeper|accept-failover-risk|accept_failover_risk| on redis /)
      return true
    })
    new Lock(backend, 'money', { purpose: 'correctness', acceptFailoverRisk: true }) // eslint-disable-line no-new
    backend.close()
  }
  client.disconnect()
})

// ---- backends from a URL and from the environment -------------------------------------------

test('backendFromEnv: memory://, the key prefix, and the errors', async () => {
  await assert.rejects(backendFromEnv({}, {}), (e) => e instanceof ConfigError && /FENCEPOST_BACKEND_URL is not set/.test(e.message))
  const backend = await backendFromEnv({}, { FENCEPOST_BACKEND_URL: 'memory://', FENCEPOST_KEY_PREFIX: 'app:' })
  assert.ok(backend instanceof MemoryBackend)
  assert.equal(backend.keyPrefix, 'app:')
  backend.close()
  await assert.rejects(backendFromUrl('mysql://user:secret@db.example:5432'), (e) => e instanceof ConfigError && !e.message.includes('secret'))
  await assert.rejects(backendFromUrl('redis://127.0.0.1:1'), (e) => e instanceof ConfigError && e.option === 'redis')
})

test('backendFromUrl on Redis owns the client it made', { skip: REDIS ? false : 'FENCEPOST_REDIS_URL is not set' }, async () => {
  let client = null
  const backend = await backendFromUrl(REDIS, { redis: (url) => { client = new IORedis(url); return client }, keyPrefix: prefix(':') })
  assert.ok(backend instanceof RedisBackend)
  const token = await new Lock(backend, 'from-url', { ttlMs: 5_000, acquireTimeoutMs: 5_000 }).using((signal, lease) => lease.token)
  assert.equal(token, 1n)
  backend.close()
  assert.ok(await waitUntil(() => client.status === 'end', 5_000), client.status)
})

test('backendFromEnv on etcd: comma-separated members', { skip: ETCD ? false : 'FENCEPOST_ETCD_URL is not set' }, async () => {
  const env = { FENCEPOST_BACKEND_URL: `http://127.0.0.1:${await deadPort()}, ${ETCD}`, FENCEPOST_KEY_PREFIX: prefix('/') }
  const backend = await backendFromEnv({}, env)
  assert.ok(backend instanceof EtcdBackend)
  assert.equal(backend.endpoints.length, 2)
  const token = await new Lock(backend, 'env', { ttlMs: 5_000, acquireTimeoutMs: 5_000, purpose: 'correctness' }).using((signal, lease) => lease.token)
  assert.ok(token >= 1n)
  backend.close()
})
