'use strict'
// Leader election on the lock API: an Election is a Lock held indefinitely, so a
// leader carries the lease's fencing token and loses leadership when the lease is lost
// (decided by the core's timer like any lease). Nothing here decides validity, renewals
// or tokens. Milliseconds; shared word for word by the napi and WASM packages.

const check = require('./check')
const { ConfigError, LockLostError, StaleTokenError } = require('./errors')

/** Why a term ends (`onStoppedLeading`'s `reason`, `leadership.stopReason`). */
const STOP_REASONS = Object.freeze(['resigned', 'cancelled', 'expired', 'renew_rejected', 'not_held_at_release', 'closed'])

/** The keys an Election takes beside the Lock's options. */
const OWN_KEYS = ['value', 'onStartedLeading', 'onStoppedLeading']

/** What a leader publishes where its backend keeps a value with the lock. */
function record (identity, value) {
  return JSON.stringify({ identity, value })
}

/** A follower's `{ identity, value, token }` of a holder whose stored value is `text`:
 * a fencepost record, or any other text (a candidate of another client) as the value
 * with no identity. */
function readRecord (text, token) {
  let doc = null
  try {
    doc = JSON.parse(text)
  } catch {}
  if (doc !== null && typeof doc === 'object' && !Array.isArray(doc) &&
      Object.keys(doc).sort().join(',') === 'identity,value' &&
      typeof doc.identity === 'string' && (doc.value === null || typeof doc.value === 'string')) {
    return Object.freeze({ identity: doc.identity, value: doc.value, token })
  }
  return Object.freeze({ identity: null, value: text, token })
}

const sleep = (ms, signal) => new Promise((resolve) => {
  // the listener goes with the timer: a follower observing for days adds none per read
  const onAbort = () => { clearTimeout(timer); resolve() }
  const timer = setTimeout(() => { signal?.removeEventListener('abort', onAbort); resolve() }, ms)
  signal?.addEventListener('abort', onAbort, { once: true })
})

function call (callback, ...args) {
  if (callback !== null) callback(...args)
}

/**
 * One term of an Election, from `campaign()`. It ends exactly once, whatever ends it
 * (`resign()`, the lease's loss, the backend closed, the `run()` signal aborted): then
 * `signal` aborts and `onStoppedLeading(leadership, reason)` is called.
 */
class Leadership {
  constructor (election, lease) {
    this._election = election
    this._lease = lease
    this._stopReason = null
    this._controller = new AbortController()
    this._resign = null
    const leaseSignal = lease.signal
    this._onLost = () => this._end(lease.lostReason ?? 'expired', leaseSignal.reason)
    this._leaseSignal = leaseSignal
  }

  _start () {
    if (this._leaseSignal.aborted) {
      queueMicrotask(this._onLost)
    } else {
      this._leaseSignal.addEventListener('abort', this._onLost, { once: true })
    }
  }

  /** The election's name (its lock's). */
  get name () { return this._lease.name }
  /** This candidate's identity. */
  get identity () { return this._election.identity }
  /** This candidate's value, or null. */
  get value () { return this._election.value }
  /** The term's fencing token (the lease's bigint): carry it on every write. */
  get token () { return this._lease.token }
  /** The lease's owner id (32 hex digits). */
  get ownerId () { return this._lease.ownerId }
  /** The lease the term is held by. */
  get lease () { return this._lease }
  /** Aborted when the term ends, for any reason; `reason` is a LockLostError after a
   * loss, else a ConfigError naming the stop reason. */
  get signal () { return this._controller.signal }
  /** null while the term lasts; then one of STOP_REASONS. */
  get stopReason () { return this._stopReason }

  /** Throws the LockLostError if the term was lost, a ConfigError if it ended otherwise;
   * call it before each step and before each write. */
  check () {
    this._lease.check()
    if (this._stopReason !== null) {
      throw new ConfigError(`check(): the leadership of ${JSON.stringify(this.name)} (token ${this.token}n) ended (${this._stopReason}); campaign again before writing`)
    }
  }

  _end (reason, abortReason) {
    if (this._stopReason !== null) return
    this._stopReason = reason
    this._leaseSignal.removeEventListener('abort', this._onLost)
    this._controller.abort(abortReason ?? new ConfigError(`the leadership of ${JSON.stringify(this.name)} ended (${reason})`))
    call(this._election._onStopped, this, reason)
  }

  /**
   * Ends the term now: releases the lease at once (owner-checked; no waiting out the
   * TTL), then calls `onStoppedLeading` with 'resigned' (or the loss reason if the
   * lease had been lost, 'not_held_at_release' if the server no longer held it).
   * Idempotent; never rejects with LockLostError (the reason is in `stopReason`).
   */
  resign () {
    if (this._resign === null) this._resign = this._doResign()
    return this._resign
  }

  async _doResign () {
    if (this._stopReason !== null) return
    try {
      await this._lease.release()
    } catch (error) {
      if (!(error instanceof LockLostError)) throw error
      this._end(error.reason, error)
      return
    }
    this._end('resigned')
  }

  toString () {
    const state = this._stopReason === null ? 'leading' : `ended: ${this._stopReason}`
    return `Leadership(${JSON.stringify(this.name)}, ${JSON.stringify(this.identity)}, token ${this.token}, ${state})`
  }
}

function createElection (Lock) {
  /**
   * A leader election named `name` on `backend`, campaigned for as `identity`, built on
   * Lock: every backend with locks has it. `options`: `value` (a string a leader
   * publishes), `onStartedLeading(leadership)`, `onStoppedLeading(leadership, reason)`
   * (each called once per term, in order), and the Lock's options (`ttlMs`, `purpose`…;
   * `autoRenew: false` is refused: a term lasts as long as its lease is renewed).
   */
  class Election {
    constructor (backend, name, identity, options) {
      check.string(identity, 'identity')
      if (identity === '') throw new ConfigError('identity must be a non-empty string, got "" (string)', { option: 'identity' })
      const o = options === undefined ? {} : check.plainObject(options, 'election options')
      const lockOptions = {}
      for (const key of Object.keys(o)) {
        if (!OWN_KEYS.includes(key)) lockOptions[key] = o[key]
      }
      if (o.value !== undefined && o.value !== null) check.string(o.value, 'value')
      for (const key of ['onStartedLeading', 'onStoppedLeading']) {
        if (o[key] !== undefined && o[key] !== null && typeof o[key] !== 'function') {
          throw new ConfigError(`${key} must be a function or null, got ${check.describe(o[key])}`, { option: key })
        }
      }
      if (lockOptions.autoRenew === false) {
        throw new ConfigError('autoRenew must stay true for an election: a term lasts as long as its lease is renewed', { option: 'autoRenew' })
      }
      if (lockOptions.metadata === undefined && typeof backend._keepsLeaderMetadata === 'function' && backend._keepsLeaderMetadata()) {
        // the record followers read (leader(), observe()), stored with the grant
        lockOptions.metadata = o.value === undefined || o.value === null ? { identity } : { identity, value: o.value }
      }
      this._lock = new Lock(backend, name, lockOptions)
      this._identity = identity
      this._value = o.value ?? null
      this._onStarted = o.onStartedLeading ?? null
      this._onStopped = o.onStoppedLeading ?? null
    }

    get name () { return this._lock.name }
    get identity () { return this._identity }
    get value () { return this._value }
    get backend () { return this._lock.backend }
    get lock () { return this._lock }

    /**
     * Waits until this candidate leads and resolves with the term (after
     * `onStartedLeading`). `options`: `signal` (cancels the campaign: what the server
     * granted is released, nothing is called, rejects with `signal.reason`), `timeoutMs`
     * (as `acquire()`'s: AcquireTimeoutError).
     */
    async campaign (options) {
      let lease
      for (;;) {
        lease = await this._lock.acquire(options)
        if (lease.lost) {
          await lease.release().catch(() => {})
          throw lease._lostError
        }
        if (typeof this.backend._proclaim !== 'function') break
        try {
          await this.backend._proclaim(lease, record(this._identity, this._value))
          break
        } catch (error) {
          await lease.release().catch(() => {})
          // the key went between the grant and the record: no term began
          if (!(error instanceof StaleTokenError)) throw error
        }
      }
      const leadership = new Leadership(this, lease)
      call(this._onStarted, leadership)
      leadership._start()
      return leadership
    }

    /**
     * Campaigns, then runs `work(signal, leadership)` with the term's signal. When
     * `work` settles inside the term, the term is resigned and `run` settles as `work`
     * did (unless the resign found the lease gone on the server, 'not_held_at_release':
     * then the term counts as lost, as in `lock.using()`). When the term is lost, `again: true` campaigns again; else `run` rejects with
     * the LockLostError. `signal` (option) aborts it all: the work's signal aborts, the
     * lease is released at once, `onStoppedLeading` gets 'cancelled', and `run` rejects
     * with `signal.reason`.
     */
    async run (work, options) {
      if (typeof work !== 'function') throw new ConfigError(`run() needs a function, got ${check.describe(work)}`)
      const o = options === undefined ? {} : check.plainObject(options, 'run options')
      for (const key of Object.keys(o)) {
        if (key !== 'signal' && key !== 'again') throw new ConfigError(`unknown run option ${JSON.stringify(key)}; known options: signal, again`)
      }
      const signal = check.abortSignal(o.signal, 'signal')
      const again = o.again === undefined ? false : check.boolean(o.again, 'again')
      for (;;) {
        const leadership = await this.campaign(signal === null ? undefined : { signal })
        const onAbort = () => {
          leadership._lease.release().catch(() => {})
          leadership._end('cancelled', signal.reason)
        }
        if (signal !== null) {
          if (signal.aborted) onAbort()
          else signal.addEventListener('abort', onAbort, { once: true })
        }
        let outcome
        try {
          outcome = { ok: true, value: await work(leadership.signal, leadership) }
        } catch (error) {
          outcome = { ok: false, error }
        } finally {
          if (signal !== null) signal.removeEventListener('abort', onAbort)
        }
        const reason = leadership.stopReason
        if (reason === 'cancelled') throw signal.reason
        if (reason === null) {
          await leadership.resign()
          // as lock.using(): a release that found the lease gone means the work ran
          // without it for some time, so its outcome is not reported
          if (leadership.stopReason === 'resigned') {
            if (!outcome.ok) throw outcome.error
            return outcome.value
          }
        }
        if (again) continue
        throw leadership.signal.reason
      }
    }

    /**
     * The current leader, `{ identity, value, token }`, or null when nobody leads, as
     * the server answers now (stale by the time it arrives: for display and routing).
     * EtcdBackend: the key with the lowest create revision under the election's prefix
     * (as etcd's own `concurrency.Election` reads it); `identity` null for a candidate
     * of etcd's own client, and both null for a holder an instant before its record.
     * RedisBackend, UpstashRedisBackend and MemoryBackend (not fair), and on Node
     * ZooKeeperBackend (the holder node's data) and KubernetesLeaseBackend (an
     * annotation of the Lease): the candidate's identity and value are its lease's
     * metadata, read by `backend.inspect`. Other backends (fair Redis, Redlock,
     * PostgreSQL) keep only the owner id with the lock: ConfigError (kind
     * 'unsupported'). BackendError /
     * ProtocolError as the backend's queries.
     */
    async leader () {
      const backend = this.backend
      if (typeof backend._leader !== 'function') {
        throw new ConfigError(`${backend.constructor.name} cannot say who leads an election: it keeps only the holder's owner id with the lock (leader() and observe() are available on EtcdBackend, ZooKeeperBackend, KubernetesLeaseBackend and on RedisBackend, UpstashRedisBackend and MemoryBackend without fair hand-off)`, { kind: 'unsupported' })
      }
      const read = await backend._leader(this.name)
      if (read === null) return null
      if (read.pending) return Object.freeze({ identity: null, value: null, token: read.token })
      return readRecord(read.value, read.token)
    }

    /**
     * The current leader, then every change of it (a new token, identity or value, or
     * nobody leading), in order, read every `intervalMs` (default 100): a term shorter
     * than the interval may be missed, never reordered. Ends when `signal` aborts.
     */
    async * observe (options) {
      const o = options === undefined ? {} : check.plainObject(options, 'observe options')
      const intervalMs = o.intervalMs === undefined ? 100 : check.millis(o.intervalMs, 'intervalMs')
      const signal = check.abortSignal(o.signal, 'signal')
      let last
      let first = true
      while (signal === null || !signal.aborted) {
        const now = await this.leader()
        const pending = now !== null && now.identity === null && now.value === null
        const same = !first && (now === null ? last === null : last !== null && now.token === last.token && now.identity === last.identity && now.value === last.value)
        if (!pending && !same) {
          first = false
          last = now
          yield now
        }
        await sleep(intervalMs, signal)
      }
    }

    toString () {
      return `Election(${JSON.stringify(this.name)}, ${JSON.stringify(this._identity)})`
    }
  }
  return Election
}

module.exports = { createElection, Leadership, STOP_REASONS }
