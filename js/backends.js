'use strict'
// Backends: where a lock lives, and the adapters that run the lock machine's requests
// with a client library. Shared word for word by the napi and WASM packages.
//
//   Backend                  the base: one lock machine and one driver per backend
//   ├─ RedisProtocolBackend  the Redis script vocabulary: keys, fenced SET
//   │  ├─ MemoryBackend      the core's in-memory Redis, in process (tests, demos)
//   │  ├─ RedisBackend       a real server through ioredis or node-redis (v4+)
//   │  └─ UpstashRedisBackend  Redis over HTTP (the Upstash REST protocol) with fetch only:
//   │                        edge workers and browsers, which cannot open Redis sockets
//   └─ EtcdBackend           etcd v3 through its JSON gateway with fetch only (Node, edge
//                            workers, browsers, Deno): lease, per-contender key, watch
//
// With `fair: true` a contended acquisition queues on the server and parks on a blocking
// pop of its own wake-up list (the machine's `redis_blpop` requests); a release grants
// the lock to the first live waiter, whose pop returns the grant. RedisBackend runs each pop on a
// connection of its own (a duplicate of the client: BLPOP blocks its connection, and the
// shared client must stay free for renewals); MemoryServer parks the caller until a
// script run on that server pushes to the list, or the timeout passes.
//
// An etcd machine's requests arrive phrased as JSON gateway calls (`path`, `body`): the
// adapter POSTs them and hands back the JSON text; a parked waiter's watch is one
// streaming POST read line by line until an event or its timeout. A PostgreSQL (pg)
// backend will subclass Backend the same way: `execute(request)` returns the reply as data.

const check = require('./check')
const { Driver, Reachability, now, describeError, singleUseSignals, deadlineSignal, eitherSignal } = require('./driver')
const { BackendError, ConfigError, FencepostError, ProtocolError, translate } = require('./errors')
const { Lease } = require('./lock')
const { Observer } = require('./observe')

function createBackends (native, LockMachine, fence) {
  /** The base of every backend: owns one lock machine and its driver (made on first use). */
  class Backend {
    constructor () {
      if (new.target === Backend) throw new ConfigError('Backend is abstract: use MemoryBackend or RedisBackend')
      this._driverInstance = null
      this._closed = false
      /** counts transport failures, warns of an unreachable server (see Reachability) */
      this._reachability = new Reachability(this._label())
      /** closers of a client this backend made itself (backendFromUrl): run by close() */
      this._owned = []
      /** what this backend's machine observes, and who hears it (see js/observe.js) */
      this._observer = new Observer()
    }

    /**
     * Sets this backend's observation callback and warning thresholds (see the README's
     * Observability section): `onEvent(observation)` is called with every event and
     * warning of every lock on this backend, `{ event, lock, lockId, level, warning,
     * fields, message }` (durations in `fields` in ms: `waitedMs`, `heldForMs`, …). The
     * same objects are published on the diagnostics channels `fencepost:<event>` and
     * `fencepost:observation`. Options, each optional: `onEvent` (a function or null),
     * `processWarnings` (default true: each warning is also a process warning, type
     * 'FencepostWarning', code 'FENCEPOST_<NAME>'), `lateRenewalFraction` (1/3),
     * `heldLongTtls` (10), `hotLockAttempts` (10), `hotLockWaiters` (10),
     * `unreachableEveryMs` (30000). Takes effect for acquisitions started from now on;
     * a later call replaces every setting. Throws ConfigError naming a bad option.
     */
    observe (options) {
      this._observer.configure(options, (numbers) => {
        const m = new LockMachine({ ...this._machineOptions(), seed: 0 })
        m._observe(numbers)
      })
    }

    /** How messages name this backend (its class name). */
    _label () {
      return this.constructor.name
    }

    /** The LockMachine options (`keyPrefix`, `fair`, `kind`) of this backend's protocol. */
    _machineOptions () {
      throw new ConfigError(`${this.constructor.name} does not say which lock machine it runs`)
    }

    _driver () {
      if (this._closed) throw new BackendError('this backend is closed; create a new one')
      if (this._driverInstance === null) this._driverInstance = new Driver(this, new LockMachine(this._machineOptions()))
      return this._driverInstance
    }

    /** Checks a lock's name and options as the core would acquire them (ConfigError). */
    _machineCheck (name, options) {
      // No machine: checking needs no entropy (in Workers, Web Crypto is available only
      // inside handlers).
      try {
        LockMachine._checkAcquire(this._machineOptions(), name, options)
      } catch (error) {
        if (!(error instanceof ConfigError) || error.kind !== 'unsafe_purpose') throw error
        // the core names its protocol ('redis') twice; say which backend the caller used,
        // and "its" tokens after that
        const rest = error.message.slice(error.message.indexOf(' fencing tokens ') + ' fencing tokens '.length)
        throw new ConfigError(`a correctness lock on ${this._label()} is unsafe: its fencing tokens ${rest}`, { kind: error.kind, option: error.option })
      }
      const noWait = options.minReplicas > 0 ? this._cannotWait() : null
      if (noWait !== null) {
        throw new ConfigError(`minReplicas: ${noWait}; leave it 0`, { kind: 'invalid_option', option: 'minReplicas' })
      }
    }

    /** Why this backend cannot confirm grants with WAIT on the connection that ran the
     * script (a sentence), or null when it can. */
    _cannotWait () { return null }

    /**
     * Runs one request of the lock machine; returns the server's reply as the client
     * gives it (an `Error` value for an error reply) or throws for a transport failure.
     * Adapters implement it.
     */
    execute (request) { // eslint-disable-line no-unused-vars
      throw new ConfigError(`${this.constructor.name} does not implement execute()`)
    }

    /**
     * Whether lock `name` is held now, as the server answers (any holder's lease is live).
     * Resolves to a boolean; rejects with BackendError (the server could not be reached),
     * ProtocolError (an error reply or a reply of the wrong shape), ConfigError (a name
     * that is not a string).
     */
    async isLocked (name) { // eslint-disable-line no-unused-vars
      throw new ConfigError(`${this.constructor.name} does not implement isLocked(); MemoryBackend, RedisBackend, UpstashRedisBackend and EtcdBackend do`)
    }

    /**
     * Frees lock `name` whoever holds it (an operator's reset); resolves to whether a
     * holder's lease was freed. Errors as `isLocked`.
     */
    async forceRelease (name) { // eslint-disable-line no-unused-vars
      throw new ConfigError(`${this.constructor.name} does not implement forceRelease(); MemoryBackend, RedisBackend, UpstashRedisBackend and EtcdBackend do`)
    }

    /**
     * Who holds lock `name` now, as the server answers: `{ name, owner, token, ttlLeftMs,
     * waiters, metadata }` (see `Holder` in fencepost.d.ts) or null when nobody holds it.
     * RedisBackend, UpstashRedisBackend and MemoryBackend implement it; the others reject
     * with ConfigError (kind 'unsupported').
     */
    async inspect (name) { // eslint-disable-line no-unused-vars
      throw new ConfigError(`${this.constructor.name} does not support inspect(): holder inspection is implemented on RedisBackend, UpstashRedisBackend and MemoryBackend`, { kind: 'unsupported' })
    }

    /**
     * The held locks whose names start with `prefix`, at most `options.limit` (100). Where
     * implemented as `inspect`; elsewhere rejects with ConfigError (kind 'unsupported').
     */
    async list (prefix, options) { // eslint-disable-line no-unused-vars
      throw new ConfigError(`${this.constructor.name} does not support list(): holder inspection is implemented on RedisBackend, UpstashRedisBackend and MemoryBackend`, { kind: 'unsupported' })
    }

    /** Reads an operator reply `{ ok, value | protocol }` of the native readers. */
    _operatorResult (what, name, result) {
      if (result.ok) return result
      throw new ProtocolError(`${what}(${JSON.stringify(name)}): ${result.protocol}`)
    }

    /** `run()`'s reply, a transport failure as BackendError naming the call. */
    async _operatorReply (what, name, run) {
      try {
        return await run()
      } catch (error) {
        if (error instanceof FencepostError) throw error
        throw new BackendError(`${what}(${JSON.stringify(name)}) failed: ${describeError(error)}`, { cause: error })
      }
    }

    /**
     * Stops this backend's driver. Locks still held or being acquired are released (best
     * effort), their leases are lost with reason 'closed' (signals aborted), pending
     * acquisitions reject with BackendError; all of that happens at once. Returns a
     * promise that resolves once the requests still in flight (those releases, renewals
     * under way) have settled, each bounded by its request deadline, and a client this
     * backend made itself (backendFromUrl) is closed: then no timer or request of this
     * backend is left, and the caller may close its own client without cutting off a
     * release. The promise never rejects. The client given to the backend is not closed:
     * its owner closes it. Idempotent (every call returns the same promise).
     */
    close () {
      if (this._closing !== undefined) return this._closing
      this._closed = true
      const idle = this._driverInstance !== null ? this._driverInstance.close() : Promise.resolve()
      const owned = this._owned.splice(0)
      this._closing = owned.length === 0
        ? idle
        : idle.then(() => Promise.all(owned.map((closer) => attempt(closer).catch(() => {})))).then(() => {}) // a client already closed by hand
      return this._closing
    }
  }

  /** A backend speaking fencepost's Redis scripts. */
  class RedisProtocolBackend extends Backend {
    constructor (options) {
      super()
      const o = check.plainObject(options, 'backend options')
      this._keyPrefix = o.keyPrefix === undefined ? 'fencepost:' : check.string(o.keyPrefix, 'keyPrefix')
      this._fair = o.fair === undefined ? false : check.boolean(o.fair, 'fair')
    }

    _machineOptions () {
      return { keyPrefix: this._keyPrefix, fair: this._fair }
    }

    /** The prefix of every key fencepost writes ('fencepost:'). */
    get keyPrefix () { return this._keyPrefix }

    /** Whether locks on this backend hand off fairly (FIFO, woken at once, no barging). */
    get fair () { return this._fair }

    /** The lease key of lock `name` (holds the owner id, with the TTL). */
    lockKey (name) {
      return native.lockKey(this._keyPrefix, check.string(name, 'lock name'))
    }

    /** The fencing-token counter key of lock `name`. */
    tokenKey (name) {
      return native.tokenKey(this._keyPrefix, check.string(name, 'lock name'))
    }

    /**
     * Writes `value` to `dataKey` unless `token` is lower than the highest token
     * `fenceKey` has seen (one atomic script); the fence then remembers `token`. With
     * `options.ownerId` (`lease.ownerId`) the owner-bound rule: the fence records the
     * owner with its highest token and refuses that token from any other owner (a token
     * granted twice writes once); without it the token-only rule, which is weaker.
     * Rejects with StaleTokenError (`reason` 'superseded' or 'duplicate_grant'),
     * BackendError (the server could not be reached: the write may or may not have
     * happened) or ProtocolError.
     */
    async fencedSet (dataKey, fenceKey, token, value, options) {
      const o = check.plainObject(options, 'fencedSet options')
      const command = fence.redisFencedSet(dataKey, fenceKey, token, value, o.ownerId)
      let reply
      try {
        reply = await this.execute(command)
      } catch (error) {
        if (error instanceof FencepostError) throw error
        throw new BackendError(`fenced SET of ${JSON.stringify(dataKey)} failed: ${error && error.message}`, { cause: error })
      }
      fence.readRedisFencedSet(dataKey, token, reply)
    }

    /**
     * Whether lock `name` is held now: true while its lease key lives (on a fair backend
     * also while it is reserved for a woken waiter). One round trip, for monitoring and
     * operators; the answer may be stale on arrival, never a substitute for acquiring.
     */
    async isLocked (name) {
      return this._operator('isLocked', name, false)
    }

    /**
     * Frees lock `name` whoever holds it (python-redis-lock's `reset()`): deletes its
     * lease key, never the token counter, so the next grant's token is higher than every
     * earlier one; on a fair backend the first live waiter is granted the lock and woken
     * at once, as a release does. Resolves to whether a lease was freed. The freed holder
     * learns it at its next renewal (LockLostError, reason 'renew_rejected').
     */
    async forceRelease (name) {
      return this._operator('forceRelease', name, true)
    }

    async _operator (what, name, force) {
      check.string(name, 'lock name')
      const command = translate(() => native.redisOperator(this._keyPrefix, name, this._fair, force))
      const reply = await this._operatorReply(what, name, () => this.execute(command))
      return this._operatorResult(what, name, native.readRedisFlag(reply)).value
    }

    /**
     * Who holds lock `name` now: `{ name, owner, token (bigint), ttlLeftMs, waiters (fair
     * backends: the queue length; else null), metadata (the object the holder acquired
     * with, or null) }`, or null when nobody holds it. One atomic script (one round
     * trip), for monitoring and operators: stale on arrival, never a substitute for
     * acquiring. Rejects with BackendError (unreachable), ProtocolError, ConfigError (a
     * name that is not a string).
     */
    /** Whether an election keeps its leader's record as the lease's metadata here: plain
     * (not fair) Redis, the backends that store metadata. */
    _keepsLeaderMetadata () { return !this._fair }

    /** The leader of election `name` as `Election.leader()` reads it: the holder's
     * metadata as the record `{ identity, value }`, or null when nobody holds it. */
    async _leader (name) {
      if (!this._keepsLeaderMetadata()) {
        throw new ConfigError(`${this.constructor.name} with fair hand-off cannot say who leads an election: a hand-off grant stores no metadata (leader() and observe() are available on EtcdBackend and on Redis backends without fair hand-off)`, { kind: 'unsupported' })
      }
      const found = await this.inspect(name)
      if (found === null) return null
      const meta = found.metadata
      if (meta === null || typeof meta.identity !== 'string') return { token: found.token, value: null, pending: true }
      return { token: found.token, value: JSON.stringify({ identity: meta.identity, value: meta.value ?? null }), pending: false }
    }

    async inspect (name) {
      check.string(name, 'lock name')
      const command = translate(() => native.redisInspect(this._keyPrefix, name, this._fair))
      const reply = await this._operatorReply('inspect', name, () => this.execute(command))
      const found = this._operatorResult('inspect', name, native.readRedisInspect(name, reply)).holder
      return found === null ? null : holder(found)
    }

    /**
     * The held locks whose names start with `prefix` (default ''), at most
     * `options.limit` (default 100), sorted by name among those found, as `inspect`
     * gives them. Bounded: cursor-based SCAN steps of 500 keys (never KEYS), at most
     * 1000 steps, stopping once `limit` locks are found; one round trip a step. Rejects
     * as `inspect`, and with ConfigError for a prefix that is not a string or a limit
     * that is not an integer >= 1.
     */
    async list (prefix = '', options) {
      const limit = check.listArguments(prefix, options)
      const found = new Map()
      let cursor = '0'
      for (let step = 0; step < LIST_STEPS; step++) {
        const command = translate(() => native.redisListStep(this._keyPrefix, prefix, cursor, this._fair))
        const reply = await this._operatorReply('list', prefix, () => this.execute(command))
        const read = this._operatorResult('list', prefix, native.readRedisList(this._keyPrefix, reply))
        for (const h of read.holders) found.set(h.name, holder(h))
        if (read.cursor === null || found.size >= limit) break
        cursor = read.cursor
      }
      return [...found.keys()].sort().slice(0, limit).map((n) => found.get(n))
    }
  }

  /**
   * The standard holder metadata of this process, for the `metadata` lock option:
   * `host` (Node's `os.hostname()`, where there is one), `pid` and `process` (Node's
   * `process.pid`, `process.title`, where there is a process), `acquired_at` (this
   * call's wall-clock time, ISO 8601 UTC: display only, never used for a decision; call
   * it when you build the lock) and `label` when given. Throws ConfigError for a label
   * that is not a string.
   */
  function standardMetadata (label) {
    if (label !== undefined && label !== null && typeof label !== 'string') {
      throw new ConfigError(`label must be a string or undefined, got ${check.describe(label)}`)
    }
    const out = {}
    const proc = globalThis.process
    if (proc && typeof proc.getBuiltinModule === 'function') {
      const os = proc.getBuiltinModule('node:os')
      if (os) out.host = os.hostname()
    } else if (proc && proc.env && typeof proc.env.HOSTNAME === 'string') {
      out.host = proc.env.HOSTNAME
    }
    if (proc && typeof proc.pid === 'number') out.pid = String(proc.pid)
    if (proc && typeof proc.title === 'string') out.process = proc.title
    out.acquired_at = new Date().toISOString()
    if (typeof label === 'string') out.label = label
    return out
  }

  /** At most this many SCAN steps per listing (the core's REDIS_LIST_STEPS). */
  const LIST_STEPS = 1000
  /** At most this many range pages per etcd listing (the core's ETCD_LIST_PAGES). */
  const ETCD_LIST_PAGES = 100

  /** A holder the native reader gave: its metadata's JSON text parsed. */
  function holder (h) {
    return Object.freeze({ ...h, metadata: h.metadata === null ? null : Object.freeze(JSON.parse(h.metadata)) })
  }

  /** An in-memory Redis-like server running fencepost's scripts (the core's MemoryRedis),
   * with TTLs on `performance.now()`. Share one between backends to contend in process. */
  class MemoryServer {
    constructor () {
      this._redis = new native.MemoryRedis()
      /** list key → callers parked on it by `blpop`, first come first served */
      this._parked = new Map()
    }

    /**
     * Runs a request now, as a Redis server would: a script call at once, returning the
     * reply as a Redis client would (an `Error` value for an error reply); a blocking pop
     * (a fair waiter's `redis_blpop` request) as `blpop` does, returning its promise.
     */
    execute (command, options) {
      if (command !== null && typeof command === 'object' && command.backend === 'redis_blpop') {
        return this.blpop(command.key, command.timeoutMs, options)
      }
      const reply = this._redis.execute(now(), command)
      this._wake()
      return reply
    }

    /**
     * `BLPOP key timeoutMs/1000`: resolves with `[key, value]` as soon as the list has an
     * item (at once, or when a script run on this server pushes one), or with `null` when
     * `timeoutMs` passes (`0`: never). `options.signal` abandons the wait: the promise
     * rejects with the signal's reason.
     */
    blpop (key, timeoutMs, options) {
      check.string(key, 'key')
      check.millis(timeoutMs, 'timeoutMs')
      const signal = check.abortSignal(check.plainObject(options, 'blpop options').signal, 'signal')
      return new Promise((resolve, reject) => {
        if (signal !== null && signal.aborted) return reject(signal.reason)
        const value = this._redis.lpop(now(), key)
        if (value !== null) return resolve([key, value])
        const waiter = { key, resolve, timer: null, signal, onAbort: null }
        if (timeoutMs > 0) {
          waiter.timer = setTimeout(() => { this._unpark(waiter); resolve(null) }, timeoutMs)
        }
        if (signal !== null) {
          waiter.onAbort = () => { this._unpark(waiter); reject(signal.reason) }
          signal.addEventListener('abort', waiter.onAbort, { once: true })
        }
        const queue = this._parked.get(key)
        if (queue === undefined) this._parked.set(key, [waiter])
        else queue.push(waiter)
      })
    }

    /** Hands the lists' new items to the callers parked on them, in the order they came. */
    _wake () {
      if (this._parked.size === 0) return
      const t = now()
      for (const [key, queue] of this._parked) {
        while (queue.length > 0) {
          const value = this._redis.lpop(t, key)
          if (value === null) break
          const waiter = queue[0]
          this._unpark(waiter)
          waiter.resolve([key, value])
        }
      }
    }

    _unpark (waiter) {
      clearTimeout(waiter.timer)
      if (waiter.onAbort !== null) waiter.signal.removeEventListener('abort', waiter.onAbort)
      const queue = this._parked.get(waiter.key)
      if (queue === undefined) return
      const i = queue.indexOf(waiter)
      if (i >= 0) queue.splice(i, 1)
      if (queue.length === 0) this._parked.delete(waiter.key)
    }

    /** `GET key` now (expired keys are gone). */
    get (key) { return this._redis.get(now(), check.string(key, 'key')) }
    /** `PTTL key` now, in ms: null when missing, -1 without expiry. */
    pttl (key) { return this._redis.pttl(now(), check.string(key, 'key')) }
    /** `DEL key`; true if it existed. */
    delete (key) { return this._redis.delete(check.string(key, 'key')) }

    /** The owner id holding lock `name` now, or null when free. */
    lockOwner (name, options) {
      return this.get(native.lockKey(prefixOf(options), check.string(name, 'lock name')))
    }

    /** Deletes lock `name`'s lease key behind its holder's back, as an operator (or a
     * bug) might: the holder's next renewal is refused and its lease is lost. */
    deleteLock (name, options) {
      return this.delete(native.lockKey(prefixOf(options), check.string(name, 'lock name')))
    }

    /** Forgets every key, as a Redis restart without persistence does (fencing counters
     * too: tokens start again from 1). */
    flush () { this._redis.flush() }
  }

  function prefixOf (options) {
    const o = check.plainObject(options, 'options')
    return o.keyPrefix === undefined ? 'fencepost:' : check.string(o.keyPrefix, 'keyPrefix')
  }

  /** A backend on an in-process MemoryServer: no server process needed. */
  class MemoryBackend extends RedisProtocolBackend {
    constructor (options) {
      const o = check.plainObject(options, 'MemoryBackend options')
      super({ keyPrefix: o.keyPrefix, fair: o.fair })
      if (o.server !== undefined && !(o.server instanceof MemoryServer)) {
        throw new ConfigError(`server must be a MemoryServer, got ${check.describe(o.server)}`)
      }
      /** The in-memory server this backend talks to. */
      this.server = o.server ?? new MemoryServer()
    }

    execute (request, options) {
      return this.server.execute(request, options)
    }

    _label () {
      return 'MemoryBackend (an in-process stand-in for Redis, with its token rules)'
    }

    _cannotWait () { return 'MemoryBackend has no replicas to confirm a grant' }
  }

  // ---- Redis clients -----------------------------------------------------------------------

  const scripts = native.redisScripts()

  /** Error replies of the server (as opposed to transport failures): ioredis throws a
   * ReplyError, node-redis an ErrorReply (v5: also SimpleError, BlobError). */
  const REPLY_ERROR_CLASSES = new Set(['ReplyError', 'ErrorReply', 'SimpleError', 'BlobError'])

  function isErrorReply (error) {
    if (!(error instanceof Error)) return false
    for (let p = Object.getPrototypeOf(error); p !== null && p !== Error.prototype; p = Object.getPrototypeOf(p)) {
      if (REPLY_ERROR_CLASSES.has(p.constructor && p.constructor.name)) return true
    }
    return REPLY_ERROR_CLASSES.has(error.name)
  }

  const isNoScript = (error) => isErrorReply(error) && /^NOSCRIPT\b/.test(error.message)

  /** `fn()`'s promise; a synchronous throw as a rejected one. */
  function attempt (fn) {
    try {
      return Promise.resolve(fn())
    } catch (error) {
      return Promise.reject(error)
    }
  }

  /** A failed command's outcome: an error reply is a value the machine reads; anything
   * else is a transport failure (rethrown). */
  function errorReply (error) {
    if (isErrorReply(error)) return error
    throw error
  }

  /** Whether `client` is a Redis Cluster client: ioredis' Cluster, node-redis' createCluster(). */
  function isClusterClient (client) {
    return client.isCluster === true || typeof client.getMasters === 'function' || Array.isArray(client.masters)
  }

  /** How to run a script call on `client`: EVALSHA, falling back to EVAL on NOSCRIPT. */
  function scriptRunner (client) {
    if (client !== null && typeof client === 'object' && typeof client.evalSha === 'function') {
      // node-redis v4+ (createClient / createCluster)
      return {
        kind: 'node-redis',
        evalsha: (c) => client.evalSha(c.sha1, { keys: c.keys, arguments: c.args }),
        eval: (c) => client.eval(scripts[c.script].source, { keys: c.keys, arguments: c.args }),
        wait: (w) => client.sendCommand(['WAIT', String(w.replicas), String(w.timeoutMs)])
      }
    }
    if (client !== null && typeof client === 'object' && typeof client.evalsha === 'function' && typeof client.eval === 'function') {
      // ioredis (Redis / Cluster)
      return {
        kind: 'ioredis',
        evalsha: (c) => client.evalsha(c.sha1, c.keys.length, ...c.keys, ...c.args),
        eval: (c) => client.eval(scripts[c.script].source, c.keys.length, ...c.keys, ...c.args),
        wait: (w) => client.call('WAIT', String(w.replicas), String(w.timeoutMs))
      }
    }
    return null
  }

  // ---- blocking pops (fair hand-off) -----------------------------------------------------

  /** How long an idle blocking connection is kept for the next wait. */
  const BLOCKING_IDLE_MS = 10_000
  /** Idle blocking connections kept at most (more waiters parked at once open more). */
  const BLOCKING_IDLE_MAX = 8

  const ignore = () => {}

  /** A connection of its own for blocking pops: a duplicate of an ioredis client. */
  function ioredisBlocker (client) {
    // lazyConnect: connect() says when it is ready (or failed); no reconnects: a broken
    // connection is replaced; no commandTimeout: a BLPOP lasts as long as its own timeout
    // (and the driver abandons it at its deadline)
    const dup = client.isCluster === true
      ? client.duplicate([], { lazyConnect: true })
      : client.duplicate({ lazyConnect: true, retryStrategy: () => null, commandTimeout: undefined })
    dup.on('error', ignore) // failures surface as rejected commands
    return {
      ready: dup.connect(),
      blpop: (key, seconds) => dup.blpop(key, seconds),
      destroy: () => { try { dup.disconnect() } catch {} }
    }
  }

  /** A connection of its own for blocking pops: a duplicate of a node-redis client. */
  function nodeRedisBlocker (client) {
    // no reconnects: connect() rejects when the server cannot be reached, and a broken
    // connection is replaced rather than revived
    const socket = { ...(client.options && client.options.socket), reconnectStrategy: false }
    const dup = client.duplicate({ socket })
    dup.on('error', ignore) // an 'error' without a listener would crash the process
    return {
      ready: Promise.resolve().then(() => dup.connect()),
      // node-redis turns the reply into { key, element }: give the machine the raw shape
      blpop: async (key, seconds) => {
        const reply = await dup.blPop(key, seconds)
        return reply !== null && typeof reply === 'object' && !Array.isArray(reply) && 'element' in reply
          ? [reply.key, reply.element]
          : reply
      },
      destroy: () => {
        try {
          const closing = typeof dup.destroy === 'function' ? dup.destroy() : dup.disconnect() // v5 : v4
          if (closing && typeof closing.catch === 'function') closing.catch(ignore)
        } catch {}
      }
    }
  }

  const ABANDONED = Symbol('abandoned')

  /** `promise` (which never rejects), or ABANDONED as soon as `signal` aborts. */
  function unlessAborted (promise, signal) {
    if (signal === null) return promise
    if (signal.aborted) return Promise.resolve(ABANDONED)
    return new Promise((resolve) => {
      const onAbort = () => resolve(ABANDONED)
      signal.addEventListener('abort', onAbort, { once: true })
      promise.then((value) => {
        signal.removeEventListener('abort', onAbort)
        resolve(value)
      })
    })
  }

  /**
   * The connections fair waiters block on (BLPOP blocks the connection it runs on, so
   * never the shared client, whose renewals must not queue behind it): duplicates of the
   * client, one per wait in flight, kept idle a while for the next wait. A connection is
   * closed only once its connect has settled (node-redis 4 leaks a socket closed while
   * connecting): one whose wait was abandoned meanwhile joins the idle ones when ready.
   * `close()` closes them all; idle ones also close when the client ends.
   */
  class BlockingConnections {
    constructor (client, kind) {
      this._client = client
      this._open = kind === 'ioredis' ? ioredisBlocker : nodeRedisBlocker
      this._idle = []
      /** connecting, their wait abandoned: the next wait adopts one */
      this._orphans = []
      this._closed = false
      this._clientEnded = false
      this._onEnd = null
      /** one timer closes connections idle for BLOCKING_IDLE_MS (not one timer per wait) */
      this._sweep = null
    }

    /** An idle connection, or a connected new one; ABANDONED if `signal` aborts first. */
    async take (signal) {
      const idle = this._idle.pop()
      if (idle !== undefined) return idle
      let conn = this._orphans.shift()
      if (conn === undefined) {
        if (this._closed) throw new BackendError('this backend is closed')
        this._watchClient()
        this._clientEnded = false
        conn = this._open(this._client)
        conn.failure = conn.ready.then(() => null, (error) => error ?? new Error('could not connect'))
      }
      const failure = await unlessAborted(conn.failure, signal)
      if (failure === ABANDONED) {
        this._orphan(conn)
        return ABANDONED
      }
      if (failure !== null) {
        conn.destroy()
        throw failure
      }
      return conn
    }

    _orphan (conn) {
      this._orphans.push(conn)
      conn.failure.then((failure) => {
        const i = this._orphans.indexOf(conn)
        if (i < 0) return // adopted by another wait
        this._orphans.splice(i, 1)
        if (failure === null) this.give(conn)
        else conn.destroy()
      })
    }

    /** Takes back a connected connection that is not blocked; kept idle a while, or closed. */
    give (conn) {
      if (this._closed || this._clientEnded || this._idle.length >= BLOCKING_IDLE_MAX) return conn.destroy()
      conn.idleSince = now()
      this._idle.push(conn)
      if (this._sweep === null) this._sweepAfter(BLOCKING_IDLE_MS)
    }

    _sweepAfter (ms) {
      this._sweep = setTimeout(() => this._sweepIdle(), ms)
      this._sweep.unref?.()
    }

    /** Closes the connections idle for BLOCKING_IDLE_MS; wakes again for the next one. */
    _sweepIdle () {
      this._sweep = null
      const t = now()
      const kept = []
      for (const conn of this._idle) {
        if (t - conn.idleSince >= BLOCKING_IDLE_MS) conn.destroy()
        else kept.push(conn)
      }
      this._idle = kept
      // the stack's bottom has been idle longest
      if (kept.length > 0) this._sweepAfter(Math.max(1, Math.ceil(kept[0].idleSince + BLOCKING_IDLE_MS - t)))
    }

    closeIdle () {
      clearTimeout(this._sweep)
      this._sweep = null
      for (const conn of this._idle.splice(0)) conn.destroy()
    }

    /** Closes idle connections now, the others when their wait or connect ends. */
    close () {
      this._closed = true
      this.closeIdle()
      if (this._onEnd !== null) this._client.removeListener?.('end', this._onEnd)
      this._onEnd = null
    }

    /** The owner quit the client: idle duplicates must not keep the process alive. */
    _watchClient () {
      if (this._onEnd !== null || typeof this._client.on !== 'function') return
      this._onEnd = () => { this._clientEnded = true; this.closeIdle() }
      this._client.on('end', this._onEnd)
    }
  }

  /**
   * Locks on one Redis server (or a compatible one: Valkey, KeyDB, Dragonfly with Lua)
   * through an ioredis or node-redis (v4+) client that the caller owns and connects.
   *
   * Every request is a Lua script: EVAL with its source until this client has run it,
   * then EVALSHA, falling back to EVAL on NOSCRIPT (a restart, SCRIPT FLUSH). Error replies go to the lock machine as values (it decides whether they are
   * transient); connection failures are transport errors (outcome unknown).
   *
   * With `fair: true`, a parked waiter's BLPOP runs on a duplicate of the client
   * (`client.duplicate()`), never on the client itself; `close()` closes those.
   *
   * Until `close()`, the backend listens to the client's 'error' and 'ready' events to
   * warn of an unreachable server at once (FENCEPOST_UNREACHABLE / FENCEPOST_REACHABLE
   * process warnings): a client with no 'error' listener of its own then no longer logs
   * (ioredis) or throws (node-redis) its connection errors.
   */
  class RedisBackend extends RedisProtocolBackend {
    constructor (client, options) {
      super(options)
      const runner = scriptRunner(client)
      if (runner === null) {
        throw new ConfigError(`client must be an ioredis client (new Redis()) or a node-redis client (createClient()), got ${check.describe(client)}`)
      }
      if (this._fair && typeof client.duplicate !== 'function') {
        throw new ConfigError('fair: true runs each waiter\'s BLPOP on a connection of its own: the client needs duplicate() (ioredis, node-redis)', { option: 'fair' })
      }
      if (this._fair && runner.kind === 'ioredis' && client.options && client.options.keyPrefix) {
        // the release script builds waiters' keys from ARGV, which ioredis does not prefix
        throw new ConfigError(`fair: true needs keys as fencepost names them, but this ioredis client adds keyPrefix ${JSON.stringify(client.options.keyPrefix)} to every key: pass the prefix to RedisBackend as { keyPrefix } instead`, { option: 'fair' })
      }
      this._client = client
      this._runner = runner
      // The sha1s of the scripts this client has run. A script goes by EVAL until then:
      // the EVAL that follows a NOSCRIPT is sent after every command issued behind the
      // EVALSHA, so a release could run on the server before the acquire it follows
      // (a Redlock releases a master whose acquire part is still out).
      this._loaded = new Set()
      this._blocking = this._fair ? new BlockingConnections(client, runner.kind) : null
      // A client that cannot connect holds commands in its offline queue (ioredis) or
      // fails them only at their deadline: its own events tell an outage at once.
      this._clientEvents = typeof client.on === 'function'
        ? { error: (error) => this._reachability.clientFailed(describeError(error)), ready: () => this._reachability.succeeded() }
        : null
      if (this._clientEvents !== null) {
        client.on('error', this._clientEvents.error)
        client.on('ready', this._clientEvents.ready)
      }
    }

    /** The client this backend uses. */
    get client () { return this._client }
    /** 'ioredis' or 'node-redis'. */
    get clientKind () { return this._runner.kind }

    _driver () {
      // A client that will send nothing (never connected, or closed by its owner) is a
      // mistake to say now: its commands would fail as an outage, retried until the
      // acquire timeout, and forever without one.
      const client = this._client
      if (this._runner.kind === 'node-redis') {
        if (client.isOpen === false) {
          throw new ConfigError('this node-redis client is not connected: await client.connect() before acquiring (a client closed with quit() or disconnect() cannot be reopened: create another)')
        }
      } else if (client.status === 'end') {
        throw new ConfigError('this ioredis client was closed (quit() or disconnect()) and sends nothing more: pass RedisBackend a client that is connected or connecting')
      }
      return super._driver()
    }

    execute (command, options) {
      // Not `async`, and one promise chain rather than nested awaits: fewer microtask
      // turns between the reply and the machine (a throw still becomes a rejection).
      if (command !== null && typeof command === 'object' && command.backend === 'redis_blpop') {
        try {
          return this._blockingPop(command, check.abortSignal(check.plainObject(options, 'execute options').signal, 'signal'))
        } catch (error) {
          return Promise.reject(error)
        }
      }
      if (command.wait !== undefined) return this._confirmed(command)
      if (!this._loaded.has(command.sha1)) return this._evalSource(command)
      return attempt(() => this._runner.evalsha(command)).then(undefined, (error) => {
        if (!isNoScript(error)) return errorReply(error)
        this._loaded.delete(command.sha1)
        return this._evalSource(command)
      })
    }

    /** EVAL with the script's source; once it answered, the script is known loaded. */
    _evalSource (command) {
      return attempt(() => this._runner.eval(command)).then((reply) => {
        this._loaded.add(command.sha1)
        return reply
      }, errorReply)
    }

    /** The script, then `WAIT replicas timeoutMs` issued in the same tick on the same
     * client (one connection, commands in order; never MULTI, where WAIT does not block):
     * resolves `[script reply, WAIT reply]`. */
    _confirmed (command) {
      const both = (run) => Promise.all([
        attempt(() => run(command)).then(undefined, errorReply),
        attempt(() => this._runner.wait(command.wait)).then(undefined, errorReply)
      ])
      const byEval = () => both(this._runner.eval).then((reply) => {
        if (!isErrorReply(reply[0])) this._loaded.add(command.sha1)
        return reply
      })
      if (!this._loaded.has(command.sha1)) return byEval()
      return both(this._runner.evalsha).then((reply) => {
        if (!isNoScript(reply[0])) return reply
        this._loaded.delete(command.sha1)
        return byEval()
      })
    }

    _machineOptions () {
      // a Cluster client's batched renewals carry the keys of one hash slot each
      return { ...super._machineOptions(), cluster: isClusterClient(this._client) }
    }

    _cannotWait () {
      return isClusterClient(this._client)
        ? 'a cluster client routes WAIT (it has no key) to any node, not to the one that ran the script: use a client of the slot\'s primary'
        : null
    }

    /** `BLPOP key timeoutMs/1000` on a blocking connection; `signal` abandons it (the
     * connection is closed, the promise rejects with the signal's reason). */
    async _blockingPop (request, signal) {
      if (signal !== null && signal.aborted) throw signal.reason
      if (this._blocking === null) {
        throw new ConfigError('a blocking wait reached a backend built without fair: true')
      }
      const conn = await this._blocking.take(signal)
      if (conn === ABANDONED) throw signal.reason
      if (signal !== null && signal.aborted) { // between the connect and now
        this._blocking.give(conn)
        throw signal.reason
      }
      let answered = false // a reply (an error reply too): the connection is fine
      let onAbort = null
      try {
        const pop = conn.blpop(request.key, String(request.timeoutMs / 1000))
        const reply = signal === null
          ? await pop
          : await new Promise((resolve, reject) => {
            onAbort = () => reject(signal.reason)
            signal.addEventListener('abort', onAbort, { once: true })
            pop.then(resolve, reject)
          })
        answered = true
        return reply
      } catch (error) {
        if (!isErrorReply(error)) throw error // a transport failure, or abandoned
        answered = true
        return error // a reply: the machine reads it
      } finally {
        // Removing an AbortSignal listener took ~17 us (p50, Node 20) right on the
        // hand-off path, between the pop's reply and the machine. The driver's signals
        // serve one request and are dropped after it: their listener stays (it could only
        // reject a settled promise). Anyone else's signal may live on: removed.
        if (onAbort !== null && !singleUseSignals.has(signal)) signal.removeEventListener('abort', onAbort)
        if (answered) this._blocking.give(conn)
        else conn.destroy() // still blocked, or broken
      }
    }

    close () {
      const done = super.close()
      if (this._blocking !== null) this._blocking.close()
      if (this._clientEvents !== null && typeof this._client.removeListener === 'function') {
        this._client.removeListener('error', this._clientEvents.error)
        this._client.removeListener('ready', this._clientEvents.ready)
      }
      this._clientEvents = null
      return done
    }
  }

  // ---- Redis over HTTP: the Upstash REST protocol -------------------------------------

  /** Whether JSON.parse read a number exactly: a fraction, or an integer below 2^53. */
  const isSafe = (n) => Number.isSafeInteger(n) || !Number.isInteger(n)

  /** A REST `result` as a Redis client would return it. JSON numbers past 2^53 have been
   * rounded by JSON.parse: they become error values (a protocol error, never a wrong
   * number). fencepost's scripts return tokens as strings, so they never hit this. */
  function fromRest (value, depth = 0) {
    if (Array.isArray(value) && depth < 32) return value.map((item) => fromRest(item, depth + 1))
    if (typeof value === 'number' && !isSafe(value)) {
      return new Error(`fencepost: the REST endpoint sent the integer ${value}, beyond 2^53: JSON lost its exact value`)
    }
    return value
  }

  /**
   * Locks on Redis reached over HTTP with the Upstash REST protocol, with nothing but
   * `fetch`: for edge workers (which cannot open Redis sockets), browsers, and Node. Each
   * command is a POST of its JSON array to `url` (`["EVALSHA", sha1, "2", key, …]`) with
   * `Authorization: Bearer <token>`; the endpoint answers `{ "result": … }` or
   * `{ "error": "…" }`. Works with Upstash and with any server speaking that protocol.
   *
   * Scripts run with EVALSHA, falling back to EVAL on NOSCRIPT. An `{ error }` answer is the
   * server's error reply, read by the lock machine; a failed fetch, an HTTP 5xx and a
   * body that is not JSON are transport failures (outcome unknown). Each request is
   * aborted at its deadline. With `fair: true` a parked waiter's BLPOP is one long
   * request of its own (the endpoint must allow blocking commands).
   */
  class UpstashRedisBackend extends RedisProtocolBackend {
    constructor (options) {
      const o = check.plainObject(options, 'UpstashRedisBackend options')
      for (const key of Object.keys(o)) {
        if (!['url', 'token', 'fetch', 'keyPrefix', 'fair'].includes(key)) {
          throw new ConfigError(`unknown UpstashRedisBackend option ${JSON.stringify(key)}; known options: url, token, fetch, keyPrefix, fair`, { option: key })
        }
      }
      super({ keyPrefix: o.keyPrefix, fair: o.fair })
      const url = check.string(o.url, 'url')
      let parsed = null
      try { parsed = new URL(url) } catch {}
      if (parsed === null || (parsed.protocol !== 'https:' && parsed.protocol !== 'http:')) {
        throw new ConfigError(`url must be an http(s) URL (the REST endpoint), got ${check.describe(url)}`, { option: 'url' })
      }
      this._url = url
      this._token = o.token === undefined || o.token === null ? null : check.string(o.token, 'token')
      const fetch = o.fetch === undefined ? globalThis.fetch : o.fetch
      if (typeof fetch !== 'function') {
        throw new ConfigError(`fetch must be a function (this runtime has no global fetch: pass one), got ${check.describe(fetch)}`, { option: 'fetch' })
      }
      // Called bare, never as a method of this object (workers' fetch refuses `this`).
      this._fetch = o.fetch === undefined ? (...args) => globalThis.fetch(...args) : fetch
    }

    /** The REST endpoint. */
    get url () { return this._url }

    _cannotWait () {
      return 'the REST protocol runs every command as a request of its own, and Redis\' WAIT counts only the writes of the connection it runs on: nothing ties it to the script\'s; use RedisBackend on a direct connection'
    }

    async execute (command, options) {
      if (command !== null && typeof command === 'object' && command.backend === 'redis_blpop') {
        const signal = check.abortSignal(check.plainObject(options, 'execute options').signal, 'signal')
        return this._command(['BLPOP', command.key, String(command.timeoutMs / 1000)], signal)
      }
      if (command === null || typeof command !== 'object' || (command.backend !== undefined && command.backend !== 'redis' && command.backend !== 'redlock_part')) {
        throw new BackendError(`UpstashRedisBackend cannot run this request: ${check.describe(command && command.backend)}`)
      }
      // aborted at the request's deadline; the timer goes with the request, so none is
      // left once it settled (close() waits for that)
      const deadline = deadlineTimer(command.deadlineMs)
      try {
        const tail = [String(command.keys.length), ...command.keys, ...command.args]
        const reply = await this._command(['EVALSHA', command.sha1, ...tail], deadline.signal)
        if (reply instanceof Error && /^NOSCRIPT\b/.test(reply.message)) {
          return await this._command(['EVAL', scripts[command.script].source, ...tail], deadline.signal)
        }
        return reply
      } finally {
        deadline.clear()
      }
    }

    /** One command: its result, an `Error` value for an error reply; throws for a
     * transport failure. */
    async _command (argv, signal) {
      const headers = { 'content-type': 'application/json' }
      if (this._token !== null) headers.authorization = `Bearer ${this._token}`
      const init = { method: 'POST', headers, body: JSON.stringify(argv) }
      if (signal !== null) init.signal = signal
      const response = await this._fetch(this._url, init)
      const text = await response.text()
      let body
      try {
        body = JSON.parse(text)
      } catch {
        throw new Error(`HTTP ${response.status} from the REST endpoint, body not JSON: ${JSON.stringify(text.slice(0, 200))}`)
      }
      const isObject = body !== null && typeof body === 'object' && !Array.isArray(body)
      if (response.status >= 500) {
        throw new Error(`HTTP ${response.status} from the REST endpoint${isObject && typeof body.error === 'string' ? `: ${body.error}` : ''}`)
      }
      if (isObject && typeof body.error === 'string') return new Error(body.error) // an error reply
      if (isObject && Object.hasOwn(body, 'result')) return fromRest(body.result)
      return new Error(`fencepost: HTTP ${response.status} from the REST endpoint without "result" or "error": ${JSON.stringify(text.slice(0, 200))}`)
    }
  }

  /** An AbortSignal that fires at `deadlineMs` on the driver's clock (`signal` null
   * without AbortController or a deadline), and `clear()`, which drops its timer. */
  function deadlineTimer (deadlineMs) {
    if (typeof deadlineMs !== 'number' || typeof AbortController === 'undefined') return { signal: null, clear () {} }
    const controller = new AbortController()
    const timer = setTimeout(() => controller.abort(new DOMException('the request deadline passed', 'TimeoutError')),
      Math.max(1, Math.min(2 ** 31 - 1, Math.ceil(deadlineMs - now()))))
    timer.unref?.() // the driver's own timer says whether the process must stay up
    return { signal: controller.signal, clear: () => clearTimeout(timer) }
  }

  // ---- Redlock: N independent masters ------------------------------------------------

  /** Reachability that never warns: a Redlock's warnings come from each master's own. */
  const SILENT = Object.freeze({ failed () {}, succeeded () {} })

  /** How the duplicate check names the server of an ioredis or node-redis client:
   * `host:port/db` or `unix:path/db`, from the client's options. */
  function redisServerName (client, kind) {
    const o = client.options ?? {}
    if (kind === 'ioredis') {
      const db = o.db ?? 0
      return o.path ? `unix:${o.path}/${db}` : `${o.host ?? 'localhost'}:${o.port ?? 6379}/${db}`
    }
    const socket = o.socket ?? {}
    const db = o.database ?? 0
    return socket.path ? `unix:${socket.path}/${db}` : `${socket.host ?? 'localhost'}:${socket.port ?? 6379}/${db}`
  }

  const REDLOCK_OPTIONS = ['keyPrefix', 'fetch']

  /**
   * Locks on a majority of N independent Redis masters (N odd, at least 3), after Redis'
   * "Distributed locks with Redis" page. `masters` is one entry per master, all of one
   * kind: ioredis clients, node-redis (v4+) clients (their owner connects and closes
   * them), or REST endpoints `{ url, token? }` speaking the Upstash protocol (fetch only:
   * edge workers, browsers). The core decides; this adapter runs each request part on
   * the master it names, with the scripts and keys of RedisBackend / UpstashRedisBackend.
   */
  class RedlockBackend extends Backend {
    constructor (masters, options) {
      super()
      const o = check.plainObject(options, 'RedlockBackend options')
      for (const key of Object.keys(o)) {
        if (!REDLOCK_OPTIONS.includes(key)) {
          throw new ConfigError(`unknown RedlockBackend option ${JSON.stringify(key)}; known options: ${REDLOCK_OPTIONS.join(', ')}`, { option: key })
        }
      }
      if (!Array.isArray(masters)) {
        throw new ConfigError(`masters must be an array with one entry per master (ioredis or node-redis clients, or REST endpoints { url, token }), got ${check.describe(masters)}`, { option: 'masters' })
      }
      this._keyPrefix = o.keyPrefix === undefined ? 'fencepost:' : check.string(o.keyPrefix, 'keyPrefix')
      const kinds = masters.map((m, i) => {
        const runner = scriptRunner(m)
        if (runner !== null) {
          if (isClusterClient(m)) {
            throw new ConfigError(`masters[${i}] is a Redis Cluster client: a Redlock master is one independent server, so give a client of one server each`, { option: 'masters' })
          }
          return runner.kind
        }
        if (m !== null && typeof m === 'object' && typeof m.url === 'string') return 'rest'
        throw new ConfigError(`masters[${i}] must be an ioredis client, a node-redis client or a REST endpoint { url, token }, got ${check.describe(m)}`, { option: 'masters' })
      })
      const kindSet = new Set(kinds)
      if (kindSet.size > 1) {
        throw new ConfigError(`masters mix ${[...kindSet].map((k) => k === 'rest' ? 'REST endpoints' : `${k} clients`).join(' and ')}: give every master the same kind`, { option: 'masters' })
      }
      this._kind = kinds.length > 0 ? kinds[0] : null
      if (o.fetch !== undefined && this._kind !== 'rest') {
        throw new ConfigError('fetch applies to REST endpoints only', { option: 'fetch' })
      }
      this._masters = masters.map((m) => this._kind === 'rest'
        ? new UpstashRedisBackend({ url: m.url, token: m.token, fetch: o.fetch, keyPrefix: this._keyPrefix })
        : new RedisBackend(m, { keyPrefix: this._keyPrefix }))
      this._names = masters.map((m, i) => this._kind === 'rest' ? this._masters[i].url.replace(/\/+$/, '') : redisServerName(m, this._kind))
      // the same client object twice is one server, whatever its options say
      masters.forEach((m, i) => {
        const j = masters.indexOf(m)
        if (j < i) this._names[i] = this._names[j] = `${this._names[j]} (the same client as master ${j})`
      })
      this._masters.forEach((m, i) => { m._reachability = new Reachability(`RedlockBackend master ${i} (${this._names[i]})`) })
      // a minority of masters down is normal operation: each master warns for itself
      this._reachability = SILENT
      try {
        // the core counts the masters, checks their parity and duplicates, naming the problem
        LockMachine._checkAcquire(this._machineOptions(), 'x', check.lockOptions({}))
      } catch (error) {
        for (const m of this._masters) m.close()
        throw error
      }
    }

    _machineOptions () {
      return { keyPrefix: this._keyPrefix, kind: 'redlock', masters: this._names }
    }

    _cannotWait () { return 'a Redlock is not one server with replicas' }

    /** The prefix of every key fencepost writes on each master ('fencepost:'). */
    get keyPrefix () { return this._keyPrefix }
    /** How each master's server is named (`host:port/db`, or the REST URL), in order. */
    get masters () { return [...this._names] }
    /** 'ioredis', 'node-redis' or 'rest'. */
    get clientKind () { return this._kind }
    /** The clients (or REST endpoints' backends), one per master, in the order given. */
    get clients () { return this._masters.map((m) => m instanceof RedisBackend ? m.client : m) }

    /** The lease key of lock `name`, the same on every master. */
    lockKey (name) {
      return native.lockKey(this._keyPrefix, check.string(name, 'lock name'))
    }

    /** The token-counter key of lock `name` on every master. */
    tokenKey (name) {
      return native.tokenKey(this._keyPrefix, check.string(name, 'lock name'))
    }

    /**
     * Runs one part of a Redlock step (`{ backend: 'redlock_part', master, … }`) on the
     * master it names: that master's Redis reply, an `Error` value for an error reply;
     * rejects for a transport failure. Anything else is refused with ConfigError.
     */
    execute (request, options) {
      const master = request !== null && typeof request === 'object' && request.backend === 'redlock_part'
        ? this._masters[request.master]
        : undefined
      if (master === undefined) {
        return Promise.reject(new ConfigError(`RedlockBackend runs lock requests only: fenced writes, isLocked and forceRelease need one server, so call them on a RedisBackend of the server they concern (got ${check.describe(request && request.backend)})`))
      }
      const reach = master._reachability
      return attempt(() => master.execute(request, options)).then((reply) => {
        if (!this._closed) reach.succeeded()
        return reply
      }, (error) => {
        if (!this._closed) reach.failed(describeError(error))
        throw error
      })
    }

    /** Refused: a Redlock has no one server to ask (ConfigError); ask a RedisBackend of
     * each master. */
    async isLocked (name) { // eslint-disable-line no-unused-vars
      throw new ConfigError('isLocked concerns one server: call it on a RedisBackend of each master')
    }

    /** Refused: a Redlock has no one server to free (ConfigError); call it on a
     * RedisBackend of each master. */
    async forceRelease (name) { // eslint-disable-line no-unused-vars
      throw new ConfigError('forceRelease concerns one server: call it on a RedisBackend of each master')
    }

    close () {
      const done = super.close()
      for (const m of this._masters) m.close()
      return done
    }
  }

  // ---- etcd v3 over its JSON gateway ----------------------------------------------------

  /** Codes of fetch failures that never reached a server (Node's undici puts them on the
   * error's `cause`): the next endpoint is tried at once. Any other failure may have
   * reached one, so the lock machine is told (outcome unknown). */
  const CONNECT_FAILURES = new Set([
    'ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'EADDRNOTAVAIL',
    'UND_ERR_CONNECT_TIMEOUT'
  ])

  function neverConnected (error) {
    let e = error
    for (let depth = 0; depth < 4 && e !== null && typeof e === 'object'; depth++) {
      if (CONNECT_FAILURES.has(e.code)) return true
      // several addresses tried, all refused (an AggregateError)
      if (Array.isArray(e.errors) && e.errors.length > 0 && e.errors.every((x) => x !== null && typeof x === 'object' && CONNECT_FAILURES.has(x.code))) return true
      e = e.cause
    }
    return false
  }

  /** An etcd error another member may not have (no leader, a stopped member: gRPC code
   * 14, Unavailable): the next request goes to the next endpoint. */
  const isUnavailable = (reply) => /"code"\s*:\s*14\b/.test(reply)

  /** Whether a watch stream line ends the wait: it carries events, or the watch was
   * canceled or compacted, or it is an error document. */
  function watchLineEnds (line) {
    let doc
    try {
      doc = JSON.parse(line) // only to look at its fields: the machine gets the text
    } catch {
      return true // the machine reads it as a protocol error
    }
    if (doc === null || typeof doc !== 'object' || Array.isArray(doc) || doc.error !== undefined) return true
    const result = doc.result === undefined ? doc : doc.result
    if (result === null || typeof result !== 'object') return true
    return (Array.isArray(result.events) && result.events.length > 0) || result.canceled === true || Boolean(result.compact_revision)
  }

  /** The first line of `response`'s body for which `ends(line)` holds, read as it streams
   * in; null when the body ends first. A response without a readable stream (a custom
   * fetch) is read whole. */
  async function firstLine (response, ends) {
    const body = response.body
    if (body === null || body === undefined || typeof body.getReader !== 'function') {
      for (const raw of String(await response.text()).split('\n')) {
        const line = raw.trim()
        if (line !== '' && ends(line)) return line
      }
      return null
    }
    const reader = body.getReader()
    const decoder = new TextDecoder()
    let buffered = ''
    try {
      for (;;) {
        const { value, done } = await reader.read()
        buffered += done ? decoder.decode() : decoder.decode(value, { stream: true })
        for (let nl = buffered.indexOf('\n'); nl >= 0; nl = buffered.indexOf('\n')) {
          const line = buffered.slice(0, nl).trim()
          buffered = buffered.slice(nl + 1)
          if (line !== '' && ends(line)) return line
        }
        if (done) {
          const line = buffered.trim()
          return line !== '' && ends(line) ? line : null
        }
      }
    } finally {
      reader.cancel().catch(() => {})
    }
  }

  const ETCD_OPTIONS = ['endpoints', 'keyPrefix', 'fetch', 'requestTimeoutMs', 'sharedLease']
  /** Default of EtcdBackend's `requestTimeoutMs` (httpx's default timeout, as in Python). */
  const ETCD_REQUEST_TIMEOUT_MS = 5000
  /** How long a fenced transaction may take by default (a lock request's own deadline
   * comes from the machine). */
  const FENCED_TXN_TIMEOUT_MS = 5_000
  /** Fresh for every request: a fetch of the user's may add to them. */
  const jsonHeaders = () => ({ 'content-type': 'application/json' })

  /**
   * Locks on an etcd v3 cluster through its JSON gateway (`/v3/…`, etcd ≥ 3.4), with
   * nothing but `fetch`: Node ≥ 18, edge workers (workerd, Cloudflare Workers), browsers,
   * Deno. The recipe is etcd's own mutex, decided step by step by the core: each
   * acquisition grants a lease (the TTL rounded up to whole seconds) and puts its own key
   * `{keyPrefix}{name}/{lease id}` attached to it; the key with the lowest create revision
   * holds the lock and that revision is the fencing token. A waiter watches only its
   * predecessor's key (no polling) and keeps its own lease alive meanwhile.
   *
   * `sharedLease: true` (default false) gives the locks of one machine whose TTLs round
   * up to the same whole seconds one lease (etcd's `concurrency.Session`): one
   * keep-alive a renew period renews them all. They share its fate: when keep-alives
   * stop reaching etcd for a TTL, every lock on it is lost at once. Each lock keeps its
   * own key, fencing token and validity; a release deletes its key and leaves the lease.
   *
   * Endpoints: a request that could not connect moves on to the next member at once; any
   * other transport failure is reported to the machine (outcome unknown) and the next
   * request goes to the next member, as does the one after an `Unavailable` reply.
   */
  class EtcdBackend extends Backend {
    constructor (options) {
      super()
      const o = check.plainObject(options, 'EtcdBackend options')
      for (const key of Object.keys(o)) {
        if (!ETCD_OPTIONS.includes(key)) {
          throw new ConfigError(`unknown EtcdBackend option ${JSON.stringify(key)}; known options: ${ETCD_OPTIONS.join(', ')}`, { option: key })
        }
      }
      const given = typeof o.endpoints === 'string' ? [o.endpoints] : o.endpoints
      if (!Array.isArray(given)) {
        throw new ConfigError(`endpoints must be an etcd member's client URL ('http://127.0.0.1:2379') or an array of them, got ${check.describe(o.endpoints)}`, { option: 'endpoints' })
      }
      if (given.length === 0) throw new ConfigError('endpoints must name at least one etcd member', { option: 'endpoints' })
      this._endpoints = Object.freeze(given.map((url, i) => {
        let parsed = null
        try { parsed = typeof url === 'string' ? new URL(url) : null } catch {}
        if (parsed === null || (parsed.protocol !== 'http:' && parsed.protocol !== 'https:')) {
          throw new ConfigError(`endpoints[${i}] must be an http:// or https:// URL of an etcd member, got ${check.describe(url)}`, { option: 'endpoints' })
        }
        return url.replace(/\/+$/, '')
      }))
      this._keyPrefix = o.keyPrefix === undefined ? 'fencepost/' : check.string(o.keyPrefix, 'keyPrefix')
      this._sharedLease = o.sharedLease === undefined ? false : check.boolean(o.sharedLease, 'sharedLease')
      this._requestTimeoutMs = o.requestTimeoutMs === undefined ? ETCD_REQUEST_TIMEOUT_MS : check.millis(o.requestTimeoutMs, 'requestTimeoutMs')
      if (!(this._requestTimeoutMs > 0)) {
        throw new ConfigError(`requestTimeoutMs must be above 0, got ${this._requestTimeoutMs}`, { option: 'requestTimeoutMs' })
      }
      const fetch = o.fetch === undefined ? globalThis.fetch : o.fetch
      if (typeof fetch !== 'function') {
        throw new ConfigError(`fetch must be a function (this runtime has no global fetch: pass one), got ${check.describe(fetch)}`, { option: 'fetch' })
      }
      // Called bare, never as a method of this object (workers' fetch refuses `this`).
      this._fetch = o.fetch === undefined ? (...args) => globalThis.fetch(...args) : fetch
      /** index of the endpoint tried first */
      this._next = 0
      /** AbortControllers of the watches in flight (close() ends them) */
      this._watches = new Set()
    }

    _machineOptions () {
      return { keyPrefix: this._keyPrefix, kind: 'etcd', sharedLease: this._sharedLease }
    }

    /** The members' client URLs, in the order they are tried (without trailing '/'). */
    get endpoints () { return this._endpoints }
    /** The prefix of every key fencepost writes ('fencepost/'). */
    get keyPrefix () { return this._keyPrefix }
    /** Whether the locks of a machine share one lease per TTL (`sharedLease`, false). */
    get sharedLease () { return this._sharedLease }

    /** The prefix under which every contender for lock `name` puts its key. */
    lockKey (name) {
      return `${this._keyPrefix}${check.string(name, 'lock name')}/`
    }

    /** The key the acquisition `ownerId` (`lease.ownerId`) puts for lock `name`; while it
     * holds the lock, the key's create revision is its fencing token. */
    holderKey (name, ownerId) {
      check.string(name, 'lock name')
      check.string(ownerId, 'ownerId')
      return fence.etcdHolderKey(this._keyPrefix, name, ownerId)
    }

    /** The etcd lease id (a bigint, above 2^53 as often as not) of the acquisition
     * `ownerId`. */
    leaseId (ownerId) {
      return fence.etcdLeaseId(ownerId)
    }

    /**
     * Runs one request of an etcd lock machine (`{ backend: 'etcd', path, body }`): the
     * JSON text the gateway answered (error documents included). A watch (`call: 'watch'`)
     * streams until a line with events, or `'{}'` at its `timeoutMs`; `options.signal`
     * abandons it (rejecting with the signal's reason). Throws for a transport failure.
     */
    async execute (request, options) {
      if (request === null || typeof request !== 'object' || request.backend !== 'etcd' || typeof request.path !== 'string' || typeof request.body !== 'string') {
        throw new BackendError(`EtcdBackend cannot run this request: ${check.describe(request && request.backend)}`)
      }
      const signal = check.abortSignal(check.plainObject(options, 'execute options').signal, 'signal')
      if (request.call === 'watch') return this._watch(request, signal)
      // each call ends at the request's deadline or after requestTimeoutMs, whichever is
      // first: a member that hangs costs one timeout, then the next member is tried
      const deadlineMs = Math.min(typeof request.deadlineMs === 'number' ? request.deadlineMs : Infinity, now() + this._requestTimeoutMs)
      return this._post(request.path, request.body, eitherSignal(signal, deadlineSignal(deadlineMs)))
    }

    /** The endpoints, starting with the one to try first. */
    _order () {
      const n = this._endpoints.length
      return Array.from({ length: n }, (_, i) => this._endpoints[(this._next + i) % n])
    }

    /** After a failure at `url`: the next request starts at the next endpoint. */
    _rotate (url) {
      if (this._endpoints[this._next] === url) this._next = (this._next + 1) % this._endpoints.length
    }

    /** POSTs `body` to `path` on the first endpoint that accepts a connection; returns the
     * first line of the answer (a JSON document). */
    async _post (path, body, signal) {
      let last = null
      for (const url of this._order()) {
        const init = { method: 'POST', headers: jsonHeaders(), body }
        if (signal !== null) init.signal = signal
        let response, text
        try {
          response = await this._fetch(url + path, init)
          text = String(await response.text())
        } catch (error) {
          this._rotate(url)
          if (response === undefined && neverConnected(error) && !(signal !== null && signal.aborted)) {
            last = error
            continue
          }
          throw error
        }
        const line = text.split('\n', 1)[0].trim()
        if (!line.startsWith('{')) {
          this._rotate(url)
          throw new Error(`HTTP ${response.status} from the etcd gateway at ${url} without a JSON body: ${JSON.stringify(text.slice(0, 200))}`)
        }
        if (isUnavailable(line)) this._rotate(url)
        return line
      }
      throw new BackendError(`no etcd endpoint reachable (${this._endpoints.join(', ')}): ${describeError(last)}`, { cause: last })
    }

    /** A watch: the first stream line that ends the wait, or '{}' at `timeoutMs`; a stream
     * that ends early without an event is a BackendError (a transport failure). Leaving
     * the stream cancels the watch on the server. */
    async _watch (request, outer) {
      if (outer !== null && outer.aborted) throw outer.reason
      const controller = new AbortController()
      let timedOut = false
      const timeoutMs = typeof request.timeoutMs === 'number' ? request.timeoutMs : 0
      const timer = setTimeout(() => { timedOut = true; controller.abort() }, Math.min(2 ** 31 - 1, Math.max(1, timeoutMs)))
      const onAbort = () => controller.abort(outer.reason)
      if (outer !== null) outer.addEventListener('abort', onAbort, { once: true })
      this._watches.add(controller)
      let url = null
      try {
        let response = null
        let last = null
        for (const candidate of this._order()) {
          url = candidate
          try {
            response = await this._fetch(url + request.path, { method: 'POST', headers: jsonHeaders(), body: request.body, signal: controller.signal })
            break
          } catch (error) {
            if (controller.signal.aborted || !neverConnected(error)) throw error
            this._rotate(url)
            last = error
          }
        }
        if (response === null) {
          url = null
          throw new BackendError(`no etcd endpoint reachable (${this._endpoints.join(', ')}): ${describeError(last)}`, { cause: last })
        }
        const line = await firstLine(response, watchLineEnds)
        if (line === null) {
          if (timedOut) return '{}'
          // ended early without an event (a member stopping, a proxy closing streams): a
          // transport failure, so the machine backs off instead of re-watching at once
          throw new BackendError(`the etcd watch stream from ${url} ended without an event`)
        }
        if (!line.startsWith('{')) throw new Error(`HTTP ${response.status} from the etcd gateway at ${url}: not a JSON watch response: ${JSON.stringify(line.slice(0, 200))}`)
        if (isUnavailable(line)) this._rotate(url)
        return line
      } catch (error) {
        if (timedOut) return '{}'
        if (outer !== null && outer.aborted) throw outer.reason
        if (url !== null) this._rotate(url)
        throw error
      } finally {
        clearTimeout(timer)
        if (outer !== null) outer.removeEventListener('abort', onAbort)
        this._watches.delete(controller)
        controller.abort() // ends the stream if still open
      }
    }

    /**
     * Writes to etcd only while `lease` still holds its lock: one transaction that compares
     * the create revision of the lease's key with `lease.token` (etcd's `IsOwner`) and, if
     * it still matches, puts every `[key, value]` of `puts` and deletes every key of
     * `deletes`. Resolves to the transaction's revision (bigint).
     *
     * The request is abandoned after `timeoutMs` (default 5 000) or when `signal` aborts.
     *
     * Rejects with StaleTokenError (the lease no longer holds the lock; nothing written;
     * `highest` = the current holder's token or 0n), BackendError (no endpoint reachable,
     * a transport failure or the timeout: it may or may not have been applied),
     * ProtocolError (etcd answered with an error), ConfigError (arguments),
     * `signal.reason` when `signal` aborts.
     */
    async fencedTxn (lease, options) {
      if (!(lease instanceof Lease)) {
        throw new ConfigError(`lease must be a Lease from lock.acquire() on this EtcdBackend, got ${check.describe(lease)}`)
      }
      if (lease._acquisition.lock.backend !== this) {
        throw new ConfigError(`lease of lock ${JSON.stringify(lease.name)} was acquired on another backend: fence it with that backend`)
      }
      const o = check.plainObject(options, 'fencedTxn options')
      for (const key of Object.keys(o)) {
        if (!['puts', 'deletes', 'signal', 'timeoutMs'].includes(key)) {
          throw new ConfigError(`unknown fencedTxn option ${JSON.stringify(key)}; known options: puts, deletes, signal, timeoutMs`, { option: key })
        }
      }
      const signal = check.abortSignal(o.signal, 'signal')
      const timeoutMs = o.timeoutMs === undefined ? FENCED_TXN_TIMEOUT_MS : check.millis(o.timeoutMs, 'timeoutMs')
      const call = fence.etcdFencedTxn(this._keyPrefix, lease.name, lease.ownerId, lease.token, o.puts ?? [], o.deletes ?? [])
      if (signal !== null && signal.aborted) throw signal.reason
      let reply
      try {
        reply = await this._post(call.path, call.body, eitherSignal(signal, deadlineSignal(now() + timeoutMs)))
      } catch (error) {
        if (error instanceof FencepostError) throw error
        if (signal !== null && signal.aborted) throw signal.reason
        throw new BackendError(`fenced etcd transaction for lock ${JSON.stringify(lease.name)} failed (it may or may not have been applied): ${describeError(error)}`, { cause: error })
      }
      return fence.readEtcdFencedTxn(lease.name, lease.token, reply)
    }

    /**
     * Whether lock `name` is held now: true while any contender's key (and so its lease)
     * lives under the lock's prefix; the lowest create revision holds the lock.
     */
    async isLocked (name) {
      return (await this._holder('isLocked', name)).token !== null
    }

    /**
     * Frees lock `name` whoever holds it by revoking the holder's lease: etcd deletes its
     * key, the next contender's watch fires and it acquires with a later revision as its
     * token. Resolves to whether a lease was revoked. The freed holder learns it at its
     * next keep-alive (LockLostError, reason 'renew_rejected').
     */
    async forceRelease (name) {
      const holder = await this._holder('forceRelease', name)
      if (holder.token === null) return false
      const call = translate(() => native.etcdLeaseRevoke(holder.lease))
      const reply = await this._operatorReply('forceRelease', name, () => this._post(call.path, call.body, deadlineSignal(now() + this._requestTimeoutMs)))
      return this._operatorResult('forceRelease', name, native.readEtcdRevoke(reply)).value
    }

    /** An election's leader publishes its record (identity and value, JSON) in its own
     * key, on its lease, while the key still has the term's token: etcd's
     * `Election.Proclaim`, so etcd's own `Leader()` / `Observe()` read it. Rejects with
     * StaleTokenError when the key is gone. */
    async _proclaim (lease, record) {
      const call = translate(() => native.etcdProclaim(this._keyPrefix, lease.name, lease.ownerId, lease.token, record))
      const reply = await this._operatorReply('campaign', lease.name, () => this._post(call.path, call.body, deadlineSignal(now() + this._requestTimeoutMs)))
      fence.readEtcdFencedTxn(lease.name, lease.token, reply)
    }

    /** The leader of election `name`: `null`, or `{ token, value, pending }` where
     * `pending` says the key still holds its holder's owner id (a fencepost holder an
     * instant before its record, or a plain lock). */
    async _leader (name) {
      check.string(name, 'election name')
      const call = translate(() => native.etcdLeaderRange(this._keyPrefix, name))
      const reply = await this._operatorReply('leader', name, () => this._post(call.path, call.body, deadlineSignal(now() + this._requestTimeoutMs)))
      const read = this._operatorResult('leader', name, native.readEtcdLeader(reply))
      if (read.token === null) return null
      let pending = false
      if (/^[0-9a-f]{32}$/.test(read.value)) {
        try {
          pending = native.etcdLeaseId(read.value) === read.lease
        } catch {}
      }
      return { token: read.token, value: read.value, pending }
    }

    async _call (what, name, call) {
      return this._operatorReply(what, name, () => this._post(call.path, call.body, deadlineSignal(now() + this._requestTimeoutMs)))
    }

    /**
     * Who holds lock `name` now: the contender key with the lowest create revision under
     * the lock's prefix, as `{ name, owner ('lease:' + 16 hex digits: the key names its
     * lease), token (its create revision, bigint), ttlLeftMs (the lease's remaining whole
     * seconds, LeaseTimeToLive), waiters (the other contender keys), metadata (the key's
     * value when the holder acquired with `metadata`, else null) }`, or null when no key
     * lives there. Two round trips; if the lease ended in between it reads again (at most
     * 3 times).
     */
    async inspect (name, what = 'inspect') {
      check.string(name, 'lock name')
      for (let attempt = 0; attempt < 3; attempt++) {
        const range = translate(() => native.etcdLeaderRange(this._keyPrefix, name))
        const found = this._operatorResult(what, name, native.readEtcdInspect(name, await this._call(what, name, range)))
        if (found.holder === null) return null
        const ttl = translate(() => native.etcdLeaseTimeToLive(found.lease))
        const left = this._operatorResult(what, name, native.readEtcdTimeToLive(await this._call(what, name, ttl)))
        if (left.ttlLeftMs !== null) return holder({ ...found.holder, ttlLeftMs: left.ttlLeftMs })
      }
      return null
    }

    /**
     * The held locks whose names start with `prefix` (default ''), at most
     * `options.limit` (default 100), sorted by name among those found, as `inspect`
     * gives them. Bounded: keys-only range pages of 1000 keys over the key prefix, at
     * most 100 pages, then one inspection per lock name, stopping once `limit` holders
     * are found.
     */
    async list (prefix = '', options) {
      const limit = check.listArguments(prefix, options)
      const found = []
      const seen = new Set() // a name's keys may span pages, or interleave with `name/…`'s
      let after = null
      done: for (let page = 0; page < ETCD_LIST_PAGES; page++) {
        const call = translate(() => native.etcdListPage(this._keyPrefix, prefix, after))
        const read = this._operatorResult('list', prefix, native.readEtcdListPage(this._keyPrefix, prefix, await this._call('list', prefix, call)))
        for (const n of read.names) {
          if (seen.has(n)) continue
          seen.add(n)
          const h = await this.inspect(n, 'list')
          if (h !== null) found.push(h)
          if (found.length >= limit) break done
        }
        if (read.after === null) break
        after = read.after
      }
      return found.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
    }

    async _holder (what, name) {
      check.string(name, 'lock name')
      const call = translate(() => native.etcdHolderRange(this._keyPrefix, name))
      const reply = await this._operatorReply(what, name, () => this._post(call.path, call.body, deadlineSignal(now() + this._requestTimeoutMs)))
      return this._operatorResult(what, name, native.readEtcdHolder(reply))
    }

    close () {
      const done = super.close()
      for (const controller of this._watches) controller.abort()
      return done
    }
  }

  const URL_SCHEMES = 'redis://, rediss://, http(s):// (etcd; several members separated by commas) or memory://'

  /**
   * A backend for `url`, by its scheme: `memory://` a MemoryBackend; `http://` / `https://`
   * an EtcdBackend (`endpoints` = the comma-separated URLs); `redis://` / `rediss://` a
   * RedisBackend on the client `options.redis(url)` returns (or resolves to: node-redis
   * `(url) => createClient({ url }).connect()`, ioredis `(url) => new Redis(url)`); the
   * shared JavaScript loads no Redis client library itself. The backend owns a client it
   * made this way: `close()` disconnects it. Other options (`keyPrefix`, `fair`,
   * `requestTimeoutMs`, `fetch`) go to the backend's constructor. PostgreSQL has no
   * JavaScript backend. Resolves to the backend; rejects with ConfigError for an unknown
   * scheme or a missing `redis` factory.
   */
  async function backendFromUrl (url, options) {
    check.string(url, 'url')
    const { redis, ...rest } = check.plainObject(options, 'backendFromUrl options')
    const scheme = /^([a-z][a-z0-9+.-]*):/i.exec(url)?.[1].toLowerCase()
    if (scheme === 'memory') return new MemoryBackend(rest)
    if (scheme === 'http' || scheme === 'https') {
      return new EtcdBackend({ ...rest, endpoints: url.split(',').map((u) => u.trim()).filter((u) => u !== '') })
    }
    if (scheme === 'redis' || scheme === 'rediss') {
      if (typeof redis !== 'function') {
        throw new ConfigError('a redis:// URL needs options.redis, a function making the client: (url) => new Redis(url) (ioredis) or (url) => createClient({ url }).connect() (node-redis)', { option: 'redis' })
      }
      const client = await redis(url)
      let backend
      try {
        backend = new RedisBackend(client, rest)
      } catch (error) {
        closeClient(client)
        throw error
      }
      backend._owned.push(() => closeClient(client))
      return backend
    }
    throw new ConfigError(`url must start with ${URL_SCHEMES}, got ${check.describe(url.replace(/\/\/[^@/]*@/, '//…@'))}`, { option: 'url' })
  }

  /** Closes a Redis client of either library (ioredis, node-redis 4+): gracefully when
   * connected (commands already sent, a last release among them, still get their
   * replies), at once otherwise (a client retrying a server that is down). */
  function closeClient (client) {
    if (typeof client.isOpen !== 'boolean') { // ioredis
      return client.status === 'ready' ? client.quit() : client.disconnect()
    }
    if (!client.isOpen) return undefined
    if (client.isReady) return typeof client.close === 'function' ? client.close() : client.quit()
    return typeof client.destroy === 'function' ? client.destroy() : client.disconnect()
  }

  /**
   * `backendFromUrl(env.FENCEPOST_BACKEND_URL, options)`, with `keyPrefix` from
   * `env.FENCEPOST_KEY_PREFIX` when set (and not given in `options`). `env` defaults to
   * `process.env` (pass one in runtimes without it). Rejects with ConfigError when
   * FENCEPOST_BACKEND_URL is unset or empty.
   */
  async function backendFromEnv (options, env) {
    const vars = env ?? globalThis.process?.env ?? {}
    const url = vars.FENCEPOST_BACKEND_URL
    if (typeof url !== 'string' || url === '') {
      throw new ConfigError(`FENCEPOST_BACKEND_URL is not set: set it to a backend URL (${URL_SCHEMES})`, { option: 'FENCEPOST_BACKEND_URL' })
    }
    const o = { ...check.plainObject(options, 'backendFromEnv options') }
    if (o.keyPrefix === undefined && typeof vars.FENCEPOST_KEY_PREFIX === 'string' && vars.FENCEPOST_KEY_PREFIX !== '') {
      o.keyPrefix = vars.FENCEPOST_KEY_PREFIX
    }
    return backendFromUrl(url, o)
  }

  return { Backend, RedisProtocolBackend, MemoryServer, MemoryBackend, RedisBackend, UpstashRedisBackend, RedlockBackend, EtcdBackend, backendFromUrl, backendFromEnv, standardMetadata }
}

module.exports = { createBackends }
