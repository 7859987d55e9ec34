// Types of ZooKeeper in the `fencepost` Node package (zookeeper.js beside this file). Not in
// fencepost.d.ts, which the WebAssembly package shares: workers and browsers have no
// sockets to reach ZooKeeper.
import { Backend, ExecuteOptions, Lease, MachineZooKeeperRequest } from './fencepost'

/** A node-zookeeper-client `Client` (structurally: the package ships no types). */
export interface ZooKeeperClientLike {
  connect(): void
  close(): void
  getState(): unknown
  getSessionId(): Uint8Array
  getSessionTimeout(): number
  transaction(): ZooKeeperTransactionLike
  on(event: string, listener: (...args: any[]) => void): unknown
  once(event: string, listener: (...args: any[]) => void): unknown
}

/** node-zookeeper-client's `Transaction`, as `fencedCommit`'s `build` receives it. */
export interface ZooKeeperTransactionLike {
  create(path: string, data?: Uint8Array | null, mode?: number): ZooKeeperTransactionLike
  create(path: string, data: Uint8Array | null, acls: unknown[], mode?: number): ZooKeeperTransactionLike
  setData(path: string, data: Uint8Array | null, version?: number): ZooKeeperTransactionLike
  remove(path: string, version?: number): ZooKeeperTransactionLike
  check(path: string, version?: number): ZooKeeperTransactionLike
}

export interface ZooKeeperBackendOptions {
  /** Parent of every lock path (`'/fencepost'`): lock `name` lives at `{root}/{name}`. To
   * share a lock with kazoo's `client.Lock('/locks/report')`, use root `'/locks'` and name
   * `'report'`. */
  root?: string
  /** `'kazoo'` (default: nodes named as kazoo's `Lock` names them, `{32 hex}__lock__` +
   * sequence) or `'curator'` (as Curator's `InterProcessMutex`, `_c_{UUID}-lock-` +
   * sequence). kazoo and Curator do not see each other's nodes: one path serves one. */
  naming?: 'kazoo' | 'curator'
}

export interface ZooKeeperConnectOptions extends ZooKeeperBackendOptions {
  /** The session timeout to ask for, in ms, when the backend makes the client from a
   * connection string (default 10000); the server may negotiate another
   * (`sessionTimeoutMs` of the backend). Refused with a client you pass. */
  sessionTimeoutMs?: number
  /** How long to wait for the first session, in ms (default 15000). */
  connectTimeoutMs?: number
}

/** A request of a ZooKeeper lock machine (`LockMachine({ kind: 'zookeeper' })`). */
export type ZooKeeperRequest = MachineZooKeeperRequest

/**
 * Locks on a ZooKeeper ensemble (3.5+: multi-op transactions) through
 * node-zookeeper-client (`npm install node-zookeeper-client`, an optional peer
 * dependency: without it the constructor throws a ConfigError naming it), with the same
 * recipe and semantics as Python's `fencepost.zookeeper` (kazoo). Node only: WebAssembly
 * hosts cannot reach ZooKeeper, and their machines refuse the kind.
 *
 * **Why for correctness locks.** Every write goes through the ensemble's atomic broadcast
 * before it is answered, and zxids rise across the ensemble through leader changes: the
 * token (the holder node's `czxid`, a bigint) never goes back, so `purpose: 'correctness'`
 * needs no opt-in.
 *
 * **The recipe** (ZooKeeper's documented lock recipe, decided step by step by the core):
 * each contender creates an ephemeral sequential node under `{root}/{name}` whose name
 * carries its owner id; the lowest sequence holds; a waiter watches only its immediate
 * predecessor (no herd, no polling) and wakes on any session state change too; release
 * deletes the node. After a create whose reply was lost, the contender finds and adopts
 * its own node by that name. The client has no `create2`, so a create is followed by an
 * `exists` of the new node (its czxid); if that fails the create counts as ambiguous.
 *
 * **Session = lease.** The node lives as long as the client's session, which the client
 * keeps alive with pings. A lock's `ttlMs` must not exceed the session timeout the
 * server negotiated (`sessionTimeoutMs`; a larger one is a ConfigError naming `ttlMs`):
 * pass `ttlMs: backend.sessionTimeoutMs`. Validity is measured from the send of the last
 * request of the lock the server answered, renewed every `ttlMs / 3` by an `exists` of
 * its node. While the client is disconnected those fail and are retried: a reconnect
 * within the session keeps the lock, otherwise it is lost at its validity deadline
 * (`send + ttl × (1 − drift) − margin`), before the server can expire the session. A
 * renewal that finds the session expired or the node gone is a loss at once. After an
 * expiry, a backend made from a connection string opens a new session (as kazoo does);
 * on a client you passed every call answers `session_expired` until you make a new
 * backend on a new client.
 *
 * **Holder metadata, inspection, followers.** The `metadata` lock option is written as
 * the lock node's data (compact JSON; a lock without it writes its owner id): kazoo's
 * Lock writes its `identifier` there and Curator its client's address, so the data is a
 * free-form label to both. `inspect(name)` reads the lowest contender (owner id from its
 * name, token = czxid, waiters = the contenders behind it, metadata = its data when it
 * is a JSON object of strings, `ttlLeftMs` null); `list(prefix, { limit })` reads the
 * root's children and inspects the matching names in order; an election's followers
 * (`leader()`, `observe()`) read the leader's record from the holder's metadata.
 *
 * **Fenced writes**: `fencedCommit` runs a multi-op transaction that first checks the
 * lease's own node (it exists, at data version 0), ZooKeeper's counterpart of etcd's
 * `IsOwner`.
 */
export declare class ZooKeeperBackend extends Backend {
  /** A backend on a connected `client` (learns the negotiated session timeout from it).
   * @throws ConfigError (`ERR_CONFIG`) for a value that is not a node-zookeeper-client
   *   `Client`, a client not connected yet (use `connect`), a `root` that is not an
   *   absolute path, an unknown `naming`, node-zookeeper-client not installed. */
  constructor(client: ZooKeeperClientLike, options?: ZooKeeperBackendOptions)
  /** Connects `client` (a `Client` not connected yet, or a connection string such as
   * `'10.0.0.1:2181,10.0.0.2:2181'`, for which the backend makes a client it owns and
   * `close()` closes) and resolves to a backend once the session is established.
   * @throws ConfigError as the constructor; BackendError (`ERR_BACKEND`) when no session
   *   came within `connectTimeoutMs`. */
  static connect(client: ZooKeeperClientLike | string, options?: ZooKeeperConnectOptions): Promise<ZooKeeperBackend>
  /** The node-zookeeper-client this backend uses now. */
  readonly client: ZooKeeperClientLike
  /** The parent of every lock path. */
  readonly root: string
  /** Whose node names the locks use. */
  readonly naming: 'kazoo' | 'curator'
  /** The session timeout the server negotiated, in ms: the largest `ttlMs` a lock may have. */
  readonly sessionTimeoutMs: number
  /** The client's current session id (0n before the first session). */
  readonly sessionId: bigint
  /** The path of lock `name`: `{root}/{name}`. */
  lockPath(name: string): string
  /** The name the node of acquisition `ownerId` (`lease.ownerId`) starts with, before the
   * server's sequence. */
  nodePrefix(name: string, ownerId: string): string
  /** Runs one call of a ZooKeeper lock machine; resolves to the JSON reply the core reads
   * (with the session id; a server error as `{ error, message }`), rejects for a transport
   * failure (a lost connection: the outcome is unknown). */
  execute(request: ZooKeeperRequest, options?: ExecuteOptions): Promise<string>
  /**
   * Runs a multi-op transaction only while `lease` holds its lock: the first operation
   * checks the lease's own node (exists, data version 0), then `build(txn)` adds the
   * writes. Resolves to node-zookeeper-client's results of the writes.
   * @throws StaleTokenError (`ERR_STALE_TOKEN`): the lease's node is gone (the lock was
   *   lost or released, or its session expired): nothing was written; `highest` is 0n
   *   (ZooKeeper does not say who holds it now).
   * @throws BackendError (`ERR_BACKEND`): ZooKeeper stayed unreachable for one session
   *   timeout before the transaction was sent (nothing was written); the connection was
   *   lost with it in flight (it may or may not have been applied); a write of its own
   *   failed (its ZooKeeper error, such as `node_exists`, in the message).
   */
  fencedCommit(lease: Lease, build: (txn: ZooKeeperTransactionLike) => void | Promise<void>): Promise<unknown[]>
}
