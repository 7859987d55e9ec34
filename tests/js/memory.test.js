'use strict'
// Unit tests of the JavaScript API on the embedded in-memory backend (no server needed),
// plus scripted backends that answer with faults. Mirrors tests/python/test_memory.py.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')
const { pathToFileURL } = require('node:url')

const { fencepost, IMPL, PACKAGES, sleep, waitUntil } = require('./impl')

const {
  Lock, Lease, MemoryBackend, MemoryServer, RedisProtocolBackend, Fence, LockMachine,
  FencepostError, ConfigError, ClockError, LockLostError, AcquireTimeoutError,
  StaleTokenError, ProtocolError, BackendError, sqlFencedUpdate, redisFencedSet,
  readRedisFencedSet, redisScripts
} = fencepost

const HEX32 = /^[0-9a-f]{32}$/

/** Resolves when `signal` aborts (or at once if it has). */
const aborted = (signal) => new Promise((resolve) => {
  if (signal.aborted) resolve(signal.reason)
  else signal.addEventListener('abort', () => resolve(signal.reason), { once: true })
})

// ---- acquire, renew, release --------------------------------------------------------------

test('acquire and release give strictly increasing bigint tokens', async () => {
  const backend = new MemoryBackend()
  const lock = new Lock(backend, 'report', { ttlMs: 10_000 })
  const tokens = []
  for (let i = 0; i < 3; i++) {
    const lease = await lock.acquire()
    assert.ok(lease instanceof Lease)
    assert.equal(typeof lease.token, 'bigint')
    assert.match(lease.ownerId, HEX32)
    assert.equal(backend.server.lockOwner('report'), lease.ownerId)
    assert.equal(lease.name, 'report')
    assert.equal(lease.lost, false)
    assert.equal(lease.lostReason, null)
    assert.equal(lease.signal.aborted, false)
    const valid = lease.validForMs()
    assert.ok(valid > 9_000 && valid <= 10_000 * 0.99 - 2, `valid for ${valid} ms`)
    tokens.push(lease.token)
    await lease.release()
    assert.equal(backend.server.lockOwner('report'), null)
    assert.equal(lease.signal.aborted, false, 'a release is not a loss')
  }
  assert.deepEqual(tokens, [1n, 2n, 3n])
  backend.close()
})

test('tokenFloor: each grant is max(counter + 1, floor), as real Redis counts it', async () => {
  const backend = new MemoryBackend()
  const tokens = []
  for (const tokenFloor of [undefined, 10n, 3, 12n]) {
    tokens.push(await new Lock(backend, 'report', { ttlMs: 5_000, tokenFloor }).using(async (signal, lease) => lease.token))
  }
  assert.deepEqual(tokens, [1n, 10n, 11n, 12n])
  backend.close()
})

test('release is idempotent and Symbol.asyncDispose releases', async () => {
  const backend = new MemoryBackend()
  const lock = new Lock(backend, 'r', { ttlMs: 5_000 })
  const lease = await lock.acquire()
  const first = lease.release()
  assert.equal(lease.release(), first)
  await first
  await lease[Symbol.asyncDispose]() // after release(): nothing more to do
  const other = await lock.acquire()
  assert.equal(other.token, 2n)
  await other[Symbol.asyncDispose]()
  assert.equal(backend.server.lockOwner('r'), null)
  backend.close()
})

test('renewal keeps a short lease alive well past its TTL', async () => {
  const backend = new MemoryBackend()
  const lease = await new Lock(backend, 'short', { ttlMs: 300 }).acquire() // renews every 100 ms
  await sleep(700)
  lease.check()
  assert.ok(lease.validForMs() > 100)
  assert.equal(backend.server.lockOwner('short'), lease.ownerId)
  const pttl = backend.server.pttl(backend.lockKey('short'))
  assert.ok(pttl > 0 && pttl <= 300, `pttl ${pttl}`)
  await lease.release()
  backend.close()
})

test('using() returns the body\'s value, rethrows its error, and releases either way', async () => {
  const backend = new MemoryBackend()
  const lock = new Lock(backend, 'u', { ttlMs: 5_000 })
  const seen = []
  const result = await lock.using(async (signal, lease) => {
    assert.ok(signal === lease.signal)
    seen.push(lease.token)
    return 'done'
  })
  assert.equal(result, 'done')
  assert.equal(backend.server.lockOwner('u'), null)
  await assert.rejects(lock.using(() => { throw new TypeError('body failed') }), { name: 'TypeError', message: 'body failed' })
  assert.equal(backend.server.lockOwner('u'), null)
  await assert.rejects(lock.using('not a function'), ConfigError)
  assert.deepEqual(seen, [1n])
  backend.close()
})

// ---- waiting ------------------------------------------------------------------------------

test('acquireTimeoutMs 0 under contention fails at once with AcquireTimeoutError', async () => {
  const backend = new MemoryBackend()
  const holder = await new Lock(backend, 'busy', { ttlMs: 5_000 }).acquire()
  const started = performance.now()
  const error = await new Lock(backend, 'busy', { ttlMs: 5_000, acquireTimeoutMs: 0 }).acquire().then(() => null, (e) => e)
  assert.ok(error instanceof AcquireTimeoutError)
  assert.equal(error.code, 'ERR_ACQUIRE_TIMEOUT')
  assert.equal(error.lockName, 'busy')
  assert.equal(error.lastError, null)
  assert.match(error.message, /held by another owner/)
  assert.ok(performance.now() - started < 200)
  await assert.rejects(new Lock(backend, 'busy', { ttlMs: 5_000, acquireTimeoutMs: 60, retryBaseMs: 5, retryMaxMs: 10 }).acquire(), AcquireTimeoutError)
  await holder.release()
  backend.close()
})

test('a waiter gets the lock when the holder releases, with the next token', async () => {
  const backend = new MemoryBackend()
  const lock = new Lock(backend, 'queue', { ttlMs: 5_000, retryBaseMs: 2, retryMaxMs: 10 })
  const first = await lock.acquire()
  const waiting = lock.acquire()
  await sleep(30)
  await first.release()
  const second = await waiting
  assert.equal(second.token, first.token + 1n)
  await second.release()
  backend.close()
})

test('two backends on one server exclude each other', async () => {
  const server = new MemoryServer()
  const a = new MemoryBackend({ server })
  const b = new MemoryBackend({ server })
  const leaseA = await new Lock(a, 'shared', { ttlMs: 5_000 }).acquire()
  await assert.rejects(new Lock(b, 'shared', { ttlMs: 5_000, acquireTimeoutMs: 0 }).acquire(), AcquireTimeoutError)
  await leaseA.release()
  const leaseB = await new Lock(b, 'shared', { ttlMs: 5_000, acquireTimeoutMs: 0 }).acquire()
  assert.equal(leaseB.token, 2n)
  await leaseB.release()
  a.close()
  b.close()
})

test('fifty concurrent users of one lock never overlap and see increasing tokens', async () => {
  const backend = new MemoryBackend()
  const lock = new Lock(backend, 'hot', { ttlMs: 5_000, retryBaseMs: 1, retryMaxMs: 5 })
  const log = []
  let inside = 0
  await Promise.all(Array.from({ length: 50 }, (_, i) => lock.using(async (signal, lease) => {
    inside += 1
    assert.equal(inside, 1, 'two holders at once')
    log.push(lease.token)
    await sleep(i % 3)
    inside -= 1
  })))
  assert.equal(log.length, 50)
  for (let i = 1; i < log.length; i++) assert.ok(log[i - 1] < log[i], `tokens ${log[i - 1]} then ${log[i]}`)
  backend.close()
})

// ---- cancelling ---------------------------------------------------------------------------

test('an abort signal cancels a waiting acquire and leaves the lock free', async () => {
  const backend = new MemoryBackend()
  const holder = await new Lock(backend, 'c', { ttlMs: 5_000 }).acquire()
  const controller = new AbortController()
  const waiting = new Lock(backend, 'c', { ttlMs: 5_000 }).acquire({ signal: controller.signal })
  await sleep(20)
  controller.abort(new Error('shutting down'))
  await assert.rejects(waiting, { message: 'shutting down' })
  await holder.release()
  await sleep(10)
  assert.equal(backend.server.lockOwner('c'), null)
  // an already aborted signal: nothing is sent
  const before = new Lock(backend, 'c', { ttlMs: 5_000 })
  await assert.rejects(before.acquire({ signal: AbortSignal.abort() }), { name: 'AbortError' })
  assert.equal(backend.server.lockOwner('c'), null)
  await assert.rejects(before.acquire({ signal: 'soon' }), ConfigError)
  await assert.rejects(before.acquire({ sginal: AbortSignal.abort() }), /unknown acquire option "sginal"/)
  backend.close()
})

test('a signal aborted while acquire() starts cancels it: by an observation callback, or by a loss the start delivers', async () => {
  const backend = new MemoryBackend()
  const holder = await new Lock(backend, 'c', { ttlMs: 5_000 }).acquire()
  const within = (promise) => Promise.race([promise, sleep(1_000).then(() => { throw new Error('still pending after 1 s') })])
  // the lock's own callback hears 'acquiring' inside acquire(), and aborts
  const controller = new AbortController()
  const seen = []
  const observed = new Lock(backend, 'c', {
    ttlMs: 5_000,
    onEvent: (o) => {
      seen.push(o.event)
      if (o.event === 'acquiring') controller.abort(new Error('shutting down'))
    }
  })
  await assert.rejects(within(observed.acquire({ signal: controller.signal })), { message: 'shutting down' })
  assert.deepEqual(seen, ['acquiring', 'released']) // cancelled before a grant
  // acquiring under another lease's signal, that lease already past its validity: the
  // start's own input delivers the loss, which aborts the signal
  const first = await new Lock(backend, 'first', { ttlMs: 50, autoRenew: false }).acquire()
  const signal = first.signal
  const until = performance.now() + 80
  while (performance.now() < until) {} // eslint-disable-line no-empty -- busy past the validity: no timer runs
  const error = await within(new Lock(backend, 'c', { ttlMs: 5_000 }).acquire({ signal })).then(() => null, (e) => e)
  assert.ok(error instanceof LockLostError, String(error))
  assert.equal(error, first.signal.reason)
  assert.equal(error.reason, 'expired')
  // neither cancelled acquisition waits on: the holder's release frees the lock
  await holder.release()
  await sleep(10)
  assert.equal(backend.server.lockOwner('c'), null)
  backend.close()
})

/** A memory backend whose replies are held back until released. */
class SlowBackend extends MemoryBackend {
  constructor (delayMs) {
    super()
    this.delayMs = delayMs
  }

  async execute (request) {
    const reply = this.server.execute(request) // the server acts now…
    await sleep(this.delayMs) // …the reply arrives later
    return reply
  }
}

test('cancelling an acquire in flight releases what the server granted', async () => {
  const backend = new SlowBackend(50)
  const controller = new AbortController()
  const acquiring = new Lock(backend, 'inflight', { ttlMs: 5_000 }).acquire({ signal: controller.signal })
  await sleep(10)
  assert.match(backend.server.lockOwner('inflight'), HEX32) // granted on the server
  controller.abort()
  await assert.rejects(acquiring, { name: 'AbortError' })
  assert.ok(await waitUntil(() => backend.server.lockOwner('inflight') === null, 2_000), 'the late grant was released')
  backend.close()
})

// ---- loss -----------------------------------------------------------------------------------

test('a deleted key is lost within a renew interval: the signal aborts with LockLostError', async () => {
  const backend = new MemoryBackend()
  const lock = new Lock(backend, 'victim', { ttlMs: 300 }) // renews every 100 ms
  let bodySignal
  const started = performance.now()
  const error = await lock.using(async (signal, lease) => {
    bodySignal = signal
    assert.ok(backend.server.deleteLock('victim'))
    const reason = await aborted(signal)
    assert.ok(reason instanceof LockLostError)
    assert.ok(performance.now() - started < 100 + 150)
    assert.throws(() => lease.check(), LockLostError)
    assert.equal(lease.validForMs(), 0)
    return 'finished anyway'
  }).then(() => null, (e) => e)
  assert.ok(error instanceof LockLostError, 'using() rejects with the loss')
  assert.equal(error, bodySignal.reason)
  assert.equal(error.code, 'ERR_LOCK_LOST')
  assert.equal(error.reason, 'renew_rejected')
  assert.equal(error.lockName, 'victim')
  assert.equal(error.token, 1n)
  assert.equal(backend.server.lockOwner('victim'), null, 'a renewal never re-creates the key')
  backend.close()
})

test('a lease without renewal expires at its validity and aborts its signal', async () => {
  const backend = new MemoryBackend()
  const started = performance.now()
  const lease = await new Lock(backend, 'once', { ttlMs: 200, autoRenew: false }).acquire()
  const reason = await aborted(lease.signal)
  const elapsed = performance.now() - started
  // valid until sent + 200 · 0.99 − 2 = 196 ms
  assert.ok(elapsed >= 190 && elapsed < 350, `lost after ${elapsed} ms`)
  assert.equal(reason.reason, 'expired')
  assert.equal(lease.lostReason, 'expired')
  await assert.rejects(lease.release(), (e) => e === reason)
  backend.close()
})

test('release after expiry rejects with LockLostError and spares the next holder', async () => {
  const server = new MemoryServer()
  const a = new MemoryBackend({ server })
  const b = new MemoryBackend({ server })
  const leaseA = await new Lock(a, 'shared', { ttlMs: 200, autoRenew: false }).acquire()
  await sleep(250)
  const leaseB = await new Lock(b, 'shared', { ttlMs: 5_000, acquireTimeoutMs: 0 }).acquire()
  assert.equal(leaseB.token, leaseA.token + 1n)
  await assert.rejects(leaseA.release(), { code: 'ERR_LOCK_LOST', reason: 'expired' })
  await sleep(30)
  assert.equal(server.lockOwner('shared'), leaseB.ownerId)
  await leaseB.release()
  a.close()
  b.close()
})

test('release of a key deleted behind the holder reports not_held_at_release', async () => {
  const backend = new MemoryBackend()
  const lease = await new Lock(backend, 'gone', { ttlMs: 5_000, autoRenew: false }).acquire()
  backend.server.deleteLock('gone')
  const error = await lease.release().then(() => null, (e) => e)
  assert.ok(error instanceof LockLostError)
  assert.equal(error.reason, 'not_held_at_release')
  assert.equal(lease.signal.reason, error)
  backend.close()
})

test('an abort listener may use the same backend at once (re-entrant driver)', async () => {
  const server = new MemoryServer()
  const backend = new MemoryBackend({ server })
  const other = new MemoryBackend({ server })
  const holder = await new Lock(other, 'b', { ttlMs: 5_000 }).acquire()
  const lease = await new Lock(backend, 'a', { ttlMs: 300 }).acquire()
  let nested = null
  lease.signal.addEventListener('abort', () => {
    assert.equal(lease.validForMs(), 0) // feeds the machine from inside its own event
    nested = new Lock(backend, 'b', { ttlMs: 1_000, acquireTimeoutMs: 3_000, retryBaseMs: 5, retryMaxMs: 20 }).acquire()
  })
  server.deleteLock('a')
  await aborted(lease.signal)
  assert.ok(nested instanceof Promise)
  await sleep(50) // the nested acquisition waits (backoff timers) while B holds the lock
  await holder.release()
  const got = await nested
  assert.equal(got.token, 2n)
  await got.release()
  backend.close()
  other.close()
})

/** Acquires and releases work; renewals never get an answer. */
class HangingRenewBackend extends MemoryBackend {
  execute (request) {
    if (request.script === 'renew') return new Promise(() => {})
    return this.server.execute(request)
  }
}

test('a hung renewal does not delay loss', async () => {
  const backend = new HangingRenewBackend()
  const started = performance.now()
  const error = await new Lock(backend, 'hung', { ttlMs: 300 }).using((signal) => aborted(signal)).then(() => null, (e) => e)
  // valid until 300 · 0.99 − 2 = 295 ms after the acquire was sent
  assert.ok(performance.now() - started < 450)
  assert.equal(error.reason, 'expired')
  backend.close()
})

// ---- server replies the machine classifies ---------------------------------------------------

/** Answers every request with `reply` (or throws it: a transport failure). */
class ScriptedBackend extends RedisProtocolBackend {
  constructor (reply, { throws = false } = {}) {
    super()
    this.reply = reply
    this.throws = throws
    this.calls = 0
  }

  async execute () {
    this.calls += 1
    if (this.throws) throw this.reply
    return this.reply
  }
}

for (const [label, reply] of [
  ['an object', { not: 'redis' }],
  ['a fraction', 3.5],
  ['a short array', [1]],
  ['a WRONGTYPE error reply', new Error('WRONGTYPE Operation against a key holding the wrong kind of value')],
  ['a function', () => 1],
  ['a symbol', Symbol('x')],
  ['a bigint past 64 bits', 2n ** 70n]
]) {
  test(`a nonsense acquire reply (${label}) rejects with ProtocolError`, async () => {
    const backend = new ScriptedBackend(reply)
    const error = await new Lock(backend, 'p', { ttlMs: 1_000, acquireTimeoutMs: 1_000 }).acquire().then(() => null, (e) => e)
    assert.ok(error instanceof ProtocolError, String(error))
    assert.equal(error.code, 'ERR_PROTOCOL')
    assert.match(error.message, /redis protocol error/)
    backend.close()
  })
}

test('transient error replies are retried until the acquire timeout', async () => {
  const backend = new ScriptedBackend(new Error('LOADING Redis is loading the dataset in memory'))
  const error = await new Lock(backend, 't', { ttlMs: 1_000, acquireTimeoutMs: 0 }).acquire().then(() => null, (e) => e)
  assert.ok(error instanceof AcquireTimeoutError)
  assert.match(error.lastError, /LOADING/)
  await assert.rejects(new Lock(backend, 't', { ttlMs: 1_000, acquireTimeoutMs: 100, retryBaseMs: 5, retryMaxMs: 10 }).acquire(), AcquireTimeoutError)
  assert.ok(backend.calls >= 4, `${backend.calls} calls`)
  backend.close()
})

test('transport errors are retried until the acquire timeout and reported', async () => {
  class ResetError extends Error {}
  const backend = new ScriptedBackend(new ResetError('peer went away'), { throws: true })
  const error = await new Lock(backend, 't', { ttlMs: 1_000, acquireTimeoutMs: 0 }).acquire().then(() => null, (e) => e)
  assert.ok(error instanceof AcquireTimeoutError)
  assert.equal(error.lastError, 'ResetError: peer went away')
  await assert.rejects(new Lock(backend, 't', { ttlMs: 1_000, acquireTimeoutMs: 100, retryBaseMs: 5, retryMaxMs: 10 }).acquire(), AcquireTimeoutError)
  assert.ok(backend.calls >= 4)
  const thrower = new ScriptedBackend('not even an Error', { throws: true })
  await assert.rejects(new Lock(thrower, 't', { ttlMs: 1_000, acquireTimeoutMs: 0 }).acquire(), { lastError: 'thrown: not even an Error' })
  backend.close()
  thrower.close()
})

// ---- bad input ------------------------------------------------------------------------------

const BAD_OPTIONS = [
  [{ ttlMs: 0 }, 'ttlMs', 'ttlMs: must be at least 1 ms, got 0 ms'], // the core's durations in ms, not Rust's `0ns`
  [{ ttlMs: 0.5 }, 'ttlMs', 'ttlMs: must be at least 1 ms, got 0.5 ms'],
  [{ ttlMs: -1 }, 'ttlMs', 'ttlMs must be a finite number of milliseconds ≥ 0, got -1'],
  [{ ttlMs: NaN }, 'ttlMs', 'got NaN'],
  [{ ttlMs: Infinity }, 'ttlMs', 'got Infinity'],
  [{ ttlMs: '30000' }, 'ttlMs', 'got "30000" (string)'],
  [{ ttlMs: 30000n }, 'ttlMs', 'got 30000n (bigint)'],
  [{ ttlMs: true }, 'ttlMs', 'got true (boolean)'],
  [{ ttlMs: 1e12 }, 'ttlMs', 'ttlMs: must be at most 2^31 ms (~24.8 days), got 1000000000000 ms'],
  [{ ttlMs: 1e30 }, 'ttlMs', 'ttlMs is too long: durations must be below 2^64 ns (about 584 years), got 1e+30 ms'],
  [{ acquireTimeoutMs: 2 ** 70 }, 'acquireTimeoutMs', 'got 1.1805916207174113e+21 ms'],
  [{ ttlMs: 3 }, 'ttlMs', 'ttlMs: 3 ms is too short to renew automatically: the default renew interval ttl/3 (1 ms) is not below the validity 0.97 ms (ttl less drift and margin); use a longer ttlMs, a shorter renewEveryMs, or autoRenew: false'],
  [{ ttlMs: 1000, renewEveryMs: 1000 }, 'renewEveryMs', 'renewEveryMs: must be above 0 and below the validity 988 ms (ttl 1000 ms less drift and margin), got 1000 ms'],
  [{ ttlMs: 1000, renewEveryMs: 0 }, 'renewEveryMs', 'renewEveryMs: must be above 0'],
  [{ acquireTimeoutMs: -0.5 }, 'acquireTimeoutMs', 'acquireTimeoutMs must be a finite number'],
  [{ acquireTimeoutMs: NaN }, 'acquireTimeoutMs', 'got NaN'],
  [{ retryBaseMs: 0 }, 'retryBaseMs', 'retryBaseMs: must be above 0'],
  [{ retryBaseMs: 500, retryMaxMs: 100 }, 'retryMaxMs', 'retryMaxMs: must be at least retryBaseMs 500 ms, got 100 ms'],
  [{ driftFactor: 0.5 }, 'driftFactor', 'driftFactor: must be in 0 ..< 0.5'],
  [{ driftFactor: NaN }, 'driftFactor', 'driftFactor: must be in 0 ..< 0.5, got NaN'],
  [{ driftFactor: '0.1' }, 'driftFactor', 'driftFactor must be a number'],
  [{ clockMarginMs: -1 }, 'clockMarginMs', 'clockMarginMs must be a finite number'],
  [{ purpose: 'speed' }, 'purpose', "purpose must be 'efficiency' or 'correctness'"],
  [{ purpose: 'correctness' }, 'purpose', 'or set acceptFailoverRisk: true if you accept that risk'],
  [{ autoRenew: 1 }, 'autoRenew', 'autoRenew must be true or false'],
  [{ acceptFailoverRisk: 'yes' }, 'acceptFailoverRisk', 'acceptFailoverRisk must be true or false'],
  [{ ttl: 30 }, 'ttl', 'unknown lock option "ttl"; did you mean ttlMs?'],
  [{ timeout: 30 }, 'timeout', 'unknown lock option "timeout"']
]

for (const [options, option, fragment] of BAD_OPTIONS) {
  test(`bad option ${fencepostShow(options)} throws ConfigError naming ${option}`, () => {
    const backend = new ScriptedBackend([1, 1])
    const error = (() => { try { new Lock(backend, 'cfg', options); return null } catch (e) { return e } })() // eslint-disable-line no-new
    assert.ok(error instanceof ConfigError, `no ConfigError for ${fencepostShow(options)}`)
    assert.ok(error instanceof FencepostError && error instanceof Error)
    assert.equal(error.code, 'ERR_CONFIG')
    assert.equal(error.option, option)
    assert.ok(error.message.includes(fragment), `${JSON.stringify(error.message)} lacks ${JSON.stringify(fragment)}`)
    assert.equal(backend.calls, 0, 'refused before any request')
  })
}

function fencepostShow (v) {
  return JSON.stringify(v, (k, x) => typeof x === 'bigint' ? `${x}n` : Number.isNaN(x) ? 'NaN' : x === Infinity ? 'Infinity' : x)
}

test('good options of every kind are accepted (fractional milliseconds too)', async () => {
  const backend = new MemoryBackend()
  const lock = new Lock(backend, 'ok', {
    ttlMs: 1000.5,
    purpose: 'correctness',
    acceptFailoverRisk: true,
    acquireTimeoutMs: Infinity,
    retryBaseMs: 0.5,
    retryMaxMs: 20,
    renewEveryMs: 300.25,
    autoRenew: true,
    driftFactor: 0,
    clockMarginMs: 0
  })
  new Lock(backend, 'ok', { acquireTimeoutMs: null, renewEveryMs: null, ttlMs: undefined }) // eslint-disable-line no-new
  new Lock(backend, 'ok', undefined) // eslint-disable-line no-new
  const lease = await lock.acquire()
  assert.equal(lease.token, 1n)
  await lease.release()
  backend.close()
})

test('bad lock names, backends and option bags throw ConfigError', () => {
  const backend = new MemoryBackend()
  for (const name of ['', 42, null, undefined, Buffer.from('x'), 'x'.repeat(1025), 5n]) {
    assert.throws(() => new Lock(backend, name), (e) => e instanceof ConfigError && /name/.test(e.message), String(name))
  }
  assert.ok(new Lock(backend, 'x'.repeat(1024)))
  for (const notBackend of [{}, null, 'redis://localhost', { execute () {} }]) {
    assert.throws(() => new Lock(notBackend, 'x'), /backend must be a fencepost backend/)
  }
  for (const bag of [5, 'ttlMs', [1000], true]) {
    assert.throws(() => new Lock(backend, 'x', bag), /lock options must be an object/)
  }
  assert.throws(() => new MemoryBackend({ keyPrefix: 7 }), /keyPrefix must be a string/)
  assert.throws(() => new MemoryBackend({ server: {} }), /server must be a MemoryServer/)
  assert.throws(() => new fencepost.Backend(), ConfigError)
  backend.close()
})

test('error classes: one base, stable codes, names, fields', () => {
  const cases = [
    [new ConfigError('x'), 'ERR_CONFIG', 'ConfigError'],
    [new ClockError('x'), 'ERR_CONFIG', 'ClockError'],
    [new LockLostError('n', 7n, 'expired'), 'ERR_LOCK_LOST', 'LockLostError'],
    [new AcquireTimeoutError('n', null), 'ERR_ACQUIRE_TIMEOUT', 'AcquireTimeoutError'],
    [new StaleTokenError('x', 'r', 1n, 2n), 'ERR_STALE_TOKEN', 'StaleTokenError'],
    [new ProtocolError('x'), 'ERR_PROTOCOL', 'ProtocolError'],
    [new BackendError('x'), 'ERR_BACKEND', 'BackendError']
  ]
  for (const [error, code, name] of cases) {
    assert.ok(error instanceof FencepostError && error instanceof Error)
    assert.equal(error.code, code)
    assert.equal(error.name, name)
    assert.ok(String(error).startsWith(`${name}: `))
  }
  assert.ok(new ClockError('x') instanceof ConfigError)
  const lost = new LockLostError('report', 7n, 'renew_rejected')
  assert.equal(lost.message, 'lock "report" (fencing token 7) was lost: the server refused the renewal: it no longer held the lock for this owner')
})

// ---- fencing --------------------------------------------------------------------------------

test('Fence refuses lower tokens, accepts equal ones, and wants bigints', () => {
  const fence = new Fence()
  fence.check('row:1', 33n)
  fence.check('row:1', 34n)
  fence.check('row:1', 34n) // the same lease writes again
  const error = (() => { try { fence.check('row:1', 33n) } catch (e) { return e } })()
  assert.ok(error instanceof StaleTokenError)
  assert.equal(error.code, 'ERR_STALE_TOKEN')
  assert.deepEqual([error.resource, error.token, error.highest], ['row:1', 33n, 34n])
  assert.match(error.message, /stale fencing token 33/)
  fence.check('row:2', 1n) // per resource
  assert.equal(fence.highest('row:1'), 34n)
  assert.equal(fence.highest('nothing'), null)
  fence.check('max', 2n ** 64n - 1n)
  for (const bad of [5, 5.5, '5', -1n, 0n, 2n ** 64n, null]) {
    assert.throws(() => fence.check('row:1', bad), ConfigError, String(bad))
  }
  // 0n is no lease's token: a fresh fence would take it from anyone
  assert.throws(() => new Fence().check('fresh', 0n), /fencing token of a lease \(a bigint in 1n/)
  assert.throws(() => fence.check('row:1', 5), /must be a bigint fencing token, got 5 \(number\) \(write 5n/)
})

test('sqlFencedUpdate quotes identifiers and parameterizes values', () => {
  assert.equal(
    sqlFencedUpdate('accounts', 'id', 'last_token', ['balance']),
    'UPDATE "accounts" SET "balance" = $3, "last_token" = $2 WHERE "id" = $1 AND "last_token" <= $2'
  )
  assert.match(sqlFencedUpdate('accounts', 'id', 'last_token', ['balance'], { style: 'pyformat' }), /WHERE "id" = %\(id\)s AND "last_token" <= %\(token\)s$/)
  assert.throws(() => sqlFencedUpdate('a; DROP TABLE x', 'id', 't', []), { code: 'ERR_CONFIG', message: /invalid SQL identifier/ })
  assert.throws(() => sqlFencedUpdate('a', 'id', 't', ['1col']), ConfigError)
  assert.throws(() => sqlFencedUpdate('a', 'id', 't', 'balance'), /columns must be an array/)
  assert.throws(() => sqlFencedUpdate('a', 'id', 't', [5]), /columns\[0\] must be a string/)
  assert.throws(() => sqlFencedUpdate('a', 'id', 't', [], { style: 'qmark' }), /style must be 'dollar' or 'pyformat'/)
})

test('the Redis fenced SET: builder, reader, and MemoryBackend.fencedSet', async () => {
  const command = redisFencedSet('doc', 'doc:fence', 5n, 'v')
  assert.equal(command.script, 'fenced_set')
  assert.deepEqual([...command.keys], ['doc', 'doc:fence'])
  assert.deepEqual([...command.args], ['5', 'v'])
  assert.equal(command.sha1, redisScripts().fenced_set.sha1)
  readRedisFencedSet('doc', 5n, [1, 5])
  assert.throws(() => readRedisFencedSet('doc', 5n, [0, 9]), { code: 'ERR_STALE_TOKEN', highest: 9n })
  assert.throws(() => readRedisFencedSet('doc', 5n, new Error('WRONGTYPE x')), ProtocolError)
  assert.throws(() => redisFencedSet('doc', 'doc:fence', 5, 'v'), ConfigError)

  const backend = new MemoryBackend()
  await backend.fencedSet('row', 'row:fence', 5n, 'five')
  await backend.fencedSet('row', 'row:fence', 5n, 'five again')
  await backend.fencedSet('row', 'row:fence', 7n, 'seven')
  const error = await backend.fencedSet('row', 'row:fence', 6n, 'six').then(() => null, (e) => e)
  assert.ok(error instanceof StaleTokenError)
  assert.deepEqual([error.resource, error.token, error.highest], ['row', 6n, 7n])
  assert.equal(backend.server.get('row'), 'seven')
  await assert.rejects(backend.fencedSet('row', 'row:fence', 8, 'eight'), ConfigError)
  // one key for both: the write would replace the fence's token and every later write fail
  await assert.rejects(backend.fencedSet('row', 'row', 8n, 'eight'), (e) => e instanceof ConfigError && e.code === 'ERR_CONFIG' && e.kind === 'invalid_argument' &&
    e.message === 'dataKey and fenceKey must differ (both "row"): the write would overwrite the fence')
  assert.equal(backend.server.get('row'), 'seven')
  const broken = new ScriptedBackend(new Error('connection reset'), { throws: true })
  await assert.rejects(broken.fencedSet('row', 'row:fence', 8n, 'eight'), (e) => e instanceof BackendError && e.cause instanceof Error)
  backend.close()
})

test('redisScripts lists every script with its SHA-1', () => {
  const scripts = redisScripts()
  assert.deepEqual(Object.keys(scripts).sort(), ['acquire', 'acquire_fair', 'fenced_set', 'force_release', 'inspect', 'is_locked', 'list', 'release', 'release_fair', 'renew', 'renew_many'])
  for (const { sha1, source } of Object.values(scripts)) {
    assert.match(sha1, /^[0-9a-f]{40}$/)
    assert.match(source, /redis\.call/)
  }
})

// ---- closing, and the process lifetime ----------------------------------------------------------

test('close() loses held leases, fails pending acquisitions, frees the server', async () => {
  const backend = new MemoryBackend()
  const lock = new Lock(backend, 'closing', { ttlMs: 5_000 })
  const lease = await lock.acquire()
  const waiting = lock.acquire()
  backend.close()
  assert.equal(lease.lostReason, 'closed')
  assert.equal(lease.signal.reason.reason, 'closed')
  await assert.rejects(waiting, BackendError)
  await assert.rejects(lease.release(), LockLostError)
  assert.ok(await waitUntil(() => backend.server.lockOwner('closing') === null, 1_000))
  await assert.rejects(lock.acquire(), { code: 'ERR_BACKEND' })
  backend.close() // idempotent
})

test('close() rejects a waiter sleeping in backoff with BackendError at once', async () => {
  const backend = new MemoryBackend()
  const held = await new Lock(backend, 'backoff', { ttlMs: 30_000 }).acquire()
  // 10 s to wait, backoff steps up to 2 s: without the close it would still be waiting
  const waiting = new Lock(backend, 'backoff', { ttlMs: 30_000, acquireTimeoutMs: 10_000, retryBaseMs: 2_000, retryMaxMs: 2_000 }).acquire()
  const outcome = waiting.then(() => 'granted', (error) => error)
  // asleep between attempts: its first attempt (out since acquire()) was answered, and
  // no request of the driver's is out
  const driver = backend._driver()
  assert.ok(await waitUntil(() => driver.pending.size === 0 && driver.acquisitions.size === 2, 1_000))
  const closedAt = performance.now()
  backend.close()
  const error = await Promise.race([outcome, sleep(1_000).then(() => 'still pending 1 s after close()')])
  assert.ok(error instanceof BackendError, String(error))
  assert.equal(error.code, 'ERR_BACKEND')
  assert.ok(performance.now() - closedAt < 1_000)
  assert.equal(held.lostReason, 'closed')
  await assert.rejects(held.release(), { code: 'ERR_LOCK_LOST', reason: 'closed' })
})

function runNode (args, timeoutMs = 10_000) {
  const started = performance.now()
  const out = spawnSync(process.execPath, args, { encoding: 'utf8', timeout: timeoutMs, env: { ...process.env } })
  return { ...out, elapsedMs: performance.now() - started }
}

test('a released lock never keeps the process alive; a held one does until it is lost', () => {
  const pkg = JSON.stringify(PACKAGES[IMPL])
  // released: the machine remembers the finished lock for one TTL (60 s) on an unref'd timer
  const released = runNode(['-e', `
    const fp = require(${pkg})
    new fp.Lock(new fp.MemoryBackend(), 'x', { ttlMs: 60000 }).using(() => 'done').then(console.log)
  `])
  assert.equal(released.status, 0, released.stderr)
  assert.equal(released.stdout.trim(), 'done')
  assert.ok(released.elapsedMs < 5_000, `exited after ${released.elapsedMs} ms`)
  // held: renewals keep the process up (the unref'd timer below still gets to fire)
  const held = runNode(['-e', `
    const fp = require(${pkg})
    const backend = new fp.MemoryBackend()
    new fp.Lock(backend, 'x', { ttlMs: 300 }).acquire().then((lease) => {
      lease.signal.addEventListener('abort', () => console.log('lost', lease.signal.reason.reason))
      setTimeout(() => backend.server.deleteLock('x'), 500).unref()
    })
  `])
  assert.equal(held.status, 0, held.stderr)
  assert.equal(held.stdout.trim(), 'lost renew_rejected')
  assert.ok(held.elapsedMs < 5_000)
})

test('ES modules and CommonJS get the same API', () => {
  const manifest = JSON.parse(fs.readFileSync(path.join(PACKAGES[IMPL], 'package.json'), 'utf8'))
  const esm = pathToFileURL(path.join(PACKAGES[IMPL], manifest.exports['.'].import.default)).href
  const out = runNode(['--input-type=module', '-e', `
    import * as ns from ${JSON.stringify(esm)}
    import fencepost from ${JSON.stringify(esm)}
    import { createRequire } from 'node:module'
    const cjs = createRequire(import.meta.url)(${JSON.stringify(PACKAGES[IMPL])})
    const same = Object.keys(cjs).every((k) => ns[k] === cjs[k]) && fencepost === cjs
    const lease = await new ns.Lock(new ns.MemoryBackend(), 'esm', { ttlMs: 1000 }).acquire()
    await lease.release()
    console.log(same, Object.keys(cjs).length, lease.token)
  `])
  assert.equal(out.status, 0, out.stderr)
  const [same, count, token] = out.stdout.trim().split(' ')
  assert.equal(same, 'true')
  assert.ok(Number(count) >= 20)
  assert.equal(token, '1n')
})

// ---- the sans-IO machine ----------------------------------------------------------------------

test('LockMachine emits requests and events as data', () => {
  const machine = new LockMachine({ seed: 7n })
  const lock = machine.acquire(0, 'report', { ttlMs: 1_000 })
  assert.equal(lock, 1)
  let { outputs, nextTimeoutMs } = machine.poll()
  assert.equal(outputs.length, 1)
  const [request] = outputs
  assert.equal(request.type, 'request')
  assert.equal(request.operation, 'acquire')
  assert.equal(request.deadlineMs, 988)
  assert.deepEqual([...request.keys], ['fencepost:{report}:lock', 'fencepost:{report}:token'])
  assert.equal(request.args[0], machine.owner(lock))
  assert.equal(nextTimeoutMs, 988)
  assert.equal(machine.requestsInFlight, 1)
  const server = new MemoryServer()
  machine.reply(2, request.id, server.execute(request))
  ;({ outputs, nextTimeoutMs } = machine.poll())
  assert.deepEqual(outputs, [{ lock: 1, type: 'acquired', token: 1n, validUntilMs: 988, previous: 'none', ownerId: machine.owner(lock) }])
  assert.equal(nextTimeoutMs, 333.333333)
  assert.equal(machine.validUntilMs(lock), 988)
  assert.equal(machine.lockCount, 1)
})

test('LockMachine.poll() gives every kind of output in one shape (keys in order), whatever the addon sends across', () => {
  // The addons hand outputs over as the JSON text of one flat array (pollJson); js/machine.js rebuilds these.
  const keysOf = (outputs) => outputs.map((o) => Object.keys(o).join(','))
  const server = new MemoryServer()
  const a = new LockMachine({ seed: 11n })
  const lock = a.acquire(0, 'shape', { ttlMs: 1_000 })
  let { outputs } = a.poll()
  assert.deepEqual(keysOf(outputs), ['type,id,lock,operation,deadlineMs,backend,script,sha1,keys,args'])
  assert.equal(outputs[0].sha1, redisScripts().acquire.sha1)
  a.reply(1, outputs[0].id, server.execute(outputs[0]))
  ;({ outputs } = a.poll())
  assert.deepEqual(outputs, [{ lock, type: 'acquired', token: 1n, validUntilMs: 988, previous: 'none', ownerId: a.owner(lock) }])
  assert.match(outputs[0].ownerId, /^[0-9a-f]{32}$/)
  assert.deepEqual(keysOf(outputs), ['lock,type,token,validUntilMs,previous,ownerId'])
  a.timeout(334)
  ;({ outputs } = a.poll())
  assert.deepEqual(outputs.map((o) => [o.operation, o.script]), [['renew', 'renew']])
  a.reply(335, outputs[0].id, server.execute(outputs[0]))
  assert.deepEqual(a.poll().outputs, [{ lock, type: 'renewed', validUntilMs: 334 + 988 }])
  // a second machine times out at once on the held lock: acquire_failed (message null)
  const b = new LockMachine({ seed: 12n })
  const other = b.acquire(400, 'shape', { ttlMs: 1_000, acquireTimeoutMs: 0 })
  ;({ outputs } = b.poll())
  b.reply(401, outputs[0].id, server.execute(outputs[0]))
  ;({ outputs } = b.poll())
  const failed = outputs.filter((o) => o.type !== 'request')
  assert.deepEqual(keysOf(failed), ['lock,type,reason,message'])
  assert.equal(failed[0].lock, other)
  assert.equal(failed[0].reason, 'timeout')
  // the key deleted behind the holder's back: the next renewal is refused, lost
  server.deleteLock('shape')
  a.timeout(700)
  ;({ outputs } = a.poll())
  a.reply(701, outputs[0].id, server.execute(outputs[0]))
  assert.deepEqual(a.poll().outputs.filter((o) => o.type !== 'request'), [{ lock, type: 'lost', reason: 'renew_rejected' }])
  // release: 'released'
  const c = new LockMachine({ seed: 13n })
  const third = c.acquire(800, 'shape', { ttlMs: 1_000 })
  ;({ outputs } = c.poll())
  c.reply(801, outputs[0].id, server.execute(outputs[0]))
  c.poll()
  c.release(802, third)
  ;({ outputs } = c.poll())
  assert.deepEqual(keysOf(outputs), ['type,id,lock,operation,deadlineMs,backend,script,sha1,keys,args'])
  c.reply(803, outputs[0].id, server.execute(outputs[0]))
  assert.deepEqual(c.poll().outputs, [{ lock: third, type: 'released' }])
  // fair: a contended acquisition parks on a blocking pop
  const d = new LockMachine({ seed: 14n, fair: true })
  const e = new LockMachine({ seed: 15n, fair: true })
  d.acquire(900, 'fair-shape', { ttlMs: 1_000 })
  ;({ outputs } = d.poll())
  d.reply(901, outputs[0].id, server.execute(outputs[0]))
  d.poll()
  e.acquire(902, 'fair-shape', { ttlMs: 1_000 })
  ;({ outputs } = e.poll())
  e.reply(903, outputs[0].id, server.execute(outputs[0]))
  ;({ outputs } = e.poll())
  assert.deepEqual(keysOf(outputs), ['type,id,lock,operation,deadlineMs,backend,key,timeoutMs'])
  assert.equal(outputs[0].backend, 'redis_blpop')
  assert.equal(outputs[0].operation, 'wait')
  // etcd: a gateway call (timeoutMs only on a watch)
  const f = new LockMachine({ seed: 16n, kind: 'etcd' })
  f.acquire(0, 'etcd-shape', { ttlMs: 1_000 })
  ;({ outputs } = f.poll())
  assert.deepEqual(keysOf(outputs), ['type,id,lock,operation,deadlineMs,backend,call,path,body'])
})

test('LockMachine refuses wrong types and backwards time with ConfigError, never a crash', () => {
  const machine = new LockMachine({ seed: 1 })
  machine.timeout(10)
  assert.throws(() => machine.timeout(5), (e) => e instanceof ClockError && e.kind === 'time_went_backwards' && e.code === 'ERR_CONFIG')
  // past the latest instant (2^62 ns ≈ 4.6e12 ms): no finite deadline is left
  for (const now of [5e12, 1e300]) {
    assert.throws(() => machine.timeout(now), (e) => e instanceof ClockError && e.kind === 'time_out_of_range' && /monotonic/.test(e.message), String(now))
  }
  for (const now of [NaN, -1, Infinity, '10', 10n, null]) {
    assert.throws(() => machine.timeout(now), ConfigError, String(now))
  }
  assert.throws(() => machine.acquire(20, 42, {}), /lock name must be a string/)
  assert.throws(() => machine.acquire(20, '', {}), (e) => e.kind === 'invalid_name')
  assert.throws(() => machine.release(20, 99), (e) => e.kind === 'unknown_lock')
  for (const id of [1.5, -1, '1', 1n, NaN]) {
    assert.throws(() => machine.release(20, id), ConfigError, String(id))
    assert.throws(() => machine.reply(20, id, 1), ConfigError, String(id))
  }
  assert.throws(() => machine.transportError(20, 1, 42), /message must be a string/)
  assert.throws(() => new LockMachine({ seed: -1 }), ConfigError)
  assert.throws(() => new LockMachine({ keyPrefix: 1 }), ConfigError)
  assert.throws(() => new LockMachine(7), ConfigError)
})

test('every kind of reply value is read without crashing (garbage becomes a protocol error)', () => {
  const values = [
    null, undefined, true, 0, -1, 2 ** 53, Number.MAX_VALUE, NaN, -Infinity, 1.5, 2n ** 63n - 1n, -(2n ** 63n), 2n ** 64n,
    '', 'x', Buffer.from([0xff, 0xfe]), new Uint8Array([65]), [], [[[]]], { status: 'OK' }, { error: 'ERR x' },
    { status: 5 }, { a: 1, b: 2 }, new Error(''), Object.assign(new Error('x'), { message: 42 }), () => 1, Symbol('s'),
    new Map(), new Date(0), Promise.resolve(1), new Proxy({}, {}), Object.create(null),
    // values whose reading throws: the exception must not escape
    Object.defineProperty(new Error('x'), 'message', { get () { throw new Error('getter') } }),
    new Proxy({}, { ownKeys () { throw new Error('trap') } }),
    [new Proxy({}, { getPrototypeOf () { throw new Error('trap') }, ownKeys () { throw new Error('trap') } })]
  ]
  let deep = []
  for (let i = 0; i < 100; i++) deep = [deep]
  values.push(deep)
  for (const [i, value] of values.entries()) {
    const machine = new LockMachine({ seed: 3 })
    machine.acquire(0, 'g', { ttlMs: 1_000, acquireTimeoutMs: 0 })
    const { outputs } = machine.poll()
    machine.reply(1, outputs[0].id, value)
    const events = machine.poll().outputs.filter((o) => o.type !== 'request')
    assert.ok(events.length <= 1, `value #${i}`)
  }
})
