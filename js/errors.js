'use strict'
// Every error fencepost throws, under one base class, FencepostError, each with a stable
// `code` (the same strings as Python's `fencepost.errors` classes carry):
//
//   class                 code                 thrown when
//   ConfigError           ERR_CONFIG           bad input or misuse (types, ranges, options)
//   ClockError            ERR_CONFIG           the monotonic clock went backwards or out of range
//   LockLostError         ERR_LOCK_LOST        a held lease ended before it was released
//   AcquireTimeoutError   ERR_ACQUIRE_TIMEOUT  the acquire timeout passed
//   StaleTokenError       ERR_STALE_TOKEN      a fence refused a write with an old token
//   ProtocolError         ERR_PROTOCOL         the server's reply made no sense
//   BackendError          ERR_BACKEND          a helper could not reach the server
//
// This file is shared word for word by the napi and WASM packages.

class FencepostError extends Error {
  constructor (message, options) {
    super(message, options)
    this.name = new.target.name
    // an own property, as on Node's own errors, so that util.inspect and console.error
    // show it; each class's prototype keeps its code too
    this.code = new.target.prototype.code
  }
}
FencepostError.prototype.code = 'ERR_FENCEPOST'

class ConfigError extends FencepostError {
  /** @param {{kind?: string, option?: string|null, cause?: unknown}} [details] */
  constructor (message, details = {}) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause })
    this.kind = details.kind ?? 'invalid_argument'
    this.option = details.option ?? null
  }
}
ConfigError.prototype.code = 'ERR_CONFIG'

class ClockError extends ConfigError {
  /** @param {string} message @param {'time_went_backwards'|'time_out_of_range'} [kind] */
  constructor (message, kind = 'time_went_backwards') {
    super(message, { kind })
  }
}

const LOST_WHY = {
  expired: 'its validity deadline passed without a confirmed renewal',
  renew_rejected: 'the server refused the renewal: it no longer held the lock for this owner',
  not_held_at_release: 'the server no longer held it for this owner when it was released',
  closed: 'its backend was closed while it was held'
}

class LockLostError extends FencepostError {
  constructor (lockName, token, reason) {
    super(`lock ${JSON.stringify(lockName)} (fencing token ${token}) was lost: ${LOST_WHY[reason] ?? reason}`)
    this.lockName = lockName
    this.token = token
    this.reason = reason
  }
}
LockLostError.prototype.code = 'ERR_LOCK_LOST'

class AcquireTimeoutError extends FencepostError {
  constructor (lockName, lastError) {
    const detail = lastError ? `; last error: ${lastError}` : '; it was held by another owner'
    super(`could not acquire lock ${JSON.stringify(lockName)} before the acquire timeout${detail}`)
    this.lockName = lockName
    this.lastError = lastError ?? null
  }
}
AcquireTimeoutError.prototype.code = 'ERR_ACQUIRE_TIMEOUT'

/** A fenced write was refused. `reason`: 'superseded' (a lower token than the
 * resource's `highest`) or 'duplicate_grant' (owner-bound rule: the same token from
 * another owner, so the lock server granted it twice). A legitimate holder refused
 * because tokens went backwards acquires again with `tokenFloor: highest + 1n`. */
class StaleTokenError extends FencepostError {
  constructor (message, resource, token, highest, reason = 'superseded') {
    super(message)
    this.resource = resource
    this.token = token
    this.highest = highest
    this.reason = reason
  }
}
StaleTokenError.prototype.code = 'ERR_STALE_TOKEN'

class ProtocolError extends FencepostError {}
ProtocolError.prototype.code = 'ERR_PROTOCOL'

class BackendError extends FencepostError {}
BackendError.prototype.code = 'ERR_BACKEND'

// ---- translating the native addon's errors --------------------------------------------------

/** The core's option names and their JavaScript spelling. */
const JS_OPTION = {
  ttl: 'ttlMs',
  purpose: 'purpose',
  accept_failover_risk: 'acceptFailoverRisk',
  acquire_timeout: 'acquireTimeoutMs',
  retry_base: 'retryBaseMs',
  retry_max: 'retryMaxMs',
  renew_every: 'renewEveryMs',
  auto_renew: 'autoRenew',
  drift_factor: 'driftFactor',
  clock_margin: 'clockMarginMs',
  token_floor: 'tokenFloor',
  min_replicas: 'minReplicas',
  replica_timeout: 'replicaTimeoutMs'
}

/** Messages the core did not say for JavaScript (the addons' own, which may name an
 * option the Rust/Python way or neutrally, `accept-failover-risk`), said the JavaScript way. */
function jsWords (text) {
  return String(text)
    .replace(/\b(accept|auto|renew|retry|acquire|clock|drift)-(failover-risk|renew|every|base|max|timeout|margin|factor)\b/g, (w) => w.replace(/-/g, '_'))
    .replace(/\b(accept_failover_risk|auto_renew)=(true|false)\b/g, (_, name, value) => `${JS_OPTION[name]}: ${value}`)
    .replace(/\b(accept_failover_risk|auto_renew|renew_every|retry_base|retry_max|acquire_timeout|clock_margin|drift_factor|token_floor|min_replicas|replica_timeout)\b/g, (name) => JS_OPTION[name])
}

// napi-rs's own codes for an argument of the wrong type (the JavaScript half checks types
// first, so these mean a bug or a value that changed under us).
const NAPI_TYPE_CODES = new Set([
  'InvalidArg', 'ObjectExpected', 'StringExpected', 'NameExpected', 'FunctionExpected',
  'NumberExpected', 'BooleanExpected', 'ArrayExpected', 'BigintExpected', 'DateExpected',
  'ArrayBufferExpected', 'DetachableArraybufferExpected'
])

/** A FencepostError for an error thrown by the native addon (other errors unchanged). */
function fromNative (error) {
  if (error instanceof FencepostError || error === null || typeof error !== 'object') return error
  switch (error.code) {
    case 'ERR_CONFIG': {
      const option = error.option ? (JS_OPTION[error.option] ?? error.option) : null
      // the core says its own messages the JavaScript way (durations in ms, option names
      // as the options object's keys); the addons' other messages may still name an option
      // the core's way
      const message = error.kind === 'invalid_option' || error.kind === 'unsafe_purpose'
        ? error.message
        : jsWords(error.message)
      return new ConfigError(message, { kind: error.kind, option })
    }
    case 'ERR_CLOCK':
      return new ClockError(error.message, error.kind === 'time_out_of_range' ? 'time_out_of_range' : 'time_went_backwards')
    case 'ERR_BACKEND':
      return new BackendError(error.message)
    default:
      if (NAPI_TYPE_CODES.has(error.code)) {
        return new ConfigError(`invalid argument: ${error.message || error.code}`, { cause: error })
      }
      return error
  }
}

/** Runs `fn`, rethrowing the native addon's errors as FencepostErrors. */
function translate (fn) {
  try {
    return fn()
  } catch (error) {
    throw fromNative(error)
  }
}

module.exports = {
  FencepostError,
  ConfigError,
  ClockError,
  LockLostError,
  AcquireTimeoutError,
  StaleTokenError,
  ProtocolError,
  BackendError,
  JS_OPTION,
  fromNative,
  translate
}
