'use strict'
// Observability: the core's events and warnings on the diagnostics channels
// (`fencepost:<event>`), to the backend's and the lock's `onEvent`, and as process
// warnings, on the memory backend and a real Redis (FENCEPOST_REDIS_URL). Run on napi
// and on WASM. Mirrors tests/python/test_observe.py.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const crypto = require('node:crypto')

const { fencepost, IMPL, devRequire, sleep, waitUntil } = require('./impl')

const { Lock, MemoryBackend, RedisBackend, LockMachine, ConfigError, AcquireTimeoutError, LockLostError, diagnosticsChannel, OBSERVATION_EVENTS, OBSERVATION_WARNINGS } = fencepost

const REDIS = process.env.FENCEPOST_REDIS_URL

/** A memory backend whose requests of the operations in `failing` throw (transport). */
class FlakyBackend extends MemoryBackend {
  constructor () {
    super()
    this.failing = new Set()
  }

  execute (request, options) {
    if (this.failing.has(request.operation)) throw new Error('connection refused')
    return super.execute(request, options)
  }
}

const named = (seen, event) => seen.filter((o) => o.event === event)

/** Collects the FencepostWarnings emitted while `fn` runs. */
async function warningsDuring (fn) {
  const seen = []
  const listener = (w) => { if (w.name === 'FencepostWarning') seen.push(w) }
  process.on('warning', listener)
  try {
    await fn()
    await new Promise((resolve) => setImmediate(resolve))
  } finally {
    process.off('warning', listener)
  }
  return seen
}

test('a cycle reports each event with its fields to the backend onEvent', async () => {
  const backend = new MemoryBackend()
  const seen = []
  backend.observe({ onEvent: (o) => seen.push(o) })
  let token
  await new Lock(backend, 'report', { ttlMs: 300 }).using(async (signal, lease) => {
    token = lease.token
    await sleep(250) // renewed at 100 and 200
  })
  assert.deepEqual(seen.slice(0, 2).map((o) => o.event), ['acquiring', 'acquired'])
  assert.equal(seen.at(-1).event, 'released')
  const [acquired] = named(seen, 'acquired')
  assert.equal(acquired.lock, 'report')
  assert.equal(acquired.level, 'info')
  assert.equal(acquired.warning, false)
  assert.equal(acquired.fields.token, token)
  assert.equal(acquired.fields.attempts, 1)
  assert.ok(acquired.fields.waitedMs >= 0 && acquired.fields.waitedMs < 100, acquired.fields.waitedMs)
  // durations in milliseconds, as the fields: never Rust's `1.5ms` or `0ns`
  assert.match(acquired.message, /^lock "report": acquired with token \d+ after \d+(\.\d+)? ms \(1 attempt\)$/)
  const renewed = named(seen, 'renewed')
  assert.ok(renewed.length >= 2)
  // confirmed at once: about the whole validity (300 · 0.99 − 2 = 295 ms) left
  for (const o of renewed) assert.ok(o.fields.validityLeftMs > 200 && o.fields.validityLeftMs <= 295, o.fields.validityLeftMs)
  const heldFor = named(seen, 'released')[0].fields.heldForMs
  assert.ok(heldFor > 240 && heldFor < 500, heldFor)
  backend.close()
})

test('messages say durations in milliseconds; the lock name and the errors they quote stay as they are', async () => {
  class SaysSeconds extends MemoryBackend {
    execute (request, options) {
      if (request.operation === 'acquire') throw new Error('gave up after 5s (2.5ms idle)')
      return super.execute(request, options)
    }
  }
  const backend = new SaysSeconds()
  backend._reachability.reportEveryMs = 60_000
  const seen = []
  backend.observe({ onEvent: (o) => seen.push(o), processWarnings: false })
  await assert.rejects(new Lock(backend, 'job 2s', { ttlMs: 1000, acquireTimeoutMs: 50, retryMaxMs: 10 }).acquire(), AcquireTimeoutError)
  const [timedOut] = named(seen, 'acquire_timed_out')
  // the client's error, or, when the timeout fell while an attempt was out, that
  // attempt's "no reply in time (earlier: …)" around it: quoted as it is either way
  assert.ok(timedOut.fields.lastError.includes('Error: gave up after 5s (2.5ms idle)'), timedOut.fields.lastError)
  const said = /^lock "job 2s": acquire timed out after (\d+(?:\.\d{1,6})?) ms \((\d+) attempts\); last error: (.*)$/.exec(timedOut.message)
  assert.ok(said !== null, timedOut.message)
  assert.equal(said[3], timedOut.fields.lastError)
  // the message rounds to the microsecond below a second, to the millisecond from one on
  // (a loaded machine can stretch the 50 ms wait past it); the field is exact
  const rounding = timedOut.fields.waitedMs >= 1000 ? 0.5 : 0.0005
  assert.ok(Math.abs(Number(said[1]) - timedOut.fields.waitedMs) <= rounding + 1e-9, `${said[1]} ms, waitedMs ${timedOut.fields.waitedMs}`)
  assert.equal(Number(said[2]), timedOut.fields.attempts)
  const errors = named(seen, 'backend_error')
  assert.ok(errors.length >= 1)
  for (const o of errors) assert.equal(o.message, 'lock "job 2s": acquire request failed: Error: gave up after 5s (2.5ms idle)')
  backend.close()
})

test('events are published on diagnostics channels named fencepost:<event>', async () => {
  const backend = new MemoryBackend()
  const got = []
  const all = []
  const onAcquired = (message, name) => got.push([name, message.event])
  const onAll = (message) => all.push(message.event)
  diagnosticsChannel.subscribe('fencepost:acquired', onAcquired)
  diagnosticsChannel.subscribe('fencepost:observation', onAll)
  try {
    const lease = await new Lock(backend, 'channels', { ttlMs: 1000 }).acquire()
    await lease.release()
  } finally {
    diagnosticsChannel.unsubscribe('fencepost:acquired', onAcquired)
    diagnosticsChannel.unsubscribe('fencepost:observation', onAll)
  }
  assert.deepEqual(got, [['fencepost:acquired', 'acquired']])
  assert.deepEqual(all, ['acquiring', 'acquired', 'released'])
  if (IMPL === 'napi' || typeof process.getBuiltinModule === 'function') {
    // on Node these are node:diagnostics_channel's own channels
    const dc = process.getBuiltinModule('node:diagnostics_channel')
    assert.equal(dc.channel('fencepost:acquired'), diagnosticsChannel.channel('fencepost:acquired'))
  }
  assert.ok(OBSERVATION_EVENTS.includes('acquire_timed_out') && OBSERVATION_WARNINGS.includes('hot_lock'))
  backend.close()
})

test('a lock\'s own onEvent hears its loss with the reason and the hold time', async () => {
  const backend = new MemoryBackend()
  const seen = []
  const other = []
  const lock = new Lock(backend, 'mine', { ttlMs: 300, onEvent: (o) => seen.push(o) })
  const quiet = new Lock(backend, 'quiet', { ttlMs: 300, onEvent: (o) => other.push(o) })
  await assert.rejects(lock.using(async (signal) => {
    backend.server.deleteLock('mine')
    await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }))
    signal.throwIfAborted()
  }), LockLostError)
  const [lost] = named(seen, 'lost')
  assert.equal(lost.level, 'warning')
  assert.equal(lost.fields.reason, 'renew_rejected')
  assert.ok(lost.fields.heldForMs > 50 && lost.fields.heldForMs < 500, lost.fields.heldForMs)
  assert.deepEqual(other, [])
  assert.equal(quiet.name, 'quiet')
  backend.close()
})

test('an acquire timeout reports the wait and the attempts', async () => {
  const backend = new MemoryBackend()
  const seen = []
  backend.observe({ onEvent: (o) => seen.push(o) })
  const holder = await new Lock(backend, 'busy', { ttlMs: 1000 }).acquire()
  await assert.rejects(new Lock(backend, 'busy', { ttlMs: 1000, acquireTimeoutMs: 100, retryMaxMs: 20 }).acquire(), AcquireTimeoutError)
  await holder.release()
  const timedOut = named(seen, 'acquire_timed_out')
  assert.equal(timedOut.length, 1)
  assert.ok(timedOut[0].fields.attempts >= 2)
  assert.ok(timedOut[0].fields.waitedMs >= 90 && timedOut[0].fields.waitedMs < 500, timedOut[0].fields.waitedMs)
  backend.close()
})

test('a failing renewal reports the error, the retry and the deadline', async () => {
  const backend = new FlakyBackend()
  const seen = []
  backend.observe({ onEvent: (o) => seen.push(o) })
  const lease = await new Lock(backend, 'flaky', { ttlMs: 400 }).acquire()
  backend.failing.add('renew')
  assert.ok(await waitUntil(() => named(seen, 'renewal_failing').length > 0, 2000))
  backend.failing.clear()
  await lease.release()
  const [failing] = named(seen, 'renewal_failing')
  assert.match(failing.fields.error, /connection refused/)
  // a quarter of the renew interval (400 / 3 / 4)
  assert.ok(Math.abs(failing.fields.retryInMs - 400 / 12) < 1e-3, failing.fields.retryInMs)
  assert.ok(failing.fields.deadlineInMs > 0 && failing.fields.deadlineInMs < 270, failing.fields.deadlineInMs)
  assert.equal(named(seen, 'backend_error')[0].fields.operation, 'renew')
  backend.close()
})

// ---- warnings ------------------------------------------------------------------------------

test('a late renewal is a process warning by default, naming what to change', async () => {
  const backend = new MemoryBackend()
  const warnings = await warningsDuring(async () => {
    // renewed 250 ms after each send: 295 − 250 = 45 ms left, under a third of 295
    await new Lock(backend, 'late', { ttlMs: 300, renewEveryMs: 250 }).using(() => sleep(350))
  })
  const late = warnings.filter((w) => w.code === 'FENCEPOST_RENEWAL_LATE')
  assert.ok(late.length >= 1, warnings.map((w) => w.message).join('\n'))
  assert.match(late[0].message, /raise ttl.*renew_every/)
  backend.close()
})

test('a lease held many TTLs is a warning once; processWarnings: false keeps it off the process', async () => {
  const backend = new MemoryBackend()
  const seen = []
  backend.observe({ onEvent: (o) => seen.push(o), heldLongTtls: 3, processWarnings: false })
  const warnings = await warningsDuring(async () => {
    await new Lock(backend, 'long', { ttlMs: 100 }).using(() => sleep(500))
  })
  const held = named(seen, 'held_long')
  assert.equal(held.length, 1)
  assert.equal(held[0].warning, true)
  assert.equal(held[0].fields.ttlMs, 100)
  assert.ok(held[0].fields.heldForMs >= 300)
  assert.match(held[0].message, /keep only the short protected step/)
  assert.deepEqual(warnings, [])
  backend.close()
})

test('a hot lock is a warning for many waiters, never for one long hold', async () => {
  const backend = new MemoryBackend()
  const seen = []
  backend.observe({ onEvent: (o) => seen.push(o), hotLockWaiters: 3, hotLockAttempts: 4, processWarnings: false })
  const holder = await new Lock(backend, 'hot', { ttlMs: 1000 }).acquire()
  const results = await Promise.allSettled([0, 1, 2].map(() =>
    new Lock(backend, 'hot', { ttlMs: 1000, acquireTimeoutMs: 200, retryMaxMs: 20 }).acquire()))
  await holder.release()
  assert.ok(results.every((r) => r.status === 'rejected' && r.reason instanceof AcquireTimeoutError))
  const hot = named(seen, 'hot_lock')
  assert.deepEqual(hot.filter((o) => 'waiters' in o.fields).map((o) => o.fields), [{ waiters: 3 }])
  // each waiter tried about ten times and found one holder: a long hold, not a hot lock
  // (the core's tests count holders passing the lock along)
  assert.deepEqual(hot.filter((o) => 'foundHeld' in o.fields), [])
  const timedOut = named(seen, 'acquire_timed_out')
  assert.equal(timedOut.length, 3)
  for (const o of timedOut) assert.ok(o.fields.attempts >= 4, o.fields.attempts)
  assert.match(hot[0].message, /SKIP LOCKED/)
  backend.close()
})

test('an unreachable server without acquireTimeoutMs warns periodically', async () => {
  const backend = new FlakyBackend()
  backend.failing.add('acquire')
  backend._reachability.reportEveryMs = 60_000 // only the core's warning matters here
  const seen = []
  backend.observe({ onEvent: (o) => seen.push(o), unreachableEveryMs: 100, processWarnings: false })
  const controller = new AbortController()
  const attempt = new Lock(backend, 'down', { ttlMs: 1000, retryMaxMs: 20 }).acquire({ signal: controller.signal })
  await sleep(450)
  controller.abort()
  await assert.rejects(attempt)
  const warned = named(seen, 'server_unreachable')
  assert.ok(warned.length >= 2 && warned.length <= 5, JSON.stringify(warned.map((o) => o.fields)))
  assert.ok(warned[0].fields.unreachableForMs >= 100)
  assert.match(warned[0].fields.lastError, /connection refused/)
  assert.match(warned[0].message, /set acquire_timeout/)
  seen.length = 0
  await assert.rejects(new Lock(backend, 'down', { ttlMs: 1000, acquireTimeoutMs: 300, retryMaxMs: 20 }).acquire(), AcquireTimeoutError)
  assert.deepEqual(named(seen, 'server_unreachable'), [])
  backend.close()
})

test('nothing is observed while nobody listens, and LockMachine observes on request', async () => {
  const backend = new MemoryBackend()
  backend.observe({ processWarnings: false })
  const lease = await new Lock(backend, 'silent', { ttlMs: 300 }).acquire()
  await lease.release()
  const driver = backend._driver()
  assert.deepEqual([driver.observing.events, driver.observing.warnings], [false, false])
  assert.deepEqual(driver.machine.observations(), [])
  backend.close()

  const m = new LockMachine({ seed: 1 })
  m.acquire(0, 'direct', { ttlMs: 1000 })
  assert.deepEqual(m.observations(), [])
  m.observe({ warnings: false })
  m.acquire(1, 'direct', { ttlMs: 1000 })
  const [o] = m.observations()
  assert.deepEqual([o.event, o.lock, o.lockId, o.level, o.fields], ['acquiring', 'direct', 2, 'debug', {}])
  m.observe(null)
})

test('bad observe options are ConfigErrors naming the option', () => {
  const backend = new MemoryBackend()
  const config = (option) => (e) => e instanceof ConfigError && e.option === option
  assert.throws(() => backend.observe({ lateRenewalFraction: 1.5 }), config('lateRenewalFraction'))
  assert.throws(() => backend.observe({ unreachableEveryMs: 0 }), config('unreachableEveryMs'))
  assert.throws(() => backend.observe({ unreachableEveryMs: 0.5 }), { message: 'unreachableEveryMs: must be at least 1 ms, got 0.5 ms' })
  assert.throws(() => backend.observe({ heldLongTtls: -1 }), config('heldLongTtls'))
  assert.throws(() => backend.observe({ heldLongTtls: '3' }), config('heldLongTtls'))
  assert.throws(() => backend.observe({ onEvent: 3 }), config('onEvent'))
  assert.throws(() => backend.observe({ heldLong: 3 }), config('heldLong'))
  assert.throws(() => new Lock(backend, 'x', { onEvent: 'no' }), config('onEvent'))
  backend.close()
})

test('a real Redis: events and a loss', { skip: REDIS ? false : 'FENCEPOST_REDIS_URL is not set' }, async () => {
  const IORedis = devRequire('ioredis')
  const client = new IORedis(REDIS)
  const keyPrefix = `fptest:${crypto.randomUUID().slice(0, 12)}:`
  const backend = new RedisBackend(client, { keyPrefix })
  const seen = []
  const lock = new Lock(backend, 'real', { ttlMs: 300, onEvent: (o) => seen.push(o) })
  try {
    let first
    await lock.using(async (signal, lease) => {
      first = lease.token
      await sleep(150) // one renewal at 100
    })
    await assert.rejects(lock.using(async (signal) => {
      await client.del(`${keyPrefix}{real}:lock`)
      await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }))
      signal.throwIfAborted()
    }), LockLostError)
    const events = seen.map((o) => o.event)
    assert.deepEqual(events.slice(0, 2), ['acquiring', 'acquired'])
    assert.ok(events.includes('renewed') && events.includes('released'))
    const acquired = named(seen, 'acquired')
    assert.equal(acquired[0].fields.token, first)
    assert.equal(acquired[1].fields.token, first + 1n)
    assert.deepEqual(named(seen, 'lost').map((o) => o.fields.reason), ['renew_rejected'])
  } finally {
    await backend.close()
    await client.del(`${keyPrefix}{real}:lock`, `${keyPrefix}{real}:token`)
    await client.quit()
  }
})
