// PostgreSQL from Node with node-postgres (a pool: lease rows), a session advisory lock and
// a transaction lock around the work, and postgres.js (type-checked, not run here;
// tests/js/postgres.test.js runs the same against a real PostgreSQL on 127.0.0.1).
import pg from 'pg'
import postgres from 'postgres'
import { Lock, PostgresBackend, fencedUpdate, xactLock, StaleTokenError } from 'fencepost'

export async function closeTheBooks (url: string): Promise<void> {
  const pool = new pg.Pool({ connectionString: url, max: 4 })
  const backend = new PostgresBackend(pool) // lease rows: any connection, PgBouncer too
  try {
    await backend.migrate() // once: CREATE TABLE IF NOT EXISTS fencepost_leases, fencepost_tokens
    // lease rows' tokens never go backwards: 'correctness' needs no opt-in
    const lock = new Lock(backend, 'books-2026-11', { ttlMs: 10_000, purpose: 'correctness' })
    await lock.using(async (signal, lease) => {
      signal.throwIfAborted()
      // passes only while no later holder has written the row
      await fencedUpdate(pool, 'books', {
        idColumn: 'id', rowId: '2026-11', tokenColumn: 'last_token', token: lease.token,
        ownerColumn: 'last_owner', ownerId: lease.ownerId, values: { state: 'closed' }
      })
    })
  } catch (error) {
    if (error instanceof StaleTokenError) console.log(`a newer holder (token ${error.highest}) took over`)
    throw error
  } finally {
    backend.close()
    await pool.end()
  }
}

export async function nightly (url: string): Promise<bigint> {
  // a session advisory lock: one dedicated connection per lock, a heartbeat every ttl/3
  const session = new PostgresBackend(null, { mode: 'session', connectionString: url })
  try {
    await new Lock(session, 'nightly', { ttlMs: 3_000 }).using(async () => {})
  } finally {
    session.close()
  }
  // the work inside the transaction that holds the lock: committed with the token bump
  const sql = postgres(url)
  try {
    return await xactLock(sql, 'nightly', async (tx, token) => {
      await (tx as typeof sql)`UPDATE reports SET token = ${token.toString()} WHERE day = current_date`
      return token
    })
  } finally {
    await sql.end()
  }
}
