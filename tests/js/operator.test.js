'use strict'
// Operator calls beside the lock machine: `backend.isLocked(name)` asks the server whether
// any holder's lease lives; `backend.forceRelease(name)` frees the lock whoever holds it,
// keeps the token counter (the next grant's token is higher) and, on fair Redis, grants it
// to the first live waiter as a release does. The freed holder finds out at its next
// renewal (LockLostError, 'renew_rejected'). On MemoryBackend (always), real Redis at
// $FENCEPOST_REDIS_URL (ioredis, and Upstash REST through rest-proxy.js) and etcd at
// $FENCEPOST_ETCD_URL. Mirrors tests/python/test_operator.py.

const { test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const crypto = require('node:crypto')

const { fencepost, devRequire, sleep } = require('./impl')
const { startRestProxy } = require('./rest-proxy')

const { Lock, MemoryBackend, MemoryServer, RedisBackend, UpstashRedisBackend, EtcdBackend, LockLostError, ConfigError } = fencepost

const REDIS = process.env.FENCEPOST_REDIS_URL
const ETCD = process.env.FENCEPOST_ETCD_URL
const skipRedis = REDIS ? false : 'FENCEPOST_REDIS_URL is not set (scripts/test starts Redis and sets it)'
const skipEtcd = ETCD ? false : 'FENCEPOST_ETCD_URL is not set (scripts/test starts etcd and sets it)'
const IORedis = devRequire('ioredis')

/** A slow backoff: a waiter that acquires well within it was woken, not polling. */
const SLOW = { ttlMs: 5_000, retryBaseMs: 1_500, retryMaxMs: 3_000 }
const TOKEN = crypto.randomBytes(12).toString('hex')
let proxy = null
const clients = []

before(async () => {
  if (REDIS) proxy = await startRestProxy({ redisUrl: REDIS, token: TOKEN })
})

after(async () => {
  if (proxy !== null) await proxy.close()
  for (const c of clients) await c.quit()
})

const name = () => `op-${crypto.randomBytes(6).toString('hex')}`

/** Factories of backends that share one server, per kind. */
function kind (which, fair) {
  if (which === 'memory') {
    const server = new MemoryServer()
    return () => new MemoryBackend({ server, fair })
  }
  if (which === 'upstash') return () => new UpstashRedisBackend({ url: proxy.url, token: TOKEN, fair })
  return () => {
    const client = new IORedis(REDIS, { maxRetriesPerRequest: 2 })
    clients.push(client)
    return new RedisBackend(client, { fair })
  }
}

const renewRejected = (e) => e instanceof LockLostError && e.reason === 'renew_rejected'

for (const which of ['memory', 'ioredis', 'upstash']) {
  for (const fair of [false, true]) {
    const skip = which === 'memory' ? false : skipRedis
    test(`${which}${fair ? ' fair' : ''}: isLocked follows the lease; forceRelease frees it, keeps the counter, and the holder learns it at its renewal`, { skip }, async () => {
      const make = kind(which, fair)
      const holder = make()
      const operator = make()
      const n = name()
      try {
        assert.equal(await operator.isLocked(n), false)
        assert.equal(await operator.forceRelease(n), false)
        const lease = await new Lock(holder, n, { ttlMs: 3_000 }).acquire()
        assert.equal(await operator.isLocked(n), true)
        assert.equal(await operator.forceRelease(n), true)
        assert.equal(await operator.isLocked(n), false)
        const second = await new Lock(operator, n, { ttlMs: 3_000 }).acquire()
        assert.ok(second.token > lease.token, `${second.token} > ${lease.token}`)
        await assert.rejects(lease.extend(), renewRejected)
        await second.release()
        assert.equal(await operator.isLocked(n), false)
      } finally {
        holder.close()
        operator.close()
      }
    })
  }
  const skip = which === 'memory' ? false : skipRedis
  test(`${which} fair: forceRelease wakes the parked waiter at once, with a higher token`, { skip }, async () => {
    const make = kind(which, true)
    const [holder, waiter, operator] = [make(), make(), make()]
    const n = name()
    try {
      const held = await new Lock(holder, n, SLOW).acquire()
      let granted = null
      const waiting = new Lock(waiter, n, SLOW).acquire().then((lease) => { granted = lease })
      await sleep(200) // queued and parked on its wake-up list
      assert.equal(granted, null)
      const freedAt = performance.now()
      assert.equal(await operator.forceRelease(n), true)
      await waiting
      const wokenMs = performance.now() - freedAt
      assert.ok(wokenMs < 1_000, `the waiter took ${wokenMs.toFixed(0)} ms: it polled (backoff 1.5 s) instead of being woken`)
      assert.ok(granted.token > held.token)
      assert.equal(await operator.isLocked(n), true)
      await assert.rejects(held.extend(), LockLostError)
      await granted.release()
    } finally {
      for (const b of [holder, waiter, operator]) b.close()
    }
  })
}

test('isLocked refuses a name that is not a string', async () => {
  const backend = new MemoryBackend()
  await assert.rejects(backend.isLocked(42), ConfigError)
  await assert.rejects(backend.forceRelease(undefined), ConfigError)
  backend.close()
})

test('etcd: forceRelease revokes the holder\'s lease; the watching contender acquires with a later revision', { skip: skipEtcd }, async () => {
  const [holder, waiter, operator] = [0, 1, 2].map(() => new EtcdBackend({ endpoints: ETCD }))
  const n = name()
  try {
    assert.equal(await operator.isLocked(n), false)
    assert.equal(await operator.forceRelease(n), false)
    const held = await new Lock(holder, n, { ttlMs: 6_000 }).acquire()
    assert.equal(await operator.isLocked(n), true)
    let granted = null
    const waiting = new Lock(waiter, n, { ttlMs: 6_000 }).acquire().then((lease) => { granted = lease })
    await sleep(300) // its key queued behind the holder's, watching it
    assert.equal(granted, null)
    assert.equal(await operator.forceRelease(n), true)
    await waiting
    assert.ok(granted.token > held.token)
    await assert.rejects(held.extend(), renewRejected)
    await granted.release()
    assert.equal(await operator.isLocked(n), false)
  } finally {
    for (const b of [holder, waiter, operator]) b.close()
  }
})
