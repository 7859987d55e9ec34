'use strict'
// The shared bad-input table (tests/bad_input/table.json), replayed on the implementation
// under test (FENCEPOST_IMPL=napi|wasm): every row is refused with the same error class,
// code, kind and option as in the other bindings, before anything is sent (the backend
// counts requests). Mirrors tests/python/test_bad_input.py.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')

const { fencepost } = require('./impl')

const { Lock, Fence, RedisProtocolBackend, ConfigError, FencepostError, sqlFencedUpdate, backendFromUrl } = fencepost

const TABLE = JSON.parse(fs.readFileSync(path.join(__dirname, '..', 'bad_input', 'table.json'), 'utf8'))

/** The table's option names (the core's) as JavaScript spells them. */
const OPTION = {
  ttl: 'ttlMs',
  acquire_timeout: 'acquireTimeoutMs',
  retry_base: 'retryBaseMs',
  retry_max: 'retryMaxMs',
  renew_every: 'renewEveryMs',
  clock_margin: 'clockMarginMs',
  drift_factor: 'driftFactor',
  retry_count: 'retryCount',
  purpose: 'purpose',
  auto_renew: 'autoRenew',
  accept_failover_risk: 'acceptFailoverRisk'
}

/** A table value as JavaScript spells it (tags for what JSON cannot say). */
function value (v) {
  if (Array.isArray(v)) return v.map(value)
  if (v === null || typeof v !== 'object') return v
  if ('$nan' in v) return NaN
  if ('$inf' in v) return Infinity * v.$inf
  if ('$bigint' in v) return BigInt(v.$bigint)
  if ('$repeat' in v) return v.$repeat[0].repeat(v.$repeat[1])
  if ('$lone' in v) return (v.before ?? '') + String.fromCharCode(parseInt(v.$lone, 16)) + (v.after ?? '')
  throw new Error(`unknown tag in ${JSON.stringify(v)}`)
}

/** Counts the requests it is given: none is expected. */
class CountingBackend extends RedisProtocolBackend {
  constructor () { super(); this.calls = 0 }
  async execute (request) {
    this.calls += 1
    throw new Error(`a request was sent: ${request.operation}`)
  }
}

async function run (row) {
  switch (row.call) {
    case 'lock': {
      const options = {}
      for (const [key, v] of Object.entries(row.options ?? {})) {
        if (key === '$unknown') options[v] = 1
        else options[OPTION[key]] = value(v)
      }
      const backend = new CountingBackend()
      try {
        new Lock(backend, 'name' in row ? value(row.name) : 'job', options) // eslint-disable-line no-new
      } finally {
        assert.equal(backend.calls, 0, 'refused only after a request was sent')
      }
      break
    }
    case 'fence_check':
      new Fence().check(value(row.resource), value(row.token), row.owner_id)
      break
    case 'sql_fenced_update':
      sqlFencedUpdate(value(row.table ?? 'jobs'), value(row.id_column ?? 'id'), value(row.token_column ?? 'last_token'), value(row.columns ?? ['body']))
      break
    case 'backend_from_url': {
      const backend = await backendFromUrl(value(row.url))
      backend.close()
      break
    }
    default:
      throw new Error(`unknown call ${row.call}`)
  }
  throw new Error('accepted')
}

for (const row of TABLE.rows) {
  const skip = row.skip?.js
  test(`bad input ${row.id}: refused as the other bindings refuse it`, { skip }, async () => {
    const expected = row.js?.error ?? 'ConfigError'
    const error = await run(row).then(() => null, (e) => e)
    assert.ok(error !== null)
    assert.equal(error.constructor.name, expected, `${error.constructor.name}: ${error.message}`)
    if (expected === 'ConfigError') {
      assert.ok(error instanceof ConfigError && error instanceof FencepostError)
      assert.deepEqual([error.code, error.kind], ['ERR_CONFIG', row.expect.kind], error.message)
      if ('option' in row.expect) { // compared where the table names one (or null)
        const option = row.expect.option === null ? null : (OPTION[row.expect.option] ?? row.expect.option)
        assert.equal(error.option, option, error.message)
      }
    }
  })
}

test('the bad-input table covers every call and its row ids are unique', () => {
  assert.deepEqual(new Set(TABLE.rows.map((r) => r.call)), new Set(['lock', 'fence_check', 'sql_fenced_update', 'backend_from_url']))
  assert.equal(new Set(TABLE.rows.map((r) => r.id)).size, TABLE.rows.length)
})

// JavaScript has two absent values: `undefined` is an option left out, and `null` is
// refused like any value of the wrong type, except where fencepost.d.ts says an option's
// `null` is its default. The table's rows say values every language can; these are
// JavaScript's own.
const NULL_REFUSED = ['ttlMs', 'retryBaseMs', 'retryMaxMs', 'clockMarginMs', 'replicaTimeoutMs', 'purpose', 'acceptFailoverRisk', 'autoRenew', 'driftFactor', 'minReplicas']
const NULL_MEANS_DEFAULT = ['acquireTimeoutMs', 'retryCount', 'renewEveryMs', 'tokenFloor', 'metadata']

for (const option of NULL_REFUSED) {
  test(`bad input ${option}: null is refused naming the option, not taken for the default`, () => {
    const backend = new CountingBackend()
    assert.throws(() => new Lock(backend, 'job', { [option]: null }), (error) => {
      assert.ok(error instanceof ConfigError, `${error.constructor.name}: ${error.message}`)
      assert.deepEqual([error.code, error.kind, error.option], ['ERR_CONFIG', 'invalid_argument', option], error.message)
      assert.ok(error.message.startsWith(`${option} must be`) && error.message.endsWith('got null'), error.message)
      return true
    })
    assert.equal(backend.calls, 0)
  })
}

test('null means the default for the options documented so, and undefined for every option', () => {
  const backend = new CountingBackend()
  for (const option of NULL_MEANS_DEFAULT) new Lock(backend, 'job', { [option]: null }) // eslint-disable-line no-new
  for (const option of [...NULL_REFUSED, ...NULL_MEANS_DEFAULT]) new Lock(backend, 'job', { [option]: undefined }) // eslint-disable-line no-new
  assert.equal(backend.calls, 0)
})
