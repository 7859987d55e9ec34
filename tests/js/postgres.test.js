'use strict'
// PostgreSQL from Node against a real PostgreSQL 15 ($FENCEPOST_PG_URL) and a PgBouncer in
// pool_mode = transaction in front of it ($FENCEPOST_PGBOUNCER_URL), as scripts/test starts
// them on 127.0.0.1 (scripts/services/postgres.sh, pgbouncer.sh). Mirrors
// tests/python/test_postgres.py: lease rows and session advisory locks on node-postgres
// (Pool, Client) and postgres.js, xactLock, fencedUpdate, migrations, PgBouncer, and 8
// processes contending with a fenced log. The napi package only: PostgreSQL is not
// reachable from WebAssembly hosts (workers have no sockets), so the WASM package has no
// PostgresBackend.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const path = require('node:path')
const crypto = require('node:crypto')
const { fork } = require('node:child_process')

const { fencepost, IMPL, devRequire, sleep, waitUntil } = require('./impl')

const PG_URL = process.env.FENCEPOST_PG_URL
const BOUNCER_URL = process.env.FENCEPOST_PGBOUNCER_URL
const skip = IMPL !== 'napi'
  ? 'PostgreSQL is Node-only: the WASM package has no PostgresBackend (workers cannot reach PostgreSQL)'
  : PG_URL ? false : 'FENCEPOST_PG_URL is not set (scripts/test starts PostgreSQL)'
const skipBouncer = skip || (BOUNCER_URL ? false : 'FENCEPOST_PGBOUNCER_URL is not set')

const { Lock, PostgresBackend, xactLock, fencedUpdate, postgresMigration, advisoryKey, ConfigError, AcquireTimeoutError, LockLostError, ProtocolError, StaleTokenError, LockMachine } = fencepost
const pg = skip ? null : devRequire('pg')
const postgres = skip ? null : devRequire('postgres')

const lockName = () => `fp-${crypto.randomUUID().slice(0, 12)}`
/** The PgBouncer database served by one server connection (pgbouncer.sh). */
const singleSessionUrl = () => BOUNCER_URL.replace(/\/[^/]*$/, '/locks_single')

/** One statement on a connection of its own: rows as arrays. */
async function sql (text, params = [], url = PG_URL) {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    return (await client.query({ text, values: params, rowMode: 'array' })).rows
  } finally {
    await client.end()
  }
}

/** Backend pids holding advisory key `key` (session or transaction level). */
async function advisoryHolders (key) {
  const rows = await sql("SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = $1", [key.toString()])
  return rows.map((r) => r[0])
}

/** A fresh row of fp_jobs (token 0). */
async function newJob () {
  const id = String(BigInt('0x' + crypto.randomBytes(7).toString('hex')))
  await sql("INSERT INTO fp_jobs (id, body) VALUES ($1, 'new')", [id])
  return id
}

/** The clients under test, each with how to make and end one. */
const CLIENTS = {
  'pg-pool': () => { const pool = new pg.Pool({ connectionString: PG_URL, max: 4 }); pool.on('error', () => {}); return { client: pool, end: () => pool.end() } },
  'pg-client': async () => { const c = new pg.Client({ connectionString: PG_URL }); c.on('error', () => {}); await c.connect(); return { client: c, end: () => c.end() } },
  'postgres.js': () => { const s = postgres(PG_URL, { max: 4, onnotice: () => {} }); return { client: s, end: () => s.end() } }
}

let migrated = null
function migrate () {
  migrated ??= (async () => {
    const { client, end } = CLIENTS['pg-pool']()
    try {
      await new PostgresBackend(client).migrate()
      await new PostgresBackend(client).migrate() // idempotent
      await sql("CREATE TABLE IF NOT EXISTS fp_jobs (id bigint PRIMARY KEY, body text, last_token bigint NOT NULL DEFAULT 0)")
    } finally {
      await end()
    }
  })()
  return migrated
}

// ---- no server --------------------------------------------------------------------------------

test('configuration errors name what was wrong', { skip: IMPL !== 'napi' && 'the WASM package has no PostgresBackend' }, () => {
  assert.throws(() => new PostgresBackend(null), (e) => e instanceof ConfigError && /lease mode needs a client/.test(e.message))
  assert.throws(() => new PostgresBackend({ query () {} }), (e) => e instanceof ConfigError && /pg\.Pool, a pg\.Client or a postgres\.js/.test(e.message))
  assert.throws(() => new PostgresBackend(null, { mode: 'session' }), (e) => e instanceof ConfigError && /connectionString/.test(e.message) && /got nothing/.test(e.message))
  // the options alone, where the client goes: the error shows the call that works
  assert.throws(() => new PostgresBackend({ mode: 'session', connectionString: 'postgresql://127.0.0.1/x' }), (e) => e instanceof ConfigError && /new PostgresBackend\(null, \{ mode: 'session', connectionString \}\)/.test(e.message))
  assert.throws(() => new PostgresBackend(null, { mode: 'advisory' }), (e) => e instanceof ConfigError && e.option === 'mode')
  assert.throws(() => new PostgresBackend(null, { mode: 'session', connectionString: 'x', connect: () => null }), /not both/)
  assert.throws(() => postgresMigration({ leaseTable: 'x; DROP TABLE y' }), (e) => e instanceof ConfigError && /invalid table name/.test(e.message))
  assert.match(postgresMigration({ leaseTable: 'locks.leases' }), /CREATE TABLE IF NOT EXISTS locks\.leases/)
  // pinned: the same keys as Python's and Rust's (test_advisory_keys_are_pinned)
  assert.equal(advisoryKey('report'), -2364901989615549545n)
  assert.equal(advisoryKey('report', 'app'), -6065654635645092017n)
  assert.equal(advisoryKey('ünïcødé/🔒'), -2301606991453087764n)
  // a PostgreSQL machine phrases its requests as statements with typed parameters
  const m = new LockMachine({ kind: 'postgres', mode: 'session', seed: 1 })
  m.acquire(0, 'report', { ttlMs: 1000 })
  const [request] = m.poll().outputs
  assert.equal(request.backend, 'sql')
  assert.equal(request.connection, 'dedicated')
  assert.deepEqual(request.params.slice(0, 2), [-2364901989615549545n, 'report'])
  assert.match(request.sql, /pg_try_advisory_lock\(\$1::bigint\)/)
  assert.throws(() => new LockMachine({ kind: 'postgres', leaseTable: '1x' }), (e) => e instanceof ConfigError)
})

test('fencedUpdate refuses token 0 and an unpaired owner before anything is sent', { skip: IMPL !== 'napi' && 'the WASM package has no fencedUpdate' }, async () => {
  const never = { query () { throw new Error('sent') }, connect () {}, on () {}, connectionParameters: {} }
  await assert.rejects(fencedUpdate(never, 'fp_jobs', { idColumn: 'id', tokenColumn: 'last_token', rowId: 1, token: 0n, values: { body: 'x' } }), (e) => e instanceof ConfigError && /bigint >= 1n/.test(e.message))
  await assert.rejects(fencedUpdate(never, 'fp_jobs', { idColumn: 'id', tokenColumn: 'last_token', rowId: 1, token: 1n, values: { body: 'x' }, ownerColumn: 'last_owner' }), (e) => e instanceof ConfigError && /go together/.test(e.message))
  await assert.rejects(fencedUpdate(never, 'fp_jobs; x', { idColumn: 'id', tokenColumn: 'last_token', rowId: 1, token: 1n, values: { body: 'x' } }), (e) => e instanceof ConfigError)
})

// ---- lease rows, session locks: acquire, renew, release, loss -------------------------------

for (const kind of Object.keys(CLIENTS)) {
  test(`${kind}: lease rows renew on the server's clock, release, and the next grant's token is higher`, { skip }, async () => {
    await migrate()
    const { client, end } = await CLIENTS[kind]()
    const name = lockName()
    const backend = new PostgresBackend(client)
    try {
      assert.equal(backend.clientKind, kind)
      const lock = new Lock(backend, name, { ttlMs: 600, purpose: 'correctness' })
      const lease = await lock.acquire()
      assert.equal(await backend.isLocked(name), true)
      const [[owner, token]] = await sql('SELECT owner, token FROM fencepost_leases WHERE name = $1', [name])
      assert.equal(owner, lease.ownerId)
      assert.equal(BigInt(token), lease.token)
      await sleep(900) // past the TTL: renewals at ttl/3 kept it
      lease.check()
      const [[live]] = await sql('SELECT expires_at > clock_timestamp() FROM fencepost_leases WHERE name = $1', [name])
      assert.equal(live, true)
      // another contender waits (backoff) and gets it after the release
      const other = new Lock(backend, name, { ttlMs: 2000, acquireTimeoutMs: 5000, retryMaxMs: 20 })
      const waiting = other.acquire()
      await sleep(50)
      await lease.release()
      const second = await waiting
      assert.equal(second.token, lease.token + 1n)
      await second.release()
      assert.equal(await backend.isLocked(name), false)
      assert.equal(await new Lock(backend, name, { ttlMs: 1000 }).tryAcquire().then(async (l) => { const t = l.token; await l.release(); return t }), lease.token + 2n)
    } finally {
      backend.close()
      await end()
    }
  })
}

test('a lease freed behind its holder (forceRelease) is lost at its next renewal; a stale write is refused', { skip }, async () => {
  await migrate()
  const job = await newJob()
  const { client, end } = CLIENTS['pg-pool']()
  const name = lockName()
  const backend = new PostgresBackend(client)
  try {
    const a = await new Lock(backend, name, { ttlMs: 600, purpose: 'correctness' }).acquire()
    await fencedUpdate(client, 'fp_jobs', { idColumn: 'id', tokenColumn: 'last_token', rowId: job, token: a.token, values: { body: 'A: draft' } })
    assert.equal(await backend.forceRelease(name), true)
    const b = await new Lock(backend, name, { ttlMs: 5000, acquireTimeoutMs: 0 }).acquire()
    assert.equal(b.token, a.token + 1n)
    await fencedUpdate(client, 'fp_jobs', { idColumn: 'id', tokenColumn: 'last_token', rowId: job, token: b.token, values: { body: 'B: final' } })
    assert.ok(await waitUntil(() => a.signal.aborted, 2000), 'A learns at its next renewal')
    assert.throws(() => a.check(), (e) => e instanceof LockLostError && e.reason === 'renew_rejected')
    await assert.rejects(
      fencedUpdate(client, 'fp_jobs', { idColumn: 'id', tokenColumn: 'last_token', rowId: job, token: a.token, values: { body: 'A: stale' } }),
      (e) => e instanceof StaleTokenError && e.token === a.token && e.highest === b.token && e.resource === `fp_jobs:${job}` && e.reason === 'superseded')
    assert.deepEqual(await sql('SELECT body, last_token FROM fp_jobs WHERE id = $1', [job]), [['B: final', String(b.token)]])
    await assert.rejects(fencedUpdate(client, 'fp_jobs', { idColumn: 'id', tokenColumn: 'last_token', rowId: -1, token: 9n, values: { body: 'x' } }), (e) => e.code === 'ERR_ROW_NOT_FOUND')
    await b.release()
  } finally {
    backend.close()
    await end()
  }
})

test('a paused holder past its TTL: the server expires the row, the next holder gets token + 1, the release reports the loss', { skip }, async () => {
  await migrate()
  const { client, end } = CLIENTS['postgres.js']()
  const name = lockName()
  const backend = new PostgresBackend(client)
  try {
    const a = await new Lock(backend, name, { ttlMs: 300, autoRenew: false, purpose: 'correctness' }).acquire()
    await sleep(350)
    const b = await new Lock(backend, name, { ttlMs: 5000, acquireTimeoutMs: 0 }).acquire()
    assert.equal(b.token, a.token + 1n)
    await assert.rejects(a.release(), (e) => e instanceof LockLostError)
    await b.release()
  } finally {
    backend.close()
    await end()
  }
})

test('session mode: the advisory lock lives on its own connection, the heartbeat notices a terminated session', { skip }, async () => {
  await migrate()
  const name = lockName()
  const key = advisoryKey(name)
  const backend = new PostgresBackend(null, { mode: 'session', connectionString: PG_URL })
  try {
    const lease = await new Lock(backend, name, { ttlMs: 600, purpose: 'correctness' }).acquire()
    const [holder] = await advisoryHolders(key)
    assert.ok(holder > 0)
    await sleep(700) // heartbeats at ttl/3 kept it
    lease.check()
    await assert.rejects(new Lock(new PostgresBackend(null, { mode: 'session', connect: () => new pg.Client({ connectionString: PG_URL }) }), name, { ttlMs: 1000, acquireTimeoutMs: 0 }).acquire(), AcquireTimeoutError)
    await sql('SELECT pg_terminate_backend($1)', [holder])
    assert.ok(await waitUntil(() => lease.signal.aborted, 2000), 'the heartbeat reports the loss')
    assert.throws(() => lease.check(), LockLostError)
    assert.deepEqual(await advisoryHolders(key), [])
    // postgres.js connections (max: 1) from a factory; released: its connection is closed
    const viaPostgresJs = new PostgresBackend(null, { mode: 'session', connect: () => postgres(PG_URL, { max: 1, onnotice: () => {} }) })
    const again = await new Lock(viaPostgresJs, name, { ttlMs: 1000 }).acquire()
    assert.ok(again.token > lease.token)
    assert.equal((await advisoryHolders(key)).length, 1)
    await again.release()
    assert.deepEqual(await advisoryHolders(key), [])
    viaPostgresJs.close()
    await assert.rejects(new Lock(new PostgresBackend(null, { mode: 'session', connect: () => postgres(PG_URL) }), name, { ttlMs: 1000, acquireTimeoutMs: 500 }).acquire(), (e) => /max: 1/.test(e.message))
  } finally {
    backend.close()
  }
})

test('a lease on a terminated single pg.Client survives on a new connection, with a warning', { skip }, async () => {
  await migrate()
  const { client, end } = await CLIENTS['pg-client']()
  const name = lockName()
  const backend = new PostgresBackend(client)
  const warnings = []
  const listener = (w) => { if (w.code === 'FENCEPOST_PG_RECONNECTED') warnings.push(w) }
  process.on('warning', listener)
  try {
    const lease = await new Lock(backend, name, { ttlMs: 900 }).acquire()
    await sql('SELECT pg_terminate_backend($1)', [client.processID])
    await sleep(1000) // renewals after the drop run on a new connection
    lease.check()
    assert.ok(warnings.length >= 1, 'FENCEPOST_PG_RECONNECTED')
    await lease.release()
    assert.equal(await backend.isLocked(name), false)
  } finally {
    process.off('warning', listener)
    backend.close()
    await end().catch(() => {})
  }
})

test('missing tables are a protocol error naming the migration', { skip }, async () => {
  const { client, end } = CLIENTS['pg-pool']()
  const backend = new PostgresBackend(client, { leaseTable: 'fp_nowhere', tokenTable: 'fp_nowhere_tokens' })
  try {
    await assert.rejects(new Lock(backend, lockName(), { ttlMs: 1000, acquireTimeoutMs: 1000 }).acquire(),
      (e) => e instanceof ProtocolError && /42P01/.test(e.message) && /backend\.migrate\(\)/.test(e.message))
  } finally {
    backend.close()
    await end()
  }
})

// ---- transaction locks ------------------------------------------------------------------------

for (const kind of Object.keys(CLIENTS)) {
  test(`${kind}: xactLock tries once and commits the token with the work`, { skip }, async () => {
    await migrate()
    const job = await newJob()
    const name = lockName()
    const { client, end } = await CLIENTS[kind]()
    const other = new pg.Client({ connectionString: PG_URL })
    await other.connect()
    try {
      const token = await xactLock(client, name, async (tx, token) => {
        await fencedUpdate(tx, 'fp_jobs', { idColumn: 'id', tokenColumn: 'last_token', rowId: job, token, values: { body: 'in tx' } })
        // held meanwhile: another transaction tries once and is refused
        await assert.rejects(xactLock(other, name, async () => {}), (e) => e instanceof AcquireTimeoutError && /tries exactly once/.test(e.message))
        assert.equal((await advisoryHolders(advisoryKey(name))).length, 1)
        return token
      })
      assert.equal(typeof token, 'bigint')
      assert.deepEqual(await sql('SELECT body, last_token FROM fp_jobs WHERE id = $1', [job]), [['in tx', String(token)]])
      assert.deepEqual(await advisoryHolders(advisoryKey(name)), [])
      // a failing work rolls back: the body and the token bump with it
      await assert.rejects(xactLock(client, name, async (tx, t) => {
        await fencedUpdate(tx, 'fp_jobs', { idColumn: 'id', tokenColumn: 'last_token', rowId: job, token: t, values: { body: 'rolled back' } })
        throw new Error('work failed')
      }), /work failed/)
      assert.deepEqual(await sql('SELECT body FROM fp_jobs WHERE id = $1', [job]), [['in tx']])
      assert.equal(await xactLock(client, name, async (tx, t) => t), token + 1n) // the rolled-back token again
    } finally {
      await other.end()
      await end()
    }
  })
}

test('xactLock with a timeout waits on the server for an advisory holder; a live lease is refused at once', { skip }, async () => {
  await migrate()
  const name = lockName()
  const { client: pool, end } = CLIENTS['pg-pool']()
  const backend = new PostgresBackend(pool)
  try {
    let release
    const held = xactLock(pool, name, () => new Promise((resolve) => { release = resolve }))
    await waitUntil(() => release !== undefined)
    await assert.rejects(xactLock(pool, name, async () => {}, { timeoutMs: 100 }), (e) => e instanceof AcquireTimeoutError && /lock_timeout 100ms/.test(e.message) && e.lastError !== null)
    const waiting = backend.xactLock(name, async (tx, t) => t, { timeoutMs: 5000 })
    await sleep(100)
    release()
    const first = await held
    assert.equal(first, undefined)
    assert.equal(typeof await waiting, 'bigint')
    const lease = await new Lock(backend, name, { ttlMs: 5000 }).acquire()
    await assert.rejects(xactLock(pool, name, async () => {}, { timeoutMs: 2000 }), (e) => e instanceof AcquireTimeoutError && /lease row/.test(e.message))
    await lease.release()
  } finally {
    backend.close()
    await end()
  }
})

test('the three modes exclude each other and count one token per name', { skip }, async () => {
  await migrate()
  const name = lockName()
  const { client: pool, end } = CLIENTS['pg-pool']()
  const leases = new PostgresBackend(pool)
  const sessions = new PostgresBackend(null, { mode: 'session', connectionString: PG_URL })
  try {
    const lease = await new Lock(leases, name, { ttlMs: 5000 }).acquire()
    await assert.rejects(new Lock(sessions, name, { ttlMs: 1000, acquireTimeoutMs: 0 }).acquire(), AcquireTimeoutError)
    await assert.rejects(xactLock(pool, name, async () => {}), AcquireTimeoutError)
    await lease.release()
    const session = await new Lock(sessions, name, { ttlMs: 1000 }).acquire()
    assert.equal(session.token, lease.token + 1n)
    await assert.rejects(new Lock(leases, name, { ttlMs: 1000, acquireTimeoutMs: 0 }).acquire(), AcquireTimeoutError)
    await assert.rejects(xactLock(pool, name, async () => {}), AcquireTimeoutError)
    await session.release()
    assert.equal(await xactLock(pool, name, async (tx, t) => t), lease.token + 2n)
    const [[token]] = await sql('SELECT token FROM fencepost_leases WHERE name = $1', [name])
    assert.equal(BigInt(token), lease.token + 2n)
  } finally {
    leases.close()
    sessions.close()
    await end()
  }
})

// ---- PgBouncer in transaction mode ------------------------------------------------------------

test('PgBouncer (transaction pooling): session locks are refused, not shared; lease rows and xactLock stay exclusive', { skip: skipBouncer }, async () => {
  await migrate()
  const name = lockName()
  const url = singleSessionUrl()
  const key = advisoryKey(name)
  const a = new PostgresBackend(null, { mode: 'session', connectionString: url })
  const others = []
  try {
    const aLease = await new Lock(a, name, { ttlMs: 5000, acquireTimeoutMs: 0 }).acquire()
    const [holder] = await advisoryHolders(key)
    for (let i = 0; i < 2; i++) {
      const other = new PostgresBackend(null, { mode: 'session', connectionString: url })
      others.push(other)
      await assert.rejects(new Lock(other, name, { ttlMs: 5000, acquireTimeoutMs: 1000 }).acquire(),
        (e) => e instanceof ProtocolError && /transaction-pooling/.test(e.message) && /lease rows/.test(e.message) && /xact_lock/.test(e.message))
    }
    const c = new pg.Client({ connectionString: url })
    await c.connect()
    try {
      await assert.rejects(xactLock(c, name, async () => {}), (e) => e instanceof ProtocolError && /transaction-pooling/.test(e.message))
      await assert.rejects(new Lock(new PostgresBackend(c), name, { ttlMs: 5000, acquireTimeoutMs: 0 }).acquire(), AcquireTimeoutError)
    } finally {
      await c.end()
    }
    assert.deepEqual(await advisoryHolders(key), [holder])
    aLease.check()
    await aLease.release()
    assert.deepEqual(await advisoryHolders(key), [])
    // lease rows through the pooler, two clients and postgres.js: exclusive
    const c1 = new pg.Pool({ connectionString: BOUNCER_URL, max: 2 })
    const c2 = postgres(BOUNCER_URL, { max: 2, onnotice: () => {} })
    const b1 = new PostgresBackend(c1)
    const b2 = new PostgresBackend(c2)
    try {
      const held = await new Lock(b1, name, { ttlMs: 5000, acquireTimeoutMs: 0 }).acquire()
      await assert.rejects(new Lock(b2, name, { ttlMs: 5000, acquireTimeoutMs: 0 }).acquire(), AcquireTimeoutError)
      await held.release()
      const token = await xactLock(c1, name, async (tx, t) => {
        await assert.rejects(xactLock(c2, name, async () => {}), AcquireTimeoutError)
        return t
      })
      assert.equal(token, held.token + 1n)
    } finally {
      b1.close()
      b2.close()
      await c1.end()
      await c2.end()
    }
  } finally {
    a.close()
    for (const o of others) o.close()
  }
})

test('PgBouncer: a duplicate grant behind the pooler writes once through an owner-bound fencedUpdate', { skip: skipBouncer }, async () => {
  // The hazard session mode refuses, made on purpose: a plain pg_try_advisory_lock through
  // PgBouncer (transaction mode, one server connection) "succeeds" for three clients on one
  // server session, and all three read the same token. The token-only fence lets all three
  // write; the owner-bound one lets the first owner write and refuses the other two.
  await migrate()
  const name = lockName()
  const key = advisoryKey(name).toString()
  await sql("CREATE TABLE IF NOT EXISTS fp_owned_jobs (id bigint PRIMARY KEY, body text, last_token bigint NOT NULL DEFAULT 0, last_owner text NOT NULL DEFAULT '')")
  const [tokenOnlyRow, ownerBoundRow] = [await newJob(), await newJob()]
  await sql("INSERT INTO fp_owned_jobs (id, body) VALUES ($1, 'new'), ($2, 'new')", [tokenOnlyRow, ownerBoundRow])
  await sql('INSERT INTO fencepost_tokens (name, token) VALUES ($1, 7)', [name])
  const owners = [0, 1, 2].map(() => crypto.randomBytes(16).toString('hex'))
  const holders = await Promise.all(owners.map(async () => { const c = new pg.Client({ connectionString: singleSessionUrl() }); await c.connect(); return c }))
  const warnings = []
  const listener = (w) => { if (w.code === 'FENCEPOST_DUPLICATE_GRANT') warnings.push(w) }
  process.on('warning', listener)
  try {
    for (const c of holders) {
      assert.deepEqual((await c.query({ text: 'SELECT pg_try_advisory_lock($1)', values: [key], rowMode: 'array' })).rows, [[true]])
    }
    const write = (c, row, owner, bound) => fencedUpdate(c, 'fp_owned_jobs', {
      idColumn: 'id', tokenColumn: 'last_token', rowId: row, token: 7n, values: { body: owner },
      ...(bound ? { ownerColumn: 'last_owner', ownerId: owner } : {})
    })
    for (const [i, c] of holders.entries()) await write(c, tokenOnlyRow, owners[i], false)
    assert.deepEqual(await sql('SELECT body FROM fp_owned_jobs WHERE id = $1', [tokenOnlyRow]), [[owners[2]]])
    const refused = []
    for (const [i, c] of holders.entries()) {
      try {
        await write(c, ownerBoundRow, owners[i], true)
      } catch (e) {
        assert.ok(e instanceof StaleTokenError && e.token === 7n && e.highest === 7n, String(e))
        refused.push(e.reason)
      }
    }
    assert.deepEqual(refused, ['duplicate_grant', 'duplicate_grant'])
    assert.deepEqual(await sql('SELECT body, last_owner FROM fp_owned_jobs WHERE id = $1', [ownerBoundRow]), [[owners[0], owners[0]]])
    await sleep(0)
    assert.equal(warnings.length, 2)
  } finally {
    process.off('warning', listener)
    await holders[0].query('SELECT pg_advisory_unlock_all()')
    for (const c of holders) await c.end()
  }
  assert.deepEqual(await advisoryHolders(advisoryKey(name)), [])
})

// ---- many processes, one lock -----------------------------------------------------------------

async function contend (url, mixes, rounds = 5) {
  await migrate()
  const name = lockName()
  const job = await newJob()
  const logTable = `fp_log_${crypto.randomUUID().slice(0, 8)}`
  await sql(`CREATE TABLE ${logTable} (start_ns numeric, end_ns numeric, token bigint, pid int, mode text)`)
  const processes = 8
  const children = Array.from({ length: processes }, (_, i) => {
    const [mode, kind] = mixes[i % mixes.length]
    return fork(path.join(__dirname, 'pg_contender.js'), [url, name, String(rounds), mode, kind, logTable, job], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
  })
  const exits = children.map((child) => new Promise((resolve) => child.once('exit', (code, signal) => resolve(code ?? signal))))
  try {
    await Promise.all(children.map((child) => new Promise((resolve, reject) => {
      child.once('message', resolve)
      child.once('exit', () => reject(new Error(`contender ${child.pid} exited before it was ready`)))
    })))
    for (const child of children) child.send('go')
    let timer
    const codes = await Promise.race([
      Promise.all(exits),
      new Promise((resolve, reject) => { timer = setTimeout(() => reject(new Error('contenders still running after 45 s')), 45_000) })
    ]).finally(() => clearTimeout(timer))
    assert.deepEqual(codes, Array(processes).fill(0))
  } finally {
    for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
  }
  const records = (await sql(`SELECT start_ns::text, end_ns::text, token::text, pid, mode FROM ${logTable}`)).map(([start, end, token, pid, mode]) => ({ start: BigInt(start), end: BigInt(end), token: BigInt(token), pid, mode }))
  await sql(`DROP TABLE ${logTable}`)
  assert.equal(records.length, processes * rounds)
  records.sort((a, b) => (a.start < b.start ? -1 : a.start > b.start ? 1 : 0))
  assert.equal(new Set(records.map((r) => r.pid)).size, processes)
  for (let i = 1; i < records.length; i++) {
    const [before, after] = [records[i - 1], records[i]]
    assert.ok(before.end < after.start, `critical sections overlap: ${JSON.stringify([before, after], (k, v) => typeof v === 'bigint' ? String(v) : v)}`)
    assert.ok(before.token < after.token, `tokens do not rise in order of start: ${before.token}, ${after.token}`)
  }
  // every fenced write was accepted: the row carries the last token and its write
  const last = records[records.length - 1]
  const [[lastToken, body]] = await sql('SELECT last_token::text, body FROM fp_jobs WHERE id = $1', [job])
  assert.equal(BigInt(lastToken), last.token)
  assert.ok(body.startsWith(`${last.pid}:`))
}

const CONTENTION = {
  'lease rows (pg.Pool, pg.Client, postgres.js)': [PG_URL, [['lease', 'pg-pool'], ['lease', 'pg-client'], ['lease', 'postgres.js']]],
  'session locks': [PG_URL, [['session', 'pg-pool']]],
  'lease + session + xact, one name': [PG_URL, [['lease', 'pg-pool'], ['session', 'pg-pool'], ['xact', 'pg-pool'], ['xact', 'postgres.js']]],
  'lease + xact through PgBouncer (transaction mode)': [BOUNCER_URL, [['lease', 'pg-pool'], ['xact', 'pg-client'], ['lease', 'postgres.js'], ['xact', 'pg-pool']]]
}

for (const [what, [url, mixes]] of Object.entries(CONTENTION)) {
  test(`8 processes × 5 sections, ${what}: no overlap, tokens rise, every fenced write lands`, { skip: url === BOUNCER_URL ? skipBouncer : skip, timeout: 60_000 }, async () => {
    await contend(url, mixes)
  })
}

// ---- waiters woken by the release's notification ----------------------------------------------

/** The backoff of the waiters below (ms): far above what a notification takes. */
const SLOW_POLL_MS = 8000

/** Holds `name` on `holderBackend`, starts a waiter on `waiterBackend` whose backoff is
 * `pollMs`, releases after `releaseAfterMs`; resolves to the ms from the release's
 * return to the waiter's grant. `between` runs while the waiter waits. */
async function grantDelay (holderBackend, waiterBackend, name, { pollMs = SLOW_POLL_MS, releaseAfterMs = 1000, between = null } = {}) {
  const held = await new Lock(holderBackend, name, { ttlMs: 30000 }).acquire()
  const waiter = new Lock(waiterBackend, name, { ttlMs: 30000, acquireTimeoutMs: 25000, retryBaseMs: pollMs, retryMaxMs: pollMs })
  let grantedAt = null
  const waiting = waiter.acquire().then((lease) => { grantedAt = performance.now(); return lease })
  await sleep(releaseAfterMs)
  if (between !== null) await between()
  assert.equal(grantedAt, null)
  await held.release()
  const released = performance.now()
  const lease = await waiting
  await lease.release()
  assert.equal(lease.token, held.token + 1n)
  return grantedAt - released
}

for (const kind of Object.keys(CLIENTS)) {
  test(`${kind}: a waiter is granted within milliseconds of the release (LISTEN/NOTIFY), not at its 8 s backoff`, { skip }, async () => {
    await migrate()
    const a = await CLIENTS[kind]()
    const b = await CLIENTS[kind]()
    const holder = new PostgresBackend(a.client)
    const waiter = new PostgresBackend(b.client)
    try {
      assert.equal(waiter.notify, true)
      const delay = await grantDelay(holder, waiter, lockName())
      assert.ok(delay < 250, `granted ${delay.toFixed(1)} ms after the release`)
    } finally {
      holder.close()
      waiter.close()
      await a.end()
      await b.end()
    }
  })
}

test('session mode: a waiter is granted within milliseconds of the unlock', { skip }, async () => {
  await migrate()
  const holder = new PostgresBackend(null, { mode: 'session', connectionString: PG_URL })
  const waiter = new PostgresBackend(null, { mode: 'session', connectionString: PG_URL })
  try {
    const delay = await grantDelay(holder, waiter, lockName())
    assert.ok(delay < 250, `granted ${delay.toFixed(1)} ms after the release`)
  } finally {
    holder.close()
    waiter.close()
  }
})

test('a listener that cannot connect: the waiter gets the lock by polling', { skip }, async () => {
  await migrate()
  const a = await CLIENTS['pg-pool']()
  const b = await CLIENTS['pg-pool']()
  const holder = new PostgresBackend(a.client)
  const waiter = new PostgresBackend(b.client, { listenConnectionString: 'postgresql://127.0.0.1:1/none?connect_timeout=1' })
  try {
    const delay = await grantDelay(holder, waiter, lockName(), { pollMs: 1000, releaseAfterMs: 500 })
    assert.ok(delay < 3000, `granted ${delay.toFixed(0)} ms after the release`)
  } finally {
    holder.close()
    waiter.close()
    await a.end()
    await b.end()
  }
})

test('with the listening connection terminated the waiter still gets the lock (it listens again, or polls)', { skip }, async () => {
  await migrate()
  const a = await CLIENTS['pg-pool']()
  const b = await CLIENTS['pg-pool']()
  const holder = new PostgresBackend(a.client)
  const waiter = new PostgresBackend(b.client)
  const name = lockName()
  const channel = `fencepost_${BigInt.asUintN(64, advisoryKey(name)).toString(16).padStart(16, '0')}`
  try {
    const delay = await grantDelay(holder, waiter, name, {
      pollMs: 1500,
      releaseAfterMs: 300,
      between: async () => {
        await waitUntil(async () => (await sql('SELECT pid FROM pg_stat_activity WHERE query = $1', [`LISTEN ${channel}`])).length > 0, 5000)
        const killed = await sql('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = $1', [`LISTEN ${channel}`])
        assert.ok(killed.length > 0 && killed.every((r) => r[0] === true))
      }
    })
    assert.ok(delay < 5000, `granted ${delay.toFixed(0)} ms after the release`)
  } finally {
    holder.close()
    waiter.close()
    await a.end()
    await b.end()
  }
})

test('PgBouncer (transaction pooling): LISTEN cannot work there, and waiters fall back on polling', { skip: skipBouncer }, async () => {
  await migrate()
  const mk = () => { const pool = new pg.Pool({ connectionString: BOUNCER_URL, max: 2 }); pool.on('error', () => {}); return pool }
  const [p1, p2] = [mk(), mk()]
  const holder = new PostgresBackend(p1)
  const waiter = new PostgresBackend(p2)
  try {
    const delay = await grantDelay(holder, waiter, lockName(), { pollMs: 1500, releaseAfterMs: 500 })
    assert.ok(delay < 5000, `granted ${delay.toFixed(0)} ms after the release`)
  } finally {
    holder.close()
    waiter.close()
    await p1.end()
    await p2.end()
  }
})

test('notify: false polls, and its releases notify nobody', { skip }, async () => {
  await migrate()
  const name = lockName()
  const channel = `fencepost_${BigInt.asUintN(64, advisoryKey(name)).toString(16).padStart(16, '0')}`
  const listen = new pg.Client({ connectionString: PG_URL })
  await listen.connect()
  const heard = []
  listen.on('notification', (m) => heard.push(m.channel))
  await listen.query(`LISTEN ${channel}`)
  const { client, end } = CLIENTS['pg-pool']()
  try {
    assert.throws(() => new PostgresBackend(client, { notify: 'yes' }), ConfigError)
    for (const notify of [false, true]) {
      const backend = new PostgresBackend(client, { notify })
      assert.equal(backend.notify, notify)
      const lease = await new Lock(backend, name, { ttlMs: 5000 }).acquire()
      await lease.release()
      await sleep(300)
      assert.deepEqual(heard, notify ? [channel] : [], `notify: ${notify}`)
      backend.close()
    }
  } finally {
    await listen.end()
    await end()
  }
})
