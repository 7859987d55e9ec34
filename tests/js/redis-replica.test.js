'use strict'
// Replica-confirmed grants (minReplicas) against a real Redis primary and replica on
// 127.0.0.1, started by this file with scripts/services/redis-replica.sh (its link proxy can
// hold replication back), through ioredis and node-redis. Mirrors
// tests/python/test_redis_replica.py; runs where the Redis tests run ($FENCEPOST_REDIS_URL).

const { test, before, after, afterEach } = require('node:test')
const assert = require('node:assert/strict')
const { execFileSync } = require('node:child_process')
const path = require('node:path')
const crypto = require('node:crypto')

const { fencepost, REPO, devRequire, sleep } = require('./impl')

const { Lock, RedisBackend, UpstashRedisBackend, MemoryBackend, ConfigError, AcquireTimeoutError } = fencepost
const IORedis = devRequire('ioredis')
const nodeRedis = devRequire('redis')

const skip = process.env.FENCEPOST_REDIS_URL ? false : 'FENCEPOST_REDIS_URL is not set (scripts/test starts Redis; this file starts its own pair)'
const SCRIPT = path.join(REPO, 'scripts', 'services', 'redis-replica.sh')
const service = (...args) => execFileSync(SCRIPT, args, { encoding: 'utf8', timeout: 60_000 }).trim()
let primaryUrl, replicaUrl

before(() => { if (!skip) [primaryUrl, replicaUrl] = service('start').split(' ') })
after(() => { if (!skip) service('stop') })
afterEach(() => { if (!skip) service('resume') })

const CLIENTS = {
  ioredis: { connect: async (url) => new IORedis(url, { maxRetriesPerRequest: 2 }), close: (c) => c.quit() },
  'node-redis': {
    connect: async (url) => { const c = nodeRedis.createClient({ url }); await c.connect(); return c },
    close: (c) => c.quit()
  }
}
const name = () => `replica-${crypto.randomBytes(4).toString('hex')}`

for (const [kind, { connect, close }] of Object.entries(CLIENTS)) {
  test(`${kind}: a confirmed grant is on the replica when acquired; an unconfirmed one is not acquired and is released`, { skip }, async () => {
    const [client, replica] = [await connect(primaryUrl), new IORedis(replicaUrl)]
    const backend = new RedisBackend(client)
    const n = name()
    await new Lock(backend, n, { ttlMs: 5_000, minReplicas: 1, replicaTimeoutMs: 500 }).using(async (signal, lease) => {
      assert.equal(await replica.get(backend.lockKey(n)), lease.ownerId)
      assert.equal(BigInt(await replica.get(backend.tokenKey(n))), lease.token)
    })
    service('hold')
    const started = performance.now()
    await assert.rejects(
      new Lock(backend, n, { ttlMs: 5_000, minReplicas: 1, replicaTimeoutMs: 50, acquireTimeoutMs: 400 }).acquire(),
      (e) => e instanceof AcquireTimeoutError && /WAIT confirmed the grant on 0 of 1 replicas/.test(e.message)
    )
    assert.ok(performance.now() - started < 2_000)
    const primary = new IORedis(primaryUrl)
    for (let i = 0; i < 100 && await primary.exists(backend.lockKey(n)); i++) await sleep(20)
    assert.equal(await primary.exists(backend.lockKey(n)), 0, 'the unconfirmed attempt was released')
    backend.close()
    await Promise.all([close(client), replica.quit(), primary.quit()])
  })

  test(`${kind}: renewals no replica confirms are retried until the validity deadline, then the lease is lost`, { skip }, async () => {
    const client = await connect(primaryUrl)
    const backend = new RedisBackend(client)
    const lease = await new Lock(backend, name(), { ttlMs: 600, minReplicas: 1, replicaTimeoutMs: 50 }).acquire()
    const deadline = lease.validUntilMs
    service('hold')
    await new Promise((resolve) => lease.signal.addEventListener('abort', resolve, { once: true }))
    assert.equal(lease.lostReason, 'expired')
    assert.ok(performance.now() >= deadline - 1, 'not lost before its validity deadline')
    backend.close()
    await close(client)
  })
}

test('minReplicas is refused where WAIT cannot confirm the script: the REST protocol, the in-memory server', () => {
  const rest = new UpstashRedisBackend({ url: 'http://127.0.0.1:1/', token: 't' })
  assert.throws(() => new Lock(rest, 'r', { minReplicas: 1 }), (e) => e instanceof ConfigError && e.option === 'minReplicas' && /REST protocol runs every command as a request of its own/.test(e.message))
  assert.throws(() => new Lock(new MemoryBackend(), 'r', { minReplicas: 1 }), (e) => e instanceof ConfigError && /MemoryBackend has no replicas/.test(e.message))
  assert.throws(() => new Lock(new MemoryBackend(), 'r', { minReplicas: -1 }), (e) => e instanceof ConfigError && e.option === 'minReplicas')
  assert.throws(() => new Lock(new MemoryBackend(), 'r', { minReplicas: 1, replicaTimeoutMs: 0 }), (e) => e instanceof ConfigError && e.option === 'replicaTimeoutMs')
  new Lock(rest, 'r', { minReplicas: 0 }) // eslint-disable-line no-new
  rest.close()
})
