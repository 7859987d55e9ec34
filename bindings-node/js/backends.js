'use strict'
// Backends: where a lock lives, and the adapters that run the lock machine's requests
// with a client library. Shared word for word by the napi and WASM packages.
//
//   Backend                  the base: one lock machine and one driver per backend
//   └─ RedisProtocolBackend  the Redis script vocabulary: keys, fenced SET
//      ├─ MemoryBackend      the core's in-memory Redis, in process (tests, demos)
//      └─ RedisBackend       a real server through ioredis or node-redis (v4+)
//
// PostgreSQL (pg: Client and Pool) and etcd (its JSON gateway over fetch) backends come
// here once fencepost-core has them (issue 6, item 4); their adapters will subclass
// Backend the same way: `execute(request)` returns the server's reply as data.

const check = require('./check')
const { Driver, now } = require('./driver')
const { BackendError, ConfigError, FencepostError } = require('./errors')

function createBackends (native, LockMachine, fence) {
  /** The base of every backend: owns one lock machine and its driver (made on first use). */
  class Backend {
    constructor () {
      if (new.target === Backend) throw new ConfigError('Backend is abstract: use MemoryBackend or RedisBackend')
      this._driverInstance = null
      this._closed = false
    }

    /** A new lock machine for this backend's protocol. */
    _newMachine () {
      throw new ConfigError(`${this.constructor.name} does not say which lock machine it runs`)
    }

    _driver () {
      if (this._closed) throw new BackendError('this backend is closed; create a new one')
      if (this._driverInstance === null) this._driverInstance = new Driver(this, this._newMachine())
      return this._driverInstance
    }

    /** Checks a lock's name and options as the core would acquire them (ConfigError). */
    _machineCheck (name, options) {
      if (this._checker === undefined) this._checker = this._newMachine()
      this._checker.check(name, options)
    }

    /**
     * Runs one request of the lock machine; returns the server's reply as the client
     * gives it (an `Error` value for an error reply) or throws for a transport failure.
     * Adapters implement it.
     */
    execute (request) { // eslint-disable-line no-unused-vars
      throw new ConfigError(`${this.constructor.name} does not implement execute()`)
    }

    /**
     * Stops this backend's driver. Locks still held or being acquired are released (best
     * effort), their leases are lost with reason 'closed' (signals aborted), pending
     * acquisitions reject with BackendError. The client given to the backend is not
     * closed: its owner closes it. Idempotent.
     */
    close () {
      if (this._closed) return
      this._closed = true
      if (this._driverInstance !== null) this._driverInstance.close()
    }
  }

  /** A backend speaking fencepost's Redis scripts. */
  class RedisProtocolBackend extends Backend {
    constructor (options) {
      super()
      const o = check.plainObject(options, 'backend options')
      this._keyPrefix = o.keyPrefix === undefined ? 'fencepost:' : check.string(o.keyPrefix, 'keyPrefix')
    }

    _newMachine () {
      return new LockMachine({ keyPrefix: this._keyPrefix })
    }

    /** The prefix of every key fencepost writes ('fencepost:'). */
    get keyPrefix () { return this._keyPrefix }

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
     * `fenceKey` has seen (one atomic script); the fence then remembers `token`.
     * Rejects with StaleTokenError, BackendError (the server could not be reached: the
     * write may or may not have happened) or ProtocolError.
     */
    async fencedSet (dataKey, fenceKey, token, value) {
      const command = fence.redisFencedSet(dataKey, fenceKey, token, value)
      let reply
      try {
        reply = await this.execute(command)
      } catch (error) {
        if (error instanceof FencepostError) throw error
        throw new BackendError(`fenced SET of ${JSON.stringify(dataKey)} failed: ${error && error.message}`, { cause: error })
      }
      fence.readRedisFencedSet(dataKey, token, reply)
    }
  }

  /** An in-memory Redis-like server running fencepost's scripts (the core's MemoryRedis),
   * with TTLs on `performance.now()`. Share one between backends to contend in process. */
  class MemoryServer {
    constructor () {
      this._redis = new native.MemoryRedis()
    }

    /** Runs a script call now; returns the reply as a Redis client would (an `Error`
     * value for an error reply). */
    execute (command) {
      return this._redis.execute(now(), command)
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
      super({ keyPrefix: o.keyPrefix })
      if (o.server !== undefined && !(o.server instanceof MemoryServer)) {
        throw new ConfigError(`server must be a MemoryServer, got ${check.describe(o.server)}`)
      }
      /** The in-memory server this backend talks to. */
      this.server = o.server ?? new MemoryServer()
    }

    execute (request) {
      return this.server.execute(request)
    }
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

  /** How to run a script call on `client`: EVALSHA, falling back to EVAL on NOSCRIPT. */
  function scriptRunner (client) {
    if (client !== null && typeof client === 'object' && typeof client.evalSha === 'function') {
      // node-redis v4+ (createClient / createCluster)
      return {
        kind: 'node-redis',
        evalsha: (c) => client.evalSha(c.sha1, { keys: c.keys, arguments: c.args }),
        eval: (c) => client.eval(scripts[c.script].source, { keys: c.keys, arguments: c.args })
      }
    }
    if (client !== null && typeof client === 'object' && typeof client.evalsha === 'function' && typeof client.eval === 'function') {
      // ioredis (Redis / Cluster)
      return {
        kind: 'ioredis',
        evalsha: (c) => client.evalsha(c.sha1, c.keys.length, ...c.keys, ...c.args),
        eval: (c) => client.eval(scripts[c.script].source, c.keys.length, ...c.keys, ...c.args)
      }
    }
    return null
  }

  /**
   * Locks on one Redis server (or a compatible one: Valkey, KeyDB, Dragonfly with Lua)
   * through an ioredis or node-redis (v4+) client that the caller owns and connects.
   *
   * Every request is a Lua script run with EVALSHA, falling back to EVAL on NOSCRIPT.
   * Error replies go to the lock machine as values (it decides whether they are
   * transient); connection failures are transport errors (outcome unknown).
   */
  class RedisBackend extends RedisProtocolBackend {
    constructor (client, options) {
      super(options)
      const runner = scriptRunner(client)
      if (runner === null) {
        throw new ConfigError(`client must be an ioredis client (new Redis()) or a node-redis client (createClient()), got ${check.describe(client)}`)
      }
      this._client = client
      this._runner = runner
    }

    /** The client this backend uses. */
    get client () { return this._client }
    /** 'ioredis' or 'node-redis'. */
    get clientKind () { return this._runner.kind }

    async execute (command) {
      try {
        try {
          return await this._runner.evalsha(command)
        } catch (error) {
          if (!isNoScript(error)) throw error
          return await this._runner.eval(command)
        }
      } catch (error) {
        if (isErrorReply(error)) return error // a reply: the machine reads it
        throw error // a transport failure
      }
    }
  }

  return { Backend, RedisProtocolBackend, MemoryServer, MemoryBackend, RedisBackend }
}

module.exports = { createBackends }
