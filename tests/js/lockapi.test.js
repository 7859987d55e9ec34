'use strict'
// The lock API beside the peers' (node-redlock, redis-py Lock, python-redis-lock): manual
// extend, the local "still mine?" view, try-once and per-call timeouts, a retry count,
// dropped leases, and a release whose reply was lost. In-memory backend. Mirrors
// tests/python/test_lock_api.py.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { spawnSync } = require('node:child_process')
const path = require('node:path')

const { fencepost, sleep, waitUntil } = require('./impl')

const { Lock, MemoryBackend, ConfigError, LockLostError, AcquireTimeoutError } = fencepost

/** Runs every request; the first release's reply is lost on the way back. */
class LostReleaseReply extends MemoryBackend {
  constructor () { super(); this.lost = 0 }
  async execute (request, options) {
    const value = await super.execute(request, options)
    if (request.operation === 'release' && this.lost === 0) {
      this.lost++
      throw new Error('connection reset after the release ran')
    }
    return value
  }
}

test('a release whose reply was lost is a release, not a loss', async () => {
  const backend = new LostReleaseReply()
  const lease = await new Lock(backend, 'job', { ttlMs: 5_000 }).acquire()
  await lease.release() // its reply lost; the retry finds the key gone
  assert.equal(backend.lost, 1)
  assert.equal(lease.lostReason, null)
  assert.equal(backend.server.lockOwner('job'), null)
  backend.close()
})

test('extend renews now and moves the validity; a deleted key rejects it', async () => {
  const backend = new MemoryBackend()
  const lease = await new Lock(backend, 'job', { ttlMs: 1_000, autoRenew: false }).acquire()
  const first = lease.validUntilMs
  await sleep(200)
  await lease.extend()
  assert.ok(lease.validUntilMs - first > 150, `${lease.validUntilMs - first}`)
  assert.equal(lease.held, true)
  backend.server.deleteLock('job') // an operator deletes the key
  await assert.rejects(lease.extend(), (e) => e instanceof LockLostError && e.reason === 'renew_rejected')
  assert.equal(lease.held, false)
  await assert.rejects(lease.extend(), LockLostError)
  backend.close()
})

test('extend of a released lease is a ConfigError', async () => {
  const backend = new MemoryBackend()
  const lease = await new Lock(backend, 'job', { ttlMs: 5_000 }).acquire()
  await lease.release()
  assert.equal(lease.held, false)
  await assert.rejects(lease.extend(), (e) => e instanceof ConfigError && /released/.test(e.message))
  backend.close()
})

test('a released lease fails its check and says it was released', async () => {
  // work that goes on after the release must not take check() for a yes
  const backend = new MemoryBackend()
  const lock = new Lock(backend, 'job', { ttlMs: 5_000 })
  const lease = await lock.acquire()
  lease.check()
  assert.equal(lease.released, false)
  assert.equal(String(lease), 'Lease("job", token 1, held)')
  await lease.release()
  assert.equal(lease.released, true)
  assert.equal(String(lease), 'Lease("job", token 1, released)')
  assert.throws(() => lease.check(), (e) => e instanceof ConfigError && /^check\(\): the lease of "job" \(token 1n\) was released/.test(e.message))
  // lost first, released after: the loss is what check() reports
  const lost = await lock.acquire()
  backend.close()
  await assert.rejects(lost.release(), LockLostError)
  assert.throws(() => lost.check(), LockLostError)
  assert.equal(String(lost), 'Lease("job", token 2, lost: closed)')
})

test('tryAcquire resolves null while held; timeoutMs overrides the wait for one call', async () => {
  const backend = new MemoryBackend()
  const lock = new Lock(backend, 'job', { ttlMs: 5_000 }) // waits forever by default
  const held = await lock.acquire()
  const started = performance.now()
  assert.equal(await lock.tryAcquire(), null)
  await assert.rejects(lock.acquire({ timeoutMs: 50 }), AcquireTimeoutError)
  assert.ok(performance.now() - started < 1_000)
  // the call's own option is the one named, as the caller spelled it
  await assert.rejects(lock.acquire({ timeoutMs: -1 }), (e) => e instanceof ConfigError && e.option === 'timeoutMs' && /^timeoutMs must be/.test(e.message))
  await assert.rejects(lock.acquire({ timeout: 5 }), (e) => e instanceof ConfigError && e.option === 'timeout' && /did you mean timeoutMs\?/.test(e.message))
  await held.release()
  const again = await lock.tryAcquire()
  assert.equal(again.token, held.token + 1n)
  await again.release()
  backend.close()
})

test('retryCount bounds the attempts', async () => {
  const backend = new MemoryBackend()
  const held = await new Lock(backend, 'job', { ttlMs: 5_000 }).acquire()
  let calls = 0
  const execute = backend.execute.bind(backend)
  backend.execute = (request, options) => {
    if (request.operation === 'acquire') calls++
    return execute(request, options)
  }
  const lock = new Lock(backend, 'job', { ttlMs: 5_000, retryCount: 2, retryBaseMs: 1, retryMaxMs: 2 })
  await assert.rejects(lock.acquire(), AcquireTimeoutError)
  assert.equal(calls, 3) // the first attempt and 2 retries
  assert.throws(() => new Lock(backend, 'job', { retryCount: -1 }), (e) => e instanceof ConfigError && /retryCount/.test(e.message))
  assert.throws(() => new Lock(backend, 'job', { retryCount: 1.5 }), ConfigError)
  await held.release()
  backend.close()
})

test('a dropped lease warns and is released when collected (node --expose-gc)', () => {
  const script = `
    const { fencepost, waitUntil } = require(${JSON.stringify(path.join(__dirname, 'impl.js'))})
    const warnings = []
    process.on('warning', (w) => warnings.push(w))
    ;(async () => {
      const backend = new fencepost.MemoryBackend()
      await (async () => { await new fencepost.Lock(backend, 'job', { ttlMs: 5000 }).acquire() })()
      for (let i = 0; i < 10 && warnings.length === 0; i++) {
        global.gc()
        await new Promise((resolve) => setTimeout(resolve, 10))
      }
      await waitUntil(() => backend.server.lockOwner('job') === null, 2000)
      const kept = await new fencepost.Lock(backend, 'job', { ttlMs: 5000, acquireTimeoutMs: 0 }).acquire()
      await kept.release()
      global.gc()
      await new Promise((resolve) => setTimeout(resolve, 10))
      backend.close()
      console.log(JSON.stringify({ warnings: warnings.map((w) => [w.name, w.code, w.message]), token: String(kept.token) }))
    })().catch((e) => { console.error(e); process.exit(1) })
  `
  const child = spawnSync(process.execPath, ['--expose-gc', '-e', script], { encoding: 'utf8', timeout: 20_000, env: process.env })
  assert.equal(child.status, 0, child.stderr)
  const out = JSON.parse(child.stdout.trim().split('\n').pop())
  assert.equal(out.token, '2') // the dropped lease (token 1) was released
  assert.equal(out.warnings.length, 1, JSON.stringify(out.warnings))
  const [name, code, message] = out.warnings[0]
  assert.equal(name, 'ResourceWarning')
  assert.equal(code, 'FENCEPOST_LEASE_DROPPED')
  assert.match(message, /garbage-collected while held/)
})

test('a lease whose signal was taken is never collected while held (node --expose-gc)', () => {
  const script = `
    const { fencepost } = require(${JSON.stringify(path.join(__dirname, 'impl.js'))})
    const warnings = []
    process.on('warning', (w) => warnings.push(w))
    ;(async () => {
      const backend = new fencepost.MemoryBackend()
      // only a listener on the signal refers to the lease (what a guarded fetch does)
      let heard = null
      await (async () => {
        const lease = await new fencepost.Lock(backend, 'job', { ttlMs: 5000 }).acquire()
        lease.signal.addEventListener('abort', (e) => { heard = e.target.reason.code })
      })()
      for (let i = 0; i < 10; i++) {
        global.gc()
        await new Promise((resolve) => setTimeout(resolve, 10))
      }
      const owner = backend.server.lockOwner('job')
      backend.close()
      await new Promise((resolve) => setTimeout(resolve, 10))
      console.log(JSON.stringify({ warnings: warnings.map((w) => w.code), held: owner !== null, heard }))
    })().catch((e) => { console.error(e); process.exit(1) })
  `
  const child = spawnSync(process.execPath, ['--expose-gc', '-e', script], { encoding: 'utf8', timeout: 20_000, env: process.env })
  assert.equal(child.status, 0, child.stderr)
  const out = JSON.parse(child.stdout.trim().split('\n').pop())
  assert.deepEqual(out, { warnings: [], held: true, heard: 'ERR_LOCK_LOST' }) // lost only at close()
})

test('a finished lease is collected: after using(), after release() of a lease whose signal was taken, after a loss (node --expose-gc)', () => {
  const script = `
    const { fencepost } = require(${JSON.stringify(path.join(__dirname, 'impl.js'))})
    const warnings = []
    process.on('warning', (w) => warnings.push(w))
    ;(async () => {
      const backend = new fencepost.MemoryBackend()
      const lock = new fencepost.Lock(backend, 'job', { ttlMs: 5000 })
      const refs = { using: [], signal: [], lost: [] }
      for (let i = 0; i < 200; i++) {
        await lock.using(async (signal, lease) => { refs.using.push(new WeakRef(lease)) })
      }
      // each lease in a call of its own, so no frame of this function still holds one
      const taken = async () => {
        const lease = await lock.acquire()
        lease.signal.addEventListener('abort', () => {})
        refs.signal.push(new WeakRef(lease))
        await lease.release()
      }
      for (let i = 0; i < 200; i++) await taken()
      // lost (expired, never released): the loss ends it as a release would
      const lost = async () => {
        const lease = await new fencepost.Lock(backend, 'short', { ttlMs: 30, autoRenew: false }).acquire()
        await new Promise((resolve) => lease.signal.addEventListener('abort', resolve, { once: true }))
        refs.lost.push(new WeakRef(lease))
      }
      for (let i = 0; i < 3; i++) await lost()
      for (let i = 0; i < 10; i++) {
        global.gc()
        await new Promise((resolve) => setTimeout(resolve, 10))
      }
      // the indices of the leases still alive
      const alive = Object.fromEntries(Object.entries(refs).map(([k, v]) => [k, v.flatMap((r, i) => r.deref() !== undefined ? [i] : [])]))
      backend.close()
      console.log(JSON.stringify({ alive, warnings: warnings.map((w) => w.code) }))
    })().catch((e) => { console.error(e); process.exit(1) })
  `
  const child = spawnSync(process.execPath, ['--expose-gc', '-e', script], { encoding: 'utf8', timeout: 20_000, env: process.env })
  assert.equal(child.status, 0, child.stderr)
  const out = JSON.parse(child.stdout.trim().split('\n').pop())
  assert.deepEqual(out, { alive: { using: [], signal: [], lost: [] }, warnings: [] })
})

test('a Lock is a shareable description: concurrent using() calls each get their own lease', async () => {
  const backend = new MemoryBackend()
  const lock = new Lock(backend, 'job', { ttlMs: 5_000, retryBaseMs: 1, retryMaxMs: 5 })
  let inside = 0
  const tokens = await Promise.all([1, 2, 3].map(() => lock.using(async (signal, lease) => {
    inside++
    assert.equal(inside, 1)
    await sleep(10)
    inside--
    return lease.token
  })))
  assert.deepEqual([...tokens].sort(), [1n, 2n, 3n])
  backend.close()
})

void waitUntil
