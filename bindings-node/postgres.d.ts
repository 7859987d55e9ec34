// Types of PostgreSQL in the `fencepost` Node package (postgres.js beside this file). Not in
// fencepost.d.ts, which the WebAssembly package shares: workers and browsers have no
// sockets to reach PostgreSQL.
import { Backend, ExecuteOptions, MachineSqlRequest } from './fencepost'

/** A node-postgres `pg.Pool` (structurally: no dependency on `@types/pg`). */
export interface PgPoolLike {
  query(config: object): Promise<unknown>
  connect(): Promise<{ query(config: object): Promise<unknown>, release(error?: Error | boolean): void }>
  readonly totalCount: number
  readonly idleCount: number
}

/** A node-postgres `pg.Client` (or a pool's client). */
export interface PgClientLike {
  query(config: object): Promise<unknown>
  connect(): Promise<unknown>
  on(event: any, listener: (...args: any[]) => void): unknown
}

/** A postgres.js instance (`postgres(url, options)`), or one of its transactions. */
export interface PostgresJsLike {
  (...args: any[]): unknown
  unsafe(query: string, params?: unknown[], options?: { prepare?: boolean }): unknown
  begin?(fn: (tx: PostgresJsLike) => Promise<unknown>): Promise<unknown>
  readonly options?: { max?: number }
}

export type PostgresClient = PgPoolLike | PgClientLike | PostgresJsLike

/** The tables and advisory-key namespace; every client of one name must use the same. */
export interface PostgresSettings {
  /** The lease table (`'fencepost_leases'`): a plain SQL identifier, optionally `schema.table`. */
  leaseTable?: string
  /** The per-name token table (`'fencepost_tokens'`): every grant's token is above the name's row there. */
  tokenTable?: string
  /** Namespace of advisory keys (`'fencepost'`), so applications sharing a database do not collide. */
  namespace?: string
}

export interface PostgresBackendOptions extends PostgresSettings {
  /** `'lease'` (lease rows, the default) or `'session'` (session-level advisory locks). */
  mode?: 'lease' | 'session'
  /** Session mode: the connection string each lock opens its dedicated node-postgres
   * `pg.Client` with (needs `pg` installed; put `connect_timeout` in it). */
  connectionString?: string
  /** Session mode, instead of `connectionString`: a factory of new connections, one per
   * lock: a `pg.Client` (connected or not; fencepost connects it) or a promise of one, or
   * a postgres.js instance made with `max: 1`. fencepost closes each after its lock's
   * final event. */
  connect?: () => PgClientLike | PostgresJsLike | Promise<PgClientLike | PostgresJsLike>
  /** Wake waiters on release with LISTEN/NOTIFY (default `true`): every release sends
   * `pg_notify` on the name's channel in its own statement (so only once it committed),
   * and a lock that finds the name held waits for that notification instead of sleeping
   * through its backoff. The wait lasts the backoff it stands in for, so a lost
   * notification, a dead listening connection or a pooler that cannot carry LISTEN
   * (PgBouncer in transaction mode) costs what polling costs. `false`: waiters poll and
   * releases notify nobody. */
  notify?: boolean
  /** The connection string of the listening connection (one node-postgres `pg.Client`
   * per backend, opened on the first wait, closed 30 s after the last waiter left or by
   * `close()`). By default: `connectionString`, the pool's or the single client's
   * parameters, or postgres.js's own `listen()`. Behind PgBouncer in transaction mode
   * point it at the server itself, or waiters poll. With only `connect`, waiters poll. */
  listenConnectionString?: string
}

/** A request of a PostgreSQL lock machine (`LockMachine({ kind: 'postgres' })`). */
export type SqlRequest = MachineSqlRequest

/**
 * Locks on PostgreSQL 12+ through node-postgres (`pg.Pool`, `pg.Client`) or postgres.js,
 * with the same statements, modes and semantics as Python's `fencepost.postgres`. Node
 * only: WebAssembly hosts cannot reach PostgreSQL.
 *
 * **Lease rows** (`new PostgresBackend(pool)`, `mode: 'lease'`): a row per lock name in
 * `fencepost_leases` with owner, fencing token and expiry. Acquire is one statement that
 * takes a free or expired row and bumps the token; expiry is decided by the *server's*
 * clock; renew and release are owner-checked `UPDATE`s. Every statement runs on any
 * connection in autocommit, so a pool and PgBouncer in transaction mode are fine; when
 * the server drops a single `pg.Client` given here, the next statement connects again
 * with its parameters (process warning `FENCEPOST_PG_RECONNECTED`; fencepost closes that
 * new connection on `close()`), so a lease survives it as with a pool. Do not run
 * transactions of your own on that client: renewals run on it at any time. Tokens are
 * durable rows that never go backwards: `purpose: 'correctness'` needs no opt-in.
 *
 * **Session advisory locks** (`new PostgresBackend(null, { mode: 'session',
 * connectionString })`): `pg_try_advisory_lock` on a connection opened for each lock, plus
 * a bump of the name's lease row in the same statement. The lock lives as long as that
 * connection: `ttlMs` is the heartbeat deadline (the connection is asked every ttl/3
 * whether it still holds the lock; a failed or negative answer is a loss), and the
 * connection is closed after the lock's final event. The server may hand the lock on as
 * soon as the connection drops, before the heartbeat notices: keep `ttlMs` short and
 * carry the token on writes. Never a pool's connections; behind a transaction-pooling
 * proxy (PgBouncer `pool_mode = transaction`) an acquire landing on a server session that
 * holds the lock for another client is refused with ProtocolError (naming lease rows and
 * `xactLock`), never granted with the same token. Each held or waiting lock costs one
 * connection.
 *
 * **One lock per name across the modes.** Lease rows, session locks and `xactLock` of the
 * same name (same `leaseTable`, `tokenTable`, `namespace`) exclude each other and count
 * one fencing token per name, on its lease row. Waiting is backoff only (no LISTEN/NOTIFY).
 *
 * Run `migrate()` once before the first lock (a missing table is a ProtocolError naming it).
 *
 * @throws ConfigError (`ERR_CONFIG`) for a client of another kind; lease mode without a
 *   client; session mode without `connectionString` or `connect`; both of them; a bad
 *   mode, table name or namespace.
 */
export declare class PostgresBackend extends Backend {
  constructor(client: PostgresClient | null, options?: PostgresBackendOptions)
  readonly mode: 'lease' | 'session'
  readonly leaseTable: string
  readonly tokenTable: string
  readonly namespace: string
  /** Whether releases notify and waiters listen (LISTEN/NOTIFY; `notify` option, default true). */
  readonly notify: boolean
  /** What the client given is: `'pg-pool'`, `'pg-client'`, `'postgres.js'`, or null. */
  readonly clientKind: 'pg-pool' | 'pg-client' | 'postgres.js' | null
  /** The advisory-lock key of lock `name` in this backend's namespace. */
  advisoryKey(name: string): bigint
  /**
   * Creates fencepost's tables if missing (`postgresMigration()`), idempotent, on the
   * client given or, without one, on a connection opened for it and closed.
   * @throws the client's error when the server refuses it; BackendError when it cannot be reached.
   */
  migrate(): Promise<void>
  /** `xactLock(options.client, name, work, options)` with this backend's tables and
   * namespace; `options.client` defaults to the pool or postgres.js instance given (a
   * single `pg.Client` is refused: the backend's renewals would run inside the
   * transaction). */
  xactLock<T>(name: string, work: (tx: any, token: bigint) => Promise<T> | T, options?: XactLockOptions & { client?: PostgresClient }): Promise<T>
  /** Whether lock `name` is held now: a live lease row (the server's clock), or a session
   * holding the name's advisory lock (session mode, `xactLock`; from `pg_locks`). */
  isLocked(name: string): Promise<boolean>
  /**
   * Frees lock `name`'s live lease row whoever holds it (the token kept); resolves to
   * whether one was freed. The freed holder learns it at its next renewal (LockLostError,
   * reason 'renew_rejected').
   * @throws ConfigError (`kind` 'unsupported') when an advisory lock holds the name: only
   *   its session can free it; the message names the server process to end.
   */
  forceRelease(name: string): Promise<boolean>
  /** Not on PostgreSQL: rejects with ConfigError naming `fencedUpdate`. */
  fencedSet(...args: unknown[]): Promise<never>
  /** Runs one request of the lock machine: its rows, or `{ sqlstate, message }` for a server error. */
  execute(request: SqlRequest, options?: ExecuteOptions): Promise<unknown[][] | { sqlstate: string, message: string }>
}

export interface XactLockOptions extends PostgresSettings {
  /**
   * `0` (default): try exactly once; held (by another transaction, a session lock or a live
   * lease row) → AcquireTimeoutError. A positive number of milliseconds, or `null` /
   * `Infinity` for no limit: wait **on the server** (`pg_advisory_xact_lock` under the
   * transaction's `lock_timeout`, restored for the work) while another transaction or
   * session holds the name's advisory lock. A live lease row is not waited for.
   */
  timeoutMs?: number | null
}

/**
 * Runs `work(tx, token)` inside one transaction on `client` that holds the
 * transaction-level advisory lock `name`: `BEGIN`, the core's statement first
 * (`pg_try_advisory_xact_lock` on `advisoryKey(name, namespace)` and, if granted while no
 * lease of the name is live, the name's token + 1 in the same transaction), then `work`;
 * `COMMIT` when it resolves (the work and the token bump together; the lock ends),
 * `ROLLBACK` when it throws (rethrown). Resolves to what `work` resolves to.
 *
 * `client`: a `pg.Pool` (a client of its own is checked out and released), a `pg.Client`
 * not inside a transaction (`tx` is that client), or a postgres.js instance (`sql.begin`;
 * `tx` is the transaction's `sql`). Run the work's statements on `tx`.
 *
 * A rolled-back token is handed out again to the next holder, so the token fences writes
 * *inside this transaction* only. Correct through PgBouncer in transaction mode (the
 * transaction pins one server session).
 *
 * @throws AcquireTimeoutError (`ERR_ACQUIRE_TIMEOUT`) the lock is held (see `timeoutMs`), or
 *   was held longer than `timeoutMs` (`lastError` names the server's lock timeout);
 *   ProtocolError (`ERR_PROTOCOL`) the server refused the statement (missing tables: run
 *   the migration), or a session lock of the name is held by another client on the same
 *   server session (a transaction-pooling proxy); BackendError (`ERR_BACKEND`) no
 *   connection; ConfigError (`ERR_CONFIG`) a bad name, table, timeout, client or `work`.
 */
export declare function xactLock<T>(client: PostgresClient, name: string, work: (tx: any, token: bigint) => Promise<T> | T, options?: XactLockOptions): Promise<T>

export interface FencedUpdateOptions {
  /** The id column and the row's id (the row must exist: a fenced update never inserts). */
  idColumn: string
  rowId: unknown
  /** The token column: `bigint NOT NULL DEFAULT 0`. */
  tokenColumn: string
  /** The lease's fencing token, ≥ 1n. */
  token: bigint
  /** Column → value, written when the fence passes. */
  values: Record<string, unknown>
  /** Owner-bound rule, together with `ownerId` (`lease.ownerId`): a `text NOT NULL DEFAULT ''` column. */
  ownerColumn?: string | null
  ownerId?: string | null
}

/**
 * Updates row `rowId` of `table` with `values` only if `token` passes the fence
 * (`sqlFencedUpdate`), and stores `token` there. Owner-bound (`ownerColumn` + `ownerId`):
 * passes only if `last_token < token OR (last_token = token AND last_owner = owner)`, so a
 * token granted twice writes for one owner only; without them the token-only rule
 * (`last_token <= token`), which is weaker. Runs on `client` (in your transaction if that
 * client, or a postgres.js `tx`, is in one). When no row is updated, a second `SELECT`
 * tells the causes apart.
 *
 * @throws StaleTokenError (`ERR_STALE_TOKEN`): the row carries a higher token (`reason`
 *   'superseded') or, owner-bound, this token from another owner ('duplicate_grant', after
 *   a `FENCEPOST_DUPLICATE_GRANT` process warning); `resource` is `"table:rowId"`.
 *   An `Error` with `code` `'ERR_ROW_NOT_FOUND'` (not a FencepostError: the caller's data
 *   is missing) when no row has that id. ConfigError for a bad name, a token < 1n, an owner
 *   id that is not 32 hex digits, `ownerColumn` without `ownerId` or the reverse, a token
 *   column that does not hold integers. The client's error when the server refuses it.
 */
export declare function fencedUpdate(client: PostgresClient, table: string, options: FencedUpdateOptions): Promise<void>

/** The SQL creating fencepost's tables (idempotent, `CREATE TABLE IF NOT EXISTS`): run it
 * once with any client, or `backend.migrate()`. Never truncate them: tokens must survive.
 * @throws ConfigError for a table name that is not a plain SQL identifier. */
export declare function postgresMigration(settings?: Pick<PostgresSettings, 'leaseTable' | 'tokenTable'>): string

/** The stable signed 64-bit advisory-lock key of `name` in `namespace` (default
 * `'fencepost'`): the first 8 bytes, big-endian, of SHA-1 over
 * `"fencepost\0" + namespace + "\0" + name`, the same in every language and version. */
export declare function advisoryKey(name: string, namespace?: string): bigint
