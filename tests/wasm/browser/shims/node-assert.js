'use strict'
// node:assert/strict for the browser: the functions tests/js/scenarios.test.js calls, with
// strict semantics (===, strict deep equality incl. bigint), throwing AssertionError.
class AssertionError extends Error {
  constructor (message) {
    super(message)
    this.name = 'AssertionError'
  }
}

const show = (v) => {
  try { return JSON.stringify(v, (k, x) => typeof x === 'bigint' ? `${x}n` : x) } catch { return String(v) }
}

function fail (message) {
  throw message instanceof Error ? message : new AssertionError(message ?? 'Failed')
}

function ok (value, message) {
  if (!value) fail(message ?? `expected a truthy value, got ${show(value)}`)
}

function equal (actual, expected, message) {
  if (!Object.is(actual, expected)) fail(message ?? `expected ${show(expected)}, got ${show(actual)}`)
}

function notEqual (actual, expected, message) {
  if (Object.is(actual, expected)) fail(message ?? `expected anything but ${show(expected)}`)
}

function same (a, b) {
  if (Object.is(a, b)) return true
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false
  if (Object.getPrototypeOf(a) !== Object.getPrototypeOf(b)) return false
  if (a instanceof Uint8Array) return a.length === b.length && a.every((x, i) => x === b[i])
  const ka = Object.keys(a)
  const kb = Object.keys(b)
  return ka.length === kb.length && ka.every((k) => Object.hasOwn(b, k) && same(a[k], b[k]))
}

function deepEqual (actual, expected, message) {
  if (!same(actual, expected)) fail(message ?? `expected ${show(expected)}, got ${show(actual)}`)
}

function matches (error, expected) {
  if (expected === undefined) return true
  if (expected instanceof RegExp) return expected.test(String(error && error.message))
  if (typeof expected === 'function') {
    if (expected.prototype !== undefined && error instanceof expected) return true
    if (Error.isPrototypeOf(expected) || expected === Error) return false
    return expected(error) === true
  }
  return Object.keys(expected).every((k) => same(error[k], expected[k]))
}

function throws (fn, expected, message) {
  if (typeof expected === 'string') [expected, message] = [undefined, expected]
  try {
    fn()
  } catch (error) {
    if (!matches(error, expected)) fail(message ?? `the error ${error} does not match`)
    return
  }
  fail(message ?? 'expected the function to throw')
}

function match (string, regexp, message) {
  if (!regexp.test(string)) fail(message ?? `${show(string)} does not match ${regexp}`)
}

module.exports = { AssertionError, fail, ok, equal, notEqual, deepEqual, strictEqual: equal, deepStrictEqual: deepEqual, throws, match }
