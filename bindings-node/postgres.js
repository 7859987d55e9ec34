'use strict'
// PostgreSQL from Node: the lock machine's SQL run with node-postgres (`pg`: Client,
// Pool) or postgres.js. Node-only, outside the shared js/: WebAssembly hosts (workers,
// browsers) have no sockets to reach PostgreSQL, so the WASM package carries none of it.
//
// Three ways to lock, the same as Python's fencepost.postgres (README, "Choosing a
// PostgreSQL mode"):
//
// * lease rows (`mode: 'lease'`, the default): a row per lock name in `fencepost_leases`
//   with owner, token and expiry on the server's clock; every statement runs on any
//   connection (a pool, a single client, postgres.js, PgBouncer in transaction mode).
// * session advisory locks (`mode: 'session'`): `pg_try_advisory_lock` on a connection
//   the backend opens for each lock (`connectionString` or `connect`), a heartbeat every
//   ttl/3, the connection closed after the lock's final event. Refused (ProtocolError)
//   when a transaction-pooling proxy shares one server session between clients.
// * transaction advisory locks (`xactLock`): the caller's work in one transaction that
//   took `pg_try_advisory_xact_lock` first; the lock ends with the commit or rollback.
//
// Statements come from the core with `$1…$n` placeholders, which both clients take as
// they are; they run unprepared (PgBouncer in transaction mode cannot keep prepared
// statements). A server error (an error carrying a SQLSTATE) goes to the machine as
// `{ sqlstate, message }`, which decides whether it is transient; any other failure is a
// transport failure: the outcome is unknown.

const check = require('./dist/js/check.js')
const { describeError, emitWarning } = require('./dist/js/driver.js')
const { translate } = require('./dist/js/errors.js')

/** The settings the core reads: table names and the advisory-key namespace. */
const SETTINGS = ['leaseTable', 'tokenTable', 'namespace']
const INT_TYPES = new Set([20, 21, 23, 26]) // int8, int2, int4, oid
const BOOL_TYPE = 16
/** node-postgres type parsers for fencepost's own statements: integers as bigint (int8
 * holds tokens and milliseconds past 2^53), booleans, everything else as text. */
const PG_TYPES = {
  getTypeParser: (oid) => INT_TYPES.has(oid) ? BigInt : oid === BOOL_TYPE ? (v) => v === 't' : (v) => v
}
const SQLSTATE = /^[0-9A-Z]{5}$/

function createPostgres (native, fp) {
  const { Backend, ConfigError, BackendError, ProtocolError, AcquireTimeoutError, StaleTokenError, FencepostError } = fp

  // ---- clients ----------------------------------------------------------------------------

  const isPostgresJs = (c) => typeof c === 'function' && typeof c.unsafe === 'function' && typeof c.begin === 'function'
  const isPgPool = (c) => c !== null && typeof c === 'object' && typeof c.query === 'function' && typeof c.connect === 'function' && 'totalCount' in c && 'idleCount' in c
  const isPgClient = (c) => c !== null && typeof c === 'object' && typeof c.query === 'function' && typeof c.connect === 'function' && 'connectionParameters' in c && !isPgPool(c)

  /** What kind of client `c` is: 'pg-pool', 'pg-client', 'postgres.js', or null. */
  function clientKind (c) {
    return isPgPool(c) ? 'pg-pool' : isPgClient(c) ? 'pg-client' : isPostgresJs(c) ? 'postgres.js' : null
  }

  /** bigint parameters as decimal text: every statement casts its parameters, and both
   * clients send text as a parameter of unknown type for the server to cast. */
  const param = (v) => typeof v === 'bigint' ? v.toString() : v

  /** Runs `sql` with `params` on `client` (any kind, or a postgres.js transaction); resolves
   * to `{ rows, count }` (rows as arrays: integers bigint, booleans, text) and rejects as
   * the client does. */
  async function query (client, sql, params) {
    const values = params.map(param)
    if (typeof client === 'function') { // postgres.js, or one of its transactions
      const result = await client.unsafe(sql, values, { prepare: false }).values()
      const columns = result.columns || []
      const rows = Array.from(result, (row) => row.map((cell, i) => {
        const column = columns[i]
        return typeof cell === 'string' && column && INT_TYPES.has(column.type) ? BigInt(cell) : cell
      }))
      return { rows, count: result.count ?? rows.length }
    }
    const result = await client.query({ text: sql, values, rowMode: 'array', types: PG_TYPES })
    return { rows: result.rows || [], count: result.rowCount ?? 0 }
  }

  /** A server error reply (an error carrying a SQLSTATE: pg's DatabaseError, postgres.js's
   * PostgresError) as `{ sqlstate, message }`, else null. */
  function errorReply (error) {
    if (!(error instanceof Error) || typeof error.code !== 'string' || !SQLSTATE.test(error.code)) return null
    const name = error.constructor && error.constructor.name
    if (name !== 'DatabaseError' && name !== 'PostgresError' && error.name !== 'PostgresError') return null
    return { sqlstate: error.code, message: error.message || name }
  }

  /** The reply of `stmt` on `client`: its rows, or `{ sqlstate, message }` for a server
   * error; throws for a transport failure. */
  async function run (client, stmt) {
    try {
      return (await query(client, stmt.sql, stmt.params)).rows
    } catch (error) {
      const reply = errorReply(error)
      if (reply === null) throw error
      return reply
    }
  }

  const ignore = () => {}

  /** A dedicated connection: `{ client, dead, close }`; `dead` once the server dropped it. */
  async function dedicated (made) {
    const client = await made
    const kind = clientKind(client)
    if (kind === 'pg-client') {
      const conn = { client, dead: false, close: () => client.end().catch(ignore) }
      client.on('error', ignore) // failures surface as rejected queries
      client.on('end', () => { conn.dead = true })
      if (client._connected !== true && client._connecting !== true) await client.connect()
      return conn
    }
    if (kind === 'postgres.js') {
      if (!client.options || client.options.max !== 1) {
        throw new ConfigError('connect() must return a postgres.js instance with max: 1 (postgres(url, { max: 1 })): a session lock lives on one connection')
      }
      return { client, dead: false, close: () => Promise.resolve(client.end({ timeout: 0 })).catch(ignore) }
    }
    throw new ConfigError(`connect() must return a pg.Client (or a promise of one) or a postgres.js instance with max: 1, got ${check.describe(client)}`)
  }

  function loadPg () {
    try {
      return require('pg')
    } catch (error) {
      throw new ConfigError('connectionString needs node-postgres: npm install pg (or pass connect: a factory of connections)', { cause: error })
    }
  }

  // ---- the listening connection of waiters ---------------------------------------------------

  /** How long the listener keeps its connection after its last waiter left (ms). */
  const LINGER_MS = 30_000
  /** The pause before the listener connects again after losing its connection (ms). */
  const RECONNECT_MS = 500

  /**
   * The backend's LISTEN connection, shared by the waiters of every lock. A wait answers
   * at once when its release may have been missed: the channel was not listened to yet
   * when the lock's acquire was sent (its LISTEN came later, or the connection was lost
   * and listened again), or a notification on it came after that send. Sequence numbers
   * order these events against the acquire's mark. Without a way to connect, waits last
   * their timeout (the polling fallback).
   */
  class Listener {
    constructor (open) {
      this._open = open // () => Promise<{ listen(channel, sql), close() }> | null
      this.seq = 0
      this._listened = new Map() // channel → seq of its LISTEN on the connection
      this._notified = new Map() // channel → seq of its last notification
      this._waiters = new Map() // channel → Set of wake functions
      this._conn = null // a promise of the connection
      this._linger = null
      this._closed = false
    }

    /** Resolves once a release on `channel` may have come after `mark`, or after
     * `timeoutMs`, or when `signal` aborts: always with no rows (try again). */
    wait (channel, sql, mark, timeoutMs, signal) {
      return new Promise((resolve) => {
        const listened = this._listened.get(channel)
        if (listened !== undefined && (listened > mark || (this._notified.get(channel) ?? -1) > mark)) {
          resolve([])
          return
        }
        let timer = null
        const done = () => {
          clearTimeout(timer)
          if (signal) signal.removeEventListener('abort', done)
          const set = this._waiters.get(channel)
          if (set !== undefined) {
            set.delete(done)
            if (set.size === 0) this._waiters.delete(channel)
          }
          this._idle()
          resolve([])
        }
        timer = setTimeout(done, timeoutMs)
        if (signal) signal.addEventListener('abort', done, { once: true })
        if (!this._waiters.has(channel)) this._waiters.set(channel, new Set())
        this._waiters.get(channel).add(done)
        clearTimeout(this._linger)
        if (listened === undefined) this._listen(channel, sql)
      })
    }

    _wake (channel) {
      this._notified.set(channel, ++this.seq)
      const set = this._waiters.get(channel)
      if (set !== undefined) for (const wake of [...set]) wake()
    }

    async _listen (channel, sql) {
      if (this._closed || this._open === null) return
      try {
        this._conn ??= this._open({
          notified: (ch) => this._wake(ch),
          lost: () => this._lost()
        })
        const conn = await this._conn
        if (this._listened.has(channel)) return
        await conn.listen(channel, sql)
        this._listened.set(channel, ++this.seq)
        this._wake(channel) // a release between the acquire and this LISTEN went unheard
      } catch (error) {
        this._lost() // waiters poll meanwhile (their timeout)
      }
    }

    /** The connection is gone: nothing is listened to; the waiters' channels listen again. */
    _lost () {
      const conn = this._conn
      this._conn = null
      this._listened.clear()
      if (conn !== null) conn.then((c) => c.close(), ignore)
      if (this._closed || this._waiters.size === 0) return
      const retry = setTimeout(() => {
        for (const channel of this._waiters.keys()) this._listen(channel, `LISTEN ${channel}`)
      }, RECONNECT_MS)
      retry.unref?.()
    }

    _idle () {
      if (this._waiters.size > 0 || this._conn === null) return
      clearTimeout(this._linger)
      this._linger = setTimeout(() => this.close(false), LINGER_MS)
      this._linger.unref?.()
    }

    close (forever = true) {
      if (forever) this._closed = true
      clearTimeout(this._linger)
      const conn = this._conn
      this._conn = null
      this._listened.clear()
      if (conn !== null) conn.then((c) => c.close(), ignore)
    }
  }

  /** A listening connection of node-postgres made by `make()` (a new pg.Client). */
  async function pgListening (make, events) {
    const client = make()
    client.on('error', ignore) // a lost connection surfaces as 'end'
    client.on('end', () => events.lost())
    client.on('notification', (msg) => events.notified(msg.channel))
    await client.connect()
    // the listener alone must not keep the process alive
    client.connection && client.connection.stream && client.connection.stream.unref?.()
    return { listen: (channel, sql) => client.query(sql), close: () => client.end().catch(ignore) }
  }

  /** Listening through postgres.js's own listen(), which keeps a connection for it and
   * listens again after a reconnect (each time calling its onlisten). */
  function postgresJsListening (sql, events) {
    const unlisten = []
    return Promise.resolve({
      listen: async (channel) => {
        let first = true
        const handle = await sql.listen(channel, () => events.notified(channel), () => {
          if (!first) events.notified(channel) // listened again: what came meanwhile went unheard
          first = false
        })
        unlisten.push(handle.unlisten)
      },
      close: () => Promise.all(unlisten.map((u) => u().catch(ignore)))
    })
  }

  // ---- the backend ------------------------------------------------------------------------

  /**
   * Locks on PostgreSQL through node-postgres (`pg.Pool`, `pg.Client`) or postgres.js; see
   * fencepost.d.ts (`PostgresBackend`) for the options, modes and errors.
   */
  /** A holder the native reader gave: its metadata's JSON text parsed. */
  function holder (h) {
    return Object.freeze({ ...h, metadata: h.metadata === null ? null : Object.freeze(JSON.parse(h.metadata)) })
  }

  class PostgresBackend extends Backend {
    constructor (client, options) {
      const o = check.plainObject(options, 'PostgresBackend options')
      const mode = o.mode === undefined ? 'lease' : check.string(o.mode, 'mode')
      if (mode !== 'lease' && mode !== 'session') {
        throw new ConfigError(`mode must be 'lease' or 'session', got ${check.describe(o.mode)}`, { option: 'mode' })
      }
      const settings = {}
      for (const key of SETTINGS) if (o[key] !== undefined) settings[key] = check.string(o[key], key)
      translate(() => native.postgresMigration(settings)) // ConfigError for a bad table name
      const kind = client === undefined || client === null ? null : clientKind(client)
      if (client !== undefined && client !== null && kind === null) {
        // options in the client's place: session mode without a client takes null first
        const optionsFirst = typeof client === 'object' && options === undefined && ('connectionString' in client || 'mode' in client || 'connect' in client)
        const hint = optionsFirst ? ': options go second, after null when there is no client (new PostgresBackend(null, { mode: \'session\', connectionString }))' : ''
        throw new ConfigError(`client must be a pg.Pool, a pg.Client or a postgres.js instance, got ${check.describe(client)}${hint}`)
      }
      const connectionString = o.connectionString === undefined ? null : check.string(o.connectionString, 'connectionString')
      if (o.connect !== undefined && typeof o.connect !== 'function') {
        throw new ConfigError(`connect must be a function returning a connection, got ${check.describe(o.connect)}`, { option: 'connect' })
      }
      const connect = o.connect ?? null
      if (connectionString !== null && connect !== null) throw new ConfigError('pass connectionString or connect, not both')
      if (mode === 'lease' && kind === null) {
        throw new ConfigError('lease mode needs a client: a pg.Pool (best), a pg.Client or a postgres.js instance')
      }
      if (mode === 'session' && connectionString === null && connect === null) {
        const given = kind === 'pg-pool' ? 'a pool' : kind !== null ? 'a shared client' : 'nothing'
        throw new ConfigError(`session mode needs a dedicated connection per lock: pass connectionString (node-postgres) or connect (a factory of connections); got ${given}. A pool's connections serve other users between statements, who would share or free a session-level advisory lock`)
      }
      const notify = o.notify === undefined ? true : o.notify
      if (typeof notify !== 'boolean') throw new ConfigError(`notify must be true or false, got ${check.describe(o.notify)}`, { option: 'notify' })
      const listenConnectionString = o.listenConnectionString === undefined ? null : check.string(o.listenConnectionString, 'listenConnectionString')
      super()
      this._mode = mode
      this._notify = notify
      this._listenConnectionString = listenConnectionString
      /** the waiters' listening connection, made on the first wait */
      this._listener = null
      /** lock id → the listener's sequence number when its last acquire was sent */
      this._marks = new Map()
      this._settings = settings
      this._client = client ?? null
      this._kind = kind
      this._connectionString = connectionString
      this._connect = connect
      /** a single pg.Client: whether the server dropped it, and the one opened instead */
      this._single = null
      if (kind === 'pg-client') {
        this._single = { client, dead: false, replacement: null, reconnecting: null }
        client.on('end', () => { if (this._single.client === client) this._single.dead = true })
      }
      /** lock id → { conn, opening, inFlight, finished } (session mode) */
      this._dedicated = new Map()
    }

    _machineOptions () {
      return { kind: 'postgres', mode: this._mode, notify: this._notify, ...this._settings }
    }

    /** 'lease' or 'session'. */
    get mode () { return this._mode }
    /** The lease table ('fencepost_leases'). */
    get leaseTable () { return this._settings.leaseTable ?? 'fencepost_leases' }
    /** The per-name token table ('fencepost_tokens'). */
    get tokenTable () { return this._settings.tokenTable ?? 'fencepost_tokens' }
    /** The namespace of advisory keys ('fencepost'). */
    get namespace () { return this._settings.namespace ?? 'fencepost' }
    /** Whether releases notify and waiters listen (LISTEN/NOTIFY; default true). */
    get notify () { return this._notify }
    /** What the client given is: 'pg-pool', 'pg-client', 'postgres.js', or null. */
    get clientKind () { return this._kind }

    /** The advisory-lock key of lock `name` in this backend's namespace (a bigint). */
    advisoryKey (name) {
      return native.advisoryKey(this.namespace, check.string(name, 'lock name'))
    }

    // -- running the machine's requests --

    execute (request, options) {
      if (request === null || typeof request !== 'object' || request.backend !== 'sql') {
        throw new ConfigError(`a PostgresBackend cannot run ${check.describe(request)}`)
      }
      if (request.connection === 'listen') return this._wait(request, options)
      if (this._notify && request.operation === 'acquire') {
        // before the send: a release after it is heard by a wait that follows
        this._marks.set(request.lock, this._listening().seq)
      }
      if (request.connection === 'any') return this._any(request)
      return this._onDedicated(request)
    }

    _wait (request, options) {
      const [channel, timeoutMs] = request.params
      const mark = this._marks.get(request.lock) ?? -1
      const signal = options && options.signal ? options.signal : null
      return this._listening().wait(channel, request.sql, mark, Number(timeoutMs), signal)
    }

    _listening () {
      if (this._listener === null) this._listener = new Listener(this._listenOpener())
      return this._listener
    }

    /** How the listener connects: listenConnectionString, connectionString, the pool's or
     * the single client's parameters, or postgres.js's listen(); null with only a
     * `connect` factory (waiters then poll). */
    _listenOpener () {
      const cs = this._listenConnectionString ?? this._connectionString
      if (cs !== null) return (events) => pgListening(() => new (loadPg().Client)({ connectionString: cs }), events)
      if (this._kind === 'pg-pool') return (events) => pgListening(() => new (this._client.Client ?? loadPg().Client)(this._client.options), events)
      if (this._kind === 'pg-client') {
        const given = this._client
        return (events) => pgListening(() => new given.constructor(given.connectionParameters), events)
      }
      if (this._kind === 'postgres.js') return (events) => postgresJsListening(this._client, events)
      return null
    }

    async _any (stmt) {
      if (this._kind !== 'pg-client') return run(this._client, stmt)
      return run(await this._singleClient(), stmt)
    }

    /** The single pg.Client given, or, once the server dropped it, a new one with its
     * parameters (a lease survives a dropped connection as it does with a pool). */
    async _singleClient () {
      const single = this._single
      if (!single.dead) return single.client
      if (single.reconnecting === null) {
        const dead = single.client
        single.reconnecting = (async () => {
          const fresh = new dead.constructor(dead.connectionParameters)
          fresh.on('error', ignore) // failures surface as rejected queries
          await fresh.connect()
          fresh.on('end', () => { if (single.client === fresh) single.dead = true })
          emitWarning(`the PostgreSQL connection was dropped (host=${dead.host} port=${dead.port} database=${dead.database}); fencepost connected again with its parameters`, 'FENCEPOST_PG_RECONNECTED')
          if (single.replacement !== null) single.replacement.end().catch(ignore)
          single.client = single.replacement = fresh
          single.dead = false
        })().finally(() => { single.reconnecting = null })
      }
      await single.reconnecting
      return single.client
    }

    async _onDedicated (request) {
      let entry = this._dedicated.get(request.lock)
      if (entry === undefined) {
        if (request.operation !== 'acquire') {
          // only a lock's cleanups come after its connection was closed; closing it ended
          // the session and every advisory lock it held: not held, as the owner-checked
          // unlock would have found (no rows)
          return []
        }
        entry = { conn: null, opening: null, inFlight: 0, finished: false }
        this._dedicated.set(request.lock, entry)
      }
      entry.inFlight += 1
      try {
        if (entry.conn === null || entry.conn.dead) {
          if (entry.conn !== null) entry.conn.close() // the session, and the lock with it, is gone
          entry.conn = null
          entry.opening ??= this._open().finally(() => { entry.opening = null })
          entry.conn = await entry.opening
        }
        const conn = entry.conn
        try {
          return await run(conn.client, request)
        } catch (error) {
          // a broken connection: the next statement of this lock opens a new one, which
          // does not hold the lock (the heartbeat then reads "not held")
          if (conn.dead && entry.conn === conn) entry.conn = null
          throw error
        }
      } finally {
        entry.inFlight -= 1
        this._closeIfDone(request.lock, entry)
      }
    }

    /** A new dedicated connection (session mode), or one for a helper's single use. */
    _open () {
      if (this._connect !== null) return dedicated(this._connect())
      const pg = loadPg()
      return dedicated(new pg.Client({ connectionString: this._connectionString }))
    }

    _lockFinished (lock) {
      this._marks.delete(lock)
      const entry = this._dedicated.get(lock)
      if (entry === undefined) return
      entry.finished = true
      this._closeIfDone(lock, entry)
    }

    _closeIfDone (lock, entry) {
      if (!entry.finished || entry.inFlight > 0 || this._dedicated.get(lock) !== entry) return
      this._dedicated.delete(lock)
      if (entry.conn !== null) entry.conn.close()
      else if (entry.opening !== null) entry.opening.then((conn) => conn.close(), ignore)
    }

    /**
     * Stops this backend (Backend.close): locks are released (best effort) and, once
     * those statements are done, every dedicated connection is closed, and so is a
     * connection opened in place of a dropped single client. The client given stays its
     * owner's.
     */
    close () {
      if (this._closed) return
      super.close()
      if (this._listener !== null) this._listener.close()
      // after the releases the driver just queued (microtasks) have been handed over
      queueMicrotask(() => {
        for (const [lock, entry] of this._dedicated) {
          entry.finished = true
          this._closeIfDone(lock, entry)
        }
      })
      const replacement = this._single && this._single.replacement
      if (replacement) replacement.end().catch(ignore)
    }

    // -- migrations, operators, transaction locks --

    /** Runs `fn(client)` on the client given, or on a connection opened for it and closed
     * after (session mode without a client). */
    async _withClient (fn) {
      if (this._client !== null) return fn(this._kind === 'pg-client' ? await this._singleClient() : this._client)
      const conn = await this._open()
      try {
        return await fn(conn.client)
      } finally {
        await conn.close()
      }
    }

    /**
     * Creates fencepost's tables if missing (`postgresMigration()`), idempotent. Runs on the
     * client given or, without one, on a connection opened for it. Rejects with the
     * client's error when the server refuses it, BackendError when it cannot be reached.
     */
    async migrate () {
      const statements = postgresMigration(this._settings).split(';').map((s) => s.trim()).filter(Boolean)
      try {
        await this._withClient(async (client) => {
          for (const sql of statements) await query(client, sql, [])
        })
      } catch (error) {
        if (errorReply(error) !== null || error instanceof FencepostError) throw error
        throw new BackendError(`migrate() failed: ${describeError(error)}`, { cause: error })
      }
    }

    async _lockState (what, name, force) {
      check.string(name, 'lock name')
      const stmt = translate(() => native.lockStateStatement(this._settings, name, force))
      const reply = await this._operatorReply(what, name, () => this._withClient((c) => run(c, stmt)))
      const state = this._operatorResult(what, name, native.readLockState(reply))
      if (force && !state.lease && state.advisoryPid !== null) {
        const pid = state.advisoryPid
        throw new ConfigError(`lock ${JSON.stringify(name)} is held by a PostgreSQL advisory lock (session mode or xactLock) of server process ${pid}: only its own session can free an advisory lock. End that session with SELECT pg_terminate_backend(${pid}) (the holder's next heartbeat then reports the loss), or use lease rows (mode: 'lease'), which forceRelease frees`, { kind: 'unsupported' })
      }
      return state.lease || (!force && state.advisoryPid !== null)
    }

    /** Whether lock `name` is held now: a live lease row, or a session holding its
     * advisory lock (session mode, xactLock). Errors as Backend.isLocked. */
    async isLocked (name) {
      return this._lockState('isLocked', name, false)
    }

    /** Frees lock `name`'s live lease row whoever holds it (the token kept); resolves to
     * whether one was freed. ConfigError (kind 'unsupported') when an advisory lock holds
     * the name: only its session can free it. */
    async forceRelease (name) {
      return this._lockState('forceRelease', name, true)
    }

    _rowsOnly (what) {
      if (this._mode !== 'lease') {
        throw new ConfigError(`PostgresBackend (mode '${this._mode}') does not support ${what}(): advisory locks keep no row to read a holder from (inspect, list and election followers work on lease rows, mode: 'lease')`, { kind: 'unsupported' })
      }
    }

    async _holders (what, name, stmt) {
      const reply = await this._operatorReply(what, name, () => this._withClient((c) => run(c, stmt)))
      return this._operatorResult(what, name, native.readPgHolders(reply)).holders.map(holder)
    }

    /**
     * Who holds lock `name` now (lease rows): `{ name, owner, token (bigint), ttlLeftMs
     * (from the row's expiry on the server's clock), waiters (null: lease-row contenders
     * leave no trace), metadata }`, or null when no live row holds it. One statement.
     * ConfigError (kind 'unsupported') in session mode: advisory locks keep no row.
     */
    async inspect (name) {
      this._rowsOnly('inspect')
      check.string(name, 'lock name')
      const stmt = translate(() => native.pgInspectStatement(this._settings, name))
      const found = await this._holders('inspect', name, stmt)
      return found.length === 0 ? null : found[0]
    }

    /**
     * The held locks (live lease rows) whose names start with `prefix` (default ''), at
     * most `options.limit` (1 ..= 10000, default 100), in name order: one bounded
     * statement (`LIKE` with the prefix's metacharacters escaped, `ORDER BY name LIMIT`).
     * ConfigError in session mode (kind 'unsupported'), for a prefix that is not a
     * string or a limit out of range.
     */
    async list (prefix = '', options) {
      this._rowsOnly('list')
      const limit = check.listArguments(prefix, options, 10000)
      const stmt = translate(() => native.pgListStatement(this._settings, prefix, limit))
      return this._holders('list', prefix, stmt)
    }

    /** Lease rows keep an election leader's record as the row's metadata. */
    _keepsLeaderMetadata () { return this._mode === 'lease' }

    /** The leader of election `name` as `Election.leader()` reads it (lease rows): the
     * holder's metadata as the record, or null when nobody holds it. */
    async _leader (name) {
      if (this._mode !== 'lease') {
        throw new ConfigError(`PostgresBackend (mode '${this._mode}') cannot say who leads an election: advisory locks keep no row for the leader's record (leader() and observe() work on lease rows, mode: 'lease')`, { kind: 'unsupported' })
      }
      const found = await this.inspect(name)
      if (found === null) return null
      const meta = found.metadata
      if (meta === null || typeof meta.identity !== 'string') return { token: found.token, value: null, pending: true }
      return { token: found.token, value: JSON.stringify({ identity: meta.identity, value: meta.value ?? null }), pending: false }
    }

    /**
     * `xactLock(client, name, work, options)` with this backend's tables and namespace;
     * `options.client` defaults to the pool or postgres.js instance given (a single
     * pg.Client is refused: the backend's renewals would run inside the transaction).
     */
    async xactLock (name, work, options) {
      const o = check.plainObject(options, 'xactLock options')
      let client = o.client
      if (client === undefined) {
        if (this._kind === 'pg-client' || this._kind === null) {
          throw new ConfigError(`xactLock needs options.client here: this backend has ${this._kind === null ? 'no client' : 'a single pg.Client, whose renewals and releases would run inside the transaction'}; pass a pg.Client / pool client of its own, a pg.Pool or a postgres.js instance`)
        }
        client = this._client
      }
      return xactLock(client, name, work, { timeoutMs: o.timeoutMs, ...this._settings })
    }

    /** Not on PostgreSQL: use `fencedUpdate`. Rejects with ConfigError. */
    async fencedSet () {
      throw new ConfigError('fencedSet is a Redis helper; on PostgreSQL use fencedUpdate(client, table, …)')
    }
  }

  // ---- helpers ------------------------------------------------------------------------------

  /** The SQL creating fencepost's tables (idempotent); ConfigError for a bad table name. */
  function postgresMigration (settings) {
    const o = check.plainObject(settings, 'settings')
    const s = {}
    for (const key of ['leaseTable', 'tokenTable']) if (o[key] !== undefined) s[key] = check.string(o[key], key)
    return translate(() => native.postgresMigration(s))
  }

  /** The stable advisory-lock key of `name` in `namespace` (a bigint). */
  function advisoryKey (name, namespace = 'fencepost') {
    return native.advisoryKey(check.string(namespace, 'namespace'), check.string(name, 'lock name'))
  }

  /** How `xactLock` waits: null to try once, else the transaction's lock_timeout. */
  function lockTimeout (timeoutMs) {
    if (timeoutMs === undefined || timeoutMs === 0) return null
    if (timeoutMs === null || timeoutMs === Infinity) return '0' // no limit
    check.millis(timeoutMs, 'timeoutMs')
    return `${Math.max(1, Math.ceil(timeoutMs))}ms`
  }

  function notGranted (name, timeout) {
    const error = new AcquireTimeoutError(name, null)
    error.message = `could not acquire lock ${JSON.stringify(name)}: ` + (timeout === null
      ? 'another transaction holds it (xactLock tries exactly once with timeoutMs 0; retry the transaction)'
      : 'a lease row of the name is live (xactLock waits on the server for advisory holders only; retry the transaction)')
    return error
  }

  /** Takes the lock as the transaction's first statement on `tx`; resolves to the token. */
  async function takeXact (tx, name, stmt, timeout) {
    let previous = null
    if (timeout !== null) {
      const { rows } = await query(tx, "SELECT current_setting('lock_timeout'), set_config('lock_timeout', $1, true)", [timeout])
      previous = rows[0][0]
    }
    let reply
    try {
      reply = (await query(tx, stmt.sql, stmt.params)).rows
    } catch (error) {
      const sqlError = errorReply(error)
      if (sqlError === null) throw new BackendError(`xactLock(${JSON.stringify(name)}) failed: ${describeError(error)}`, { cause: error })
      if (sqlError.sqlstate === '55P03') { // lock_not_available: the lock_timeout passed
        const timedOut = new AcquireTimeoutError(name, sqlError.message)
        timedOut.message = `could not acquire lock ${JSON.stringify(name)} within the timeout: another transaction or session held it for longer (lock_timeout ${timeout})`
        throw timedOut
      }
      reply = sqlError
    }
    const read = native.readXactLock(reply)
    if (!read.ok) throw new ProtocolError(`xactLock(${JSON.stringify(name)}): ${read.protocol}`)
    if (read.token === null) throw notGranted(name, timeout)
    // the caller's work runs under its own setting
    if (previous !== null) await query(tx, "SELECT set_config('lock_timeout', $1, true)", [previous])
    return read.token
  }

  /**
   * Runs `work(tx, token)` inside one transaction on `client` that holds the
   * transaction-level advisory lock `name`; commits when it resolves (the work and the
   * token bump together; the lock ends) and rolls back when it throws. See fencepost.d.ts.
   */
  async function xactLock (client, name, work, options) {
    check.string(name, 'lock name')
    if (typeof work !== 'function') throw new ConfigError(`work must be a function (tx, token) => …, got ${check.describe(work)}`)
    const o = check.plainObject(options, 'xactLock options')
    const settings = {}
    for (const key of SETTINGS) if (o[key] !== undefined) settings[key] = check.string(o[key], key)
    const timeout = lockTimeout(o.timeoutMs)
    const stmt = translate(() => native.xactLockStatement(settings, name, timeout !== null))
    const kind = clientKind(client)
    if (kind === 'postgres.js') {
      return client.begin(async (tx) => work(tx, await takeXact(tx, name, stmt, timeout)))
    }
    if (kind === null) throw new ConfigError(`client must be a pg.Pool, a pg.Client or a postgres.js instance, got ${check.describe(client)}`)
    let tx = client
    if (kind === 'pg-pool') {
      try {
        tx = await client.connect()
      } catch (error) {
        throw new BackendError(`xactLock(${JSON.stringify(name)}) could not get a connection: ${describeError(error)}`, { cause: error })
      }
    }
    let broken
    try {
      await query(tx, 'BEGIN', [])
      try {
        const result = await work(tx, await takeXact(tx, name, stmt, timeout))
        await query(tx, 'COMMIT', [])
        return result
      } catch (error) {
        await query(tx, 'ROLLBACK', []).catch((e) => { broken = e })
        throw error
      }
    } finally {
      if (tx !== client) tx.release(broken)
    }
  }

  /**
   * Updates row `rowId` of `table` with `values` only if `token` passes the fence (see
   * `sqlFencedUpdate`), and stores `token` (and `ownerId`) there. See fencepost.d.ts.
   */
  async function fencedUpdate (client, table, options) {
    const o = check.plainObject(options, 'fencedUpdate options')
    const token = check.token(o.token, 'token')
    // 0 is what a fresh row's token column holds: a write with it would pass with no lease
    if (token < 1n) throw new ConfigError(`token must be a fencing token of a lease (a bigint >= 1n), got ${token}n`, { option: 'token' })
    if (o.values === null || typeof o.values !== 'object' || Array.isArray(o.values)) {
      throw new ConfigError(`values must be an object of column to value, got ${check.describe(o.values)}`, { option: 'values' })
    }
    const ownerColumn = o.ownerColumn ?? null
    const ownerId = o.ownerId ?? null
    if ((ownerColumn === null) !== (ownerId === null)) {
      throw new ConfigError(`ownerColumn and ownerId go together (the owner-bound rule); give both, or neither for the token-only rule; got ownerColumn ${check.describe(ownerColumn)}, ownerId ${check.describe(ownerId)}`)
    }
    if (ownerId !== null && !(typeof ownerId === 'string' && /^[0-9a-fA-F]{32}$/.test(ownerId))) {
      throw new ConfigError(`ownerId must be 32 hex digits (lease.ownerId), got ${check.describe(ownerId)}`, { option: 'ownerId' })
    }
    const kind = clientKind(client)
    if (kind === null && typeof client?.unsafe !== 'function') {
      throw new ConfigError(`client must be a pg.Pool, a pg.Client or a postgres.js instance (or transaction), got ${check.describe(client)}`)
    }
    const idColumn = check.string(o.idColumn, 'idColumn')
    const tokenColumn = check.string(o.tokenColumn, 'tokenColumn')
    const columns = Object.keys(o.values)
    const sql = fp.sqlFencedUpdate(table, idColumn, tokenColumn, columns, { ownerColumn })
    const params = [o.rowId, token, ...(ownerId === null ? [] : [ownerId]), ...columns.map((c) => o.values[c])]
    const { count } = await query(client, sql, params)
    if (count > 0) return
    // names were checked by sqlFencedUpdate: plain identifiers, quoted the same way
    const current = `SELECT "${tokenColumn}"${ownerColumn === null ? '' : `, "${ownerColumn}"`} FROM "${table}" WHERE "${idColumn}" = $1`
    const { rows } = await query(client, current, [o.rowId])
    const resource = `${table}:${o.rowId}`
    if (rows.length === 0) {
      const missing = new Error(`fenced update of ${resource}: no row has that id (insert it first, with token 0)`)
      missing.code = 'ERR_ROW_NOT_FOUND'
      throw missing
    }
    const highest = rows[0][0]
    if (typeof highest !== 'bigint') {
      throw new ConfigError(`fenced update of ${resource}: the token column holds ${check.describe(highest)}; make it bigint NOT NULL DEFAULT 0`)
    }
    if (ownerId !== null && highest === token) {
      const message = `fencing token ${token} for ${JSON.stringify(resource)} was granted twice: the row carries it from owner ${JSON.stringify(rows[0][1])} (the lock server handed it out again: a failover, a transaction pooler or a restart without persistence)`
      emitWarning(message, 'FENCEPOST_DUPLICATE_GRANT')
      throw new StaleTokenError(message, resource, token, highest, 'duplicate_grant')
    }
    throw new StaleTokenError(`stale fencing token ${token} for ${JSON.stringify(resource)}: the row already carries token ${highest}`, resource, token, highest)
  }

  return { PostgresBackend, xactLock, fencedUpdate, postgresMigration, advisoryKey }
}

module.exports = { createPostgres }
