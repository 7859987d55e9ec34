'use strict'
// Holder inspection: `backend.inspect(name)` and `backend.list(prefix, { limit })` read the
// holder's owner id, token, time left, waiters and the `metadata` it acquired with (stored
// in the `…:meta` key beside the lease); `forceRelease` evicts a holder whose later fenced
// write is refused. On MemoryBackend (always), real Redis at $FENCEPOST_REDIS_URL
// (ioredis, and Upstash REST through rest-proxy.js). Mirrors tests/python/test_inspect.py.

const { test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const crypto = require('node:crypto')

const { fencepost, devRequire, sleep } = require('./impl')
const { startRestProxy } = require('./rest-proxy')

const { Lock, MemoryBackend, MemoryServer, RedisBackend, UpstashRedisBackend, ConfigError, StaleTokenError, standardMetadata } = fencepost

const REDIS = process.env.FENCEPOST_REDIS_URL
const skipRedis = REDIS ? false : 'FENCEPOST_REDIS_URL is not set (scripts/test starts Redis and sets it)'
const IORedis = devRequire('ioredis')
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

const name = () => `insp-${crypto.randomBytes(6).toString('hex')}`

/** Factories of backends that share one server, per kind. */
function kind (which, fair = false) {
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

for (const which of ['memory', 'ioredis', 'upstash']) {
  const skip = which === 'memory' ? false : skipRedis

  test(`${which}: metadata round-trips through inspect`, { skip, timeout: 20_000 }, async () => {
    const make = kind(which)
    const [holderBackend, operator] = [make(), make()]
    const n = name()
    const meta = standardMetadata('nightly report')
    assert.equal(meta.label, 'nightly report')
    assert.ok(meta.acquired_at && meta.pid)
    try {
      assert.equal(await operator.inspect(n), null)
      const lease = await new Lock(holderBackend, n, { ttlMs: 3_000, metadata: meta }).acquire()
      const found = await operator.inspect(n)
      assert.deepEqual([found.name, found.owner, found.token], [n, lease.ownerId, lease.token])
      assert.deepEqual({ ...found.metadata }, meta)
      assert.ok(found.ttlLeftMs > 2_000 && found.ttlLeftMs <= 3_000, `ttlLeftMs ${found.ttlLeftMs}`)
      assert.equal(found.waiters, null)
      await sleep(300)
      await lease.extend() // the renewal extends the metadata key with the lease
      const again = await operator.inspect(n)
      assert.deepEqual({ ...again.metadata }, meta)
      assert.ok(again.ttlLeftMs > 2_500)
      await lease.release()
      assert.equal(await operator.inspect(n), null)
      const plain = await new Lock(holderBackend, n, { ttlMs: 3_000 }).acquire()
      const bare = await operator.inspect(n)
      assert.equal(bare.metadata, null)
      assert.equal(bare.token, plain.token)
      await plain.release()
    } finally {
      await holderBackend.close()
      await operator.close()
    }
  })

  test(`${which}: list is prefix-filtered and bounded`, { skip, timeout: 20_000 }, async () => {
    const backend = kind(which)()
    const n = name()
    try {
      const names = [0, 1, 2].map((i) => `${n}:job-${i}`)
      const leases = []
      for (const [i, m] of names.entries()) leases.push(await new Lock(backend, m, { ttlMs: 3_000, metadata: { i: String(i) } }).acquire())
      const other = await new Lock(backend, `x${n}`, { ttlMs: 3_000 }).acquire()
      const listed = await backend.list(`${n}:`)
      assert.deepEqual(listed.map((h) => h.name), names)
      assert.deepEqual(listed.map((h) => h.metadata.i), ['0', '1', '2'])
      assert.deepEqual(listed.map((h) => h.token), leases.map((l) => l.token))
      assert.equal((await backend.list(`${n}:`, { limit: 2 })).length, 2)
      assert.deepEqual(await backend.list(`${n}:none`), [])
      assert.deepEqual(await backend.list(`${n}*`), []) // glob characters are literal
      await leases[0].release()
      assert.deepEqual((await backend.list(`${n}:`)).map((h) => h.name), names.slice(1))
      for (const l of [...leases.slice(1), other]) await l.release()
      await assert.rejects(backend.list(n, { limit: 0 }), ConfigError)
    } finally {
      await backend.close()
    }
  })

  test(`${which}: forceRelease fences the evicted holder`, { skip, timeout: 20_000 }, async () => {
    const make = kind(which)
    const [holderBackend, operator] = [make(), make()]
    const n = name()
    const [data, fenceKey] = [`${n}:data`, `${n}:fence`]
    try {
      const evicted = await new Lock(holderBackend, n, { ttlMs: 3_000, metadata: { who: 'a' } }).acquire()
      await holderBackend.fencedSet(data, fenceKey, evicted.token, 'from a')
      assert.equal(await operator.forceRelease(n), true)
      assert.equal(await operator.inspect(n), null)
      const successor = await new Lock(operator, n, { ttlMs: 3_000, metadata: { who: 'b' } }).acquire()
      assert.ok(successor.token > evicted.token)
      assert.equal((await operator.inspect(n)).metadata.who, 'b')
      await operator.fencedSet(data, fenceKey, successor.token, 'from b')
      await assert.rejects(holderBackend.fencedSet(data, fenceKey, evicted.token, 'late write from a'),
        (e) => e instanceof StaleTokenError && e.highest === successor.token)
      await successor.release()
    } finally {
      await holderBackend.close()
      await operator.close()
    }
  })

  test(`${which}: a fair lock counts its waiters and refuses metadata`, { skip, timeout: 20_000 }, async () => {
    const make = kind(which, true)
    const [holderBackend, waiterBackend] = [make(), make()]
    const n = name()
    try {
      assert.throws(() => new Lock(holderBackend, n, { ttlMs: 3_000, metadata: { a: 'b' } }),
        (e) => e instanceof ConfigError && e.option === 'metadata')
      const held = await new Lock(holderBackend, n, { ttlMs: 3_000 }).acquire()
      const waiter = new Lock(waiterBackend, n, { ttlMs: 3_000 }).acquire()
      await sleep(200)
      const found = await holderBackend.inspect(n)
      assert.equal(found.owner, held.ownerId)
      assert.equal(found.waiters, 1)
      await held.release()
      const granted = await waiter
      const after = await holderBackend.inspect(n)
      assert.equal(after.owner, granted.ownerId)
      assert.equal(after.waiters, 0)
      await granted.release()
    } finally {
      await holderBackend.close()
      await waiterBackend.close()
    }
  })
}

test('bad metadata is refused before anything is sent', async () => {
  const backend = new MemoryBackend()
  const n = name()
  for (const bad of [{ pid: 7 }, ['a'], 'text', { big: 'x'.repeat(4096) }]) {
    assert.throws(() => new Lock(backend, n, { metadata: bad }), (e) => e instanceof ConfigError && e.option === 'metadata', JSON.stringify(bad))
  }
  assert.equal(await backend.inspect(n), null)
  assert.throws(() => standardMetadata(3), ConfigError)
  await assert.rejects(backend.inspect(42), ConfigError)
  await backend.close()
})
