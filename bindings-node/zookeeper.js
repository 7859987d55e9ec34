'use strict'
// ZooKeeper from Node: the lock machine's ZooKeeper calls run with node-zookeeper-client
// (pure JavaScript; multi-op transactions, session events, the negotiated session
// timeout). Node-only, outside the shared js/: WebAssembly hosts have no sockets to reach
// ZooKeeper, so the WASM package carries none of it. The same recipe and semantics as
// Python's fencepost.zookeeper (kazoo):
//
// * The recipe is the core's (ZooKeeper's documented lock recipe, kazoo's and Curator's
//   node names); this file only runs each call and writes the JSON reply the core reads,
//   with the client's session id on every reply. An expired session is reported as
//   `session_expired`, a lost connection as a transport failure (the outcome is unknown).
// * Session = lease: a lock's ttlMs must not exceed the session timeout the server
//   negotiated (`backend.sessionTimeoutMs`, read from the client after its handshake).
// * A waiter's watch wakes on the predecessor's deletion or change and on any session
//   state change (disconnected, reconnected, expired), so the machine checks again.
//
// The client has no `create2`: a create is followed by an `exists` of the created node on
// the same session to read its czxid; if that fails the create is reported as a transport
// failure, and the core's next step finds the node by its owner-prefixed name.

const check = require('./dist/js/check.js')
const { describeError } = require('./dist/js/driver.js')
const { translate } = require('./dist/js/errors.js')

/** ZooKeeper's error codes (KeeperException.Code) as the reply kinds the core reads. */
const KINDS = new Map([
  [-1, 'system_error'], [-2, 'rolled_back'], [-4, 'connection_loss'], [-7, 'operation_timeout'],
  [-8, 'bad_arguments'], [-101, 'no_node'], [-102, 'no_auth'], [-103, 'bad_version'],
  [-108, 'no_children_for_ephemerals'], [-110, 'node_exists'], [-111, 'not_empty'],
  [-112, 'session_expired'], [-114, 'invalid_acl'], [-115, 'auth_failed'], [-118, 'session_moved']
])
/** Failures whose outcome is unknown: reported to the machine as transport errors. */
const TRANSPORT = new Set([-4])
const NO_NODE = -101
const SESSION_EXPIRED = -112
const BIG = /"\\u0000(-?\d+)"/g

/** `doc` as JSON with its bigints as JSON integers (session ids and zxids use all 64 bits). */
function toJson (doc) {
  return JSON.stringify(doc, (k, v) => typeof v === 'bigint' ? `\u0000${v}` : v).replace(BIG, '$1')
}

/** A jute `long` (an 8-byte big-endian Buffer) as a bigint. */
function long (value) {
  if (Buffer.isBuffer(value) && value.length === 8) return value.readBigInt64BE(0)
  if (typeof value === 'number') return BigInt(value)
  return 0n
}

function createZooKeeper (native, fp) {
  const { Backend, ConfigError, BackendError, StaleTokenError, FencepostError } = fp

  function loadClient () {
    try {
      return require('node-zookeeper-client')
    } catch (error) {
      throw new ConfigError('ZooKeeperBackend needs node-zookeeper-client: npm install node-zookeeper-client', { cause: error })
    }
  }

  const isClient = (c) => c !== null && typeof c === 'object' && typeof c.getSessionTimeout === 'function' &&
    typeof c.getSessionId === 'function' && typeof c.transaction === 'function' && typeof c.getState === 'function'

  /** Resolves once `client` is connected (SyncConnected), rejects after `ms`. */
  function connected (zk, client, ms) {
    if (client.getState() === zk.State.SYNC_CONNECTED) return Promise.resolve()
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        client.removeListener('connected', done)
        reject(new BackendError(`ZooKeeper: no session within ${ms} ms`))
      }, ms)
      function done () { clearTimeout(timer); resolve() }
      client.once('connected', done)
      client.connect()
    })
  }

  /** A node-zookeeper-client call as a promise: resolves to the callback's results. */
  function call (fn) {
    return new Promise((resolve, reject) => {
      fn((error, ...results) => error ? reject(error) : resolve(results))
    })
  }

  /** `promise`, or a rejection once `ms` passed. */
  function bounded (promise, ms) {
    let timer
    const late = new Promise((resolve, reject) => {
      timer = setTimeout(() => reject(new BackendError(`ZooKeeper: no reply within ${Math.round(ms)} ms`)), ms)
    })
    return Promise.race([promise, late]).finally(() => clearTimeout(timer))
  }

  /** The ZooKeeper error code of `error`, or null for an error that is not the server's. */
  const codeOf = (error) => error !== null && typeof error === 'object' && typeof error.getCode === 'function' ? error.getCode() : null

  /**
   * Locks on a ZooKeeper ensemble through node-zookeeper-client; see fencepost.d.ts
   * (`ZooKeeperBackend`) for the options, the recipe and the errors.
   */
  class ZooKeeperBackend extends Backend {
    constructor (client, options) {
      const zk = loadClient()
      if (!isClient(client)) {
        throw new ConfigError(`client must be a node-zookeeper-client Client, got ${check.describe(client)}`)
      }
      const o = check.plainObject(options, 'ZooKeeperBackend options')
      const root = o.root === undefined ? '/fencepost' : check.string(o.root, 'root')
      const naming = o.naming === undefined ? 'kazoo' : check.string(o.naming, 'naming')
      if (client.getState() !== zk.State.SYNC_CONNECTED) {
        throw new ConfigError('the client must be connected: use `await ZooKeeperBackend.connect(client)`, which connects it and learns the session timeout the server negotiated')
      }
      const sessionTimeoutMs = client.getSessionTimeout()
      translate(() => native.zookeeperNodePrefix({ root, naming, sessionTimeoutMs }, 'x', '0'.repeat(32))) // ConfigError for bad settings
      super()
      this._zk = zk
      this._root = root
      this._naming = naming
      this._sessionTimeoutMs = sessionTimeoutMs
      /** makes a replacement client after an expiry (a client the backend owns), or null */
      this._factory = null
      this._use(client)
    }

    /** Runs on `client` from now on. An expired session never comes back, and the client
     * does not say so once it has closed its socket: remember it. */
    _use (client) {
      this._client = client
      this._expired = false
      client.once('expired', () => {
        if (this._client !== client) return
        this._expired = true
        if (this._factory !== null && !this._closed) this._replace()
      })
    }

    /** A new session on a client of the backend's own, as kazoo makes one after an expiry:
     * nodes of the old session are gone, so every lock on it is lost already. */
    _replace () {
      const old = this._client
      const client = this._factory()
      client.once('connected', () => {
        if (this._closed) { client.close(); return }
        this._use(client)
        old.close()
      })
      client.connect()
    }

    /**
     * Connects `client` (a node-zookeeper-client `Client` not connected yet, or a
     * connection string such as '10.0.0.1:2181,10.0.0.2:2181', for which the backend
     * makes a client it owns and closes) and resolves to a backend once the session is
     * established. Options: `root`, `naming`, `sessionTimeoutMs` (asked for when the
     * backend makes the client; default 10000), `connectTimeoutMs` (default 15000).
     */
    static async connect (client, options) {
      const zk = loadClient()
      const o = check.plainObject(options, 'ZooKeeperBackend options')
      const connectTimeoutMs = o.connectTimeoutMs === undefined ? 15000 : check.millis(o.connectTimeoutMs, 'connectTimeoutMs')
      const { connectTimeoutMs: _, sessionTimeoutMs, ...rest } = o
      let owned = false
      let made = null
      if (typeof client === 'string') {
        const timeout = sessionTimeoutMs === undefined ? 10000 : check.millis(sessionTimeoutMs, 'sessionTimeoutMs')
        made = { hosts: client, options: { sessionTimeout: timeout, retries: 0 } }
        client = zk.createClient(made.hosts, made.options)
        owned = true
      } else if (sessionTimeoutMs !== undefined) {
        throw new ConfigError('sessionTimeoutMs applies to a client the backend makes (a connection string); a client you pass asks for its own', { option: 'sessionTimeoutMs' })
      }
      if (!isClient(client)) {
        throw new ConfigError(`client must be a node-zookeeper-client Client or a connection string, got ${check.describe(client)}`)
      }
      try {
        await connected(zk, client, connectTimeoutMs)
      } catch (error) {
        if (owned) client.close()
        throw error
      }
      let backend
      try {
        backend = new ZooKeeperBackend(client, rest)
      } catch (error) {
        if (owned) client.close()
        throw error
      }
      if (owned) {
        backend._factory = () => zk.createClient(made.hosts, made.options)
        backend._owned.push(() => backend._client.close())
      }
      return backend
    }

    _machineOptions () {
      return { kind: 'zookeeper', root: this._root, naming: this._naming, sessionTimeoutMs: this._sessionTimeoutMs }
    }

    /** The node-zookeeper-client this backend uses. */
    get client () { return this._client }
    /** The parent of every lock path ('/fencepost'). */
    get root () { return this._root }
    /** Whose node names the locks use: 'kazoo' or 'curator'. */
    get naming () { return this._naming }
    /** The session timeout the server negotiated, in ms: the largest `ttlMs` a lock may have. */
    get sessionTimeoutMs () { return this._sessionTimeoutMs }
    /** The client's current session id (a bigint; 0n before the first session). */
    get sessionId () { return long(this._client.getSessionId()) }

    /** The path of lock `name`: `{root}/{name}`. */
    lockPath (name) {
      return this._paths(check.string(name, 'lock name'), '0'.repeat(32))[0]
    }

    /** The name the node of acquisition `ownerId` (`lease.ownerId`) starts with, before the server's sequence. */
    nodePrefix (name, ownerId) {
      return this._paths(check.string(name, 'lock name'), check.string(ownerId, 'ownerId'))[1]
    }

    _paths (name, ownerId) {
      return translate(() => native.zookeeperNodePrefix({ root: this._root, naming: this._naming }, name, ownerId))
    }

    // -- running the machine's requests --

    async execute (request, options) {
      if (request === null || typeof request !== 'object' || request.backend !== 'zookeeper') {
        throw new ConfigError(`ZooKeeperBackend cannot run ${check.describe(request)}`)
      }
      const spec = JSON.parse(request.spec)
      const expired = { error: 'session_expired', message: 'the ZooKeeper session expired' }
      let doc
      try {
        doc = this._expired ? expired : await this._call(spec, options && options.signal)
      } catch (error) {
        const code = codeOf(error)
        if (this._expired) doc = expired // the client answers CONNECTION_LOSS once it closed
        else if (code === null || TRANSPORT.has(code)) throw error // the outcome is unknown
        else doc = { error: KINDS.get(code) ?? `error_${code}`, message: String(error.message || error) }
      }
      doc.session = this.sessionId
      return toJson(doc)
    }

    async _call (spec, signal) {
      const client = this._client
      const stat = (s) => ({ czxid: long(s.czxid), version: s.version, ephemeral_owner: long(s.ephemeralOwner) })
      switch (spec.call) {
        case 'create': {
          const parent = spec.path.slice(0, spec.path.lastIndexOf('/'))
          const create = () => call((cb) => client.create(spec.path, Buffer.from(spec.data), this._zk.CreateMode.EPHEMERAL_SEQUENTIAL, cb))
          // sent right behind the create, the listing sees the new node (a session's
          // requests run in order): both in one round trip; a failed one is left out
          const list = () => call((cb) => client.getChildren(parent, cb)).then(([children]) => children, () => null)
          let created = create()
          let listed = list()
          let path
          try {
            [path] = await created
          } catch (error) {
            if (codeOf(error) !== NO_NODE) throw error
            // the lock's parents are made on first use, as kazoo's makepath
            await call((cb) => client.mkdirp(parent, cb))
            created = create()
            listed = list()
            ;[path] = await created
          }
          let s
          try {
            [s] = await call((cb) => client.exists(path, cb))
          } catch (error) {
            throw new BackendError(`ZooKeeper: created ${path} but could not read its stat: ${describeError(error)}`, { cause: error })
          }
          if (!s) throw new BackendError(`ZooKeeper: created ${path} but it was gone at once`)
          const doc = { path, stat: stat(s) }
          const children = await listed
          if (children) doc.children = children
          return doc
        }
        case 'children': {
          const [children] = await call((cb) => client.getChildren(spec.path, cb))
          return { children }
        }
        case 'exists': {
          const [s] = await call((cb) => client.exists(spec.path, cb))
          return { stat: s ? stat(s) : null }
        }
        case 'get': {
          const [data, s] = await call((cb) => client.getData(spec.path, cb))
          let text = null
          try {
            if (data) text = new TextDecoder('utf-8', { fatal: true }).decode(data)
          } catch {} // not UTF-8: not fencepost's, no metadata
          return { data: text, stat: stat(s) }
        }
        case 'watch': return { event: await this._watch(spec.path, spec.timeout_ms, signal) }
        case 'delete':
          await call((cb) => client.remove(spec.path, -1, cb))
          return { deleted: true }
        case 'delete_owned': {
          let children
          try {
            [children] = await call((cb) => client.getChildren(spec.path, cb))
          } catch (error) {
            if (codeOf(error) === NO_NODE) return { deleted: 0 }
            throw error
          }
          const mine = children.filter((c) => c.startsWith(spec.prefix))
          // sent together: one round trip (a child already gone counts as deleted)
          await Promise.all(mine.map((child) => call((cb) => client.remove(`${spec.path}/${child}`, -1, cb)).catch((error) => {
            if (codeOf(error) !== NO_NODE) throw error
          })))
          return { deleted: mine.length }
        }
        case 'multi': {
          const txn = this._checked(spec.check_path, spec.check_version)
          for (const op of spec.ops) {
            if (op.op === 'create') txn.create(op.path, Buffer.from(op.data))
            else if (op.op === 'set_data') txn.setData(op.path, Buffer.from(op.data), op.version)
            else if (op.op === 'delete') txn.remove(op.path, op.version)
            else throw new ConfigError(`unknown transaction op ${JSON.stringify(op.op)}`)
          }
          return { results: results(await this._commit(txn)) }
        }
        default:
          throw new ConfigError(`ZooKeeperBackend cannot run the call ${JSON.stringify(spec.call)}`)
      }
    }

    /** A transaction whose first operation checks that `path` exists at data `version`. */
    _checked (path, version) {
      const txn = this._client.transaction().check(path, version)
      // the client turns version 0 into -1 (any version): set the version the core asked for
      if (txn.ops && txn.ops[0] && txn.ops[0].path === path) txn.ops[0].version = version
      return txn
    }

    /** Commits `txn`; resolves to the per-operation results (a failed multi too), rejects
     * on a transport failure. */
    _commit (txn) {
      return new Promise((resolve, reject) => {
        txn.commit((error, ops) => {
          if (Array.isArray(ops)) resolve(ops)
          else reject(error)
        })
      })
    }

    /** Blocks until `path`'s watch fires ('deleted' | 'changed'), the session changes
     * state ('session'), `timeoutMs` passes ('timeout'), or `signal` aborts (rejects). */
    _watch (path, timeoutMs, signal) {
      const client = this._client
      return new Promise((resolve, reject) => {
        let settled = false
        const finish = (what, error) => {
          if (settled) return
          settled = true
          clearTimeout(timer)
          client.removeListener('state', onState)
          if (signal) signal.removeEventListener('abort', onAbort)
          if (error) reject(error); else resolve(what)
        }
        const onState = () => finish('session')
        const onAbort = () => finish(null, signal.reason ?? new Error('aborted'))
        const timer = setTimeout(() => finish('timeout'), timeoutMs)
        client.on('state', onState)
        if (signal) {
          if (signal.aborted) return onAbort()
          signal.addEventListener('abort', onAbort, { once: true })
        }
        // the watcher cannot be removed: one that fires after this wait ended is ignored
        const watcher = (event) => finish(event.getType() === this._zk.Event.NODE_DELETED ? 'deleted' : 'changed')
        client.exists(path, watcher, (error, s) => {
          if (error) finish(null, error)
          else if (!s) finish('no_node')
        })
      })
    }

    // -- operator queries: who holds it? which locks are held? elections' leaders --
    //
    // The core phrases every call and reads every reply: the holder is the lowest
    // contender, as the lock recipe orders them, and its metadata is its node's data.

    /** One inspection call's reply text, bounded by the session timeout. */
    async _query (what, name, request) {
      return this._operatorReply(what, name, () => bounded(this.execute(request, {}), this._sessionTimeoutMs))
    }

    /**
     * Who holds lock `name` now: the lowest contender node under its path (as the lock
     * recipe and kazoo's Lock order them), or null when there is none. `{ name, owner
     * (from the node's name; a kazoo Lock's uuid), token (the node's czxid), ttlLeftMs
     * (null: the node lives as long as its session, whose deadline the server does not
     * tell), waiters (the contender nodes behind it), metadata (the node's data when it
     * is a JSON object of strings: what a lock with the metadata option writes) }`. Two
     * round trips; if the holder leaves in between, the listing is read again (at most
     * 4 times, then BackendError). Rejects with BackendError (unreachable),
     * ProtocolError (an error reply, an expired session among them), ConfigError (a name
     * that is not a string).
     */
    async inspect (name) {
      check.string(name, 'lock name')
      const settings = { root: this._root, naming: this._naming }
      for (let i = 0; i < INSPECT_TRIES; i++) {
        const first = translate(() => native.zookeeperInspect(settings, name))
        const listed = this._operatorResult('inspect', name, native.readZookeeperContenders(settings, name, await this._query('inspect', name, first)))
        if (listed.node === null) return null
        const { get, path, waiters } = listed.node
        const read = this._operatorResult('inspect', name, native.readZookeeperHolder(settings, name, path, waiters, await this._query('inspect', name, get)))
        if (read.holder !== null) return holder(read.holder)
      }
      throw new BackendError(`inspect(${JSON.stringify(name)}): the holder left before its node could be read, ${INSPECT_TRIES} times in a row`)
    }

    /**
     * The held locks whose names start with `prefix` (default ''), at most
     * `options.limit` (default 100), sorted by name: one getChildren of the root
     * (ZooKeeper answers it whole), then `inspect` of each matching name in order until
     * `limit` held locks are found. Names with a '/' (nested paths) are not listed.
     * Rejects as `inspect`, and with ConfigError for a prefix that is not a string or a
     * limit that is not an integer >= 1.
     */
    async list (prefix = '', options) {
      const limit = check.listArguments(prefix, options)
      const settings = { root: this._root, naming: this._naming }
      const request = translate(() => native.zookeeperListNames(settings))
      const { names } = this._operatorResult('list', prefix, native.readZookeeperList(prefix, await this._query('list', prefix, request)))
      const found = []
      for (const name of names) {
        if (found.length >= limit) break
        const h = await this.inspect(name)
        if (h !== null) found.push(h)
      }
      return found
    }

    /** An election keeps its leader's record as the holder node's data. */
    _keepsLeaderMetadata () { return true }

    /** The leader of election `name` as `Election.leader()` reads it: the holder's
     * metadata as the record `{ identity, value }`, or null when nobody holds it. */
    async _leader (name) {
      return leaderOf(await this.inspect(name))
    }

    // -- fenced writes --

    /** The full path of `lease`'s own node, or null when it is gone. Retries while the
     * client reconnects, for one session timeout; an expired session's node is gone. */
    async _holderNode (lease) {
      const path = this.lockPath(lease.name)
      const prefix = this.nodePrefix(lease.name, lease.ownerId)
      const until = performance.now() + this._sessionTimeoutMs
      for (let delay = 50; ; delay = Math.min(delay * 2, 500)) {
        try {
          // bounded: a call queued while the client finds its session expired is never
          // answered by the client
          const [children] = await bounded(call((cb) => this._client.getChildren(path, cb)), Math.max(until - performance.now(), 1))
          const node = children.find((c) => c.startsWith(prefix))
          return node === undefined ? null : `${path}/${node}`
        } catch (error) {
          const code = codeOf(error)
          if (code === NO_NODE || code === SESSION_EXPIRED || this._expired) return null
          if (performance.now() + delay > until) {
            throw new BackendError(`ZooKeeper unreachable for ${this._sessionTimeoutMs} ms while checking the holder node of ${JSON.stringify(lease.name)}: nothing was written`, { cause: error })
          }
          await new Promise((resolve) => setTimeout(resolve, delay))
        }
      }
    }

    /**
     * Runs a multi-op transaction only while `lease` holds its lock: the first operation
     * checks the lease's own node (it exists, at data version 0), then `build(txn)` adds
     * the writes (node-zookeeper-client's Transaction: `create`, `setData`, `remove`,
     * `check`). Resolves to the client's results of the writes. Rejects with
     * StaleTokenError (the lease's node is gone: the lock was lost or released, or its
     * session expired; nothing was written; `highest` 0n) or BackendError (ZooKeeper
     * unreachable for one session timeout before the transaction was sent; the
     * connection lost with it in flight, when it may or may not have been applied; a
     * write of its own failed, named with ZooKeeper's error).
     */
    async fencedCommit (lease, build) {
      if (typeof build !== 'function') throw new ConfigError(`build must be a function adding the writes to a transaction, got ${check.describe(build)}`)
      const resource = this.lockPath(lease.name)
      const stale = () => new StaleTokenError(`fenced transaction refused: lease ${lease.token} of ${JSON.stringify(lease.name)} no longer holds the lock (its node is gone)`, resource, lease.token, 0n)
      const node = await this._holderNode(lease)
      if (node === null) throw stale()
      const txn = this._checked(node, 0)
      await build(txn)
      let ops
      try {
        ops = await this._commit(txn)
      } catch (error) {
        if (codeOf(error) === SESSION_EXPIRED || this._expired) throw stale()
        if (error instanceof FencepostError) throw error
        throw new BackendError(`fenced transaction of ${JSON.stringify(lease.name)}: ${codeOf(error) === -4 ? 'the connection was lost with the transaction in flight; it may or may not have been applied' : describeError(error)}`, { cause: error })
      }
      const outcome = native.readZookeeperFenced(toJson({ results: results(ops) }))
      if (!outcome.ok) {
        const failed = ops.slice(1).find((r) => r.err !== undefined && r.err !== 0 && r.err !== -2)
        throw new BackendError(`fenced transaction of ${JSON.stringify(lease.name)} failed: ${failed ? KINDS.get(failed.err) ?? failed.err : outcome.protocol}`)
      }
      if (!outcome.applied) throw stale()
      return ops.slice(1)
    }
  }

  /** The most listings one inspection makes (the core's ZK_INSPECT_TRIES). */
  const INSPECT_TRIES = 4

  /** A holder the native reader gave: its metadata's JSON text parsed. */
  function holder (h) {
    return Object.freeze({ ...h, metadata: h.metadata === null ? null : Object.freeze(JSON.parse(h.metadata)) })
  }

  /** What `Election.leader()` reads of a holder: its metadata as the leader's record. */
  function leaderOf (found) {
    if (found === null) return null
    const meta = found.metadata
    if (meta === null || typeof meta.identity !== 'string') return { token: found.token, value: null, pending: true }
    return { token: found.token, value: JSON.stringify({ identity: meta.identity, value: meta.value ?? null }), pending: false }
  }

  /** A multi's per-operation results as the core reads them: true, or the error kind. */
  function results (ops) {
    return ops.map((r) => r.err === undefined || r.err === 0 ? true : KINDS.get(r.err) ?? `error_${r.err}`)
  }

  return { ZooKeeperBackend }
}

module.exports = { createZooKeeper }
