'use strict'
// Holder metadata, inspection and election followers on PostgreSQL lease rows from Node,
// against the real PostgreSQL 15 at $FENCEPOST_PG_URL (and the transaction-pooling
// PgBouncer at $FENCEPOST_PGBOUNCER_URL) that scripts/test starts. Mirrors
// tests/python/test_pg_inspect.py. The napi package only (the WASM package has no
// PostgresBackend).

const { test } = require('node:test')
const assert = require('node:assert/strict')
const crypto = require('node:crypto')

const { fencepost, IMPL, devRequire, sleep } = require('./impl')

const PG_URL = process.env.FENCEPOST_PG_URL
const BOUNCER_URL = process.env.FENCEPOST_PGBOUNCER_URL
const skip = IMPL !== 'napi'
  ? 'PostgreSQL is Node-only: the WASM package has no PostgresBackend'
  : PG_URL ? false : 'FENCEPOST_PG_URL is not set (scripts/test starts PostgreSQL)'
const skipBouncer = skip || (BOUNCER_URL ? false : 'FENCEPOST_PGBOUNCER_URL is not set')

const { Lock, Election, PostgresBackend, ConfigError, ProtocolError, standardMetadata } = fencepost
const pg = skip ? null : devRequire('pg')

const lockName = () => `pgi-${crypto.randomUUID().slice(0, 12)}`

async function withPool (fn, url = PG_URL) {
  const pool = new pg.Pool({ connectionString: url, max: 4 })
  pool.on('error', () => {})
  try {
    return await fn(pool)
  } finally {
    await pool.end()
  }
}

test('metadata round-trips; a renewal keeps it, a release clears it', { skip }, () => withPool(async (pool) => {
  const backend = new PostgresBackend(pool)
  await backend.migrate()
  const name = lockName()
  const meta = standardMetadata('nightly')
  assert.equal(await backend.inspect(name), null)
  const lease = await new Lock(backend, name, { ttlMs: 3000, metadata: meta }).acquire()
  const found = await backend.inspect(name)
  assert.equal(found.name, name)
  assert.equal(found.owner, lease.ownerId)
  assert.equal(found.token, lease.token)
  assert.deepEqual({ ...found.metadata }, meta)
  assert.equal(found.waiters, null)
  assert.ok(found.ttlLeftMs > 2000 && found.ttlLeftMs <= 3000, String(found.ttlLeftMs))
  await lease.extend()
  assert.deepEqual({ ...(await backend.inspect(name)).metadata }, meta)
  await lease.release()
  assert.equal(await backend.inspect(name), null)
  const row = (await pool.query('SELECT owner, metadata FROM fencepost_leases WHERE name = $1', [name])).rows[0]
  assert.deepEqual(row, { owner: null, metadata: null })
  const plain = await new Lock(backend, name, { ttlMs: 3000 }).acquire()
  const bare = await backend.inspect(name)
  assert.equal(bare.metadata, null)
  assert.equal(bare.token, plain.token)
  await plain.release()
}))

test('list: prefix filtered with LIKE metacharacters literal, in name order, bounded', { skip }, () => withPool(async (pool) => {
  const backend = new PostgresBackend(pool)
  await backend.migrate()
  const base = lockName()
  const names = [`${base}%a`, `${base}_b`, `${base}c`, `${base}d`]
  const held = []
  for (const n of names) held.push(await new Lock(backend, n, { ttlMs: 5000, metadata: { n } }).acquire())
  const other = await new Lock(backend, `x${base}`, { ttlMs: 5000 }).acquire()
  try {
    const every = await backend.list(base)
    assert.deepEqual(every.map((h) => h.name), [...names].sort())
    assert.ok(every.every((h) => h.metadata.n === h.name))
    assert.deepEqual((await backend.list(base, { limit: 2 })).map((h) => h.name), [...names].sort().slice(0, 2))
    assert.deepEqual((await backend.list(`${base}%`)).map((h) => h.name), [`${base}%a`])
    assert.deepEqual((await backend.list(`${base}_`)).map((h) => h.name), [`${base}_b`])
    await assert.rejects(backend.list(base, { limit: 0 }), ConfigError)
  } finally {
    for (const l of [...held, other]) await l.release()
  }
  assert.deepEqual(await backend.list(base), [])
}))

test('inspect and list behind PgBouncer in transaction mode', { skip: skipBouncer }, () => withPool(async (pool) => {
  const backend = new PostgresBackend(pool)
  const name = lockName()
  const lease = await new Lock(backend, name, { ttlMs: 3000, metadata: { via: 'pgbouncer' } }).acquire()
  try {
    const found = await backend.inspect(name)
    assert.equal(found.token, lease.token)
    assert.equal(found.metadata.via, 'pgbouncer')
    assert.deepEqual((await backend.list(name)).map((h) => h.name), [name])
  } finally {
    await lease.release()
  }
}, BOUNCER_URL))

test('the migration upgrades a lease table made before metadata', { skip }, () => withPool(async (pool) => {
  const table = `fp_old_${crypto.randomUUID().slice(0, 8).replace(/-/g, '')}`
  const name = lockName()
  await pool.query(`CREATE TABLE ${table} (name text PRIMARY KEY, owner text, token bigint NOT NULL, expires_at timestamptz)`)
  try {
    await pool.query(`INSERT INTO ${table} (name, owner, token, expires_at) VALUES ($1, NULL, 41, NULL)`, [name])
    const backend = new PostgresBackend(pool, { leaseTable: table })
    await assert.rejects(
      new Lock(backend, name, { ttlMs: 3000, acquireTimeoutMs: 1000 }).acquire(),
      (e) => e instanceof ProtocolError && /migration/.test(e.message) && /metadata/.test(e.message)
    )
    await backend.migrate()
    await backend.migrate()
    const cols = (await pool.query('SELECT column_name FROM information_schema.columns WHERE table_name = $1 ORDER BY ordinal_position', [table])).rows.map((r) => r.column_name)
    assert.deepEqual(cols, ['name', 'owner', 'token', 'expires_at', 'metadata'])
    const lease = await new Lock(backend, name, { ttlMs: 3000, metadata: { a: 'b' } }).acquire()
    assert.equal(lease.token, 42n)
    assert.equal((await backend.inspect(name)).metadata.a, 'b')
    await lease.release()
  } finally {
    await sleep(100) // the refused grant's cleanup may still be in flight
    await pool.query(`DROP TABLE ${table}`)
  }
}))

test('session mode refuses metadata, inspection and followers (kind unsupported)', { skip }, async () => {
  const backend = new PostgresBackend(null, { mode: 'session', connectionString: PG_URL })
  for (const call of [() => backend.inspect('x'), () => backend.list('x')]) {
    await assert.rejects(call(), (e) => e instanceof ConfigError && e.kind === 'unsupported' && /lease/.test(e.message))
  }
  assert.throws(() => new Lock(backend, 'x', { metadata: { a: 'b' } }), (e) => e instanceof ConfigError && /advisory/.test(e.message))
  await assert.rejects(new Election(backend, 'x', 'pod-a').leader(), (e) => e instanceof ConfigError && e.kind === 'unsupported')
  await backend.close?.()
})

test('a follower observes every change of leader in order on lease rows', { skip }, () => withPool(async (pool) => {
  const backend = new PostgresBackend(pool)
  await backend.migrate()
  const name = lockName()
  const follower = new Election(backend, name, 'follower', { ttlMs: 3000 })
  assert.equal(await follower.leader(), null)
  const seen = []
  const stop = new AbortController()
  const watching = (async () => {
    for await (const leader of follower.observe({ intervalMs: 20, signal: stop.signal })) seen.push(leader)
  })().catch((e) => { if (!stop.signal.aborted) throw e })
  await sleep(100)
  const tokens = []
  for (const who of ['pod-a', 'pod-b', 'pod-c']) {
    const leadership = await new Election(backend, name, who, { value: `addr-${who}`, ttlMs: 3000, purpose: 'correctness' }).campaign()
    tokens.push(leadership.token)
    const now = await follower.leader()
    assert.deepEqual([now.identity, now.value, now.token], [who, `addr-${who}`, leadership.token])
    await sleep(200)
    await leadership.resign()
    await sleep(200)
  }
  stop.abort()
  await watching
  assert.ok(tokens[0] < tokens[1] && tokens[1] < tokens[2])
  assert.deepEqual(seen.map((l) => l && [l.identity, l.value, l.token]), [
    null, ['pod-a', 'addr-pod-a', tokens[0]], null, ['pod-b', 'addr-pod-b', tokens[1]], null, ['pod-c', 'addr-pod-c', tokens[2]], null
  ])
}))
