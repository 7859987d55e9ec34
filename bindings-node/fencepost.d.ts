// fencepost: distributed locks with fencing tokens, for JavaScript.
//
// This file is THE interface of the JavaScript packages: the Node addon (napi-rs) and the
// WebAssembly package share it word for word. Every lock decision (acquire, wait, renew,
// expire, release) is made by one sans-IO Rust state machine, the same one the Python
// package runs; these packages feed it `performance.now()` and your client's replies, and
// turn its events into JavaScript: promises, an `AbortSignal` aborted on loss, errors with
// a stable `code`.
//
// Units: durations and instants are milliseconds (`number`, fractions allowed) on
// `performance.now()`'s clock; fencing tokens are `bigint`, never a lossy `number`.
//
// Needs TypeScript 5.2+ with `lib` "esnext.disposable" (or "esnext") for `await using`.

// ---- options --------------------------------------------------------------------------------

/** Why a lock is taken; decides which backends are acceptable. */
export type Purpose = 'efficiency' | 'correctness'

/**
 * Options of a lock. Types are checked when the `Lock` is built, ranges by the core: a bad
 * value throws `ConfigError` (code `ERR_CONFIG`) naming the option, before any request.
 * An option left out (or `undefined`) takes its default; `null` does so only where the
 * option says so (`acquireTimeoutMs`, `retryCount`, `renewEveryMs`, `tokenFloor`,
 * `metadata`) and is a value of the wrong type elsewhere (`ttlMs: null` throws).
 */
export interface LockOptions {
  /** Lease length the server enforces, ms: 1 ..= 2^31 (about 24.8 days). Default 30 000. */
  ttlMs?: number
  /**
   * `'efficiency'` (default: two holders at once waste work) or `'correctness'` (two
   * holders corrupt data). Redis tokens can go backwards on failover, so a correctness
   * lock on Redis needs `acceptFailoverRisk: true`; etcd's never do (`EtcdBackend`).
   */
  purpose?: Purpose
  /** The explicit opt-in described under `purpose`. Default false. */
  acceptFailoverRisk?: boolean
  /**
   * How long to keep trying, ms: `null`, `undefined` or `Infinity` wait forever (default);
   * `0` tries exactly once. Forever includes a server that cannot be reached: requests keep
   * being retried with backoff, and the outage is told as process warnings (type
   * 'FencepostWarning', code 'FENCEPOST_UNREACHABLE': at the first failed request, then at
   * most every 5 s with the count; 'FENCEPOST_REACHABLE' when the server answers again;
   * `console.warn` where there is no `process.emitWarning`). Set a timeout to get
   * AcquireTimeoutError instead (its `lastError` is the last transport error).
   */
  acquireTimeoutMs?: number | null
  /** How many times to retry after the first attempt (node-redlock's `retryCount`), an
   * integer; `null`/`undefined` = no limit (default), `0` tries once. Whichever of it and
   * `acquireTimeoutMs` runs out first rejects with AcquireTimeoutError. */
  retryCount?: number | null
  /** First backoff step, ms (default 10); step n is `min(retryMaxMs, retryBaseMs · 2^n)`,
   * each wait drawn uniformly from 0 ..= step ("full jitter"). */
  retryBaseMs?: number
  /** Largest backoff step, ms (default 500). */
  retryMaxMs?: number
  /** Renew this long after the last renewal was sent, ms; `null`/`undefined` = ttl / 3.
   * Must be below the validity `ttlMs · (1 − driftFactor) − clockMarginMs`. */
  renewEveryMs?: number | null
  /** Renew automatically (default true); when false the lease ends at its validity. */
  autoRenew?: boolean
  /** Bound on the clock-rate difference with the server, a fraction in 0 ..< 0.5
   * (default 0.01 = 1 %). */
  driftFactor?: number
  /** Safety margin subtracted from every validity, ms (default 2). */
  clockMarginMs?: number
  /**
   * The lowest fencing token a grant may carry: a bigint in `1n ..= 2n ** 63n - 1n` (or a
   * safe integer); `null`/`undefined` = the server's next token (default). Redis raises
   * its counter to `max(counter + 1, tokenFloor)` (plain and fair). For recovery after
   * tokens went backwards (a Redis failover, a restart without persistence): a fence
   * refused the new holder with StaleTokenError, whose `highest` is the highest token it
   * has seen, so acquire again with `tokenFloor: err.highest + 1n`. Refused on etcd
   * (ConfigError, `option: 'tokenFloor'`): its tokens are create revisions the server
   * alone assigns, and they never go backwards.
   */
  tokenFloor?: bigint | number | null
  /**
   * Replica-confirmed grants (Redis only): when above 0, each acquire and renew script is
   * followed on the same connection by `WAIT minReplicas replicaTimeoutMs`, and counts only
   * once that many replicas acknowledged it. An unconfirmed grant is retried under the same
   * owner id until `acquireTimeoutMs` (then released: AcquireTimeoutError); an unconfirmed
   * renewal is retried until the validity deadline (then LockLostError, 'expired'). A
   * failover to a replica that acknowledged keeps the lock and its token; WAIT does not
   * make Redis linearizable, so a correctness lock still needs `acceptFailoverRisk`.
   * Default 0 (no WAIT). ConfigError (`option: 'minReplicas'`) on etcd, MemoryBackend,
   * UpstashRedisBackend (each REST command is a request of its own) and cluster clients.
   */
  minReplicas?: number
  /** How long each WAIT may block, ms: at least 1, below the validity. Default 100. */
  replicaTimeoutMs?: number
  /**
   * Holder metadata stored with each grant, for operators (`backend.inspect`,
   * `backend.list`): a plain object of strings, at most 4096 bytes as JSON
   * (`standardMetadata()` fills host, pid, process, acquired_at and a label);
   * `null`/`undefined` = none (default). Display
   * only: nothing decides on it. Plain Redis, MemoryBackend, PostgreSQL lease rows (the
   * row's `metadata` column), etcd (the lock key's value), KubernetesLeaseBackend (the
   * Lease's `fencepost.dev/holder-metadata` annotation) and the Node-only
   * ZooKeeperBackend (the lock node's data) only: ConfigError (`option: 'metadata'`)
   * on fair Redis (a hand-off grant is written by the releasing holder), PostgreSQL
   * session and transaction locks (no row to keep it in) and Redlock. On Redis it is the key
   * `{prefix}{name}:meta`, set by the acquire script with the lease's TTL, extended by
   * each renewal, deleted by the release and by `forceRelease`.
   */
  metadata?: Record<string, string> | null
}

/** Who holds a lock, as `backend.inspect` / `backend.list` found it on the server: a
 * snapshot for operators, stale on arrival, deciding nothing. */
export interface Holder {
  /** The lock name. */
  readonly name: string
  /** The holder's owner id (32 hex digits), or null when the server keeps none; on etcd
   * `'lease:'` and the holder's lease id in 16 hex digits (its key names the lease). */
  readonly owner: string | null
  /** The holder's fencing token (the lock's counter), or null when unknown. */
  readonly token: bigint | null
  /** Milliseconds left on the holder's lease as the server counts them (Redis PTTL, a
   * PostgreSQL lease row's expiry on the server's clock, etcd's LeaseTimeToLive in whole
   * seconds), or null (ZooKeeper: the session, not the node, has a deadline).
   * Kubernetes: the record's leaseDurationSeconds, an upper bound (its last renewal
   * cannot be dated without comparing wall clocks). */
  readonly ttlLeftMs: number | null
  /** Contenders queued behind the holder (fair Redis; etcd: the other contender keys), or
   * null where the server keeps no queue (plain Redis and PostgreSQL lease-row waiters
   * leave no trace until they win). */
  readonly waiters: number | null
  /** The `metadata` the holder acquired with, or null when it gave none. */
  readonly metadata: Readonly<Record<string, string>> | null
}

export interface ListOptions {
  /** At most this many holders (an integer >= 1); default 100. */
  limit?: number
}

export interface AcquireOptions {
  /** Cancels the wait: the acquisition is abandoned (and the lock released if the server
   * had granted it already), and `acquire()` rejects with `signal.reason`. */
  signal?: AbortSignal
  /** This call's acquire timeout over the lock's `acquireTimeoutMs`, ms: `null` or
   * `Infinity` wait forever, `0` tries once. */
  timeoutMs?: number | null
}

// ---- locks and leases -----------------------------------------------------------------------

/** Why a lease was lost. */
export type LostReason =
  /** the validity deadline passed without a confirmed renewal */
  | 'expired'
  /** the server refused a renewal: the key was deleted or is held by another owner */
  | 'renew_rejected'
  /** the release found the key gone or held by another owner */
  | 'not_held_at_release'
  /** the backend was closed while the lease was held */
  | 'closed'

/**
 * A distributed lock named `name` on `backend`: a description from which every
 * `acquire()` makes an independent acquisition (each with its own owner id), so one
 * `Lock` may be shared by concurrent tasks; they contend like separate processes.
 *
 * @throws ConfigError (`ERR_CONFIG`) for a backend that is not one, a name that is not a
 *   1..1024-byte string, an unknown option (`ttl` instead of `ttlMs`), a value of the wrong
 *   type, NaN, ±Infinity or negative durations, or any value the core refuses
 *   (`ttlMs: 0`, `renewEveryMs >= ttlMs`, a correctness lock on Redis without opt-in).
 */
export declare class Lock {
  /** `onEvent` is this lock's own observation callback (see `Backend.observe`), called
   * besides the backend's; setting one makes the backend's machine observe events. */
  constructor(backend: Backend, name: string, options?: LockOptions & { onEvent?: ObserveCallback | null })
  /** The lock name. */
  readonly name: string
  /** The backend the lock lives on. */
  readonly backend: Backend
  /**
   * Acquires the lock, waiting as the options say; the lease is renewed on the event loop
   * until it is released.
   *
   * @throws AcquireTimeoutError (`ERR_ACQUIRE_TIMEOUT`) when the acquire timeout passed.
   * @throws ProtocolError (`ERR_PROTOCOL`) when the server's reply made no sense.
   * @throws BackendError (`ERR_BACKEND`) when the backend is (or gets) closed.
   * @throws `signal.reason` when `signal` aborts the wait.
   */
  acquire(options?: AcquireOptions): Promise<Lease>
  /**
   * One attempt (redis-py's `blocking=False`): the lease, or `null` when another owner
   * holds the lock. Rejects as `acquire()` otherwise (an unreachable server is an
   * AcquireTimeoutError with its `lastError`).
   */
  tryAcquire(options?: Omit<AcquireOptions, 'timeoutMs'>): Promise<Lease | null>
  /**
   * Acquires, runs `fn(signal, lease)` while the lease is renewed, and releases in
   * `finally`. `signal` is aborted the moment the lease is lost (pass it to `fetch`,
   * timers, database queries…); then `using` rejects with the `LockLostError`, whatever
   * `fn` returned or threw. Resolves with `fn`'s result otherwise.
   */
  using<T>(fn: (signal: AbortSignal, lease: Lease) => T | PromiseLike<T>, options?: AcquireOptions): Promise<Awaited<T>>
}

/**
 * A held lock. Carry `token` on every write to the protected resource; stop working when
 * `signal` aborts. `await using lease = await lock.acquire()` releases it at the end of
 * the block.
 */
export declare class Lease implements AsyncDisposable {
  private constructor()
  /** The lock name. */
  readonly name: string
  /** The fencing token: rises every time the lock is granted. Carry it on every write
   * (see `Fence`, `sqlFencedUpdate`, `RedisProtocolBackend.fencedSet`,
   * `EtcdBackend.fencedTxn`). On etcd it is the create revision of the holder's key. */
  readonly token: bigint
  /** This acquisition's owner id: 32 lowercase hex digits, the value in the lock key. */
  readonly ownerId: string
  /** How the lock's previous holder ended, as the server saw it at this grant:
   * `'released'` (a clean release, or a fair hand-off), `'expired'` (its lease ran out,
   * or it was freed behind its back: it may have left its work half done), `'none'` (the
   * first grant of this name) or `'unknown'` (the backend keeps no record: etcd,
   * Redlock, ZooKeeper, PostgreSQL advisory locks; a grant retried after a lost reply).
   * Redis (and `MemoryBackend`), PostgreSQL lease rows and Kubernetes report it; a lease
   * its holder's machine gave up is freed by a cleanup that reports `'expired'`, never
   * `'released'`. */
  readonly previous: PreviousHolder
  /** Aborted the moment the lease is lost, with the `LockLostError` as its `reason`.
   * Taking it keeps the lease alive until it is released or lost (never collected under
   * work the signal guards). */
  readonly signal: AbortSignal
  /** Whether the lease has been lost. */
  readonly lost: boolean
  /** `null` while held, else why the lease was lost. */
  readonly lostReason: LostReason | null
  /** The validity deadline on `performance.now()`'s clock; moves on every confirmed
   * renewal. Validity is measured from when the request was *sent*:
   * `sent + ttlMs · (1 − driftFactor) − clockMarginMs`. */
  readonly validUntilMs: number
  /** Milliseconds left before the validity deadline (≥ 0; 0 once lost). Timers that are
   * due are delivered first. */
  validForMs(): number
  /** Still ours by the local view: not lost, not released, before its validity deadline
   * (due timers delivered first). Sends nothing; for the server's word, `extend()`. */
  readonly held: boolean
  /** Whether this lease was released (`release()` called, `using()` or `await using`
   * ended); a released lease is never held again. */
  readonly released: boolean
  /**
   * Renews now (a manual extend; with `autoRenew: false` the only renewal there is) and
   * resolves once the server confirmed it (`validUntilMs` has moved). The TTL is the
   * lock's. Rejects with LockLostError (`'renew_rejected'`, `'expired'`) if the lease is
   * lost, ConfigError (`ERR_CONFIG`) if it was released. A lease nobody references (and
   * whose `signal` was never taken) is released when collected, with a `ResourceWarning`
   * (`FENCEPOST_LEASE_DROPPED`).
   */
  extend(): Promise<void>
  /** Throws the `LockLostError` if the lease has been lost, a `ConfigError` if it was
   * released (work under it must stop either way); due timers are delivered first. Call
   * it between steps of long synchronous work and before each protected write. */
  check(): void
  /**
   * Releases the lock (owner-checked on the server). Idempotent: later calls return the
   * same promise.
   *
   * @throws LockLostError (`ERR_LOCK_LOST`) if the lease was lost, or the server no longer
   *   held it for this owner (reason `'not_held_at_release'`).
   */
  release(): Promise<void>
  /** `await using`: the same as `release()`, so a block whose lease was lost ends with
   * `LockLostError` (had the block thrown too, both arrive in a `SuppressedError`;
   * `lock.using()` reports a loss once). */
  [Symbol.asyncDispose](): Promise<void>
}

// ---- leader election ------------------------------------------------------------------------

/** Why a term ends: `'resigned'` (`resign()`, or `run()`'s work settled), `'cancelled'`
 * (`run()`'s `signal` aborted), or the lease's loss reason. */
export type StopReason = 'resigned' | 'cancelled' | LostReason

/** Every `StopReason`, in a frozen array. */
export declare const STOP_REASONS: readonly StopReason[]

export interface ElectionOptions extends LockOptions {
  /** A string a leader publishes beside its identity (an address). */
  value?: string | null
  /** Called once per term when it starts, before `campaign()` resolves. Must not block. */
  onStartedLeading?: ((leadership: Leadership) => void) | null
  /** Called once per term when it ends, after `onStartedLeading`, whatever ends it. */
  onStoppedLeading?: ((leadership: Leadership, reason: StopReason) => void) | null
}

export interface RunOptions {
  /** Aborts the run: the work's signal aborts, the lease is released at once (no waiting
   * out the TTL), `onStoppedLeading` gets `'cancelled'`, and `run()` rejects with
   * `signal.reason`. During the campaign: as `acquire()`'s signal. */
  signal?: AbortSignal
  /** Campaign again after a lost term (a controller's loop) instead of rejecting with
   * the `LockLostError`. Default false. */
  again?: boolean
}

/** A leader as followers read it (`Election.leader()`). */
export interface Leader {
  /** The leader's identity; null for a candidate of another client (etcd's own
   * `concurrency.Election`) or a holder an instant before its record. */
  readonly identity: string | null
  /** The leader's value (null if it gave none). */
  readonly value: string | null
  /** The leader's fencing token. */
  readonly token: bigint
}

/**
 * A leader election named `name` on `backend`, campaigned for as `identity`: a `Lock`
 * held indefinitely, so a leader carries the lease's fencing token and loses leadership
 * when the lease is lost. Every backend with locks has it (Redis as an efficiency
 * election; etcd for correctness). On etcd a leader publishes `{ identity, value }` (JSON)
 * in its own key before `onStartedLeading`, as etcd's `Election.Proclaim` does.
 *
 * @throws ConfigError (`ERR_CONFIG`) for an empty `identity`, a `value` that is not a
 *   string, callbacks that are not functions, `autoRenew: false`, or anything `Lock`
 *   refuses.
 */
export declare class Election {
  constructor(backend: Backend, name: string, identity: string, options?: ElectionOptions)
  readonly name: string
  readonly identity: string
  readonly value: string | null
  readonly backend: Backend
  /** The lock the leader holds. */
  readonly lock: Lock
  /**
   * Waits until this candidate leads; resolves with the term, after `onStartedLeading`.
   *
   * @throws AcquireTimeoutError (`ERR_ACQUIRE_TIMEOUT`) when `timeoutMs` passed.
   * @throws `signal.reason` when `signal` aborts the campaign (nothing is called, what
   *   the server granted is released).
   * @throws ProtocolError, BackendError as `Lock.acquire()`.
   */
  campaign(options?: AcquireOptions): Promise<Leadership>
  /**
   * Campaigns, then runs `work(signal, leadership)` under the term's signal. Work that
   * settles inside the term resigns it, and `run` settles as the work did; a lost term
   * rejects with the `LockLostError` (`ERR_LOCK_LOST`), or campaigns again with `again`.
   * The work must stop when its signal aborts. Aborting `options.signal` rejects with
   * `signal.reason` (a DOMException `AbortError` unless `abort(reason)` gave one).
   */
  run<T>(work: (signal: AbortSignal, leadership: Leadership) => T | PromiseLike<T>, options?: RunOptions): Promise<Awaited<T>>
  /**
   * The current leader, as the server answers now (for display and routing, never a
   * substitute for campaigning); `null` when nobody leads. `EtcdBackend`: the key with
   * the lowest create revision under the election's prefix, as etcd's own
   * `concurrency.Election` reads it (a fencepost leader publishes its identity and value
   * in it; a candidate of etcd's own client reads as `identity: null` and its value).
   * RedisBackend, UpstashRedisBackend, MemoryBackend (not fair), KubernetesLeaseBackend
   * and the Node-only ZooKeeperBackend: the candidate's identity and value are
   * its lease's metadata, read by `backend.inspect`.
   *
   * @throws ConfigError (`ERR_CONFIG`, kind `'unsupported'`) on the other backends (fair
   *   Redis, Redlock, PostgreSQL): they keep only the holder's owner id with the lock.
   * @throws BackendError (`ERR_BACKEND`), ProtocolError (`ERR_PROTOCOL`) as the backend's
   *   queries.
   */
  leader(): Promise<Leader | null>
  /** The current leader, then every change of it, in order, read every `intervalMs`
   * (default 100): a term shorter than the interval may be missed, never reordered.
   * Ends when `signal` aborts; rejects as `leader()`. */
  observe(options?: { intervalMs?: number, signal?: AbortSignal }): AsyncGenerator<Leader | null, void, undefined>
}

/** One term of an `Election`. It ends exactly once, whatever ends it; then `signal`
 * aborts and `onStoppedLeading` is called. */
export declare class Leadership {
  private constructor()
  readonly name: string
  readonly identity: string
  readonly value: string | null
  /** The term's fencing token (the lease's): carry it on every write the leader makes. */
  readonly token: bigint
  readonly ownerId: string
  /** The lease the term is held by. */
  readonly lease: Lease
  /** Aborted when the term ends: `reason` is the `LockLostError` after a loss, else a
   * `ConfigError` naming the stop reason. */
  readonly signal: AbortSignal
  /** `null` while the term lasts. */
  readonly stopReason: StopReason | null
  /** Throws the `LockLostError` if the term was lost, a `ConfigError` if it ended
   * otherwise. */
  check(): void
  /** Releases the lease at once and ends the term (`'resigned'`, or the loss reason).
   * Idempotent; never rejects with `LockLostError`. */
  resign(): Promise<void>
}

// ---- backends -------------------------------------------------------------------------------

/**
 * Where locks live. Every `Lock` on one backend shares its lock machine and driver.
 * Backends: `MemoryBackend` (in process), `RedisBackend` (ioredis, node-redis),
 * `UpstashRedisBackend` (Redis over HTTP, fetch), `RedlockBackend` (a majority of
 * independent Redis masters), `EtcdBackend` (etcd v3, fetch), `KubernetesLeaseBackend`
 * (coordination.k8s.io Leases, fetch); in Node also `PostgresBackend` (pg, postgres.js)
 * and `ZooKeeperBackend` (see postgres.d.ts and zookeeper.d.ts).
 */
export declare abstract class Backend {
  /**
   * Stops this backend's driver: locks still held or being acquired are released (best
   * effort), their leases are lost with reason `'closed'` (signals aborted), pending
   * acquisitions reject with `BackendError`; all of that at once. The promise resolves
   * once the requests still in flight (those releases, renewals under way) have settled,
   * each bounded by its request deadline, and a client the backend made itself
   * (`backendFromUrl`) is closed: then no timer or request of this backend is left, and
   * you may close your own client without cutting off a release (`await backend.close();
   * await client.quit()`). It never rejects. The client you passed is not closed: its
   * owner closes it. Idempotent (every call returns the same promise).
   */
  close(): Promise<void>
  /**
   * Whether lock `name` is held now, as the server answers: any holder's lease is live
   * (Redis: the lease key lives, or a fair reservation; etcd: a contender's key lives).
   * One round trip, for monitoring and operators: the answer may be stale on arrival.
   *
   * @throws BackendError (`ERR_BACKEND`) when the server could not be reached.
   * @throws ProtocolError (`ERR_PROTOCOL`) for an error reply or a reply of the wrong shape.
   * @throws ConfigError (`ERR_CONFIG`) for a name that is not a string.
   */
  isLocked(name: string): Promise<boolean>
  /**
   * Frees lock `name` whoever holds it, for an operator or a stuck job (python-redis-lock's
   * `reset()`); resolves to whether a holder's lease was freed. The token counter is never
   * touched: the next grant's token is higher than every earlier one. On a fair Redis
   * backend the first live waiter is granted the lock and woken at once, as a release does;
   * on etcd the holder's lease is revoked and the next contender's watch fires. The freed
   * holder learns it at its next renewal (`LockLostError`, reason `'renew_rejected'`).
   *
   * @throws BackendError (`ERR_BACKEND`) when the server could not be reached (the lock
   *   may or may not have been freed).
   * @throws ProtocolError (`ERR_PROTOCOL`) for an error reply or a reply of the wrong shape.
   * @throws ConfigError (`ERR_CONFIG`) for a name that is not a string.
   */
  forceRelease(name: string): Promise<boolean>
  /**
   * Who holds lock `name` now (owner id, token, time left, waiters on a fair lock, the
   * holder's metadata), or null when nobody holds it. One atomic read, for monitoring and
   * operators: stale on arrival, never a substitute for acquiring.
   *
   * @throws BackendError (`ERR_BACKEND`) when the server could not be reached.
   * @throws ProtocolError (`ERR_PROTOCOL`) for an error reply or a reply of the wrong shape.
   * @throws ConfigError (`ERR_CONFIG`) for a name that is not a string, or (kind
   *   'unsupported') on backends other than RedisBackend, UpstashRedisBackend,
   *   MemoryBackend, EtcdBackend, PostgresBackend with lease rows, KubernetesLeaseBackend
   *   and the Node-only ZooKeeperBackend.
   */
  inspect(name: string): Promise<Holder | null>
  /**
   * The held locks whose names start with `prefix` (default ''), at most `options.limit`
   * (100), sorted by name among those found. Bounded: cursor-based SCAN steps of 500 keys
   * (never KEYS), at most 1000 steps, stopping once `limit` locks are found.
   *
   * @throws as `inspect`, and ConfigError for a prefix that is not a string or a limit
   *   that is not an integer >= 1.
   */
  list(prefix?: string, options?: ListOptions): Promise<Holder[]>
  /**
   * Sets this backend's observation callback and the warnings' thresholds. Every event
   * and warning of every lock on this backend (decided by the core: the same names and
   * fields in every language) goes to `onEvent`, to the diagnostics channels
   * `fencepost:<event>` and `fencepost:observation` (`node:diagnostics_channel` on Node,
   * `diagnosticsChannel` elsewhere), and, for warnings, to a process warning (type
   * 'FencepostWarning', code `FENCEPOST_RENEWAL_LATE`, …) unless `processWarnings` is
   * false. The machine observes nothing while nothing listens (checked when an
   * acquisition starts). A later call replaces every setting.
   *
   * @throws ConfigError (`ERR_CONFIG`) for an unknown option, a value of the wrong type or
   *   out of range (`lateRenewalFraction` 0 ..= 1, counts 0 ..= 2**32 - 1,
   *   `unreachableEveryMs` at least 1), naming it.
   */
  observe(options?: ObserveOptions): void
}

/** The events, in the core's order. */
export type ObservationEvent =
  | 'acquiring' | 'acquired' | 'renewed' | 'renewal_failing' | 'lost' | 'released'
  | 'acquire_timed_out' | 'acquire_failed' | 'backend_error'
/** The warnings: pitfalls the core sees happening, each message naming what to change. */
export type ObservationWarning = 'renewal_late' | 'held_long' | 'hot_lock' | 'server_unreachable'

/**
 * One event or warning about one lock. `fields` by event (durations in ms):
 * `acquired` { token, waitedMs, attempts }; `renewed` { validityLeftMs };
 * `renewal_failing` { error, retryInMs, deadlineInMs }; `lost` { reason, heldForMs? };
 * `released` { heldForMs? } (absent: cancelled before a grant); `acquire_timed_out`
 * { waitedMs, attempts, lastError? }; `acquire_failed` { waitedMs, error };
 * `backend_error` { operation, error }; `renewal_late` { validityLeftMs, validityMs };
 * `held_long` { heldForMs, ttlMs }; `hot_lock` { foundHeld } or { waiters };
 * `server_unreachable` { unreachableForMs, attempts, lastError? }.
 */
export interface Observation {
  event: ObservationEvent | ObservationWarning
  /** The lock name. */
  lock: string
  /** The acquisition's id in its backend's machine. */
  lockId: number
  level: 'debug' | 'info' | 'warning'
  /** Whether it is a warning (a pitfall to fix) rather than an event. */
  warning: boolean
  fields: { [field: string]: number | bigint | string }
  /** A one-line text, durations in ms (`lock "report": acquired with token 3 after
   * 1.25 ms (1 attempt)`); a warning's names what to change (the core's option names). */
  message: string
}

/** Called on the event loop with each observation; what it throws is reported as an
 * uncaught exception (on a microtask) and the lock goes on. */
export type ObserveCallback = (observation: Observation) => void

export interface ObserveOptions {
  /** Called with every event and warning of the backend's locks. */
  onEvent?: ObserveCallback | null
  /** Warnings as process warnings too (default true). */
  processWarnings?: boolean
  /** `renewal_late` when a renewal is confirmed with less than this fraction of the
   * validity left: 0 ..= 1, default 1/3 (0: never). */
  lateRenewalFraction?: number
  /** `held_long` once one lease has been held this many TTLs: default 10 (0: never). */
  heldLongTtls?: number
  /** `hot_lock` when one acquisition found the lock held this many times before its grant
   * or timeout: default 10 (0: never). Only a new holder counts, so one long hold is
   * never hot, where the server's refusal names its holder: every backend, except a
   * Redlock holder that is not a fencepost client. */
  hotLockAttempts?: number
  /** `hot_lock` when this many acquisitions of one name are pending on this backend:
   * default 10 (0: never). */
  hotLockWaiters?: number
  /** Milliseconds between two `server_unreachable` warnings while an acquisition without
   * `acquireTimeoutMs` cannot reach the server: default 30000, at least 1. */
  unreachableEveryMs?: number
}

/** A channel as `node:diagnostics_channel` has it. */
export interface DiagnosticsChannelLike {
  readonly name: string | symbol
  readonly hasSubscribers: boolean
  subscribe(onMessage: (message: unknown, name: string | symbol) => void): void
  unsubscribe(onMessage: (message: unknown, name: string | symbol) => void): boolean
  publish(message: unknown): void
}
/** `node:diagnostics_channel` where the runtime has it, else a stand-in with the same
 * surface (browsers, workerd without Node compatibility): subscribe to
 * `fencepost:<event>` or `fencepost:observation` to hear every `Observation`. */
export declare const diagnosticsChannel: {
  channel(name: string): DiagnosticsChannelLike
  subscribe(name: string, onMessage: (message: unknown, name: string | symbol) => void): void
  unsubscribe(name: string, onMessage: (message: unknown, name: string | symbol) => void): boolean
}
/** Every event name, in the core's order. */
export declare const OBSERVATION_EVENTS: readonly ObservationEvent[]
/** Every warning name. */
export declare const OBSERVATION_WARNINGS: readonly ObservationWarning[]

/** The Lua scripts fencepost runs on Redis (`acquire_fair` and `release_fair` on a fair
 * backend; `renew_many` for leases renewing together, up to 500 keys a call; `is_locked`
 * and `force_release` for `isLocked` / `forceRelease`). */
export type RedisScriptName = 'acquire' | 'renew' | 'release' | 'fenced_set' | 'acquire_fair' | 'release_fair' | 'is_locked' | 'force_release' | 'inspect' | 'list' | 'renew_many'

/** A Redis script call as data, as the lock machine and `redisFencedSet` emit it: run
 * `EVALSHA sha1 keys.length ...keys ...args`, or `EVAL` with the source on `NOSCRIPT`. */
export interface RedisScriptCall {
  /** Which script. */
  readonly script: RedisScriptName
  /** SHA-1 of the script source, 40 lowercase hex digits. */
  readonly sha1: string
  readonly keys: readonly string[]
  readonly args: readonly string[]
  /** Replica confirmation (a lock's `minReplicas`): send `WAIT replicas timeoutMs` on the
   * same connection right after the script (never inside MULTI, where WAIT does not
   * block) and answer `[script reply, WAIT reply]`. Absent: the script runs alone. */
  readonly wait?: { readonly replicas: number, readonly timeoutMs: number }
}

/**
 * The blocking wait of a fair waiter, as data: run `BLPOP key timeoutMs/1000` (fractional
 * seconds, never 0) on a connection of its own, and answer with whatever it returned:
 * `null` at the timeout, `[key, value]` when woken (an `Error` value for an error reply).
 */
export interface RedisBlockingPop {
  readonly backend: 'redis_blpop'
  /** The waiter's wake-up list. */
  readonly key: string
  /** How long to block, whole ms ≥ 1. */
  readonly timeoutMs: number
}

/** What an adapter may do with a request besides running it. */
export interface ExecuteOptions {
  /** Aborted once the outcome of a blocking wait no longer matters (the machine moved on,
   * its deadline passed, the backend closed): stop blocking and reject with its reason. */
  signal?: AbortSignal
}

/**
 * A backend speaking fencepost's Redis scripts. Keys of lock `name` are
 * `{prefix}{name}:lock` (owner id, with the TTL) and `{prefix}{name}:token` (the fencing
 * counter), one hash slot. Redis tokens can go backwards after a failover: Redis locks are
 * for `purpose: 'efficiency'` unless you pass `acceptFailoverRisk: true`.
 */
export declare abstract class RedisProtocolBackend extends Backend {
  /** The prefix of every key fencepost writes (default `'fencepost:'`). */
  readonly keyPrefix: string
  /** The lease key of lock `name`. */
  lockKey(name: string): string
  /** The fencing-token counter key of lock `name`. */
  tokenKey(name: string): string
  /**
   * Writes `value` to `dataKey` unless `token` is lower than the highest token `fenceKey`
   * has seen (checked and written atomically by one script); the fence then remembers
   * `token`. Put both keys in one hash slot on Redis Cluster.
   *
   * With `options.ownerId` (`lease.ownerId`) the owner-bound rule: the fence records the
   * owner with its highest token and refuses that token from any other owner; without it
   * the token-only rule, which is weaker (a token granted twice writes twice).
   *
   * @throws StaleTokenError (`ERR_STALE_TOKEN`) when a newer holder has written, or
   *   another owner wrote with this token (`reason` `'duplicate_grant'`).
   * @throws BackendError (`ERR_BACKEND`) when the server could not be reached (the write
   *   may or may not have happened).
   * @throws ProtocolError (`ERR_PROTOCOL`) for an error reply or a reply of the wrong shape.
   * @throws ConfigError (`ERR_CONFIG`) for a token that is not a bigint in 1n ..= 2n ** 64n - 1n
   *   (0n is no lease's token), or one key for both `dataKey` and `fenceKey`, before
   *   anything is sent.
   */
  fencedSet(dataKey: string, fenceKey: string, token: bigint, value: string, options?: FencedSetOptions): Promise<void>
  /** Whether locks on this backend hand off fairly (the `fair` option). */
  readonly fair: boolean
  /**
   * Runs one script call, or (on a fair backend) one blocking wait; returns the reply as
   * the client gives it (an `Error` value for an error reply); throws for a transport
   * failure. Adapters for other clients override it.
   */
  execute(command: RedisScriptCall | RedisBlockingPop, options?: ExecuteOptions): unknown
}

export interface RedisBackendOptions {
  /** The prefix of every key fencepost writes (default `'fencepost:'`). */
  keyPrefix?: string
  /**
   * Fair, instant hand-off (default false): a contended `acquire()` joins a FIFO queue on
   * the server and blocks on a `BLPOP` of its own; a release grants the lock to the
   * first waiter still waiting, whose `BLPOP` returns the grant at once, so waiters are served in order and
   * the releasing process cannot take the lock straight back. A waiter that gave up
   * (timeout, `signal`) is skipped. `RedisBackend` runs each `BLPOP` on a duplicate of
   * your client (`client.duplicate()`), never on the client itself. Fair and plain locks
   * may share a name safely; only fairness is lost.
   */
  fair?: boolean
}

/** An in-memory Redis-like server running fencepost's scripts (TTLs on
 * `performance.now()`). Share one between backends to contend on the same keys. */
export declare class MemoryServer {
  constructor()
  /** Runs a script call now (the reply), or a blocking wait (a promise, as `blpop`). */
  execute(command: Pick<RedisScriptCall, 'script' | 'keys' | 'args'>): unknown
  execute(command: RedisBlockingPop, options?: ExecuteOptions): Promise<[string, string] | null>
  /** `BLPOP key timeoutMs/1000`: `[key, value]` as soon as the list has an item (at once,
   * or when a script run on this server pushes one), `null` after `timeoutMs` (`0`:
   * never). Rejects with `signal.reason` when `options.signal` aborts. */
  blpop(key: string, timeoutMs: number, options?: ExecuteOptions): Promise<[string, string] | null>
  /** `GET key` now (expired keys are gone). */
  get(key: string): string | null
  /** `PTTL key` now, in ms: `null` when missing, -1 without expiry. */
  pttl(key: string): number | null
  /** `DEL key`; true if it existed. */
  delete(key: string): boolean
  /** The owner id holding lock `name` now, or `null` when free. */
  lockOwner(name: string, options?: RedisBackendOptions): string | null
  /** Deletes lock `name`'s lease key behind its holder's back, as an operator (or a bug)
   * might: the holder's next renewal is refused and its lease is lost. */
  deleteLock(name: string, options?: RedisBackendOptions): boolean
  /** Forgets every key, as a Redis restart without persistence does (fencing counters too). */
  flush(): void
}

export interface MemoryBackendOptions extends RedisBackendOptions {
  /** The server to use; a new empty one when omitted. */
  server?: MemoryServer
}

/** A backend on an in-process `MemoryServer`: no server process needed (tests, demos,
 * single-process programs). */
export declare class MemoryBackend extends RedisProtocolBackend {
  constructor(options?: MemoryBackendOptions)
  /** The in-memory server this backend talks to. */
  readonly server: MemoryServer
  execute(command: RedisScriptCall | RedisBlockingPop, options?: ExecuteOptions): unknown
}

/** What `RedisBackend` needs of an ioredis client (`new Redis()`, `new Redis.Cluster()`). */
export interface IoredisLike {
  evalsha(sha1: string, numKeys: number, ...keysAndArgs: string[]): Promise<unknown>
  eval(script: string, numKeys: number, ...keysAndArgs: string[]): Promise<unknown>
}

/** What `RedisBackend` needs of a node-redis v4+ client (`createClient()`, `createCluster()`). */
export interface NodeRedisLike {
  evalSha(sha1: string, options: { keys: string[], arguments: string[] }): Promise<unknown>
  eval(script: string, options: { keys: string[], arguments: string[] }): Promise<unknown>
}

/**
 * Locks on a Redis server (or Valkey, KeyDB, Dragonfly with Lua) through an ioredis or
 * node-redis (v4+) client that you own and connect. Requests run as EVALSHA, falling back
 * to EVAL on NOSCRIPT; error replies go to the lock machine (which tells transient from
 * fatal), connection failures count as transport errors (outcome unknown).
 *
 * With `fair: true`, parked waiters block on duplicates of the client (one per waiter,
 * kept idle a while for the next wait); `close()` closes them, and idle ones close when
 * the client ends.
 *
 * @throws ConfigError for a client that is neither; with `fair: true`, for a client
 *   without `duplicate()` or an ioredis client with its own `keyPrefix` option (pass the
 *   prefix to `RedisBackend` instead).
 */
export declare class RedisBackend extends RedisProtocolBackend {
  constructor(client: IoredisLike | NodeRedisLike, options?: RedisBackendOptions)
  /** The client this backend uses. */
  readonly client: IoredisLike | NodeRedisLike
  /** Which client library it is. */
  readonly clientKind: 'ioredis' | 'node-redis'
  execute(command: RedisScriptCall | RedisBlockingPop, options?: ExecuteOptions): Promise<unknown>
}

/** The `fetch` `UpstashRedisBackend` calls (the global one by default). */
export type FetchLike = (url: string, init: { method: 'POST', headers: Record<string, string>, body: string, signal?: AbortSignal }) => Promise<{ status: number, text(): Promise<string> }>

export interface UpstashRedisBackendOptions extends RedisBackendOptions {
  /** The REST endpoint (`https://…upstash.io`, or any server speaking the protocol). */
  url: string
  /** Sent as `Authorization: Bearer <token>`; omit for an endpoint without auth. */
  token?: string
  /** The fetch to use (default: the global `fetch`). */
  fetch?: FetchLike
}

/**
 * Locks on Redis over HTTP, with the Upstash REST protocol and nothing but `fetch`: for
 * edge workers (which cannot open Redis sockets), browsers, and Node. Each command is a
 * POST of its JSON array (`["EVALSHA", sha1, "2", key, …]`) to `url`; the endpoint answers
 * `{ "result": … }` or `{ "error": "…" }`.
 *
 * Scripts run as EVALSHA, falling back to EVAL on NOSCRIPT. An `{ error }` answer is the
 * server's error reply (a wrong token fails the acquisition with ProtocolError rather than
 * retrying); a failed fetch, an HTTP 5xx or a body that is not JSON counts as a transport
 * error (outcome unknown, retried). Each request is aborted at its deadline. Integers past
 * 2^53 in a reply are refused, never read rounded (tokens travel as strings).
 *
 * In a worker, create the backend inside the request handler and `close()` it before the
 * response: timers and I/O belong to the request that started them.
 *
 * @throws ConfigError for a missing or non-http(s) `url`, a `token` that is not a string,
 *   a `fetch` that is not a function (or no global fetch), an unknown option.
 */
export declare class UpstashRedisBackend extends RedisProtocolBackend {
  constructor(options: UpstashRedisBackendOptions)
  /** The REST endpoint. */
  readonly url: string
  execute(command: RedisScriptCall | RedisBlockingPop, options?: ExecuteOptions): Promise<unknown>
}

// ---- Redlock --------------------------------------------------------------------------------

/** A Redlock master reached over REST (the Upstash protocol, fetch only). */
export interface RedlockRestEndpoint {
  /** The REST endpoint of this master (`https://…`, or any server speaking the protocol). */
  url: string
  /** Sent as `Authorization: Bearer <token>`; omit for an endpoint without auth. */
  token?: string
}

export interface RedlockBackendOptions {
  /** Prefix of every key fencepost writes on each master (default `'fencepost:'`): the
   * keys of `RedisBackend`. */
  keyPrefix?: string
  /** REST masters only: the fetch to use (default: the global `fetch`). */
  fetch?: FetchLike
}

/** One part of a Redlock step, for the host to run on master `master` as a script call
 * (`RedisScriptCall`) and answer with that master's reply. */
export interface RedlockPart extends RedisScriptCall {
  readonly backend: 'redlock_part'
  /** Which master, an index into the backend's `masters` (from 0). */
  readonly master: number
}

/**
 * Locks on a majority of N independent Redis masters (N odd, at least 3), after Redis'
 * "Distributed locks with Redis" page. Every step of the lock machine goes to every master
 * at once, one request per master with `RedisBackend`'s scripts and keys; the core tallies
 * the replies:
 *
 * - **Acquire**: granted once a majority granted, with `lease.validUntilMs` measured from
 *   the send (`send + ttlMs × (1 − driftFactor) − clockMarginMs`; drift 1 %, margin 2 ms
 *   by default), so a majority that answers only after that is not a grant. A failed
 *   attempt releases the owner id on *every* master (those that did not answer too) and
 *   retries under a fresh owner id after a jittered backoff (`retryBaseMs`..`retryMaxMs`).
 * - **Renew**: kept once a majority renewed; lost at once (`LockLostError`, reason
 *   `'renew_rejected'`, the lease's signal aborted) when a majority refused, and the
 *   renewed minority is released.
 * - **Release**: on every master; a majority that no longer held it is
 *   `'not_held_at_release'`.
 *
 * **An efficiency lock only**: `purpose: 'correctness'` is refused with ConfigError, with
 * or without `acceptFailoverRisk` (use etcd, ZooKeeper or PostgreSQL lease rows). **The
 * token** (`lease.token`) is the highest of the granting majority's counters: a number
 * the majority handed out, not a fencing token. Counters of different masters drift apart
 * (a failed attempt counts on the masters that granted it only), so a later lease can
 * carry a lower token, and a master restarted without persistence counts from 1 again;
 * `tokenFloor` and `minReplicas` are refused.
 *
 * Masters without persistence must stay down a little longer than the longest `ttlMs` in
 * use after a restart (Redis' page, "delayed restarts"), or a restarted master may vote
 * for a second holder while the first still holds.
 *
 * `masters`: one entry per master, all of one kind: ioredis clients, node-redis (v4+)
 * clients (you own, connect and close them; no Cluster clients), or REST endpoints
 * (`{ url, token }`, the Upstash protocol with `fetch` only: edge workers, browsers).
 * Each master warns of itself when unreachable (FENCEPOST_UNREACHABLE, naming `master i`):
 * a minority down is normal operation.
 *
 * @throws ConfigError (`ERR_CONFIG`, `option: 'masters'`) for no masters, fewer than 3, an
 *   even count, the same server twice (the same `host:port/db`, REST URL or client
 *   object), kinds mixed, a Cluster client or an entry of no known kind; for an unknown
 *   option, or `fetch` without REST masters.
 */
export declare class RedlockBackend extends Backend {
  constructor(masters: ReadonlyArray<IoredisLike | NodeRedisLike> | ReadonlyArray<RedlockRestEndpoint>, options?: RedlockBackendOptions)
  /** The prefix of every key fencepost writes on each master. */
  readonly keyPrefix: string
  /** How each master's server is named for the duplicate check (`host:port/db`, or the
   * REST URL), in the order given. */
  readonly masters: string[]
  /** Which kind of masters these are. */
  readonly clientKind: 'ioredis' | 'node-redis' | 'rest'
  /** One per master, in the order given: the client, or for a REST endpoint its
   * `UpstashRedisBackend`. */
  readonly clients: Array<IoredisLike | NodeRedisLike | UpstashRedisBackend>
  /** The lease key of lock `name`, the same on every master (holds the owner id). */
  lockKey(name: string): string
  /** The token-counter key of lock `name` on every master. */
  tokenKey(name: string): string
  /** Runs one part of a Redlock step on the master it names; rejects with ConfigError for
   * anything else (fenced writes concern one server: use a `RedisBackend` there). */
  execute(request: RedlockPart, options?: ExecuteOptions): Promise<unknown>
  /** Refused (ConfigError): whether a lock is held concerns one server; ask a
   * `RedisBackend` of each master. */
  isLocked(name: string): Promise<boolean>
  /** Refused (ConfigError): call it on a `RedisBackend` of each master. */
  forceRelease(name: string): Promise<boolean>
}

// ---- etcd -----------------------------------------------------------------------------------

/** The `fetch` `EtcdBackend` calls (the global one by default). A watch reads `body` as a
 * stream of lines; a response without `body` is read whole with `text()` (then a watch
 * holds its answer until the watch's timeout). */
export type StreamingFetchLike = (url: string, init: { method: 'POST', headers: Record<string, string>, body: string, signal?: AbortSignal }) => Promise<{ status: number, text(): Promise<string>, body?: ReadableStream<Uint8Array> | null }>

export interface EtcdBackendOptions {
  /** The client URL of every etcd member (`'http://10.0.0.1:2379'`), or one URL. A request
   * that cannot connect moves on to the next at once. Required. */
  endpoints: string | readonly string[]
  /** Prefix of every key fencepost writes (default `'fencepost/'`). The contenders for lock
   * `name` put `{keyPrefix}{name}/{lease id, 16 hex digits}`. */
  keyPrefix?: string
  /** The fetch to use (default: the global `fetch`): to add headers (auth, a proxy's), or in
   * a runtime without one. Watches need a streaming `body`. */
  fetch?: StreamingFetchLike
  /** Each call to a member is abandoned after this many ms (default 5 000), or at the
   * request's deadline if that comes first; the next request goes to the next member.
   * Only a *refused* connection fails over at once: a member that hangs (stopped,
   * partitioned) costs one timeout. Keep it well below `ttlMs / 3` (the renew interval),
   * e.g. 1 000 for `ttlMs: 10_000`, or a hung member makes the holder lose its lease at
   * its validity deadline although a healthy member is listed. Watches are not affected
   * (they end at their own timeout). */
  requestTimeoutMs?: number
  /** One lease for many locks (etcd's `concurrency.Session`; default false): the locks of
   * one machine whose TTLs round up to the same whole seconds attach their keys to one
   * lease, and one keep-alive a renew period renews them all. They share its fate: when
   * the keep-alives stop reaching etcd for a TTL, every lock on it is lost at once. Each
   * lock keeps its own key, fencing token and validity (from the send of the last
   * confirmed grant or keep-alive); a release deletes its key and leaves the lease to the
   * others. Off: each lock grants, keeps alive and revokes its own lease. */
  sharedLease?: boolean
}

/** A request of an etcd lock machine, or of `etcdFencedTxn`: POST `body` (JSON, keys base64,
 * every int64 a decimal string) to `{endpoint}{path}` and answer with the JSON text the
 * gateway returned. */
export interface EtcdGatewayCall {
  readonly backend: 'etcd'
  /** The etcd RPC. */
  readonly call: 'lease_grant' | 'lease_keep_alive' | 'lease_revoke' | 'txn' | 'range' | 'watch'
  /** The JSON gateway path, e.g. `'/v3/kv/txn'`. */
  readonly path: string
  /** The request body: JSON text. Lease ids and revisions in it are decimal strings. */
  readonly body: string
  /** For a watch only: answer with the first stream line that has `events` (or is
   * canceled, compacted or an error), or `'{}'` when this many ms pass first; then close
   * the stream. Whole ms. */
  readonly timeoutMs?: number
}

export interface EtcdFencedTxnOptions {
  /** `[key, value]` pairs to put (UTF-8 strings), in order. */
  puts?: ReadonlyArray<readonly [string, string]>
  /** Keys to delete. */
  deletes?: readonly string[]
  /** Abandons the request: rejects with `signal.reason` (the transaction may or may not
   * have been applied). */
  signal?: AbortSignal
  /** Abandons the request after this many ms (default 5 000): rejects with `BackendError`
   * (the transaction may or may not have been applied). */
  timeoutMs?: number
}

/**
 * Locks on an etcd v3 cluster through its JSON gateway (`POST /v3/…`, etcd ≥ 3.4), with
 * nothing but `fetch`: Node ≥ 18, edge workers (workerd, Cloudflare Workers), browsers
 * (the gateway must allow the page's origin), Deno.
 *
 * **Why etcd suits correctness locks.** etcd replicates every write through Raft before it
 * answers, and its revisions increase across the whole cluster, through leader changes:
 * the fencing token (the create revision of the holder's key) never goes backwards, so
 * `purpose: 'correctness'` needs no opt-in. Fence writes inside etcd with `fencedTxn`.
 *
 * **The recipe** is etcd's own mutex, decided step by step by the core: each acquisition
 * grants a lease and puts its own key `{keyPrefix}{name}/{lease id}` attached to it; the
 * key with the lowest create revision holds the lock. A waiter watches only its
 * predecessor's key (a streaming `/v3/watch`, no polling) and is granted in FIFO order,
 * keeping its own lease alive meanwhile. Release deletes the key in a transaction
 * comparing its create revision, then revokes the lease.
 *
 * **TTL rounding.** etcd leases have whole-second TTLs: the lease is granted for `ttlMs`
 * rounded *up* to whole seconds (at least 1 s; etcd may raise it to its own minimum). The
 * holder never believes its lease valid longer than its own `ttlMs` allows (validity is
 * measured from the send of the last confirmed grant or keep-alive), so rounding up only
 * delays *other* contenders when a holder vanishes without releasing. A leader change
 * resets leases to their full TTL: later for others, never earlier.
 *
 * **Endpoints.** A request that cannot connect (refused, unresolvable) moves on to the
 * next member at once; any other transport failure is reported to the lock machine
 * (outcome unknown: it retries, idempotently) and the next request starts at the next
 * member, as does the one after an `Unavailable` (gRPC code 14) reply. Every JSON reply,
 * error documents included, goes to the machine; a body that is not JSON (a proxy's
 * error page) counts as a transport failure. Requests are aborted at their deadline.
 *
 * In a worker, create the backend inside the request handler and `close()` it before the
 * response: timers and I/O belong to the request that started them.
 *
 * @throws ConfigError (`ERR_CONFIG`) for missing or non-http(s) `endpoints`, a `keyPrefix`
 *   that is not a string, a `fetch` that is not a function (or no global fetch), an
 *   unknown option.
 */
export declare class EtcdBackend extends Backend {
  constructor(options: EtcdBackendOptions)
  /** The members' client URLs, in the order given (without a trailing `/`). */
  readonly endpoints: readonly string[]
  /** The prefix of every key fencepost writes (default `'fencepost/'`). */
  readonly keyPrefix: string
  /** Whether the locks of a machine share one lease per TTL (`sharedLease`). */
  readonly sharedLease: boolean
  /** The prefix under which every contender for lock `name` puts its key
   * (`{keyPrefix}{name}/`). Lock `a`'s prefix holds lock `a/b`'s keys too: an acquire
   * of `a` that finds one ahead of it rejects with a `ProtocolError` naming both locks. */
  lockKey(name: string): string
  /** The key the acquisition `ownerId` (`lease.ownerId`) puts for lock `name`; while it
   * holds the lock, the key's create revision is `lease.token`.
   * @throws ConfigError for an owner id that is not 32 hex digits. */
  holderKey(name: string, ownerId: string): string
  /** The etcd lease id of the acquisition `ownerId`: a positive int64 as a `bigint` (most
   * ids exceed 2^53: never convert them to `number`).
   * @throws ConfigError for an owner id that is not 32 hex digits. */
  leaseId(ownerId: string): bigint
  /**
   * Writes to etcd only while `lease` still holds its lock: one transaction that compares
   * the create revision of the lease's key with `lease.token` (etcd's `IsOwner`) and, if
   * it still matches, puts every pair of `puts` and deletes every key of `deletes`.
   * Resolves to the transaction's revision (a `bigint`).
   *
   * @throws StaleTokenError (`ERR_STALE_TOKEN`) when the lease no longer holds the lock
   *   (released, expired, or taken over): nothing was written. `highest` is the current
   *   holder's token, or `0n` when nobody holds the lock; `resource` is the lock name.
   * @throws BackendError (`ERR_BACKEND`) when no endpoint could be reached, the call
   *   failed in transport or `timeoutMs` passed (it may or may not have been applied).
   * @throws ProtocolError (`ERR_PROTOCOL`) when etcd answered with an error.
   * @throws ConfigError (`ERR_CONFIG`) for a lease of another backend or arguments of the
   *   wrong shape.
   */
  fencedTxn(lease: Lease, options?: EtcdFencedTxnOptions): Promise<bigint>
  /**
   * Runs one request of the lock machine: resolves to the JSON text the gateway answered
   * (error documents included); a watch streams until an event, or `'{}'` at its
   * `timeoutMs`, and `options.signal` abandons it. Throws for a transport failure.
   */
  execute(request: EtcdGatewayCall, options?: ExecuteOptions): Promise<string>
}

export interface KubernetesLeaseBackendOptions {
  /** The API server's URL (`'https://10.0.0.1:6443'`). */
  server: string
  /** A bearer token sent with every request, or a function returning one (called per
   * request: a rotated service-account token). */
  token?: string | (() => string | Promise<string>)
  /** The namespace of the Leases (`'default'`; a DNS-1123 label, checked when a lock is built). */
  namespace?: string
  /** The fetch to use (default the global one). Give one with the cluster's TLS settings
   * when its CA is not the runtime's (browsers and workers use the platform's trust store:
   * there the global fetch is the one); in Node, `kubernetesFromKubeconfig` and
   * `kubernetesInCluster` make one. */
  fetch?: (url: string, init: { method: string, headers: Record<string, string>, body?: string, signal?: AbortSignal }) => Promise<{ status: number, text(): Promise<string> }>
  /** Each API call ends after this long, in ms, or at its request deadline if sooner
   * (default 1000; keep it well below `ttlMs / 3`). */
  requestTimeoutMs?: number
}

/**
 * Locks on Kubernetes `coordination.k8s.io/v1` Leases, one Lease per lock name, over
 * `fetch`, with the same recipe and semantics as Python's `KubernetesLeaseBackend`, in
 * both packages: any host with `fetch` (Node, browsers, edge workers, Deno) passes `{
 * server, token, namespace, fetch? }`; in Node, `kubernetesFromKubeconfig` and
 * `kubernetesInCluster` (the Node package only: they read files and use node:https) build
 * one from a kubeconfig or the pod's service account. The service account needs `get`,
 * `create`, `update` and `patch` on `leases`. Tested against the project's Lease API
 * server (tests/kube/lease_server.py), not a real cluster.
 *
 * **One lock, one Lease.** `new Lock(backend, 'my-app')` is the Lease `my-app` in the
 * backend's namespace (a lock name must be a DNS-1123 subdomain; `ttlMs` whole seconds, at
 * least 1000). The fields mean what client-go's leader election makes them mean, so a
 * fencepost lock and a client-go elector on one Lease exclude each other:
 * `holderIdentity` (the owner id, `''` when free), `leaseDurationSeconds` (the TTL),
 * `acquireTime` / `renewTime` (wall-clock `MicroTime`s this adapter stamps just before
 * sending; no decision reads them), `leaseTransitions`.
 *
 * **Tokens**: `leaseTransitions`, raised by one on every grant (client-go raises it only
 * when the holder changes), always by a compare-and-set on `resourceVersion` (a 409 means
 * another candidate won the round): it never goes back while the Lease exists, so
 * `purpose: 'correctness'` needs no opt-in. Deleting the Lease restarts it at 1.
 *
 * **Expiry** is never judged from `renewTime` and this machine's clock: a contender treats
 * a Lease as expired once it stayed unchanged for the `leaseDurationSeconds` it states,
 * counted on its own monotonic clock. The holder's validity is measured from the send of
 * its last successful write, and it is lost on time even when the API server hangs.
 *
 * **Holder metadata, inspection, followers.** The `metadata` lock option is stored in the
 * Lease's `fencepost.dev/holder-metadata` annotation with the owner id (client-go keeps
 * annotations and never reads it; a reader shows it only while that owner is the
 * `holderIdentity`). `inspect(name)` reads one Lease (owner = holderIdentity, token =
 * leaseTransitions, `ttlLeftMs` = leaseDurationSeconds as an upper bound, waiters null);
 * `list(prefix, { limit })` pages `GET …/leases?limit=500` with `continue` (at most 100
 * pages); an election's followers (`leader()`, `observe()`) read the leader's record
 * from that annotation.
 *
 * Every JSON body the API server answers (a Lease or a `Status`, whatever the HTTP
 * status) goes to the machine; a body that is not JSON is a transport failure.
 *
 * @throws ConfigError (`ERR_CONFIG`) for a `server` that is not an http(s) URL, a `token`
 *   that is neither a string nor a function, a `fetch` that is not a function, an unknown
 *   option.
 */
export declare class KubernetesLeaseBackend extends Backend {
  constructor(options: KubernetesLeaseBackendOptions)
  /** The API server's URL. */
  readonly server: string
  /** The namespace of the Leases. */
  readonly namespace: string
  /** The API path of lock `name`'s Lease. */
  leasePath(name: string): string
  /** The Lease of lock `name` as stored (holder, count, times: for observers), or null
   * when there is none.
   * @throws BackendError (`ERR_BACKEND`) the server could not be reached;
   *   ProtocolError (`ERR_PROTOCOL`) any other error status. */
  readLease(name: string): Promise<Record<string, any> | null>
  /** Runs one call of a Kubernetes lock machine; resolves to the response body (JSON
   * text), rejects for a transport failure. */
  execute(request: MachineKubernetesRequest, options?: ExecuteOptions): Promise<string>
}

/** Options of `backendFromUrl` and `backendFromEnv`: the chosen backend's own options,
 * and how to make a Redis client. */
export interface BackendFromUrlOptions {
  /** For `redis://` / `rediss://` URLs: makes the client (the shared JavaScript loads no
   * Redis library): `(url) => new Redis(url)` (ioredis) or
   * `(url) => createClient({ url }).connect()` (node-redis). */
  redis?: (url: string) => unknown
  keyPrefix?: string
  fair?: boolean
  requestTimeoutMs?: number
  fetch?: typeof globalThis.fetch
}

/**
 * A backend for `url`, by its scheme: `memory://` → MemoryBackend; `http://`, `https://` →
 * EtcdBackend (several members separated by commas); `redis://`, `rediss://` →
 * RedisBackend on the client `options.redis(url)` makes (or resolves to). The backend
 * owns a client made this way: `close()` disconnects it. No PostgreSQL backend in
 * JavaScript.
 * @throws ConfigError (rejects) for another scheme, or a redis:// URL without `redis`.
 */
/** The standard holder metadata of this process for the `metadata` lock option: `host`
 * and `pid`/`process` where the runtime has them (Node), `acquired_at` (this call's
 * wall-clock time, ISO 8601 UTC; display only) and `label` when given.
 * @throws ConfigError (`ERR_CONFIG`) for a label that is not a string. */
export declare function standardMetadata(label?: string): Record<string, string>

export declare function backendFromUrl(url: string, options?: BackendFromUrlOptions): Promise<Backend>

/**
 * `backendFromUrl(env.FENCEPOST_BACKEND_URL, options)`, with `keyPrefix` from
 * `env.FENCEPOST_KEY_PREFIX` when set and not in `options`; `env` defaults to
 * `process.env`.
 * @throws ConfigError (rejects) when FENCEPOST_BACKEND_URL is unset or empty.
 */
export declare function backendFromEnv(options?: BackendFromUrlOptions, env?: Record<string, string | undefined>): Promise<Backend>

/** The etcd key the acquisition `ownerId` puts for lock `name` under `keyPrefix`
 * (`{keyPrefix}{name}/{lease id, 16 hex digits}`); while it holds the lock, the key's
 * create revision is its token. @throws ConfigError for an owner id that is not 32 hex
 * digits. */
export declare function etcdHolderKey(keyPrefix: string, name: string, ownerId: string): string

/** A fenced etcd transaction as a gateway call (run it yourself, or use
 * `EtcdBackend.fencedTxn`): puts `puts` and deletes `deletes` only while the key of
 * `ownerId` for lock `name` still has create revision `token`.
 * @throws ConfigError for arguments of the wrong shape. */
export declare function etcdFencedTxn(
  keyPrefix: string,
  name: string,
  ownerId: string,
  token: bigint,
  puts: ReadonlyArray<readonly [string, string]>,
  deletes?: readonly string[] | null
): EtcdGatewayCall & { readonly call: 'txn' }

/** Reads the gateway's reply (JSON text) to `etcdFencedTxn`: returns the transaction's
 * revision (a `bigint`) when it was applied.
 * @throws StaleTokenError when the lease no longer holds the lock (`highest`: the current
 *   holder's token, or `0n` when nobody holds it); ProtocolError for an error document or
 *   any other reply. */
export declare function readEtcdFencedTxn(name: string, token: bigint, reply: string): bigint

// ---- fencing --------------------------------------------------------------------------------

/** Options of `RedisProtocolBackend.fencedSet`. */
export interface FencedSetOptions {
  /** The writer's `lease.ownerId` (32 hex digits): the owner-bound rule. */
  ownerId?: string | null
}

/** An in-memory fence for resources your process guards itself: the highest token accepted
 * per resource, with the owner id that wrote with it. The same token as the highest passes
 * again from its recorded owner (owner-bound rule, `check(r, t, ownerId)`), or from anyone
 * (token-only rule, `check(r, t)`: weaker, a token granted twice passes twice). */
export declare class Fence {
  constructor()
  /** Accepts a write to `resource` carrying `token` and remembers the token (with
   * `ownerId`, recorded with that owner).
   * @throws StaleTokenError (`ERR_STALE_TOKEN`) if a higher token was accepted before
   *   (`reason` `'superseded'`) or, with `ownerId`, the same token from another owner
   *   (`'duplicate_grant'`, after a `FENCEPOST_DUPLICATE_GRANT` process warning).
   * @throws ConfigError (`ERR_CONFIG`) for a token that is not a bigint or an owner id that
   *   is not 32 hex digits. */
  check(resource: string, token: bigint, ownerId?: string | null): void
  /** The highest token accepted for `resource`, or `null`. */
  highest(resource: string): bigint | null
}

export interface SqlFencedUpdateOptions {
  /** `'dollar'` (`$1` id, `$2` token, `$3…` the columns in order: node-postgres; default)
   * or `'pyformat'` (`%(id)s`, `%(token)s`, `%(column)s`). */
  style?: 'dollar' | 'pyformat'
  /** The owner column (`text NOT NULL DEFAULT ''`): the owner-bound rule, run with
   * `[id, lease.token, lease.ownerId, ...values]` (`$3` / `%(owner)s` is the owner). */
  ownerColumn?: string | null
}

/**
 * The SQL of a fenced conditional update, checked and written in one statement:
 *
 *     UPDATE "table" SET "c1" = $3, …, "token_column" = $2
 *      WHERE "id_column" = $1 AND "token_column" <= $2
 *
 * Run it with `[id, lease.token, ...values]`; **zero rows updated means the token is
 * stale** (or the row does not exist). The token column is a `bigint NOT NULL` starting at 0.
 * That is the token-only rule, which is weaker: two holders of one token both write. With
 * `ownerColumn` the owner-bound rule: `SET "c1" = $4, …, "token_column" = $2,
 * "owner_column" = $3 WHERE "id_column" = $1 AND ("token_column" < $2 OR ("token_column" =
 * $2 AND "owner_column" = $3))`.
 *
 * @throws ConfigError for a name that is not a plain SQL identifier (names are quoted,
 *   never taken from user data).
 */
export declare function sqlFencedUpdate(
  table: string,
  idColumn: string,
  tokenColumn: string,
  columns: readonly string[],
  options?: SqlFencedUpdateOptions
): string

/** The fenced Redis SET as a script call (run it yourself, or use
 * `RedisProtocolBackend.fencedSet`): writes `value` to `dataKey` unless `token` is lower than
 * the highest token stored at `fenceKey` or, with `ownerId` (owner-bound rule), equal to it
 * and recorded with another owner.
 * @throws ConfigError for a token that is not a bigint in 1n ..= 2n ** 64n - 1n (0n is no
 * lease's token). */
export declare function redisFencedSet(dataKey: string, fenceKey: string, token: bigint, value: string, ownerId?: string | null): RedisScriptCall

/** Reads the reply of `redisFencedSet`: returns when the write happened.
 * @throws StaleTokenError when it was refused; ProtocolError for any other reply. */
export declare function readRedisFencedSet(resource: string, token: bigint, reply: unknown): void

/** Every Lua script fencepost runs on Redis (for `SCRIPT LOAD`). */
export declare function redisScripts(): Record<RedisScriptName, { sha1: string, source: string }>

// ---- errors ---------------------------------------------------------------------------------

/** The `code` of every fencepost error, stable across versions and languages. */
export type ErrorCode =
  | 'ERR_CONFIG'
  | 'ERR_LOCK_LOST'
  | 'ERR_ACQUIRE_TIMEOUT'
  | 'ERR_STALE_TOKEN'
  | 'ERR_PROTOCOL'
  | 'ERR_BACKEND'

/** The base class of every error fencepost throws. */
export declare class FencepostError extends Error {
  readonly code: ErrorCode | 'ERR_FENCEPOST'
}

/** The caller's input or usage is wrong; thrown before any request is sent. The message
 * names the value that was wrong and what would be right. */
export declare class ConfigError extends FencepostError {
  readonly code: 'ERR_CONFIG'
  /** `'invalid_argument'` (a JavaScript type), or the core's reason: `'invalid_option'`,
   * `'invalid_name'`, `'unsafe_purpose'`, `'unknown_lock'`, `'time_went_backwards'`,
   * `'time_out_of_range'`. */
  readonly kind: string
  /** The option at fault (`'ttlMs'`, `'renewEveryMs'`…), or `null`. */
  readonly option: string | null
}

/** A monotonic time earlier than one given before (`kind` `'time_went_backwards'`), or past
 * the latest the machine accepts, 2^62 ns ≈ 146 years after the clock's origin
 * (`'time_out_of_range'`), reached the lock machine. Only a host bug causes it; such a time
 * is never used to extend a lease. */
export declare class ClockError extends ConfigError {
  readonly kind: 'time_went_backwards' | 'time_out_of_range'
}

/** A held lease ended while its holder still believed it held it: another holder may
 * already have the lock, so the protected work must stop. It is `lease.signal.reason`. */
export declare class LockLostError extends FencepostError {
  readonly code: 'ERR_LOCK_LOST'
  /** The lock name. */
  readonly lockName: string
  /** The fencing token of the lost lease. */
  readonly token: bigint
  readonly reason: LostReason
}

/** The acquire timeout passed before the lock could be taken; it was never held by this
 * attempt. */
export declare class AcquireTimeoutError extends FencepostError {
  readonly code: 'ERR_ACQUIRE_TIMEOUT'
  readonly lockName: string
  /** The last transport or server error seen while trying, or `null` when the lock was
   * simply held by someone else. When the server is still unreachable and the client
   * reported why only as an event (ioredis holds commands in its offline queue while it
   * cannot connect, so they get no reply rather than an error), that error comes first:
   * "Error: connect ECONNREFUSED 127.0.0.1:6379 (reported by the client while the server
   * was unreachable; the lock saw: the acquire request got no reply in time)". */
  readonly lastError: string | null
}

/** A fenced write was refused: a newer lock holder has written since this lease began
 * (`reason` `'superseded'`), or another owner wrote with the same token: the lock server
 * granted it twice (`'duplicate_grant'`, owner-bound rule). */
export declare class StaleTokenError extends FencepostError {
  readonly code: 'ERR_STALE_TOKEN'
  readonly resource: string
  /** The refused token. */
  readonly token: bigint
  /** The highest token the resource had accepted. When the holder refused is the lock's
   * legitimate holder (tokens went backwards: a failover, a restart without persistence),
   * release and acquire again with `tokenFloor: highest + 1n`. */
  readonly highest: bigint
  readonly reason: 'superseded' | 'duplicate_grant'
}

/** The lock server's reply made no sense for its request (wrong shape, an error reply
 * retrying cannot fix, e.g. `WRONGTYPE` at the lock key). */
export declare class ProtocolError extends FencepostError {
  readonly code: 'ERR_PROTOCOL'
}

/** A helper could not reach the server (the write may or may not have happened; the
 * client's error is the `cause`), or the backend was closed. Lock acquisition and renewal
 * never throw it for network trouble: they retry and end in `AcquireTimeoutError` or
 * `LockLostError`. */
export declare class BackendError extends FencepostError {
  readonly code: 'ERR_BACKEND'
}

// ---- the sans-IO machine --------------------------------------------------------------------

/** A request of a Redis lock machine, for the host to run and answer. */
export interface MachineRequest extends RedisScriptCall {
  readonly type: 'request'
  /** The protocol of the request: a Redis script call. */
  readonly backend: 'redis'
  readonly id: number
  readonly lock: number
  readonly operation: 'acquire' | 'renew' | 'release'
  /** After this instant the outcome no longer matters: report a transport error. */
  readonly deadlineMs: number
}

/** A fair machine's contended acquisition parked on a blocking pop: run it on a
 * connection of its own and answer with its reply (any reply, at the wake-up or the
 * timeout, is followed by the next acquire attempt). */
export interface MachineWaitRequest extends RedisBlockingPop {
  readonly type: 'request'
  readonly id: number
  readonly lock: number
  readonly operation: 'wait'
  /** After this instant the outcome no longer matters: report a transport error. */
  readonly deadlineMs: number
}

/** A request of an etcd lock machine (`kind: 'etcd'`): a JSON gateway call. A parked
 * waiter's watch has `operation: 'wait'`, `call: 'watch'` and `timeoutMs`. */
export interface MachineEtcdRequest extends EtcdGatewayCall {
  readonly type: 'request'
  readonly id: number
  readonly lock: number
  readonly operation: 'acquire' | 'renew' | 'release' | 'wait'
  /** After this instant the outcome no longer matters: report a transport error. */
  readonly deadlineMs: number
}

/** A request of a Redlock machine (`kind: 'redlock'`): one master's part of a step. */
export interface MachineRedlockRequest extends RedlockPart {
  readonly type: 'request'
  readonly id: number
  readonly lock: number
  readonly operation: 'acquire' | 'renew' | 'release'
  /** After this instant the outcome no longer matters: report a transport error. */
  readonly deadlineMs: number
}

/** A request of a PostgreSQL lock machine (`kind: 'postgres'`, the Node package only:
 * WebAssembly hosts cannot reach PostgreSQL): a statement to run. */
export interface MachineSqlRequest {
  readonly type: 'request'
  readonly backend: 'sql'
  readonly id: number
  readonly lock: number
  readonly operation: 'acquire' | 'renew' | 'release' | 'wait'
  /** After this instant the outcome no longer matters: report a transport error. */
  readonly deadlineMs: number
  /** The statement, with `$1…$n` placeholders (one may repeat); values never interpolated. */
  readonly sql: string
  /** In order; `bigint` for the core's integers (advisory keys use all 64 bits). */
  readonly params: ReadonlyArray<null | boolean | bigint | string>
  /** `'any'`: any connection in autocommit (a pool is fine); `'dedicated'`: the lock's own
   * connection, opened for its first statement and closed after its final event;
   * `'listen'` (operation `'wait'`): run the `LISTEN` on the listening connection, then
   * answer with no rows once a notification on channel `params[0]` arrives or
   * `params[1]` milliseconds have passed. */
  readonly connection: 'any' | 'dedicated' | 'listen'
}

/** A request of a ZooKeeper lock machine (`kind: 'zookeeper'`, the Node package only:
 * WebAssembly hosts cannot reach ZooKeeper): one call for a ZooKeeper client. A parked
 * waiter's watch has `operation: 'wait'`, `call: 'watch'` and `timeoutMs`. */
export interface MachineZooKeeperRequest {
  readonly type: 'request'
  readonly backend: 'zookeeper'
  readonly id: number
  readonly lock: number
  readonly operation: 'acquire' | 'renew' | 'release' | 'wait'
  /** After this instant the outcome no longer matters: report a transport error. */
  readonly deadlineMs: number
  /** `'create'`, `'children'`, `'exists'`, `'watch'`, `'delete'`, `'delete_owned'` or `'multi'`. */
  readonly call: string
  /** The call as JSON (`{"call": …, "path": …, …}`, the core's `ZkRequest`); answer with
   * the JSON document described there, with the client's `session` id. */
  readonly spec: string
  /** A watch: answer `{"event": "timeout"}` after this long without an event. */
  readonly timeoutMs?: number
}

/** A request of a Kubernetes Lease machine (`kind: 'kubernetes'`): one call to the API
 * server. */
export interface MachineKubernetesRequest {
  readonly type: 'request'
  readonly backend: 'kubernetes'
  readonly id: number
  readonly lock: number
  readonly operation: 'acquire' | 'renew' | 'release' | 'wait'
  /** After this instant the outcome no longer matters: report a transport error. */
  readonly deadlineMs: number
  /** `'GET'`, `'POST'`, `'PUT'` or `'PATCH'`. */
  readonly method: string
  /** Under the server URL: `/apis/coordination.k8s.io/v1/namespaces/{ns}/leases[/{name}]`. */
  readonly path: string
  /** The JSON body, or null. */
  readonly body: string | null
  /** `'application/json'`, or `'application/json-patch+json'` for a PATCH. */
  readonly contentType: string
  /** The `spec` fields of the body to set to the wall clock (a MicroTime: RFC 3339 UTC
   * with six fractional digits) just before sending. */
  readonly stamp: readonly string[]
}

/** How a lock's previous holder ended (`Lease.previous`). */
export type PreviousHolder = 'released' | 'expired' | 'none' | 'unknown'

/** An event of the lock machine. */
export type MachineEvent =
  | { readonly type: 'acquired', readonly lock: number, readonly token: bigint, readonly validUntilMs: number, readonly previous: PreviousHolder, readonly ownerId: string | null }
  | { readonly type: 'renewed', readonly lock: number, readonly validUntilMs: number }
  | { readonly type: 'lost', readonly lock: number, readonly reason: Exclude<LostReason, 'closed'> }
  | { readonly type: 'released', readonly lock: number }
  | { readonly type: 'acquire_failed', readonly lock: number, readonly reason: 'timeout' | 'protocol', readonly message: string | null }

/**
 * The core's sans-IO lock machine (Redis or etcd protocol), for hosts that drive it
 * themselves and for the cross-language scenario vectors. `Lock` runs one for you. Feed
 * every input with the current monotonic `nowMs`, then drain `poll()`: run its requests,
 * act on its events, call `timeout(now)` at `nextTimeoutMs`.
 */
export declare class LockMachine {
  /** `seed` makes owner ids and jitter deterministic: tests only, never in production.
   * `fair` (default false, Redis only): fair hand-off, whose parked waiters emit
   * `MachineWaitRequest`s. `kind` (default `'redis'`): `'etcd'` makes a machine that emits
   * `MachineEtcdRequest`s and reads JSON text replies (`keyPrefix` default `'fencepost/'`);
   * `'redlock'` a machine over `masters` (one name per master, e.g. `'127.0.0.1:6379/0'`)
   * that emits one `MachineRedlockRequest` per master and step, answered with that
   * master's Redis reply. `'postgres'` (the Node package only) one that emits
   * `MachineSqlRequest`s and reads rows (arrays of `null | boolean | number | bigint |
   * string`) or `{ sqlstate, message }`, with `mode` (`'lease'` or `'session'`),
   * `leaseTable`, `tokenTable` and `namespace`. `'zookeeper'` (the Node package only) one
   * that emits `MachineZooKeeperRequest`s and reads the adapter's JSON text, with `root`,
   * `naming` and `sessionTimeoutMs` (the negotiated session timeout: the largest ttl).
   * `'kubernetes'` one that emits `MachineKubernetesRequest`s and reads the API server's
   * response bodies as text, with `namespace`.
   * `cluster: true` (Redis only) says the adapter's client is a Redis Cluster client: a
   * batched renewal (`renew_many`) then carries the keys of one hash slot.
   * `sharedLease: true` (etcd only) gives the machine's locks one lease per TTL (see
   * `EtcdBackendOptions.sharedLease`): their keep-alives go as one request.
   * @throws ConfigError for an unknown `kind`, `fair: true` with `kind: 'etcd'` or
   *   `'redlock'`, `cluster` or `masters` with another kind. A bad master list (count,
   *   parity, duplicates) is refused by `check` and `acquire`. */
  constructor(options?: { keyPrefix?: string, seed?: bigint | number, fair?: boolean, cluster?: boolean, sharedLease?: boolean, kind?: 'redis' | 'etcd' | 'redlock' | 'postgres' | 'zookeeper' | 'kubernetes', masters?: readonly string[], mode?: 'lease' | 'session', leaseTable?: string, tokenTable?: string, namespace?: string, root?: string, naming?: 'kazoo' | 'curator', sessionTimeoutMs?: number, notify?: boolean })
  /** Checks a name and options as `acquire` would. @throws ConfigError */
  check(name: string, options?: LockOptions): void
  /** Starts acquiring; returns the lock id. @throws ConfigError, ClockError */
  acquire(nowMs: number, name: string, options?: LockOptions): number
  /** Releases a lock or cancels its acquisition (a finished lock ignores it). */
  release(nowMs: number, lock: number): void
  /** The reply to `request`. Redis machines: as a Redis client gave it: `null`, integer
   * `number` or `bigint`, `string`, `Uint8Array`, arrays, an `Error` (or `{ error }`) for
   * an error reply, `{ status }` for a simple string. etcd machines: the JSON text the
   * gateway answered (a `string`, or UTF-8 bytes), error documents included. Anything
   * else is read as a protocol error, never thrown. */
  reply(nowMs: number, request: number, value: unknown): void
  /** `request` failed in transport: it may or may not have reached the server. */
  transportError(nowMs: number, request: number, message: string): void
  /** Time passed. Early and spurious calls are harmless. */
  timeout(nowMs: number): void
  /** Every pending output, and when to call `timeout` next (`null`: no timer). */
  poll(): { outputs: Array<MachineRequest | MachineWaitRequest | MachineEtcdRequest | MachineRedlockRequest | MachineSqlRequest | MachineZooKeeperRequest | MachineKubernetesRequest | MachineEvent>, nextTimeoutMs: number | null }
  /** Starts observing (each option optional: `events` and `warnings` default true, the
   * thresholds as in `ObserveOptions`), or stops with `null`; until then the machine
   * builds no observation. @throws ConfigError naming a bad option */
  observe(options: { events?: boolean, warnings?: boolean, lateRenewalFraction?: number, heldLongTtls?: number, hotLockAttempts?: number, hotLockWaiters?: number, unreachableEveryMs?: number } | null): void
  /** Drains the observations, oldest first. */
  observations(): Observation[]
  /** The owner id of `lock`, or `null` once forgotten. */
  owner(lock: number): string | null
  /** The validity deadline of `lock` while held, else `null`. */
  validUntilMs(lock: number): number | null
  /** Locks tracked (pending, held, or finished with requests out). */
  readonly lockCount: number
  /** Requests awaiting a reply or transport error. */
  readonly requestsInFlight: number
}

/** Version of fencepost-core compiled into this package. */
export declare const coreVersion: string
/** Which build of the core runs: the Node addon or the WebAssembly module. */
export declare const implementation: 'napi' | 'wasm'
