'use strict'
// The public lock API: Lock, and the Lease each acquisition hands out. Durations are
// milliseconds. Shared word for word by the napi and WASM packages.

const check = require('./check')
const { now } = require('./driver')
const {
  AcquireTimeoutError,
  BackendError,
  ConfigError,
  LockLostError,
  ProtocolError
} = require('./errors')

const asyncDispose = Symbol.asyncDispose ?? Symbol.for('Symbol.asyncDispose')

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
    this.lease = null
    this.acquired = deferred()
    /** set by Lease.release() */
    this.released = null
  }

  settle (d, how, value) {
    if (d === null || d.settled) return
    d.settled = true
    if (how === 'resolve') d.resolve(value)
    else d.reject(value)
  }

  onEvent (event) {
    switch (event.type) {
      case 'acquired': {
        const lease = new Lease(this, event.token, event.validUntilMs, this.driver.owner(this.lockId))
        this.lease = lease
        this.settle(this.acquired, 'resolve', lease)
        break
      }
      case 'renewed':
        if (this.lease !== null) this.lease._validUntilMs = event.validUntilMs
        break
      case 'lost':
        if (this.lease !== null) {
          this.lease._lose(event.reason)
          this.settle(this.released, 'reject', this.lease._lostError)
        }
        break
      case 'released':
        this.settle(this.released, 'resolve', undefined)
        break
      case 'acquire_failed':
        this.settle(this.acquired, 'reject', event.reason === 'protocol'
          ? new ProtocolError(`acquiring lock ${JSON.stringify(this.name)} failed: ${event.message}`)
          : new AcquireTimeoutError(this.name, event.message))
        break
    }
  }

  /** The backend was closed under this acquisition; `reason` is the core's name for it. */
  closed (reason) {
    if (this.lease !== null) this.lease._lose(reason)
    this.settle(this.acquired, 'reject', new BackendError(`the backend was closed while acquiring lock ${JSON.stringify(this.name)}`))
    this.settle(this.released, 'resolve', undefined)
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
  /** Aborted when the lease is lost; its `reason` is the LockLostError. */
  get signal () {
    if (this._controller === null) {
      this._controller = new AbortController()
      if (this._lostError !== null) this._controller.abort(this._lostError)
    }
    return this._controller.signal
  }
  /** `null` while held; then 'expired', 'renew_rejected', 'not_held_at_release' or 'closed'. */
  get lostReason () { return this._lostReason }
  /** Whether the lease has been lost. */
  get lost () { return this._lostReason !== null }
  /** The validity deadline on `performance.now()`'s clock, as last reported by the machine. */
  get validUntilMs () { return this._validUntilMs }

  /** Milliseconds left before the validity deadline (≥ 0; 0 once lost). Due timers are
   * delivered first. */
  validForMs () {
    this._acquisition.driver.poke()
    if (this._lostReason !== null) return 0
    return Math.max(0, this._validUntilMs - now())
  }

  /** Throws the LockLostError if the lease has been lost (due timers delivered first).
   * Call it before each step of long work and before writing to the protected resource. */
  check () {
    this._acquisition.driver.poke()
    if (this._lostError !== null) throw this._lostError
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
    return `Lease(${JSON.stringify(this.name)}, token ${this._token}, ${this._lostReason === null ? 'held' : `lost: ${this._lostReason}`})`
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
        throw new ConfigError(`backend must be a fencepost backend (MemoryBackend, RedisBackend), got ${check.describe(backend)}`)
      }
      check.string(name, 'lock name')
      const normalized = check.lockOptions(options)
      backend._machineCheck(name, normalized)
      this._backend = backend
      this._name = name
      this._options = normalized
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
          driver.start(acquisition, this._options)
          return acquisition.acquired.promise
        } catch (error) {
          return Promise.reject(error)
        }
      }
      return this._acquireWith(options)
    }

    async _acquireWith (options) {
      const o = check.plainObject(options, 'acquire options')
      for (const key of Object.keys(o)) {
        if (key !== 'signal') throw new ConfigError(`unknown acquire option ${JSON.stringify(key)}; the only one is signal`)
      }
      const signal = check.abortSignal(o.signal, 'signal')
      if (signal !== null && signal.aborted) throw signal.reason
      const driver = this._backend._driver()
      const acquisition = new Acquisition(this, driver)
      driver.start(acquisition, this._options)
      if (signal === null) return acquisition.acquired.promise
      const onAbort = () => {
        if (acquisition.acquired.settled) return
        driver.release(acquisition)
        acquisition.settle(acquisition.acquired, 'reject', signal.reason)
      }
      signal.addEventListener('abort', onAbort, { once: true })
      try {
        return await acquisition.acquired.promise
      } finally {
        signal.removeEventListener('abort', onAbort)
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
