'use strict'
// The driver's fast paths and what must not change with them: the timer is only moved
// earlier (a later deadline keeps the armed timer), yet every request deadline and every
// loss still fires on time; a release does not poke the machine first, yet a loss that
// is due is still reported by it. Mirrors tests/python/test_drivers.py.

const { test } = require('node:test')
const assert = require('node:assert/strict')

const { fencepost, sleep } = require('./impl')

const { Lock, MemoryBackend } = fencepost

/** Requests whose script is in `hang` never get an answer; the others run at once. */
class HangingBackend extends MemoryBackend {
  constructor (hang) {
    super()
    this.hang = hang
    this.sent = []
  }

  execute (request, options) {
    this.sent.push(request.script ?? request.backend)
    if (this.hang.has(request.script)) return new Promise(() => {})
    return this.server.execute(request, options)
  }
}

/** Blocks the event loop for `ms` (no timer can fire meanwhile). */
function block (ms) {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms)
}

test('a hung acquire is given up at its deadline (the acquire timeout)', async () => {
  const backend = new HangingBackend(new Set(['acquire']))
  const started = performance.now()
  await assert.rejects(
    new Lock(backend, 'hung-acquire', { ttlMs: 5_000, acquireTimeoutMs: 200 }).acquire(),
    { code: 'ERR_ACQUIRE_TIMEOUT' }
  )
  const elapsed = performance.now() - started
  assert.ok(elapsed > 150 && elapsed < 450, `${elapsed} ms`)
  backend.close()
})

test('a deadline earlier than the armed timer still fires on time', async () => {
  const backend = new HangingBackend(new Set(['renew']))
  // a long lease first: the timer is armed for its renewal, ~1.7 s away
  const long = await new Lock(backend, 'long', { ttlMs: 5_000 }).acquire()
  // then a short one whose renewal hangs: its loss is due at 300 · 0.99 − 2 = 295 ms
  const started = performance.now()
  const short = await new Lock(backend, 'short', { ttlMs: 300 }).acquire()
  await new Promise((resolve) => short.signal.addEventListener('abort', resolve, { once: true }))
  const elapsed = performance.now() - started
  assert.ok(elapsed < 400, `${elapsed} ms`)
  assert.equal(short.lostReason, 'expired')
  await long.release()
  backend.close()
})

test('release past the validity deadline, before the timer fired, rejects with LockLostError', async () => {
  const backend = new HangingBackend(new Set())
  const lease = await new Lock(backend, 'late', { ttlMs: 100, autoRenew: false }).acquire()
  block(150) // past 100 · 0.99 − 2 = 97 ms; the loss timer has not run
  assert.equal(lease.lost, false)
  const sentBefore = backend.sent.length
  await assert.rejects(lease.release(), { code: 'ERR_LOCK_LOST', reason: 'expired' })
  assert.equal(lease.lost, true)
  await sleep(20)
  // the machine's one cleanup release of the expired lease, nothing more
  assert.ok(backend.sent.slice(sentBefore).filter((s) => s === 'release').length <= 1)
  backend.close()
})

test('an uncontended cycle arms no new timer once one is set', async () => {
  const backend = new MemoryBackend()
  const lock = new Lock(backend, 'timers', { ttlMs: 10_000 })
  const lease = await lock.acquire()
  await lease.release()
  const driver = backend._driver()
  const timer = driver.timer
  assert.notEqual(timer, null)
  for (let i = 0; i < 20; i++) {
    const l = await lock.acquire()
    await l.release()
  }
  assert.equal(driver.timer, timer) // later deadlines keep the earlier timer
  backend.close()
})

test('a grant answered after close() is released, and close() waits for that release', async () => {
  // the acquire is "on the wire" until the test lets it land: after the close's release
  let land
  class SlowAcquire extends MemoryBackend {
    execute (request, options) {
      if (request.script === 'acquire') {
        return new Promise((resolve) => { land = () => resolve(this.server.execute(request, options)) })
      }
      return this.server.execute(request, options)
    }
  }
  const backend = new SlowAcquire()
  const lock = new Lock(backend, 'late', { ttlMs: 30_000 })
  const acquiring = lock.acquire()
  acquiring.catch(() => {})
  await sleep(5)
  let closed = false
  const closing = backend.close().then(() => { closed = true })
  await sleep(20)
  assert.equal(closed, false, 'close() waits for the acquire still out')
  land() // the server grants now, after the release of the close found nothing
  await closing
  await assert.rejects(acquiring, { code: 'ERR_BACKEND' })
  assert.equal(backend.server.lockOwner('late'), null, 'the late grant was released before close() resolved')
})
