'use strict'
// Type checks of user input, and lock options in the native shape. Types only: every
// range (a TTL of 0, renewEveryMs not below the validity, a correctness lock on Redis…)
// is the core's to refuse (`LockMachine.check`), so the rules live in one place for
// every language. Shared word for word by the napi and WASM packages.

const { ConfigError } = require('./errors')

/** A short description of a value for error messages: `NaN`, `"30" (string)`, `5n`. */
function describe (value) {
  switch (typeof value) {
    case 'string': return `${JSON.stringify(value.length > 60 ? value.slice(0, 57) + '...' : value)} (string)`
    case 'bigint': return `${value}n (bigint)`
    case 'number': return `${value} (number)`
    case 'undefined': return 'undefined'
    case 'function': return `a function${value.name ? ' ' + value.name : ''}`
    case 'symbol': return String(value)
    case 'boolean': return `${value} (boolean)`
    default:
      if (value === null) return 'null'
      if (Array.isArray(value)) return 'an array'
      return `an object${value.constructor && value.constructor.name ? ` (${value.constructor.name})` : ''}`
  }
}

// With the `u` flag a surrogate pair is one code point, so this matches lone ones only.
const LONE_SURROGATE = /[\uD800-\uDFFF]/u

function string (value, what) {
  if (typeof value !== 'string') throw new ConfigError(`${what} must be a string, got ${describe(value)}`)
  // the addons' UTF-8 conversion would turn it into U+FFFD: two names, one lock
  if (LONE_SURROGATE.test(value)) throw new ConfigError(`${what} must be valid UTF-8 (no lone surrogates), got ${describe(value)}`)
  return value
}

function boolean (value, what) {
  if (typeof value !== 'boolean') throw new ConfigError(`${what} must be true or false, got ${describe(value)}`)
  return value
}

/** A duration or instant in milliseconds: a finite number ≥ 0 (fractions allowed). */
function millis (value, what) {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) {
    throw new ConfigError(`${what} must be a finite number of milliseconds ≥ 0, got ${describe(value)}`)
  }
  return value
}

/** A lock or request id. */
function id (value, what) {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw new ConfigError(`${what} must be an integer id ≥ 0, got ${describe(value)}`)
  }
  return value
}

/** A fencing token: a bigint in 0n ..= 2n ** 64n - 1n. Never a (lossy) number. */
function token (value, what = 'token') {
  if (typeof value !== 'bigint') {
    const hint = typeof value === 'number' && Number.isInteger(value) ? ` (write ${value}n, or BigInt(${value}))` : ''
    throw new ConfigError(`${what} must be a bigint fencing token, got ${describe(value)}${hint}`)
  }
  if (value < 0n || value > 0xffff_ffff_ffff_ffffn) {
    throw new ConfigError(`${what} must be in 0n ..= 2n ** 64n - 1n, got ${value}n`)
  }
  return value
}

function plainObject (value, what) {
  if (value === undefined || value === null) return {}
  if (typeof value !== 'object' || Array.isArray(value)) {
    throw new ConfigError(`${what} must be an object, got ${describe(value)}`)
  }
  return value
}

const DURATION_OPTIONS = ['ttlMs', 'retryBaseMs', 'retryMaxMs', 'clockMarginMs', 'replicaTimeoutMs']
const OPTIONAL_DURATION_OPTIONS = ['acquireTimeoutMs', 'renewEveryMs']
const BOOLEAN_OPTIONS = ['acceptFailoverRisk', 'autoRenew']
const KNOWN_OPTIONS = new Set([
  ...DURATION_OPTIONS, ...OPTIONAL_DURATION_OPTIONS, ...BOOLEAN_OPTIONS, 'purpose', 'driftFactor', 'retryCount', 'tokenFloor', 'minReplicas', 'metadata'
])

function suggestion (key) {
  const bare = key.toLowerCase().replace(/[^a-z]/g, '')
  for (const known of KNOWN_OPTIONS) {
    const k = known.toLowerCase()
    if (k === bare || k === bare + 'ms' || k.replace(/ms$/, '') === bare.replace(/(s|ms|seconds)$/, '')) return known
  }
  return null
}

/**
 * Lock options as the user gave them → the native shape: the same names, types checked,
 * absent (`undefined`) options left out so the core's defaults apply. `null` is a value
 * of the wrong type (ConfigError naming the option), except for the options whose `null`
 * fencepost.d.ts documents as their default: `acquireTimeoutMs`
 * `null`, `undefined` or `Infinity` means wait forever; `renewEveryMs` `null` or
 * `undefined` means ttl / 3; `retryCount` `null` no limit; `tokenFloor` and `metadata`
 * `null` none.
 */
function lockOptions (options) {
  const given = plainObject(options, 'lock options')
  const out = {}
  for (const key of Object.keys(given)) {
    if (!KNOWN_OPTIONS.has(key)) {
      const near = suggestion(key)
      throw new ConfigError(
        `unknown lock option ${JSON.stringify(key)}${near ? `; did you mean ${near}? (durations are milliseconds)` : ''}; ` +
        `known options: ${[...KNOWN_OPTIONS].join(', ')}`,
        { option: key }
      )
    }
  }
  for (const key of DURATION_OPTIONS) {
    if (given[key] !== undefined) out[key] = optionMillis(given[key], key)
  }
  if (given.acquireTimeoutMs !== undefined && given.acquireTimeoutMs !== null && given.acquireTimeoutMs !== Infinity) {
    out.acquireTimeoutMs = optionMillis(given.acquireTimeoutMs, 'acquireTimeoutMs')
  }
  if (given.renewEveryMs !== undefined && given.renewEveryMs !== null) {
    out.renewEveryMs = optionMillis(given.renewEveryMs, 'renewEveryMs')
  }
  for (const key of BOOLEAN_OPTIONS) {
    if (given[key] !== undefined) {
      if (typeof given[key] !== 'boolean') {
        throw new ConfigError(`${key} must be true or false, got ${describe(given[key])}`, { option: key })
      }
      out[key] = given[key]
    }
  }
  if (given.purpose !== undefined) {
    // Its names are the core's: the addon refuses an unknown one, listing them (it
    // would take a null for an absent option).
    if (given.purpose === null) {
      throw new ConfigError('purpose must be the name of a purpose (leave it out for the default), got null', { option: 'purpose' })
    }
    out.purpose = given.purpose
  }
  if (given.retryCount !== undefined && given.retryCount !== null && given.retryCount !== Infinity) {
    if (!Number.isInteger(given.retryCount) || given.retryCount < 0 || given.retryCount > 2 ** 32 - 1) {
      throw new ConfigError(`retryCount must be an integer in 0 ..= 2**32 - 1 (retries after the first attempt), got ${describe(given.retryCount)}`, { option: 'retryCount' })
    }
    out.retryCount = given.retryCount
  }
  if (given.minReplicas !== undefined) {
    if (!Number.isInteger(given.minReplicas) || given.minReplicas < 0 || given.minReplicas > 2 ** 32 - 1) {
      throw new ConfigError(`minReplicas must be an integer in 0 ..= 2**32 - 1 (replicas that must confirm each grant and renewal), got ${describe(given.minReplicas)}`, { option: 'minReplicas' })
    }
    out.minReplicas = given.minReplicas
  }
  if (given.driftFactor !== undefined) {
    // NaN passes the type check: the core refuses it naming the allowed range.
    if (typeof given.driftFactor !== 'number') {
      throw new ConfigError(`driftFactor must be a number (a fraction, 0.01 = 1 %), got ${describe(given.driftFactor)}`, { option: 'driftFactor' })
    }
    out.driftFactor = given.driftFactor
  }
  if (given.tokenFloor !== undefined && given.tokenFloor !== null) {
    // A decimal string, as tokens travel: a bigint above 2 ** 53 stays exact. The range
    // is the core's.
    const floor = given.tokenFloor
    if (!(typeof floor === 'bigint' || Number.isSafeInteger(floor)) || floor < 0 || BigInt(floor) > 0xffff_ffff_ffff_ffffn) {
      throw new ConfigError(`tokenFloor must be a bigint in 1n ..= 2n ** 63n - 1n (or a safe integer), got ${describe(floor)}`, { option: 'tokenFloor' })
    }
    out.tokenFloor = String(floor)
  }
  if (given.metadata !== undefined && given.metadata !== null) {
    out.metadata = metadata(given.metadata)
  }
  return out
}

/**
 * The `metadata` lock option → the core's: the JSON text of a plain object of strings
 * (keys in order). Left out without metadata, so the core's
 * requests are those of a lock that never heard of it.
 */
function metadata (value) {
  if (typeof value !== 'object' || Array.isArray(value) || Object.getPrototypeOf(value) !== Object.prototype) {
    throw new ConfigError(`metadata must be a plain object of strings (or undefined), got ${describe(value)}`, { option: 'metadata' })
  }
  const entries = Object.entries(value).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
  for (const [key, v] of entries) {
    if (typeof v !== 'string') {
      throw new ConfigError(`metadata values must be strings, got ${JSON.stringify(key)}: ${describe(v)}`, { option: 'metadata' })
    }
  }
  // the size limit (4096 bytes) is the core's to check, like every range
  return JSON.stringify(Object.fromEntries(entries))
}

function optionMillis (value, key) {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) {
    throw new ConfigError(`${key} must be a finite number of milliseconds ≥ 0, got ${describe(value)}`, { option: key })
  }
  return value
}

function abortSignal (value, what) {
  if (value === undefined || value === null) return null
  if (typeof value !== 'object' || typeof value.aborted !== 'boolean' || typeof value.addEventListener !== 'function') {
    throw new ConfigError(`${what} must be an AbortSignal, got ${describe(value)}`)
  }
  return value
}

/** A fencing token to write with: a bigint in 1n ..= 2n ** 64n - 1n. Leases' tokens start
 * at 1n; 0n is what a fresh fence (or an absent etcd key) holds, so a write with it would be
 * refused by the Redis script, or pass on etcd with no holder at all. */
function fencingToken (value) {
  if (typeof value === 'bigint' && (value < 1n || value > 0xffff_ffff_ffff_ffffn)) {
    throw new ConfigError(`token must be a fencing token of a lease (a bigint in 1n ..= 2n ** 64n - 1n), got ${value}n`)
  }
  return token(value)
}

/** The arguments of a backend's `list(prefix = '', options)`: the prefix (a string) and
 * `options.limit` (default 100), an integer in 1 ..= `max`. Throws ConfigError (option
 * `limit` for a bad limit). */
function listArguments (prefix, options, max = Number.MAX_SAFE_INTEGER) {
  string(prefix, 'prefix')
  const o = plainObject(options, 'list options')
  const limit = o.limit === undefined ? 100 : o.limit
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > max) {
    const range = max === Number.MAX_SAFE_INTEGER ? 'an integer >= 1' : `an integer from 1 to ${max}`
    throw new ConfigError(`limit must be ${range}, got ${describe(limit)}`, { option: 'limit' })
  }
  return limit
}

module.exports = { describe, string, boolean, millis, optionMillis, id, token, fencingToken, plainObject, lockOptions, abortSignal, listArguments }
