'use strict'
// UpstashRedisBackend (Redis over HTTP, the Upstash REST protocol, fetch only) against the
// real Redis at $FENCEPOST_REDIS_URL through the project's REST proxy (rest-proxy.js, on a
// free 127.0.0.1 port, started here and stopped after). Runs for both implementations
// (FENCEPOST_IMPL=napi|wasm): the adapter lives in the shared JavaScript layer. The same
// adapter runs in workerd and Chromium in tests/wasm.

const { test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const crypto = require('node:crypto')

const { fencepost, devRequire, sleep } = require('./impl')
const { startRestProxy } = require('./rest-proxy')

const {
  Lock, UpstashRedisBackend, ConfigError, LockLostError, AcquireTimeoutError, ProtocolError,
  StaleTokenError, redisScripts
} = fencepost

const URL = process.env.FENCEPOST_REDIS_URL
const skip = URL ? false : 'FENCEPOST_REDIS_URL is not set (scripts/test starts Redis and sets it)'
const IORedis = devRequire('ioredis')

const TOKEN = crypto.randomBytes(12).toString('hex')
let proxy = null
let redis = null

before(async () => {
  if (!URL) return
  proxy = await startRestProxy({ redisUrl: URL, token: TOKEN })
  redis = new IORedis(URL, { maxRetriesPerRequest: 2 })
})

after(async () => {
  if (proxy !== null) await proxy.close()
  if (redis !== null) await redis.quit()
})

/** A fresh key prefix; `done()` deletes its keys. */
function prefixed () {
  const prefix = `fprest:${crypto.randomBytes(6).toString('hex')}:`
  return {
    prefix,
    backend: (options = {}) => new UpstashRedisBackend({ url: proxy.url, token: TOKEN, keyPrefix: prefix, ...options }),
    async done () {
      const keys = await redis.keys(`${prefix}*`)
      if (keys.length) await redis.del(...keys)
    }
  }
}

const aborted = (signal) => new Promise((resolve) => {
  if (signal.aborted) resolve(signal.reason)
  else signal.addEventListener('abort', () => resolve(signal.reason), { once: true })
})

test('acquire, renew and release over REST: rising tokens, the key holds the owner id', { skip }, async () => {
  const { backend, done } = prefixed()
  const b = backend()
  try {
    const lock = new Lock(b, 'rest', { ttlMs: 300 }) // renews every 100 ms
    const tokens = []
    for (let i = 0; i < 2; i++) {
      const lease = await lock.acquire()
      assert.equal(await redis.get(b.lockKey('rest')), lease.ownerId)
      const firstValidUntil = lease.validUntilMs
      await sleep(450) // past the first validity deadline: only renewals keep it
      assert.equal(lease.lost, false)
      assert.ok(lease.validUntilMs > firstValidUntil + 300, 'renewed over REST')
      tokens.push(lease.token)
      await lease.release()
      assert.equal(await redis.get(b.lockKey('rest')), null)
    }
    assert.deepEqual(tokens, [tokens[0], tokens[0] + 1n])
    assert.equal(b.url, proxy.url)
  } finally {
    b.close()
    await done()
  }
})

test('NOSCRIPT falls back to EVAL, after which EVALSHA works again', { skip }, async () => {
  const { backend, done } = prefixed()
  const b = backend()
  try {
    await redis.script('FLUSH')
    const start = proxy.commands.length
    await new Lock(b, 'flushed', { ttlMs: 5_000 }).using(() => {})
    const seen = proxy.commands.slice(start)
    assert.deepEqual(seen.slice(0, 2), ['EVALSHA', 'EVAL'], `commands: ${seen}`)
    const sha = redisScripts().acquire.sha1
    assert.deepEqual(await redis.script('EXISTS', sha), [1])
    const again = proxy.commands.length
    await new Lock(b, 'flushed', { ttlMs: 5_000 }).using(() => {})
    assert.ok(proxy.commands.slice(again).every((c) => c === 'EVALSHA'))
  } finally {
    b.close()
    await done()
  }
})

test('fencedSet over REST: writes, then refuses a lower token with StaleTokenError', { skip }, async () => {
  const { prefix, backend, done } = prefixed()
  const b = backend()
  try {
    await b.fencedSet(`${prefix}row`, `${prefix}row:fence`, 7n, 'seven')
    await b.fencedSet(`${prefix}row`, `${prefix}row:fence`, 7n, 'seven again') // same token: fine
    await assert.rejects(b.fencedSet(`${prefix}row`, `${prefix}row:fence`, 6n, 'six'),
      (e) => e instanceof StaleTokenError && e.highest === 7n && e.token === 6n)
    assert.equal(await redis.get(`${prefix}row`), 'seven again')
    // tokens past 2^53 travel as strings, exactly
    const big = 2n ** 63n - 1n
    await b.fencedSet(`${prefix}row`, `${prefix}row:fence`, big, 'big')
    await assert.rejects(b.fencedSet(`${prefix}row`, `${prefix}row:fence`, big - 1n, 'smaller'),
      (e) => e instanceof StaleTokenError && e.highest === big)
  } finally {
    b.close()
    await done()
  }
})

test('4 backends × 5 critical sections over REST never overlap; tokens rise; fenced writes land', { skip, timeout: 30_000 }, async () => {
  const { prefix, backend, done } = prefixed()
  const backends = Array.from({ length: 4 }, () => backend())
  const log = []
  try {
    await Promise.all(backends.map(async (b, worker) => {
      const lock = new Lock(b, 'contended', { ttlMs: 2_000, retryBaseMs: 5, retryMaxMs: 40 })
      for (let round = 0; round < 5; round++) {
        await lock.using(async (signal, lease) => {
          const start = performance.now()
          await b.fencedSet(`${prefix}data`, `${prefix}fence`, lease.token, `${worker}:${round}`)
          await sleep(10)
          log.push({ start, end: performance.now(), token: lease.token, worker })
        })
      }
    }))
    assert.equal(log.length, 20)
    log.sort((a, b) => a.start - b.start)
    for (let i = 1; i < log.length; i++) {
      assert.ok(log[i - 1].end <= log[i].start, 'critical sections overlap')
      assert.ok(log[i - 1].token < log[i].token, 'tokens rise in order of start')
    }
    assert.equal(BigInt(await redis.get(`${prefix}fence`)), log[log.length - 1].token)
  } finally {
    for (const b of backends) b.close()
    await done()
  }
})

test('a lease expires across awaited I/O when it cannot renew (autoRenew: false)', { skip }, async () => {
  const { prefix, backend, done } = prefixed()
  const b = backend()
  try {
    const lease = await new Lock(b, 'expiring', { ttlMs: 300, autoRenew: false }).acquire()
    const validUntil = lease.validUntilMs
    // an awaited request that takes longer than the lease: a 0.5 s BLPOP through the proxy
    const pop = await fetch(proxy.url, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}` },
      body: JSON.stringify(['BLPOP', `${prefix}nothing`, '0.5'])
    }).then((r) => r.json())
    assert.deepEqual(pop, { result: null })
    assert.ok(performance.now() > validUntil)
    assert.equal(lease.lost, true)
    assert.equal(lease.lostReason, 'expired')
    assert.ok(lease.signal.aborted)
    assert.throws(() => lease.check(), LockLostError)
    await assert.rejects(lease.release(), { code: 'ERR_LOCK_LOST', reason: 'expired' })
  } finally {
    b.close()
    await done()
  }
})

test('fair: a released lock is handed to the parked waiter at once (BLPOP over REST)', { skip, timeout: 10_000 }, async () => {
  const { backend, done } = prefixed()
  const [a, w] = [backend({ fair: true }), backend({ fair: true })]
  try {
    assert.equal(a.fair, true)
    const held = await new Lock(a, 'fair', { ttlMs: 5_000 }).acquire()
    // a long backoff: without the wake-up the waiter would retry only much later
    const waiting = new Lock(w, 'fair', { ttlMs: 5_000, retryBaseMs: 3_000, retryMaxMs: 3_000 }).acquire()
    await sleep(200) // the waiter is queued and parked on its BLPOP
    assert.ok(proxy.commands.includes('BLPOP'))
    const releasedAt = performance.now()
    await held.release()
    const lease = await waiting
    assert.ok(performance.now() - releasedAt < 1_000, `handed off after ${performance.now() - releasedAt} ms`)
    assert.equal(lease.token, held.token + 1n)
    await lease.release()
  } finally {
    a.close()
    w.close()
    await done()
  }
})

test('a wrong token is an error reply: the acquisition fails with ProtocolError, no retry loop', { skip }, async () => {
  const { prefix, done } = prefixed()
  const b = new UpstashRedisBackend({ url: proxy.url, token: 'wrong', keyPrefix: prefix })
  try {
    await assert.rejects(new Lock(b, 'denied', { ttlMs: 1_000, acquireTimeoutMs: 2_000 }).acquire(),
      (e) => e instanceof ProtocolError && /Unauthorized/.test(e.message))
  } finally {
    b.close()
    await done()
  }
})

test('HTTP 5xx and bodies that are not JSON are transport failures: retried, then acquired', { skip }, async () => {
  const { backend, done } = prefixed()
  const b = backend()
  try {
    proxy.failNext(1, 503, 'Service Unavailable')
    proxy.failNext(1, 500, { error: 'ERR internal' })
    const lease = await new Lock(b, 'flaky', { ttlMs: 1_000, retryBaseMs: 5, retryMaxMs: 20 }).acquire()
    assert.equal(lease.lost, false)
    await lease.release()
  } finally {
    b.close()
    await done()
  }
})

test('an unreachable endpoint: AcquireTimeoutError naming the fetch failure', { skip }, async () => {
  const net = require('node:net')
  const port = await new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => resolve(p)) })
  })
  const b = new UpstashRedisBackend({ url: `http://127.0.0.1:${port}/`, token: TOKEN })
  try {
    await assert.rejects(new Lock(b, 'nowhere', { ttlMs: 1_000, acquireTimeoutMs: 300, retryBaseMs: 10, retryMaxMs: 50 }).acquire(),
      (e) => e instanceof AcquireTimeoutError && typeof e.lastError === 'string' && e.lastError.length > 0)
  } finally {
    b.close()
  }
})

test('integers past 2^53 in a REST reply are refused, never read rounded (a custom fetch)', async () => {
  const calls = []
  const fakeFetch = async (url, init) => {
    calls.push(JSON.parse(init.body)[0])
    // the acquire script answers [1, token]: here with a JSON number JSON.parse rounds
    return new Response('{"result":[1,9007199254740993]}', { status: 200 })
  }
  const b = new UpstashRedisBackend({ url: 'https://redis.example/', token: 't', fetch: fakeFetch })
  try {
    await assert.rejects(new Lock(b, 'big', { ttlMs: 1_000, acquireTimeoutMs: 0 }).acquire(), ProtocolError)
    assert.equal(calls[0], 'EVALSHA')
  } finally {
    b.close()
  }
})

test('UpstashRedisBackend refuses bad options with ConfigError', () => {
  assert.throws(() => new UpstashRedisBackend(), ConfigError)
  assert.throws(() => new UpstashRedisBackend({ url: 'redis://127.0.0.1:6379' }), (e) => e instanceof ConfigError && e.option === 'url')
  assert.throws(() => new UpstashRedisBackend({ url: 'not a url' }), ConfigError)
  assert.throws(() => new UpstashRedisBackend({ url: 'https://x.example', token: 5 }), ConfigError)
  assert.throws(() => new UpstashRedisBackend({ url: 'https://x.example', fetch: 'no' }), (e) => e.option === 'fetch')
  assert.throws(() => new UpstashRedisBackend({ url: 'https://x.example', tokn: 'x' }), /unknown UpstashRedisBackend option "tokn"/)
  const b = new UpstashRedisBackend({ url: 'https://x.example', keyPrefix: 'p:' })
  assert.equal(b.lockKey('n'), 'p:{n}:lock')
  b.close()
})
