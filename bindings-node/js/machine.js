'use strict'
// LockMachine: the core's sans-IO lock machine with JavaScript types and errors. The
// drivers run it; hosts that want to drive the core themselves (and the scenario-vector
// runner in tests/js) use it directly. Shared by the napi and WASM packages: `native` is
// whichever addon the package loaded (both expose the same low-level interface).

const check = require('./check')
const { translate } = require('./errors')

function createLockMachine (native) {
  class LockMachine {
    /**
     * @param {{keyPrefix?: string, seed?: bigint|number, fair?: boolean, kind?: 'redis'|'etcd'}} [options] `seed`
     *   makes owner ids and jitter deterministic (tests only: never in production, owner ids
     *   become guessable). `fair` turns on fair hand-off: a contended acquisition queues on
     *   the server and parks on a blocking pop (a request with `backend: 'redis_blpop'`).
     *   `kind` 'etcd' makes an etcd machine (requests with `backend: 'etcd'`, JSON replies).
     */
    constructor (options) {
      const o = check.plainObject(options, 'LockMachine options')
      const keyPrefix = o.keyPrefix === undefined ? null : check.string(o.keyPrefix, 'keyPrefix')
      const fair = o.fair === undefined ? false : check.boolean(o.fair, 'fair')
      const kind = o.kind === undefined ? null : check.string(o.kind, 'kind')
      let seed = null
      if (o.seed !== undefined && o.seed !== null) {
        if (typeof o.seed === 'number' && Number.isSafeInteger(o.seed) && o.seed >= 0) seed = BigInt(o.seed)
        else seed = check.token(o.seed, 'seed')
      }
      this._m = translate(() => new native.Machine(keyPrefix, seed, fair, kind))
    }

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

    poll () {
      return translate(() => this._m.poll())
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

module.exports = { createLockMachine }
