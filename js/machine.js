'use strict'
// LockMachine: the core's sans-IO lock machine with JavaScript types and errors. The
// drivers run it; hosts that want to drive the core themselves (and the scenario-vector
// runner in tests/js) use it directly. Shared by the napi and WASM packages: `native` is
// whichever addon the package loaded (both expose the same low-level interface).

const check = require('./check')
const { ConfigError, fromNative, translate } = require('./errors')
const { decodeObservations } = require('./observe')
/** The flat encoding's SQL connection codes (`js_outputs`: 0 any, 1 dedicated, 2 listen). */
const CONNECTIONS = ['any', 'dedicated', 'listen']
/** The flat encoding's codes of how a previous holder ended (`js_outputs`). */
const PREVIOUS = ['released', 'expired', 'none', 'unknown']

/**
 * The decoder of the addon's `pollJson()`: the JSON text of one flat array of primitives,
 * tokens as decimal strings (building an object per output, or an array slot by slot,
 * through the addon boundary cost more than the core's decisions; `JSON.parse` and
 * JavaScript build them for a fraction of that). The layout is the core's, written out in
 * core/src/js_outputs.rs; every code of a named enum is its index in the core's list of
 * names (`native.coreNames()`). The addon adds a second slot after `nextTimeoutMs`: how
 * many observations wait. Returns `{ outputs, nextTimeoutMs, observationsPending, lock }`,
 * the output objects as `LockMachine.poll()` always gave them; `lock` is the new lock id
 * an `acquirePreparedPoll` text carries in front (`withLock`), else -1.
 */
function createDecoder (native) {
  const names = native.coreNames()
  const OPERATIONS = names.operation
  const LOST_REASONS = names.lostReason
  const FAILED_REASONS = names.acquireFailedReason
  // script index → [name, sha1], in RedisScript::ALL order (the order of redisScripts())
  const scripts = Object.entries(native.redisScripts()).map(([name, s]) => [name, s.sha1])
  const strings = (flat, i, n) => {
    const out = new Array(n)
    for (let k = 0; k < n; k++) out[k] = flat[i + k]
    return out
  }
  return function decodeOutputs (json, withLock = false) {
    const flat = JSON.parse(json)
    const outputs = []
    const n = flat.length
    const head = withLock ? 1 : 0
    let i = head + 2
    while (i < n) {
      const tag = flat[i]
      const lock = flat[i + 1 + (tag === 0 ? 1 : 0)]
      switch (tag) {
        case 0: { // request: 0, id, lock, operation, deadlineMs, body...
          const id = flat[i + 1]
          const operation = OPERATIONS[flat[i + 3]]
          const deadlineMs = flat[i + 4]
          const body = flat[i + 5]
          i += 6
          if (body === 0 || body === 4 || body === 5) {
            // 5: a Redlock part, `master` (an index into the backend's masters) first
            const master = body === 5 ? flat[i++] : -1
            const [script, sha1] = scripts[flat[i]]
            const nKeys = flat[i + 1]
            const keys = strings(flat, i + 2, nKeys)
            i += 2 + nKeys
            const nArgs = flat[i]
            const args = strings(flat, i + 1, nArgs)
            i += 1 + nArgs
            const request = body === 5
              ? { type: 'request', id, lock, operation, deadlineMs, backend: 'redlock_part', master, script, sha1, keys, args }
              : { type: 'request', id, lock, operation, deadlineMs, backend: 'redis', script, sha1, keys, args }
            if (body === 4) { // WAIT on the same connection right after the script
              request.wait = { replicas: flat[i], timeoutMs: flat[i + 1] }
              i += 2
            }
            outputs.push(request)
          } else if (body === 1) {
            outputs.push({ type: 'request', id, lock, operation, deadlineMs, backend: 'redis_blpop', key: flat[i], timeoutMs: flat[i + 1] })
            i += 2
          } else if (body === 2) {
            const o = { type: 'request', id, lock, operation, deadlineMs, backend: 'etcd', call: flat[i], path: flat[i + 1], body: flat[i + 2] }
            if (flat[i + 3] !== null) o.timeoutMs = flat[i + 3]
            outputs.push(o)
            i += 4
          } else if (body === 6) { // ZooKeeper (the Node addon only): call, JSON, timeoutMs
            const o = { type: 'request', id, lock, operation, deadlineMs, backend: 'zookeeper', call: flat[i], spec: flat[i + 1] }
            if (flat[i + 2] !== null) o.timeoutMs = flat[i + 2]
            outputs.push(o)
            i += 3
          } else if (body === 8) { // Kubernetes: method, path, body, contentType, stamp
            const n = flat[i + 4]
            outputs.push({ type: 'request', id, lock, operation, deadlineMs, backend: 'kubernetes', method: flat[i], path: flat[i + 1], body: flat[i + 2], contentType: flat[i + 3], stamp: strings(flat, i + 5, n) })
            i += 5 + n
          } else if (body === 7) { // SQL (the Node addon only): sql, connection, params
            const o = { type: 'request', id, lock, operation, deadlineMs, backend: 'sql', sql: flat[i], connection: CONNECTIONS[flat[i + 1]] ?? 'any', params: null }
            const n = flat[i + 2]
            const params = new Array(n)
            i += 3
            for (let k = 0; k < n; k++) { // type code, then the value (none for null)
              const t = flat[i]
              if (t === 0) { params[k] = null; i += 1; continue }
              const v = flat[i + 1]
              params[k] = t === 1 ? v === 1 : t === 2 ? BigInt(v) : v
              i += 2
            }
            o.params = params
            outputs.push(o)
          } else {
            outputs.push({ type: 'request', id, lock, operation, deadlineMs, backend: 'unsupported' })
          }
          break
        }
        case 1:
          outputs.push({ lock, type: 'acquired', token: BigInt(flat[i + 2]), validUntilMs: flat[i + 3], previous: PREVIOUS[flat[i + 4]] ?? 'unknown', ownerId: flat[i + 5] })
          i += 6
          break
        case 2:
          outputs.push({ lock, type: 'renewed', validUntilMs: flat[i + 2] })
          i += 3
          break
        case 3:
          outputs.push({ lock, type: 'lost', reason: LOST_REASONS[flat[i + 2]] })
          i += 3
          break
        case 4:
          outputs.push({ lock, type: 'released' })
          i += 2
          break
        case 5:
          outputs.push({ lock, type: 'acquire_failed', reason: FAILED_REASONS[flat[i + 2]], message: flat[i + 3] })
          i += 4
          break
        default:
          throw new Error(`fencepost: unknown output record ${tag} from the addon (a JavaScript half and an addon of different versions?)`)
      }
    }
    return { outputs, nextTimeoutMs: flat[head], observationsPending: flat[head + 1], lock: withLock ? flat[0] : -1 }
  }
}

/** The settings each kind that takes them reads (the addon's `settings` argument). */
const SETTINGS = {
  postgres: ['mode', 'leaseTable', 'tokenTable', 'namespace'],
  zookeeper: ['root', 'naming', 'sessionTimeoutMs'],
  kubernetes: ['namespace']
}

/** The constructor's options → the addon's `(keyPrefix, seed, fair, kind, masters,
 * settings)` arguments; `masters` names a Redlock machine's masters, `settings` is a
 * PostgreSQL machine's `{ mode, leaseTable, tokenTable, namespace, notify }`, a ZooKeeper
 * one's `{ root, naming, sessionTimeoutMs }` (both the Node addon only), a Kubernetes
 * one's `{ namespace }`, an etcd one's `{ sharedLease }` or a Redis one's `{ cluster }`. */
function machineArguments (options) {
  const o = check.plainObject(options, 'LockMachine options')
  const kind = o.kind === undefined ? null : check.string(o.kind, 'kind')
  const keyPrefix = o.keyPrefix === undefined ? null : check.string(o.keyPrefix, 'keyPrefix')
  const fair = o.fair === undefined ? false : check.boolean(o.fair, 'fair')
  let masters = null
  if (o.masters !== undefined) {
    if (!Array.isArray(o.masters)) throw new ConfigError(`masters must be an array of server names, got ${check.describe(o.masters)}`, { option: 'masters' })
    masters = o.masters.map((m, i) => check.string(m, `masters[${i}]`))
  }
  let settings = null
  if (kind === 'postgres' || kind === 'zookeeper' || kind === 'kubernetes') {
    settings = {}
    for (const key of SETTINGS[kind]) {
      if (o[key] === undefined) continue
      settings[key] = key === 'sessionTimeoutMs' ? check.millis(o[key], key) : check.string(o[key], key)
    }
    if (kind === 'postgres' && o.notify !== undefined) settings.notify = check.boolean(o.notify, 'notify')
  } else if (kind === 'etcd' && (o.sharedLease !== undefined || o.cluster !== undefined)) {
    // sharedLease: one lease for the locks of this machine with the same TTL (whole
    // seconds); cluster is passed on for the addon to refuse
    settings = {}
    if (o.sharedLease !== undefined) settings.sharedLease = check.boolean(o.sharedLease, 'sharedLease')
    if (o.cluster !== undefined) settings.cluster = check.boolean(o.cluster, 'cluster')
  } else if (o.cluster !== undefined && check.boolean(o.cluster, 'cluster')) {
    // the client is a Redis Cluster client: a batched renewal carries one hash slot's keys
    settings = { cluster: true }
  }
  let seed = null
  if (o.seed !== undefined && o.seed !== null) {
    if (typeof o.seed === 'number' && Number.isSafeInteger(o.seed) && o.seed >= 0) seed = BigInt(o.seed)
    else seed = check.token(o.seed, 'seed')
  }
  return { keyPrefix, seed, fair, kind, masters, settings }
}

function createLockMachine (native) {
  const decodeOutputs = createDecoder(native)
  /** The loss reason hosts report for a lease whose backend was closed (the core's `LostReason::Closed`). */
  const CLOSED = native.coreNames().closed

  class LockMachine {
    /**
     * @param {{keyPrefix?: string, seed?: bigint|number, fair?: boolean, kind?: 'redis'|'etcd'|'redlock'|'postgres'|'zookeeper'|'kubernetes', masters?: string[], mode?: 'lease'|'session', leaseTable?: string, tokenTable?: string, namespace?: string, root?: string, naming?: 'kazoo'|'curator', sessionTimeoutMs?: number, notify?: boolean}} [options] `seed`
     *   makes owner ids and jitter deterministic (tests only: never in production, owner ids
     *   become guessable). `fair` turns on fair hand-off: a contended acquisition queues on
     *   the server and parks on a blocking pop (a request with `backend: 'redis_blpop'`).
     *   `kind` 'etcd' makes an etcd machine (requests with `backend: 'etcd'`, JSON replies).
     *   `kind` 'redlock' makes a Redlock machine over `masters` (one name per master,
     *   e.g. '127.0.0.1:6379/0', an odd count ≥ 3, none twice): each step is one request
     *   per master, `{ backend: 'redlock_part', master, script, sha1, keys, args }`, whose
     *   reply is that master's Redis reply. 'postgres' (the Node package only) a
     *   PostgreSQL machine: requests with `backend: 'sql'` (`sql`, `params`,
     *   `connection`: 'any', 'dedicated' or 'listen', a wait for a release's
     *   notification), replies as arrays of rows or `{ sqlstate, message }`, settings
     *   `mode`, `leaseTable`, `tokenTable`, `namespace`, `notify` (boolean, default true).
     *   'zookeeper' (the Node package only): requests `{ backend: 'zookeeper', call, spec }`
     *   (`spec` the call as JSON, `timeoutMs` on a watch), replies the adapter's JSON text;
     *   settings `root`, `naming`, `sessionTimeoutMs`. 'kubernetes': requests
     *   `{ backend: 'kubernetes', method, path, body, contentType, stamp }`, replies the
     *   response body's text; setting `namespace`.
     */
    constructor (options) {
      const { keyPrefix, seed, fair, kind, masters, settings } = machineArguments(options)
      this._m = translate(() => new native.Machine(keyPrefix, seed, fair, kind, masters, settings))
    }

    /**
     * Checks a lock name and already normalized options as a machine made with
     * `machineOptions` would, without making one (no entropy needed). Throws ConfigError.
     */
    static _checkAcquire (machineOptions, name, normalizedOptions) {
      const { keyPrefix, fair, kind, masters, settings } = machineArguments(machineOptions)
      translate(() => native.checkAcquire(keyPrefix, fair, kind, name, normalizedOptions, masters, settings))
    }

    /** The loss reason of a lease whose backend was closed: the core's name for it. */
    get _closedReason () { return CLOSED }

    /** Checks a lock name and options exactly as `acquire` would; throws ConfigError. */
    check (name, options) {
      check.string(name, 'lock name')
      const o = check.lockOptions(options)
      translate(() => this._m.check(name, o))
    }

    /** Starts acquiring `name`; returns the new lock id. */
    acquire (nowMs, name, options) {
      check.millis(nowMs, 'nowMs')
      check.string(name, 'lock name')
      const o = check.lockOptions(options)
      return translate(() => this._m.acquire(nowMs, name, o))
    }

    release (nowMs, lock) {
      check.millis(nowMs, 'nowMs')
      check.id(lock, 'lock')
      translate(() => this._m.release(nowMs, lock))
    }

    /** Renews `lock` now if it is held (a manual extend); the outcome is its next
     * `renewed` or `lost` event. */
    extend (nowMs, lock) {
      check.millis(nowMs, 'nowMs')
      check.id(lock, 'lock')
      translate(() => this._m.extend(nowMs, lock))
    }

    reply (nowMs, request, value) {
      check.millis(nowMs, 'nowMs')
      check.id(request, 'request')
      translate(() => this._m.reply(nowMs, request, value))
    }

    transportError (nowMs, request, message) {
      check.millis(nowMs, 'nowMs')
      check.id(request, 'request')
      check.string(message, 'message')
      translate(() => this._m.transportError(nowMs, request, message))
    }

    timeout (nowMs) {
      check.millis(nowMs, 'nowMs')
      translate(() => this._m.timeout(nowMs))
    }

    /** Drains every pending output: `{ outputs, nextTimeoutMs }`. */
    poll () {
      const { outputs, nextTimeoutMs } = decodeOutputs(translate(() => this._m.pollJson()))
      return { outputs, nextTimeoutMs }
    }

    // -- the driver's path: its inputs are well-formed by construction (times from
    // performance.now(), ids and options the machine and Lock already checked), so it
    // skips the argument checks and closures above; errors still come out translated.

    _acquire (nowMs, name, normalizedOptions) {
      try { return this._m.acquire(nowMs, name, normalizedOptions) } catch (error) { throw fromNative(error) }
    }

    /** The addon's reading of `normalizedOptions`, made once for `_acquirePreparedPoll`
     * (the addon reads an options object property by property: dearer than the acquire). */
    _prepare (normalizedOptions) {
      try { return new native.PreparedOptions(normalizedOptions) } catch (error) { throw fromNative(error) }
    }

    /** Starts acquiring `name` with options read beforehand (`_prepare`), then
     * `_poll()`, in one call across the addon boundary: the poll, with the new lock id as
     * its `lock`. */
    _acquirePreparedPoll (nowMs, name, prepared) {
      let json
      try { json = this._m.acquirePreparedPoll(nowMs, name, prepared) } catch (error) { throw fromNative(error) }
      return decodeOutputs(json, true)
    }

    _release (nowMs, lock) {
      try { this._m.release(nowMs, lock) } catch (error) { throw fromNative(error) }
    }

    /** `_release`, then `_poll()`, in one call across the addon boundary. */
    _releasePoll (nowMs, lock) {
      let json
      try { json = this._m.releasePoll(nowMs, lock) } catch (error) { throw fromNative(error) }
      return decodeOutputs(json)
    }

    /** `_reply`, then `_poll()`, in one call across the addon boundary. */
    _replyPoll (nowMs, request, value) {
      let json
      try { json = this._m.replyPoll(nowMs, request, value) } catch (error) { throw fromNative(error) }
      return decodeOutputs(json)
    }

    _extend (nowMs, lock) {
      try { this._m.extend(nowMs, lock) } catch (error) { throw fromNative(error) }
    }

    _reply (nowMs, request, value) {
      try { this._m.reply(nowMs, request, value) } catch (error) { throw fromNative(error) }
    }

    _transportError (nowMs, request, message) {
      try { this._m.transportError(nowMs, request, message) } catch (error) { throw fromNative(error) }
    }

    _timeout (nowMs) {
      try { this._m.timeout(nowMs) } catch (error) { throw fromNative(error) }
    }

    _poll () {
      let flat
      try { flat = this._m.pollJson() } catch (error) { throw fromNative(error) }
      return decodeOutputs(flat)
    }

    /**
     * Starts observing (`options`: `{ events, warnings, lateRenewalFraction, heldLongTtls,
     * hotLockAttempts, hotLockWaiters, unreachableEveryMs }`, each optional, defaults true,
     * true, 1/3, 10, 10, 10, 30000), or stops with `null`. Until then the machine builds no
     * observation. Throws ConfigError naming a bad option.
     */
    observe (options) {
      if (options === null || options === undefined) return this._observe(null)
      const o = check.plainObject(options, 'observe options')
      const flag = (key) => o[key] === undefined ? 1 : (check.boolean(o[key], key) ? 1 : 0)
      const num = (key, d) => {
        if (o[key] === undefined) return d
        if (typeof o[key] !== 'number') throw new ConfigError(`${key} must be a number, got ${check.describe(o[key])}`, { option: key })
        return o[key]
      }
      this._observe([flag('events'), flag('warnings'), num('lateRenewalFraction', 1 / 3), num('heldLongTtls', 10),
        num('hotLockAttempts', 10), num('hotLockWaiters', 10), num('unreachableEveryMs', 30000)])
    }

    /** Drains the observations: `[{ event, lock, lockId, level, warning, fields, message }]`. */
    observations () { return this._observations() }

    _observe (numbers) {
      try { this._m.observe(numbers) } catch (error) { throw fromNative(error) }
    }

    _observations () {
      let flat
      try { flat = this._m.observeFlat() } catch (error) { throw fromNative(error) }
      return decodeObservations(flat)
    }

    owner (lock) {
      check.id(lock, 'lock')
      return translate(() => this._m.owner(lock))
    }

    validUntilMs (lock) {
      check.id(lock, 'lock')
      return translate(() => this._m.validUntilMs(lock))
    }

    get lockCount () { return this._m.lockCount }
    get requestsInFlight () { return this._m.requestsInFlight }
  }
  return LockMachine
}

module.exports = { createLockMachine, createDecoder }
