'use strict'
// Observability: the core's events and warnings, published on named diagnostics channels
// and handed to callbacks. The core decides every event and warning (one definition for all
// languages, the same names and fields); this file only delivers them.
//
// Channels are `fencepost:<event>` (`fencepost:acquired`, `fencepost:server_unreachable`,
// …) plus `fencepost:observation` with every one. On Node (and runtimes with
// `process.getBuiltinModule`) they are `node:diagnostics_channel` channels; elsewhere (the
// WebAssembly package in browsers, workerd without Node compatibility) a small stand-in
// with the same `channel(name)` / `subscribe(name, fn)` / `unsubscribe(name, fn)` surface,
// exported as `diagnosticsChannel`.
//
// A machine observes nothing until something listens: events while a callback is set or a
// channel has subscribers, warnings also while `processWarnings` is on (the default: each
// warning is a process warning, type 'FencepostWarning', code 'FENCEPOST_<NAME>').
// Whether anything listens is checked when an acquisition starts.
//
// Shared word for word by the napi and WASM packages.

const { ConfigError } = require('./errors')

const EVENTS = Object.freeze([
  'acquiring', 'acquired', 'renewed', 'renewal_failing', 'lost', 'released',
  'acquire_timed_out', 'acquire_failed', 'backend_error'
])
const WARNINGS = Object.freeze(['renewal_late', 'held_long', 'hot_lock', 'server_unreachable'])
const WARNING_SET = new Set(WARNINGS)
const ALL_CHANNEL = 'fencepost:observation'

/** The stand-in for `node:diagnostics_channel` where the runtime has none. */
function fallbackDiagnosticsChannel () {
  const channels = new Map()
  class Channel {
    constructor (name) {
      this.name = name
      this._subscribers = []
    }

    get hasSubscribers () { return this._subscribers.length > 0 }
    subscribe (fn) { this._subscribers.push(fn) }
    unsubscribe (fn) {
      const i = this._subscribers.indexOf(fn)
      if (i < 0) return false
      this._subscribers.splice(i, 1)
      return true
    }

    publish (message) {
      for (const fn of [...this._subscribers]) {
        try { fn(message, this.name) } catch (error) { queueMicrotask(() => { throw error }) }
      }
    }
  }
  const channel = (name) => {
    let c = channels.get(name)
    if (c === undefined) channels.set(name, (c = new Channel(name)))
    return c
  }
  return {
    channel,
    hasSubscribers: (name) => channel(name).hasSubscribers,
    subscribe: (name, fn) => channel(name).subscribe(fn),
    unsubscribe: (name, fn) => channel(name).unsubscribe(fn)
  }
}

function loadDiagnosticsChannel () {
  const proc = globalThis.process
  try {
    if (proc && typeof proc.getBuiltinModule === 'function') {
      const dc = proc.getBuiltinModule('node:diagnostics_channel')
      if (dc && typeof dc.channel === 'function') return dc
    }
  } catch (_) { /* no such module here: the stand-in below */ }
  return fallbackDiagnosticsChannel()
}

const diagnosticsChannel = loadDiagnosticsChannel()
const channelOf = Object.create(null)
for (const name of [...EVENTS, ...WARNINGS]) channelOf[name] = diagnosticsChannel.channel(`fencepost:${name}`)
const allChannel = diagnosticsChannel.channel(ALL_CHANNEL)

/** `FENCEPOST_RENEWAL_LATE` for 'renewal_late'. */
const warningCode = (event) => `FENCEPOST_${event.toUpperCase()}`

/** A duration as Rust's `Debug` prints it in the core's observation messages: `0ns`,
 * `500µs`, `1.5ms`, `29.698s` (digits, then the unit, nothing around them that is part of
 * a word). The core says its errors the JavaScript way itself; its observations it says
 * once for every host, the Rust way. */
const RUST_DURATION = /(?<![\w.])(\d+)(?:\.(\d+))?(ns|[\u00b5\u03bc]s|ms|s)(?![\w\u00b5\u03bc])/g
/** Where each unit puts the decimal point of milliseconds. */
const MS_SHIFT = { s: 3, ms: 0, ns: -6 }

/** The decimal `whole.frac` times 10 ** `shift`, exactly (the point moved, no floats). */
function shiftPoint (whole, frac, shift) {
  let digits = whole + frac
  let point = whole.length + shift
  if (point < 1) {
    digits = '0'.repeat(1 - point) + digits
    point = 1
  }
  if (point > digits.length) digits += '0'.repeat(point - digits.length)
  const int = digits.slice(0, point).replace(/^0+(?=\d)/, '')
  const rest = digits.slice(point).replace(/0+$/, '')
  return rest === '' ? int : `${int}.${rest}`
}

/** `text` with its Rust durations (`0ns`, `1.5s`) in milliseconds, as JavaScript's
 * fields are (`0 ms`, `1500 ms`). Only for the core's own words: never on text a message
 * quotes (a lock name, a server's error). */
function durationsInMs (text) {
  return String(text).replace(RUST_DURATION, (_, whole, frac, unit) =>
    `${shiftPoint(whole, frac ?? '', MS_SHIFT[unit] ?? -3)} ms`)
}

/** An observation's message (the core's: `lock "name": …`, durations as Rust prints
 * them) with its durations in milliseconds, as its fields are. The lock name and the
 * errors it quotes (`error`, `lastError`: a server's or a client's text) stay as they
 * are; a message of another shape too. */
function messageInMs (message, name, fields) {
  const prefix = `lock ${JSON.stringify(name)}: `
  if (!message.startsWith(prefix)) return message
  let out = prefix
  let at = prefix.length
  for (const quoted of [fields.error, fields.lastError]) {
    const i = typeof quoted === 'string' && quoted !== '' ? message.indexOf(quoted, at) : -1
    if (i < 0) continue
    out += durationsInMs(message.slice(at, i)) + quoted
    at = i + quoted.length
  }
  return out + durationsInMs(message.slice(at))
}

/** The observeFlat() layout → observation objects. */
function decodeObservations (flat) {
  const out = []
  let i = 0
  while (i < flat.length) {
    const event = flat[i + 2]
    const n = flat[i + 5]
    const fields = {}
    for (let k = 0; k < n; k++) fields[flat[i + 6 + 2 * k]] = flat[i + 7 + 2 * k]
    const lock = flat[i + 1]
    out.push({ event, lock, lockId: flat[i], level: flat[i + 3], warning: WARNING_SET.has(event), fields, message: messageInMs(flat[i + 4], lock, fields) })
    i += 6 + 2 * n
  }
  return out
}

function callbackOrNull (fn, option) {
  if (fn === undefined || fn === null) return null
  if (typeof fn !== 'function') throw new ConfigError(`${option} must be a function or null, got ${typeof fn}`, { option })
  return fn
}

const DEFAULTS = Object.freeze({ lateRenewalFraction: 1 / 3, heldLongTtls: 10, hotLockAttempts: 10, hotLockWaiters: 10, unreachableEveryMs: 30000 })
const KNOWN = new Set(['onEvent', 'processWarnings', ...Object.keys(DEFAULTS)])

/** One backend's observation settings and callbacks, shared by its driver. */
class Observer {
  constructor () {
    this.onEvent = null
    this.perLock = false
    this.processWarnings = true
    this.numbers = [DEFAULTS.lateRenewalFraction, DEFAULTS.heldLongTtls, DEFAULTS.hotLockAttempts, DEFAULTS.hotLockWaiters, DEFAULTS.unreachableEveryMs]
    this.version = 0
  }

  /** `backend.observe(options)`: checks types here, ranges in the core (`check`). */
  configure (options, check) {
    const o = options === undefined || options === null ? {} : options
    if (typeof o !== 'object' || Array.isArray(o)) throw new ConfigError(`observe options must be an object, got ${typeof o}`)
    for (const key of Object.keys(o)) {
      if (!KNOWN.has(key)) throw new ConfigError(`unknown observe option ${JSON.stringify(key)}; known options: ${[...KNOWN].join(', ')}`, { option: key })
    }
    const onEvent = callbackOrNull(o.onEvent, 'onEvent')
    if (o.processWarnings !== undefined && typeof o.processWarnings !== 'boolean') {
      throw new ConfigError(`processWarnings must be true or false, got ${typeof o.processWarnings}`, { option: 'processWarnings' })
    }
    const numbers = Object.keys(DEFAULTS).map((key) => {
      const v = o[key] === undefined ? DEFAULTS[key] : o[key]
      if (typeof v !== 'number') throw new ConfigError(`${key} must be a number, got ${typeof v}`, { option: key })
      return v
    })
    check([1, 1, ...numbers]) // ConfigError from the core, naming the option
    this.onEvent = onEvent
    this.processWarnings = o.processWarnings ?? true
    this.numbers = numbers
    this.version++
  }

  /** A lock with an `onEvent` of its own: the machine observes events from then on. */
  lockCallback (fn) {
    if (callbackOrNull(fn, 'onEvent') !== null && !this.perLock) {
      this.perLock = true
      this.version++
    }
  }

  /** What a machine should observe now: `{ events, warnings, version }`. */
  state () {
    let events = this.onEvent !== null || this.perLock || allChannel.hasSubscribers
    for (let i = 0; !events && i < EVENTS.length; i++) events = channelOf[EVENTS[i]].hasSubscribers
    let warnings = events || this.processWarnings
    for (let i = 0; !warnings && i < WARNINGS.length; i++) warnings = channelOf[WARNINGS[i]].hasSubscribers
    return { events, warnings, version: this.version }
  }

  /** Tells `machine` what to observe if that changed since `last`; returns the state. */
  sync (machine, last) {
    const s = this.state()
    if (last === null || s.events !== last.events || s.warnings !== last.warnings || s.version !== last.version) {
      machine._observe(s.events || s.warnings ? [s.events ? 1 : 0, s.warnings ? 1 : 0, ...this.numbers] : null)
    }
    return s
  }

  /** Publishes and hands out every observation `machine` has; `lockCallback(lockId)` is
   * the lock's own `onEvent`, if any. A callback that throws is reported as an uncaught
   * exception on a microtask; the lock goes on. */
  deliver (machine, lockCallback) {
    for (const o of machine._observations()) {
      const channel = channelOf[o.event]
      if (channel !== undefined && channel.hasSubscribers) channel.publish(o)
      if (allChannel.hasSubscribers) allChannel.publish(o)
      if (o.warning && this.processWarnings) emitWarning(o.message, warningCode(o.event))
      for (const fn of [this.onEvent, lockCallback(o.lockId)]) {
        if (fn === null || fn === undefined) continue
        try { fn(o) } catch (error) { queueMicrotask(() => { throw error }) }
      }
    }
  }
}

function emitWarning (message, code) {
  const proc = globalThis.process
  if (proc !== undefined && proc !== null && typeof proc.emitWarning === 'function') {
    proc.emitWarning(message, { type: 'FencepostWarning', code })
  } else if (typeof console !== 'undefined') {
    console.warn(`FencepostWarning [${code}]: ${message}`)
  }
}

module.exports = { Observer, decodeObservations, diagnosticsChannel, EVENTS, WARNINGS, ALL_CHANNEL, warningCode, callbackOrNull }
