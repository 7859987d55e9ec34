'use strict'
// The driver: runs one lock machine on the JavaScript event loop. Translations only.
//
// It feeds the machine the host's monotonic time (`performance.now()`, milliseconds; the
// addon turns them into the core's nanoseconds) and the outcomes of the requests it
// emitted, runs those requests through the backend's adapter (all at once, each reply fed
// back the moment it arrives), wakes the machine with ONE timer no later than the earliest
// of its next timeout and the pending requests' deadlines (set again only for an earlier
// instant: early wakeups are harmless), and hands events to the acquisitions
// they concern. Every `if` below is plumbing (is a request still pending, is this driver
// closed, is anyone awaiting); none is about validity, renew timing or tokens.
//
// A fair backend's machine parks a contended acquisition on a blocking wait (a request with
// `backend: 'redis_blpop'`). The adapter gets an AbortSignal with it, aborted once the
// answer no longer matters: the machine moved on for that lock (a cancel, a retry), the
// request's deadline passed, or the driver closed. The adapter then frees the connection
// the wait blocks; the (late) outcome is fed back like any other.
//
// The timer keeps the process alive while a lock is being acquired, held or released, and
// is unref'd otherwise, so the bookkeeping of finished locks (a cleanup release, late
// replies remembered for one TTL) never keeps a process alive after release.
//
// Shared word for word by the napi and WASM packages.

const { BackendError } = require('./errors')

/** The host's monotonic clock, in milliseconds. */
const now = () => performance.now()

/** setTimeout clamps longer delays to 1 ms; an early wakeup is harmless, so cap them. */
const MAX_DELAY_MS = 2 ** 31 - 1

const TERMINAL = new Set(['lost', 'released', 'acquire_failed'])

/** The AbortSignals the driver hands adapters with blocking waits: each serves one request
 * and is dropped after it, so an adapter need not remove its listeners from them. */
const singleUseSignals = new WeakSet()

function describeError (error) {
  if (error instanceof Error) {
    const name = error.name && error.name !== 'Error' ? error.name : (error.constructor && error.constructor.name) || 'Error'
    return error.message ? `${name}: ${error.message}` : name
  }
  return `thrown: ${String(error)}`
}

/** A process warning (Node: `process.emitWarning`, type 'FencepostWarning'; elsewhere
 * `console.warn`). */
function emitWarning (message, code) {
  const proc = globalThis.process
  if (proc !== undefined && proc !== null && typeof proc.emitWarning === 'function') {
    proc.emitWarning(message, { type: 'FencepostWarning', code })
  } else if (typeof console !== 'undefined') {
    console.warn(`FencepostWarning [${code}]: ${message}`)
  }
}

/**
 * Whether a backend's requests reach its server, told as process warnings. A request
 * whose outcome is a transport failure (the client threw or rejected, or no reply came
 * before the request's deadline) is a failure; any reply, an error reply too, a success.
 * The first failure after a success (or at the start) warns at once (code
 * 'FENCEPOST_UNREACHABLE'); while failures go on, another warning with their count follows
 * at most every `reportEveryMs`; the first success after failures warns that the server
 * answers again ('FENCEPOST_REACHABLE'). Acquisitions keep retrying meanwhile, until their
 * acquireTimeoutMs, and held leases their renewals, until their validity ends: these
 * warnings are the only sign of an outage a waiting caller gets.
 */
class Reachability {
  constructor (label) {
    this.label = label
    /** least milliseconds between two "still unreachable" warnings */
    this.reportEveryMs = 5000
    /** transport failures in a row, since the last request that got a reply */
    this.failures = 0
    /** the last connection error the client reported on its own (`clientFailed`), not
     * through a request: null until then, and once the server answers again */
    this.clientError = null
    this._since = 0
    this._reportedAt = 0
    this._reportedFailures = 0
  }

  /** The client reported a connection error (an 'error' event): a failure, which no
   * request's outcome may tell the machine. */
  clientFailed (message) {
    this.clientError = message
    this.failed(message)
  }

  failed (message) {
    const t = now()
    this.failures += 1
    if (this.failures === 1) {
      this._since = this._reportedAt = t
      this._reportedFailures = 1
      emitWarning(`${this.label} cannot reach its server: ${message} (acquisitions keep retrying until their acquireTimeoutMs, held leases their renewals until their validity ends; repeated at most every ${this.reportEveryMs / 1000} s while it lasts)`, 'FENCEPOST_UNREACHABLE')
    } else if (t - this._reportedAt >= this.reportEveryMs) {
      const newly = this.failures - this._reportedFailures
      this._reportedAt = t
      this._reportedFailures = this.failures
      emitWarning(`${this.label} still cannot reach its server: ${this.failures} failed requests in ${((t - this._since) / 1000).toFixed(1)} s (${newly} since the last report); last: ${message}`, 'FENCEPOST_UNREACHABLE')
    }
  }

  succeeded () {
    if (this.failures === 0) return
    const failures = this.failures
    this.failures = 0
    this.clientError = null
    emitWarning(`${this.label} reaches its server again, after ${failures} failed requests in ${((now() - this._since) / 1000).toFixed(1)} s`, 'FENCEPOST_REACHABLE')
  }
}

/** A bug in the host (the machine refused an input the driver made): surface it loudly. */
function reportBug (error) {
  setTimeout(() => { throw error }, 0)
}

class Driver {
  /**
   * @param {object} backend  has `execute(request)`: returns the reply (or a promise of
   *   it), an `Error` value for a server error reply; throws (rejects) on transport failure.
   * @param {object} machine  a LockMachine.
   */
  constructor (backend, machine) {
    this.backend = backend
    this.machine = machine
    /** lock id → acquisition (with `onEvent(event)` and `closed()`) */
    this.acquisitions = new Map()
    /** request id → { deadlineMs, lock, wait } of requests whose outcome has not been fed yet */
    this.pending = new Map()
    /** lock id → the entry of its blocking wait in flight (fair backends) */
    this.waits = new Map()
    this.machineAt = null
    this.timer = null
    this.timerAt = null
    /** whether the timer is ref'd (keeps the process alive) */
    this.timerRefd = true
    this._onTimerBound = () => this._onTimer()
    this.draining = false
    this.redrain = false
    /** polls taken by inputs fed during a drain (`_drain(polled)`), for it to handle next */
    this.handed = []
    /** no more calls from the Lock API; requests still out are still followed */
    this.closed = false
    /** after close: who waits for the requests still out */
    this.afterClose = null
    /** closed and nothing out any more: the machine hears nothing from now on */
    this.finished = false
    /** what the machine was last told to observe (see js/observe.js) */
    this.observing = null
    this._lockCallbackBound = (lock) => this.acquisitions.get(lock)?.lock?._onEvent
  }

  // -- inputs from the Lock API --

  /** Starts acquiring; throws ConfigError for options the core refuses. `prepared`: the
   * same options as the addon read them (`LockMachine._prepare`), or null. */
  start (acquisition, options, prepared = null) {
    this._checkOpen()
    const observer = this.backend._observer
    if (observer !== undefined) this.observing = observer.sync(this.machine, this.observing)
    if (prepared === null) {
      acquisition.lockId = this.machine._acquire(now(), acquisition.name, options)
      this.acquisitions.set(acquisition.lockId, acquisition)
      this._drain()
      return
    }
    // the acquire and its poll in one call across the addon boundary, as replies and
    // releases are fed
    const polled = this.machine._acquirePreparedPoll(now(), acquisition.name, prepared)
    acquisition.lockId = polled.lock
    this.acquisitions.set(acquisition.lockId, acquisition)
    this._drain(polled)
  }

  /** Releases the lock, or cancels its acquisition; a no-op once the machine has
   * reported the acquisition finished (or the driver is closed). */
  release (acquisition) {
    if (!this.closed && this.acquisitions.get(acquisition.lockId) === acquisition) {
      this._drain(this.machine._releasePoll(now(), acquisition.lockId))
    }
  }

  /** Renews a held lease now (a manual extend); the outcome comes as its next event. */
  extend (acquisition) {
    this._checkOpen()
    if (this.acquisitions.get(acquisition.lockId) === acquisition) {
      this.machine._extend(now(), acquisition.lockId)
      this._drain()
    }
  }

  /** Whether the machine still runs `acquisition` (not finished, driver open). */
  tracks (acquisition) {
    return !this.closed && this.acquisitions.get(acquisition.lockId) === acquisition
  }

  /** Delivers due timers now, so a lease past its deadline is reported lost before the
   * caller reads its state. */
  poke () {
    if (!this.closed) this._feedTimeout()
  }

  /** The `lastError` of an acquisition that timed out: the machine's last error
   * (`message`, null when the lock was held by another owner), led by the error the
   * backend's client reported if its server is unreachable right now and the machine
   * never saw that error. A client that holds commands while it cannot connect
   * (ioredis's offline queue) fails none of them: the machine saw its requests get no
   * reply in time, and the cause ("connect ECONNREFUSED …") came as a client event. */
  timeoutError (message) {
    const client = this.backend._reachability?.clientError ?? null
    if (message === null || client === null || message.includes(client)) return message
    return `${client} (reported by the client while the server was unreachable; the lock saw: ${message})`
  }

  /** Releases every lock (best effort: the requests still run), then marks held leases
   * lost ('closed'), fails pending acquisitions and stops the timer. Returns a promise
   * that resolves once every request still out (those releases among them) has settled
   * or passed its deadline; until then their outcomes still reach the machine, so a grant
   * answered late (an acquire part of a slow Redlock master, a cancelled acquisition's)
   * is released like any late grant, and that release is waited for too. No timer of
   * the driver is left after that. Idempotent. */
  close () {
    if (this.closed) return this.afterClose === null ? Promise.resolve() : this.afterClose.done
    const t = now()
    // Snapshot first: cancelling a waiting acquisition ends it at once (a 'released'
    // event, which the drain below forgets), and its caller must still hear that the
    // backend was closed.
    const acquisitions = [...this.acquisitions.values()]
    for (const acquisition of acquisitions) {
      try { this.machine._release(t, acquisition.lockId) } catch (error) { reportBug(error) }
    }
    this._drain()
    this.closed = true
    this.acquisitions.clear()
    for (const entry of this.waits.values()) entry.wait.abort()
    this.waits.clear()
    for (const acquisition of acquisitions) acquisition.closed(this.machine._closedReason)
    const after = { resolve: null, done: null }
    after.done = new Promise((resolve) => { after.resolve = resolve })
    this.afterClose = after
    this._idleIfDone()
    return after.done
  }

  /** After close: once no request is out, the driver stops for good (its timer too). */
  _idleIfDone () {
    const after = this.afterClose
    if (after === null || this.finished || this.pending.size > 0) {
      if (after !== null && !this.finished) {
        // the deadlines of what is still out; unref'd: the requests' own sockets keep
        // the process up while they can still answer
        this._arm()
        this._ref()
      }
      return
    }
    this.finished = true
    this._disarm()
    after.resolve()
  }

  // -- the loop --

  _checkOpen () {
    if (this.closed) throw new BackendError('this backend is closed; create a new one')
  }

  /** Drains the machine's outputs; `polled` is a poll the input's own call already made
   * (`_acquirePreparedPoll`, `_replyPoll`, `_releasePoll`), or null. Events run user code
   * synchronously (a lease's `abort` listeners), which may feed the machine again
   * (release, acquire, check): such a nested drain hands its poll (if its input made one)
   * to the outer one and marks it to poll once more, so outputs are handled in order and
   * the timer is set from the machine's latest answer. */
  _drain (polled = null) {
    if (this.draining) {
      // what this input's call polled goes to the outer drain, in order, before it
      // polls the machine again
      if (polled !== null) this.handed.push(polled)
      this.redrain = true
      return
    }
    this.draining = true
    try {
      do {
        this.redrain = false
        let poll = polled
        polled = null
        if (poll === null) poll = this.handed.length > 0 ? this.handed.shift() : this.machine._poll()
        const { outputs, nextTimeoutMs, observationsPending } = poll
        const observing = this.observing
        if (observationsPending > 0 && observing !== null && (observing.events || observing.warnings)) {
          // before the outputs: a terminal event forgets the lock's callback
          this.backend._observer.deliver(this.machine, this._lockCallbackBound)
        }
        this.machineAt = nextTimeoutMs
        for (const output of outputs) {
          // Anything new for a lock parked on a blocking wait: the wait no longer matters.
          const parked = this.waits.get(output.lock)
          if (parked !== undefined) {
            this.waits.delete(output.lock)
            parked.wait.abort()
          }
          if (output.type === 'request') {
            this._execute(output)
          } else {
            const acquisition = this.acquisitions.get(output.lock)
            if (TERMINAL.has(output.type)) {
              this.acquisitions.delete(output.lock)
              // a backend holding something per lock (a dedicated connection) frees it
              this.backend._lockFinished?.(output.lock)
            }
            if (acquisition !== undefined) acquisition.onEvent(output)
          }
        }
      } while (this.redrain || this.handed.length > 0)
    } finally {
      this.draining = false
    }
    this._arm()
    this._ref()
  }

  // Each feeds one input at the current time and drains.

  _feedReply (id, value) {
    if (this.finished) return
    try {
      this._drain(this.machine._replyPoll(now(), id, value))
    } catch (error) {
      reportBug(error)
    }
  }

  _feedTransportError (id, message) {
    if (this.finished) return
    try {
      this.machine._transportError(now(), id, message)
      this._drain()
    } catch (error) {
      reportBug(error)
    }
  }

  _feedTimeout () {
    if (this.finished) return
    try {
      this.machine._timeout(now())
      this._drain()
    } catch (error) {
      reportBug(error)
    }
  }

  _execute (request) {
    const entry = { deadlineMs: request.deadlineMs, lock: request.lock, wait: null }
    const id = request.id
    this.pending.set(id, entry)
    let options
    if (request.operation === 'wait') { // a blocking wait: a fair BLPOP, an etcd watch
      entry.wait = new AbortController()
      singleUseSignals.add(entry.wait.signal)
      this.waits.set(request.lock, entry)
      options = { signal: entry.wait.signal }
    }
    // Run it on a microtask, never inside this drain (it may answer synchronously), but
    // in this turn of the event loop: the request goes out before any I/O is polled.
    queueMicrotask(() => {
      let result
      try {
        result = this.backend.execute(request, options)
      } catch (error) {
        this._settleError(id, entry, error)
        return
      }
      if (result !== null && (typeof result === 'object' || typeof result === 'function') && typeof result.then === 'function') {
        result.then((value) => this._settleReply(id, entry, value), (error) => this._settleError(id, entry, error))
      } else {
        this._settleReply(id, entry, result)
      }
    })
  }

  /** Feeds a request's reply the moment it arrives (in the reply's own microtask), so
   * the next request the machine emits goes out in the same turn. */
  _settleReply (id, entry, value) {
    if (!this._take(id, entry)) return
    this.backend._reachability?.succeeded()
    this._feedReply(id, value)
    if (this.afterClose !== null) this._idleIfDone()
  }

  _settleError (id, entry, error) {
    if (!this._take(id, entry)) return
    const message = describeError(error)
    this.backend._reachability?.failed(message)
    this._feedTransportError(id, message)
    if (this.afterClose !== null) this._idleIfDone()
  }

  /** Whether the outcome of request `id` is still awaited (it stops being so here). */
  _take (id, entry) {
    if (this.pending.get(id) !== entry) return false // given up at its deadline
    this.pending.delete(id)
    this._forgetWait(entry, false)
    return true
  }

  /** A blocking wait is over (settled, or given up): stop tracking it; abort it if asked. */
  _forgetWait (entry, abort) {
    if (entry.wait === null) return
    if (this.waits.get(entry.lock) === entry) this.waits.delete(entry.lock)
    if (abort) entry.wait.abort()
  }

  /** Makes sure the timer fires no later than the machine's next timeout and the
   * pending requests' deadlines. A timer already set earlier is kept: an early wakeup is
   * harmless (the machine ignores timeouts before its deadlines; the wakeup sets the
   * timer again from the machine's answer), and most inputs then cost no timer at all. */
  _arm () {
    if (this.finished) return
    let at = this.machineAt
    for (const entry of this.pending.values()) {
      if (at === null || entry.deadlineMs < at) at = entry.deadlineMs
    }
    if (at === null) return
    if (this.timer !== null && this.timerAt <= at) return
    this._disarm()
    const delay = Math.min(MAX_DELAY_MS, Math.max(0, Math.ceil(at - now())))
    this.timerAt = at
    this.timer = setTimeout(this._onTimerBound, delay)
    this.timerRefd = true
  }

  _disarm () {
    if (this.timer !== null) clearTimeout(this.timer)
    this.timer = null
    this.timerAt = null
  }

  _ref () {
    const timer = this.timer
    if (timer === null || typeof timer !== 'object') return // browsers: numeric ids
    const wanted = this.acquisitions.size > 0
    if (wanted === this.timerRefd) return
    this.timerRefd = wanted
    if (wanted) timer.ref?.()
    else timer.unref?.()
  }

  _onTimer () {
    this.timer = null
    this.timerAt = null
    const t = now()
    // Requests past their deadline no longer matter: report them, ignore their outcome.
    for (const [id, entry] of this.pending) {
      if (entry.deadlineMs <= t) {
        this.pending.delete(id)
        this._forgetWait(entry, true)
        const late = (t - entry.deadlineMs).toFixed(3)
        const message = `no reply before the request deadline (${late} ms ago)`
        this.backend._reachability?.failed(message)
        this._feedTransportError(id, message)
      }
    }
    this._feedTimeout()
    if (this.afterClose !== null) this._idleIfDone()
  }
}

/** An AbortSignal that fires at `deadlineMs` on the driver's clock, when the runtime has
 * AbortSignal.timeout (the driver gives up at the deadline anyway; this frees the fetch). */
function deadlineSignal (deadlineMs) {
  if (typeof deadlineMs !== 'number' || typeof AbortSignal === 'undefined' || typeof AbortSignal.timeout !== 'function') return null
  return AbortSignal.timeout(Math.max(1, Math.min(2 ** 31 - 1, Math.ceil(deadlineMs - now()))))
}

/** `a` and `b` as one signal (either may be null): aborted when either is. */
function eitherSignal (a, b) {
  if (a === null) return b
  if (b === null) return a
  if (a.aborted) return a
  if (b.aborted) return b
  const both = new AbortController()
  const onA = () => both.abort(a.reason)
  const onB = () => both.abort(b.reason)
  a.addEventListener('abort', onA, { once: true })
  b.addEventListener('abort', onB, { once: true })
  both.signal.addEventListener('abort', () => {
    a.removeEventListener('abort', onA)
    b.removeEventListener('abort', onB)
  }, { once: true })
  return both.signal
}

module.exports = { Driver, Reachability, now, describeError, singleUseSignals, emitWarning, deadlineSignal, eitherSignal }
