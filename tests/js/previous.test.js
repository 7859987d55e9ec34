'use strict'
// How the previous holder ended, on every grant (`lease.previous`): the first grant of a
// name hears 'none'; after its holder's own release 'released'; after a holder whose lease
// ran out (it stopped renewing, as a paused or killed process does, and its machine's
// cleanup freed the key) or an operator's forceRelease, 'expired'. On MemoryBackend
// (always), real Redis at $FENCEPOST_REDIS_URL (plain and fair), PostgreSQL lease rows at
// $FENCEPOST_PG_URL (from Node only), the Kubernetes Lease test server at
// $FENCEPOST_KUBE_URL, and etcd at $FENCEPOST_ETCD_URL (its release and contender records).
// Mirrors tests/python/test_previous.py.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const crypto = require('node:crypto')

const { fencepost, IMPL, devRequire, sleep } = require('./impl')

const { Lock, MemoryBackend, RedisBackend, EtcdBackend, LockLostError } = fencepost

const REDIS = process.env.FENCEPOST_REDIS_URL
const PG_URL = process.env.FENCEPOST_PG_URL
const ETCD = process.env.FENCEPOST_ETCD_URL
const KUBE = process.env.FENCEPOST_KUBE_URL
const KUBE_TOKEN = process.env.FENCEPOST_KUBE_TOKEN
const notSet = (v) => `${v} is not set (scripts/test starts the server and sets it)`

const name = () => `prev-${crypto.randomBytes(6).toString('hex')}`

/** Per kind: [skip, () => { backend, end }]. */
const KINDS = {
  memory: [false, () => ({ backend: new MemoryBackend(), end: async () => {} })],
  'memory fair': [false, () => ({ backend: new MemoryBackend({ fair: true }), end: async () => {} })],
  redis: [REDIS ? false : notSet('FENCEPOST_REDIS_URL'), () => redis(false)],
  'redis fair': [REDIS ? false : notSet('FENCEPOST_REDIS_URL'), () => redis(true)],
  postgres: [IMPL !== 'napi' ? 'PostgreSQL is reached from Node only' : PG_URL ? false : notSet('FENCEPOST_PG_URL'), postgresBackend],
  etcd: [ETCD ? false : notSet('FENCEPOST_ETCD_URL'), () => ({ backend: new EtcdBackend({ endpoints: ETCD }), end: async () => {} })]
}

function redis (fair) {
  const IORedis = devRequire('ioredis')
  const client = new IORedis(REDIS, { maxRetriesPerRequest: 2 })
  return { backend: new RedisBackend(client, { fair }), end: () => client.quit() }
}

async function postgresBackend () {
  const pg = devRequire('pg')
  const pool = new pg.Pool({ connectionString: PG_URL, max: 4 })
  pool.on('error', () => {})
  const backend = new fencepost.PostgresBackend(pool)
  await backend.migrate()
  return { backend, end: () => pool.end() }
}

for (const [kind, [skip, make]] of Object.entries(KINDS)) {
  test(`${kind}: none, then released, then expired after a lapse and after forceRelease`, { skip }, async () => {
    const { backend, end } = await make()
    const n = name()
    try {
      const first = await new Lock(backend, n, { ttlMs: 5_000 }).acquire()
      assert.equal(first.previous, 'none')
      await first.release()
      const second = await new Lock(backend, n, { ttlMs: 5_000 }).acquire()
      assert.equal(second.previous, 'released')
      assert.ok(second.token > first.token)
      await second.release()
      // a holder that stops renewing: its machine declares the lease lost at the validity
      // deadline and frees the key at once with a cleanup, which is no clean release
      const stalled = await new Lock(backend, n, { ttlMs: 300, autoRenew: false }).acquire()
      await sleep(500)
      assert.throws(() => stalled.check(), LockLostError)
      const heir = await new Lock(backend, n, { ttlMs: 5_000, acquireTimeoutMs: 2_000 }).acquire()
      assert.equal(heir.previous, 'expired')
      assert.ok(heir.token > stalled.token)
      assert.equal(await backend.forceRelease(n), true)
      await assert.rejects(heir.release(), LockLostError)
      const afterReset = await new Lock(backend, n, { ttlMs: 5_000 }).acquire()
      assert.equal(afterReset.previous, 'expired')
      await afterReset.release()
    } finally {
      backend.close()
      await end()
    }
  })
}

for (const kind of ['memory fair', 'redis fair']) {
  const [skip, make] = KINDS[kind]
  test(`${kind}: a hand-off tells the waiter its predecessor released`, { skip }, async () => {
    const { backend, end } = await make()
    const n = name()
    try {
      const holder = await new Lock(backend, n, { ttlMs: 5_000 }).acquire()
      const waiting = new Lock(backend, n, { ttlMs: 5_000, acquireTimeoutMs: 5_000 }).acquire()
      await sleep(200) // queued and parked
      await holder.release()
      const heir = await waiting
      assert.equal(heir.previous, 'released')
      await heir.release()
    } finally {
      backend.close()
      await end()
    }
  })
}

test('etcd: a waiter hears it from the holder it queued behind', { skip: ETCD ? false : notSet('FENCEPOST_ETCD_URL') }, async () => {
  const backend = new EtcdBackend({ endpoints: ETCD })
  const n = name()
  // resolves once the acquisition is queued, with its promise in an object (an async
  // function returning the promise itself would wait for the grant)
  const queueBehind = async () => {
    const waiting = new Lock(backend, n, { ttlMs: 5_000, acquireTimeoutMs: 5_000 }).acquire()
    await sleep(300) // queued: its key is behind the holder's, its watch parked
    return { waiting }
  }
  try {
    const holder = await new Lock(backend, n, { ttlMs: 5_000 }).acquire()
    assert.equal(holder.previous, 'none')
    let { waiting } = await queueBehind()
    await holder.release()
    const heir = await waiting
    assert.equal(heir.previous, 'released')
    await heir.release()
    // a holder that stops renewing while another waits behind it: lost at its validity,
    // its machine revokes the lease (no clean release)
    const stalled = await new Lock(backend, n, { ttlMs: 1_000, autoRenew: false }).acquire()
    assert.equal(stalled.previous, 'released')
    ;({ waiting } = await queueBehind())
    const next = await waiting
    assert.equal(next.previous, 'expired')
    assert.ok(next.token > stalled.token)
    await next.release()
  } finally {
    backend.close()
  }
})

test('kubernetes reads it from the Lease the grant replaced', { skip: KUBE && KUBE_TOKEN ? false : notSet('FENCEPOST_KUBE_URL') }, async () => {
  const backend = new fencepost.KubernetesLeaseBackend({ server: KUBE, token: KUBE_TOKEN })
  const n = name()
  try {
    const first = await new Lock(backend, n, { ttlMs: 1_000 }).acquire()
    assert.equal(first.previous, 'none')
    await first.release()
    const second = await new Lock(backend, n, { ttlMs: 1_000 }).acquire()
    assert.equal(second.previous, 'released')
    await second.release()
    const stalled = await new Lock(backend, n, { ttlMs: 1_000, autoRenew: false }).acquire()
    await sleep(1_200) // lost at its validity; the cleanup keeps the holder, shortened to 1 s
    const heir = await new Lock(backend, n, { ttlMs: 1_000, acquireTimeoutMs: 5_000 }).acquire()
    assert.equal(heir.previous, 'expired')
    assert.ok(heir.token > stalled.token)
    await heir.release()
  } finally {
    backend.close()
  }
})
