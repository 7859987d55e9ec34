'use strict'
// The public lock API: Lock, and the Lease each acquisition hands out. Durations are
// milliseconds. Shared word for word by the napi and WASM packages.

const check = require('./check')
const { now } = require('./driver')
const { callbackOrNull } = require('./observe')
const {
  AcquireTimeoutError,
  BackendError,
  ConfigError,
  LockLostError,
  ProtocolError
} = require('./errors')

const asyncDispose = Symbol.asyncDispose ?? Symbol.for('Symbol.asyncDispose')

/** Warns through the host's warning hook: process.emitWarning in Node, console.warn
 * where there is no process (browsers, workers). */
function warn (message) {
  if (typeof process === 'object' && process !== null && typeof process.emitWarning === 'function') {
    process.emitWarning(message, { type: 'ResourceWarning', code: 'FENCEPOST_LEASE_DROPPED' })
  } else if (typeof console === 'object') {
    console.warn(`ResourceWarning: ${message}`)
  }
}

/** Leases collected while held: the registry holds only the acquisition (which sees its
 * lease weakly), so a lease nobody references can be collected; it is then released. The
 * registry holds the acquisition strongly, and the acquisition may hold its lease (see
 * `pinned`): a finished acquisition unregisters, so nothing keeps a finished lease. */
const dropped = typeof FinalizationRegistry === 'function'
  ? new FinalizationRegistry((acquisition) => {
    if (acquisition.released !== null || !acquisition.driver.tracks(acquisition)) return
    warn(`a lease of lock ${JSON.stringify(acquisition.name)} was garbage-collected while held; it is released now. Release it (lease.release(), await using, lock.using())`)
    acquisition.driver.release(acquisition)
  })
  : null

function deferred () {
  let resolve, reject
  const promise = new Promise((res, rej) => { resolve = res; reject = rej })
  return { promise, resolve, reject, settled: false }
}

/** One `acquire()` call: its promises and, once granted, its lease. Events land here. */
class Acquisition {
  constructor (lock, driver) {
    this.lock = lock
    this.name = lock.name
    this.driver = driver
    this.lockId = -1
    /** the lease, weakly once granted (WeakRef where the host has it) */
    this._leaseRef = null
    this.acquired = deferred()
    /** set by Lease.release() */
    this.released = null
    /** extend() calls waiting for the next renewal's outcome */
    this.extended = []
    /** the lease, strongly, from the first read of its signal until the lock finished
     * (see Lease.signal and finished()) */
    this.pinned = null
  }

  get lease () {
    const ref = this._leaseRef
    if (ref === null) return null
    return typeof ref.deref === 'function' ? (ref.deref() ?? null) : ref
  }

  _extended (error) {
    const waiting = this.extended
    this.extended = []
    for (const d of waiting) this.settle(d, error === null ? 'resolve' : 'reject', error ?? undefined)
  }

  settle (d, how, value) {
    if (d === null || d.settled) return
    d.settled = true
    if (how === 'resolve') d.resolve(value)
    else d.reject(value)
  }

  /** The machine is done with this lock (released, lost or closed): the lease needs
   * no pin and no release if it is dropped, so nothing here may keep it alive. */
  finished () {
    this.pinned = null
    if (dropped !== null) dropped.unregister(this)
  }

  onEvent (event) {
    switch (event.type) {
      case 'acquired': {
        const lease = new Lease(this, event.token, event.validUntilMs, event.ownerId)
        lease._previous = event.previous
        this._leaseRef = typeof WeakRef === 'function' ? new WeakRef(lease) : lease
        // the acquisition is its own unregister token (see finished())
        if (dropped !== null) dropped.register(lease, this, this)
        this.settle(this.acquired, 'resolve', lease)
        // the settled deferred must not keep the lease alive
        this.acquired = { promise: null, settled: true }
        break
      }
      case 'renewed': {
        const lease = this.lease
        if (lease !== null) lease._validUntilMs = event.validUntilMs
        this._extended(null)
        break
      }
      case 'lost': {
        const lease = this.lease
        if (lease !== null) {
          lease._lose(event.reason)
          this.settle(this.released, 'reject', lease._lostError)
          this._extended(lease._lostError)
        } else {
          this._extended(new LockLostError(this.name, 0n, event.reason))
        }
        this.finished()
        break
      }
      case 'released':
        this.finished()
        this.settle(this.released, 'resolve', undefined)
        // an Error captures a stack trace: made only for a waiting extend()
        if (this.extended.length > 0) this._extended(new ConfigError(`lock ${JSON.stringify(this.name)} was released while extending`))
        break
      case 'acquire_failed':
        this.settle(this.acquired, 'reject', event.reason === 'protocol'
          ? new ProtocolError(`acquiring lock ${JSON.stringify(this.name)} failed: ${event.message}`)
          : new AcquireTimeoutError(this.name, this.driver.timeoutError(event.message)))
        break
    }
  }

  /** The backend was closed under this acquisition; `reason` is the core's name for it. */
  closed (reason) {
    const lease = this.lease
    if (lease !== null) lease._lose(reason)
    this._extended(lease !== null ? lease._lostError : new LockLostError(this.name, 0n, reason))
    this.settle(this.acquired, 'reject', new BackendError(`the backend was closed while acquiring lock ${JSON.stringify(this.name)}`))
    this.settle(this.released, 'resolve', undefined)
    this.finished()
  }
}

/**
 * A held lock. `token` goes on every write to the protected resource; `signal` is
 * aborted (with a LockLostError as its reason) the moment the lease is lost; renewal
 * runs on the event loop until `release()` (or `await using` disposal).
 */
class Lease {
  constructor (acquisition, token, validUntilMs, ownerId) {
    this._acquisition = acquisition
    this._token = token
    this._validUntilMs = validUntilMs
    this._ownerId = ownerId
    /** made when `signal` is first read: most leases never read it, and an
     * AbortController per acquisition is work on the hand-off path */
    this._controller = null
    this._lostReason = null
    this._lostError = null
    this._release = null
  }

  /** The lock name. */
  get name () { return this._acquisition.name }
  /** The fencing token (bigint): carry it on every write to the protected resource. */
  get token () { return this._token }
  /** This acquisition's owner id: 32 lowercase hex digits, the lock key's value. */
  get ownerId () { return this._ownerId }
  /** How the lock's previous holder ended, as the server saw it at this grant:
   * 'released' (a clean release, or a fair hand-off), 'expired' (its lease ran out, or it
   * was freed behind its back: it may have left its work half done), 'none' (the first
   * grant of this name) or 'unknown' (the backend keeps no record: etcd, Redlock,
   * ZooKeeper, PostgreSQL advisory locks; a grant retried after a lost reply). Redis (and
   * MemoryBackend), PostgreSQL lease rows and Kubernetes report it; a lease its holder's
   * machine gave up is freed by a cleanup that reports 'expired', never 'released'. */
  get previous () { return this._previous ?? 'unknown' }
  /** Aborted when the lease is lost; its `reason` is the LockLostError. Taking it keeps
   * the lease alive until it is released or lost: work guarded by the signal (a fetch,
   * a listener awaiting it) may be all that still refers to the lease, and a lock must
   * not be released under it. */
  get signal () {
    if (this._controller === null) {
      this._controller = new AbortController()
      if (this._lostError !== null) this._controller.abort(this._lostError)
      // the driver holds the acquisition while the lock is live; finished() unpins
      else if (this._acquisition.driver.tracks(this._acquisition)) this._acquisition.pinned = this
    }
    return this._controller.signal
  }
  /** `null` while held; then 'expired', 'renew_rejected', 'not_held_at_release' or 'closed'. */
  get lostReason () { return this._lostReason }
  /** Whether the lease has been lost. */
  get lost () { return this._lostReason !== null }
  /** The validity deadline on `performance.now()`'s clock, as last reported by the machine. */
  get validUntilMs () { return this._validUntilMs }

  /** Whether the lease is still ours by the local view: not lost, not released, and
   * before its validity deadline (due timers delivered first). Sends nothing: for the
   * server's word, `extend()` (a renewal now, which rejects with LockLostError if the
   * server no longer holds it for us). */
  get held () {
    return this._release === null && this.validForMs() > 0
  }

  /**
   * Renews the lease now (a manual extend; with `autoRenew: false` the only renewal
   * there is) and resolves once the server confirmed it: `validUntilMs` has moved to a
   * validity measured from this renewal's send. The TTL is the lock's. A renewal already
   * in flight answers for this one; one failing in transport is retried until the
   * validity deadline. Rejects with LockLostError if the lease is lost (reason
   * 'renew_rejected' or 'expired'), ConfigError if it was released.
   */
  extend () {
    const acquisition = this._acquisition
    if (this._lostError !== null) return Promise.reject(this._lostError)
    if (this._release !== null || !acquisition.driver.tracks(acquisition)) {
      return Promise.reject(new ConfigError(`extend(): the lease of ${JSON.stringify(this.name)} was released`))
    }
    const d = deferred()
    acquisition.extended.push(d)
    try {
      acquisition.driver.extend(acquisition)
    } catch (error) {
      return Promise.reject(error)
    }
    return d.promise
  }

  /** Milliseconds left before the validity deadline (≥ 0; 0 once lost). Due timers are
   * delivered first. */
  validForMs () {
    this._acquisition.driver.poke()
    if (this._lostReason !== null) return 0
    return Math.max(0, this._validUntilMs - now())
  }

  /** Whether this lease was released (`release()` called, `using()` or `await using`
   * ended); a released lease is never held again. */
  get released () { return this._release !== null }

  /** Throws the LockLostError if the lease has been lost, a ConfigError if it was
   * released (work under it must stop either way); due timers are delivered first.
   * Call it before each step of long work and before writing to the protected resource. */
  check () {
    this._acquisition.driver.poke()
    if (this._lostError !== null) throw this._lostError
    if (this._release !== null) {
      throw new ConfigError(`check(): the lease of ${JSON.stringify(this.name)} (token ${this._token}n) was released; acquire the lock again before writing`)
    }
  }

  /**
   * Releases the lock (owner-checked on the server). Idempotent: later calls return the
   * same promise. Rejects with LockLostError if the lease was lost, or if the server no
   * longer held it for this owner (reason 'not_held_at_release').
   */
  release () {
    if (this._release === null) this._release = this._startRelease()
    return this._release
  }

  // Not `async`: returning the deferred's own promise spares every release the extra
  // microtask turns of an async wrapper; a throw still becomes a rejection.
  _startRelease () {
    const acquisition = this._acquisition
    // No poke first: the machine's release delivers a loss that is due itself (the lost
    // event then rejects `released`).
    if (this._lostError !== null) return Promise.reject(this._lostError)
    const released = deferred()
    acquisition.released = released
    try {
      acquisition.driver.release(acquisition)
    } catch (error) {
      return Promise.reject(error)
    }
    if (this._lostError !== null) acquisition.settle(released, 'reject', this._lostError)
    return released.promise
  }

  /** `await using lease = await lock.acquire()`: disposal is `release()`. */
  [asyncDispose] () {
    return this.release()
  }

  _lose (reason) {
    if (this._lostReason !== null) return
    this._lostReason = reason
    this._lostError = new LockLostError(this.name, this._token, reason)
    if (this._controller !== null) this._controller.abort(this._lostError)
  }

  toString () {
    const state = this._lostReason !== null ? `lost: ${this._lostReason}` : this._release !== null ? 'released' : 'held'
    return `Lease(${JSON.stringify(this.name)}, token ${this._token}, ${state})`
  }
}

function createLock (isBackend) {
  /**
   * A distributed lock named `name` on `backend`: a description (name and options) from
   * which each `acquire()` makes an independent acquisition. Options are checked here:
   * types by this package, ranges by the core; a bad one throws ConfigError before any
   * request is sent.
   */
  class Lock {
    constructor (backend, name, options) {
      if (!isBackend(backend)) {
        throw new ConfigError(`backend must be a fencepost backend (MemoryBackend, RedisBackend, UpstashRedisBackend, RedlockBackend, EtcdBackend, KubernetesLeaseBackend, or in Node PostgresBackend and ZooKeeperBackend: each wraps its client, as in new RedisBackend(client)), got ${check.describe(backend)}`)
      }
      check.string(name, 'lock name')
      let onEvent = null
      if (options !== null && typeof options === 'object' && 'onEvent' in options) {
        const { onEvent: fn, ...rest } = options
        onEvent = callbackOrNull(fn, 'onEvent')
        options = rest
      }
      const normalized = check.lockOptions(options)
      backend._machineCheck(name, normalized)
      backend._observer?.lockCallback(onEvent)
      this._backend = backend
      this._name = name
      this._options = normalized
      /** `_options` as the addon read them, made on the first acquire */
      this._prepared = null
      /** this lock's own observation callback (see Backend.observe) */
      this._onEvent = onEvent
    }

    get name () { return this._name }
    get backend () { return this._backend }

    /**
     * Acquires the lock, waiting as the options say, and renews it until the lease is
     * released. `signal` cancels the wait (the lock is released if the server had
     * already granted it) and rejects with `signal.reason`.
     */
    acquire (options) {
      // The common call (no options) is not `async`: it returns the acquisition's own
      // promise, sparing every acquisition the extra microtask turns of an async wrapper
      // (a throw still becomes a rejection).
      if (options === undefined) {
        try {
          const driver = this._backend._driver()
          const acquisition = new Acquisition(this, driver)
          const acquired = acquisition.acquired.promise
          if (this._prepared === null) this._prepared = driver.machine._prepare(this._options)
          driver.start(acquisition, this._options, this._prepared)
          return acquired
        } catch (error) {
          return Promise.reject(error)
        }
      }
      return this._acquireWith(options)
    }

    async _acquireWith (options) {
      const o = check.plainObject(options, 'acquire options')
      for (const key of Object.keys(o)) {
        if (key !== 'signal' && key !== 'timeoutMs') {
          const near = /^(acquire)?timeout(ms|s|seconds)?$/i.test(key) ? '; did you mean timeoutMs? (milliseconds)' : ''
          throw new ConfigError(`unknown acquire option ${JSON.stringify(key)}${near}; known options: signal, timeoutMs`, { option: key })
        }
      }
      const signal = check.abortSignal(o.signal, 'signal')
      let lockOptions = this._options
      if (o.timeoutMs !== undefined) {
        // this call's acquire timeout over the lock's: null or Infinity waits forever
        lockOptions = { ...this._options }
        delete lockOptions.acquireTimeoutMs
        if (o.timeoutMs !== null && o.timeoutMs !== Infinity) {
          lockOptions.acquireTimeoutMs = check.optionMillis(o.timeoutMs, 'timeoutMs')
        }
      }
      if (signal !== null && signal.aborted) throw signal.reason
      const driver = this._backend._driver()
      const acquisition = new Acquisition(this, driver)
      const acquired = acquisition.acquired.promise
      if (lockOptions === this._options) {
        // the lock's own options (a signal only): read once, as acquire() reads them
        if (this._prepared === null) this._prepared = driver.machine._prepare(this._options)
        driver.start(acquisition, lockOptions, this._prepared)
      } else {
        driver.start(acquisition, lockOptions)
      }
      if (signal === null) return acquired
      const onAbort = () => {
        if (acquisition.acquired.settled) return
        driver.release(acquisition)
        acquisition.settle(acquisition.acquired, 'reject', signal.reason)
      }
      signal.addEventListener('abort', onAbort, { once: true })
      // Aborted while the acquisition started: by user code the start ran (an
      // observation callback, the abort listeners of a lease whose loss the start
      // delivered), before the listener was there to hear it.
      if (signal.aborted) onAbort()
      try {
        return await acquired
      } finally {
        signal.removeEventListener('abort', onAbort)
      }
    }

    /**
     * One attempt (redis-py's `blocking=False`): resolves with the lease, or `null` when
     * another owner holds the lock. Rejects as `acquire()` otherwise (a server that
     * cannot be reached is an AcquireTimeoutError with its `lastError`).
     */
    async tryAcquire (options) {
      const o = options === undefined ? {} : check.plainObject(options, 'acquire options')
      try {
        return await this.acquire({ ...o, timeoutMs: 0 })
      } catch (error) {
        if (error instanceof AcquireTimeoutError && (error.lastError === null || error.lastError === undefined)) return null
        throw error
      }
    }

    /**
     * Acquires, runs `fn(signal, lease)` while renewing, and releases in `finally`.
     * `signal` is aborted the moment the lease is lost; then `using` rejects with the
     * LockLostError (whatever `fn` did), so work done after a loss is never reported
     * as success.
     */
    async using (fn, options) {
      if (typeof fn !== 'function') throw new ConfigError(`using() needs a function, got ${check.describe(fn)}`)
      const lease = await this.acquire(options)
      let outcome
      if (lease.lost) {
        outcome = { ok: false, error: lease._lostError } // lost before the body could start
      } else {
        try {
          outcome = { ok: true, value: await fn(lease.signal, lease) }
        } catch (error) {
          outcome = { ok: false, error }
        }
      }
      try {
        await lease.release()
      } catch (error) {
        if (error instanceof LockLostError || outcome.ok) throw error
      }
      if (!outcome.ok) throw outcome.error
      return outcome.value
    }

    toString () {
      return `Lock(${JSON.stringify(this._name)})`
    }
  }
  return Lock
}

module.exports = { createLock, Lease }
