'use strict'
// Replays the cross-language scenario vectors tests/scenarios/*.json,
// tests/scenarios/etcd/*.json, tests/scenarios/redlock/*.json and (the Node package only)
// tests/scenarios/zookeeper/*.json and tests/scenarios/kubernetes/*.json through the
// package's sans-IO API, `LockMachine` (the same object the drivers run).
//
// The format, the reply shorthand and the matching rules are in tests/scenarios/README.md;
// this file mirrors the Rust runner core/tests/scenarios.rs: read a vector (losslessly:
// tokens go up to 2^63 − 1), turn each step into one LockMachine call, render what `poll()`
// returns in the vector's vocabulary, match it against the expectation.
//
// What differs from the Rust runner, because the package is not the core:
// * Options become the JavaScript options (`ttl_ms` → `ttlMs`, `auto_renew` → `autoRenew`,
//   …) in milliseconds; the addon rounds them to nanoseconds as the Rust runner does.
// * Replies become what an adapter passes to `LockMachine.reply`, in two flavours, and every
//   vector is replayed in both: `client` is what ioredis and node-redis return (strings for
//   bulk and simple strings, an `Error` for an error reply); `tagged` uses the other shapes
//   the binding accepts (`Buffer` bulk strings, `{ status }`, `{ error }`).
// * A usage error is a thrown ConfigError (ClockError for `time_went_backwards` and
//   `time_out_of_range`) whose
//   `kind` is the core's; for `invalid_option` its `option` is the JavaScript name, which
//   is mapped back (`ttlMs` → `ttl`), and the message must start with it.
// * etcd vectors: the package emits JSON gateway calls (`path`, `body`: keys base64, int64
//   as strings); they are read back into the core's `EtcdRequest` form the vectors state
//   (int64 as bigint, keys plain), so the gateway rendering is checked too. Replies are
//   the gateway documents as JSON text (`client`) or its UTF-8 bytes (`tagged`).
// * ZooKeeper and Kubernetes vectors: requests are read back from the call's JSON (`spec`;
//   a Lease request's `body`); replies are JSON text or its bytes, as for etcd. Both
//   packages carry Kubernetes; the WebAssembly package carries no ZooKeeper: there those
//   vectors are not replayed and its machine must refuse the kind with a ConfigError.
// * Binding checks the Rust runner has no counterpart for: `acquire` returns the lock id
//   the README promises (the n-th accepted acquire is lock n), and `owner(lock)` is the
//   owner id in the lock's acquire and renew requests.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')

const { fencepost, REPO, IMPL, devRequire } = require('./impl')
const { parseJson } = require('./json')

const { LockMachine, ConfigError, ClockError } = fencepost

const SCENARIO_DIR = path.join(REPO, 'tests', 'scenarios')
/** The suite must not shrink silently (the Rust runner's MIN_VECTORS). */
const MIN_VECTORS = 25

const vectorsIn = (dir) => fs.existsSync(dir)
  ? fs.readdirSync(dir).filter((f) => f.endsWith('.json')).sort().map((f) => path.join(dir, f))
  : []

const VECTORS = vectorsIn(SCENARIO_DIR)
/** Vectors of the etcd backend (tests/scenarios/README.md, "etcd vectors"). */
const ETCD_VECTORS = vectorsIn(path.join(SCENARIO_DIR, 'etcd'))
/** Vectors of the Redlock backend (tests/scenarios/README.md, "Redlock vectors"). */
const REDLOCK_VECTORS = vectorsIn(path.join(SCENARIO_DIR, 'redlock'))
/** Vectors stating what the rules demand where the machine disagrees today: replayed only
 * with FENCEPOST_PENDING_VECTORS=1, like the Rust runner's `--ignored` test. */
const PENDING = vectorsIn(path.join(SCENARIO_DIR, 'pending'))
/** Vectors of the ZooKeeper and Kubernetes Lease backends: the kinds a package may lack. */
const KIND_VECTORS = {
  zookeeper: vectorsIn(path.join(SCENARIO_DIR, 'zookeeper')),
  kubernetes: vectorsIn(path.join(SCENARIO_DIR, 'kubernetes'))
}
/** Whether this package's machines carry `kind` (the WebAssembly module refuses some). */
function carries (kind) {
  try {
    new LockMachine({ kind, seed: 1 }) // eslint-disable-line no-new
    return true
  } catch (error) {
    if (error instanceof ConfigError) return false
    throw error
  }
}

class VectorError extends Error {}

// ---- vector → package calls -------------------------------------------------------------

/** Vector option → JavaScript option. */
const OPTIONS = {
  ttl_ms: 'ttlMs',
  acquire_timeout_ms: 'acquireTimeoutMs',
  retry_count: 'retryCount',
  retry_base_ms: 'retryBaseMs',
  retry_max_ms: 'retryMaxMs',
  renew_every_ms: 'renewEveryMs',
  auto_renew: 'autoRenew',
  drift_factor: 'driftFactor',
  clock_margin_ms: 'clockMarginMs',
  purpose: 'purpose',
  accept_failover_risk: 'acceptFailoverRisk',
  token_floor: 'tokenFloor',
  min_replicas: 'minReplicas',
  replica_timeout_ms: 'replicaTimeoutMs',
  metadata: 'metadata'
}
/** JavaScript option → the core's option name in a usage error. */
const CORE_OPTION = {
  ...Object.fromEntries(Object.entries(OPTIONS).map(([v, js]) => [js, v.replace(/_ms$/, '')])),
  masters: 'masters' // a Redlock's, spelt alike in both
}

function lockOptions (...layers) {
  const out = {}
  for (const layer of layers) {
    if (layer === null || typeof layer !== 'object' || Array.isArray(layer)) throw new VectorError('options must be an object')
    for (const [key, value] of Object.entries(layer)) {
      if (!Object.hasOwn(OPTIONS, key)) throw new VectorError(`unknown option ${JSON.stringify(key)}`)
      out[OPTIONS[key]] = value
    }
  }
  return out
}

const FLAVOURS = {
  client: { text: (s) => s, status: (s) => s, error: (s) => new Error(s) },
  tagged: { text: (s) => Buffer.from(s, 'utf8'), status: (s) => ({ status: s }), error: (s) => ({ error: s }) }
}

/** Reply shorthand → what an adapter hands `LockMachine.reply`. */
function reply (v, flavour) {
  if (v === null) return null
  if (typeof v === 'bigint') {
    if (v < -(2n ** 63n) || v >= 2n ** 63n) throw new VectorError(`not an i64: ${v}`)
    return v
  }
  if (typeof v === 'number') {
    if (!Number.isInteger(v)) throw new VectorError(`not an i64: ${v}`)
    return v
  }
  if (typeof v === 'string') return flavour.text(v)
  if (Array.isArray(v)) return v.map((item) => reply(item, flavour))
  if (typeof v === 'object') {
    const keys = Object.keys(v)
    if (keys.length === 1 && keys[0] === 'status' && typeof v.status === 'string') return flavour.status(v.status)
    if (keys.length === 1 && keys[0] === 'error' && typeof v.error === 'string') return flavour.error(v.error)
  }
  throw new VectorError(`bad reply shorthand ${show(v)}`)
}

const isU64 = (v) => (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0) ||
  (typeof v === 'bigint' && v >= 0n && v < 2n ** 64n)

function checkKeys (what, obj, required, optional = []) {
  if (obj === null || typeof obj !== 'object' || Array.isArray(obj)) throw new VectorError(`${what} must be an object`)
  const missing = required.filter((k) => !Object.hasOwn(obj, k))
  const unknown = Object.keys(obj).filter((k) => !required.includes(k) && !optional.includes(k))
  if (missing.length) throw new VectorError(`${what}: missing field(s) ${missing.join(', ')}`)
  if (unknown.length) throw new VectorError(`${what}: unknown field(s) ${unknown.join(', ')}`)
}

const INPUTS = {
  acquire: [['name'], ['options']],
  release: [['lock'], []],
  extend: [['lock'], []],
  reply: [['request', 'reply'], []],
  transport_error: [['request', 'message'], []],
  timeout: [[], []]
}

function load (file) {
  const raw = parseJson(fs.readFileSync(file, 'utf8'))
  checkKeys('scenario', raw, ['name', 'description', 'rules', 'seed', 'steps'], ['backend', 'options'])
  if (raw.name !== path.basename(file, '.json')) throw new VectorError(`name ${show(raw.name)} differs from the file name`)
  if (!Array.isArray(raw.rules) || raw.rules.length === 0) throw new VectorError('say which rules it covers in "rules"')
  if (!isU64(raw.seed)) throw new VectorError(`seed must be a u64, got ${show(raw.seed)}`)
  let keyPrefix
  let fair
  let cluster
  let masters
  let kind = 'redis'
  if (raw.backend !== undefined) {
    checkKeys('backend', raw.backend, ['kind'], ['key_prefix', 'fair', 'cluster', 'masters', 'namespace', 'shared_lease'])
    if (!['redis', 'etcd', 'redlock', 'zookeeper', 'kubernetes'].includes(raw.backend.kind)) throw new VectorError(`unknown backend ${show(raw.backend)}`)
    kind = raw.backend.kind
    if (raw.backend.namespace !== undefined && kind !== 'kubernetes') throw new VectorError('backend.namespace belongs to a kubernetes backend')
    keyPrefix = raw.backend.key_prefix
    fair = raw.backend.fair
    cluster = raw.backend.cluster
    if (raw.backend.shared_lease !== undefined && kind !== 'etcd') throw new VectorError('backend.shared_lease belongs to an etcd backend')
    masters = raw.backend.masters
    if ((masters !== undefined) !== (kind === 'redlock')) throw new VectorError('backend.masters belongs to (and only to) a redlock backend')
  }
  if (!Array.isArray(raw.steps)) throw new VectorError('steps must be an array')
  raw.steps.forEach((step, i) => {
    checkKeys(`step ${i}`, step, ['at_ms', 'input', 'expect'], ['note'])
    if (typeof step.at_ms !== 'number') throw new VectorError(`step ${i}: at_ms must be a number`)
    if (!Array.isArray(step.expect)) throw new VectorError(`step ${i}: expect must be an array`)
    const kind = step.input && step.input.type
    if (!Object.hasOwn(INPUTS, kind)) throw new VectorError(`step ${i}: unknown input ${show(step.input)}`)
    const [required, optional] = INPUTS[kind]
    checkKeys(`step ${i} input`, step.input, [...required, 'type'], optional)
  })
  return { name: raw.name, kind, keyPrefix, fair, cluster, masters, namespace: raw.backend?.namespace, sharedLease: raw.backend?.shared_lease, seed: raw.seed, options: raw.options ?? {}, steps: raw.steps }
}

/** A vector value as JSON text, integers past 2^53 (bigint) written exactly. */
function toJsonText (v) {
  if (typeof v === 'bigint') return v.toString()
  if (Array.isArray(v)) return `[${v.map(toJsonText).join(',')}]`
  if (v !== null && typeof v === 'object') return `{${Object.entries(v).map(([k, x]) => `${JSON.stringify(k)}:${toJsonText(x)}`).join(',')}}`
  return JSON.stringify(v)
}

/** An etcd reply as an adapter passes it: the gateway's JSON text (a JSON string in the
 * vector is that text verbatim), as a string or as UTF-8 bytes. */
function etcdReply (v, flavourName) {
  const text = typeof v === 'string' ? v : toJsonText(v)
  return flavourName === 'client' ? text : Buffer.from(text, 'utf8')
}

// ---- package → vector vocabulary --------------------------------------------------------

/** base64 → UTF-8 text (atob and TextDecoder: Node and browsers alike). */
const unb64 = (s) => new TextDecoder().decode(Uint8Array.from(atob(s), (c) => c.charCodeAt(0)))
const int64 = (s) => BigInt(s ?? '0')

/** A gateway range body → the core's EtcdRange fields. */
function etcdRange (r) {
  return {
    key: unb64(r.key),
    range_end: r.range_end === undefined ? null : unb64(r.range_end),
    limit: int64(r.limit),
    sort: r.sort_target === undefined ? null : `create_${String(r.sort_order).toLowerCase()}`,
    keys_only: r.keys_only === true,
    max_create_revision: int64(r.max_create_revision)
  }
}

function etcdOp (op) {
  if (op.request_put !== undefined) {
    const p = op.request_put
    return { op: 'put', key: unb64(p.key), value: unb64(p.value), lease: int64(p.lease) }
  }
  if (op.request_range !== undefined) return { op: 'range', ...etcdRange(op.request_range) }
  if (op.request_delete_range !== undefined) return { op: 'delete', key: unb64(op.request_delete_range.key) }
  return { unexpected_op: op }
}

/** An etcd request of the package (a gateway call) in the core's `EtcdRequest` form. */
function etcdSpec (o) {
  const body = JSON.parse(o.body) // int64 are strings in the gateway form: nothing is rounded
  const expectPath = { lease_grant: '/v3/lease/grant', lease_keep_alive: '/v3/lease/keepalive', lease_revoke: '/v3/lease/revoke', txn: '/v3/kv/txn', range: '/v3/kv/range', watch: '/v3/watch' }
  if (expectPath[o.call] !== o.path) return { unexpected_path: o.path, call: o.call }
  switch (o.call) {
    case 'lease_grant': return { call: o.call, id: int64(body.ID), ttl_s: int64(body.TTL) }
    case 'lease_keep_alive':
    case 'lease_revoke': return { call: o.call, id: int64(body.ID) }
    case 'txn': return {
      call: o.call,
      compare: body.compare.map((c) => c.target === 'CREATE' && c.result === 'EQUAL'
        ? { key: unb64(c.key), create_revision: int64(c.create_revision) }
        : { unexpected_compare: c }),
      success: (body.success ?? []).map(etcdOp),
      failure: (body.failure ?? []).map(etcdOp)
    }
    case 'range': return { call: o.call, ...etcdRange(body) }
    case 'watch': {
      const w = body.create_request
      if (JSON.stringify(w.filters) !== '["NOPUT"]') return { unexpected_watch: w }
      return { call: o.call, key: unb64(w.key), start_revision: int64(w.start_revision), timeout_ms: o.timeoutMs }
    }
    default: return { unexpected_call: o.call }
  }
}

function renderOutput (o) {
  if (o.type === 'request' && o.backend === 'zookeeper') {
    const zookeeper = JSON.parse(o.spec) // strings and small integers only: nothing is rounded
    const request = { id: o.id, lock: o.lock, operation: o.operation, deadline_ms: o.deadlineMs, zookeeper }
    if (o.timeoutMs !== undefined) request.wait_timeout_ms = o.timeoutMs
    return { request }
  }
  if (o.type === 'request' && o.backend === 'kubernetes') {
    // the body parsed, as the Rust runner renders it
    const kubernetes = { method: o.method, path: o.path, body: o.body === null ? null : JSON.parse(o.body), content_type: o.contentType, stamp: [...o.stamp] }
    return { request: { id: o.id, lock: o.lock, operation: o.operation, deadline_ms: o.deadlineMs, kubernetes } }
  }
  if (o.type === 'request' && o.backend === 'etcd') {
    const request = { id: o.id, lock: o.lock, operation: o.operation, deadline_ms: o.deadlineMs, etcd: etcdSpec(o) }
    if (o.operation === 'wait') request.wait_timeout_ms = o.timeoutMs
    return { request }
  }
  if (o.type === 'request' && o.backend === 'redis_blpop') {
    // fair hand-off: a blocking pop, rendered as the Rust runner does
    return {
      request: {
        id: o.id,
        lock: o.lock,
        operation: o.operation,
        deadline_ms: o.deadlineMs,
        wait_key: o.key,
        wait_timeout_ms: o.timeoutMs
      }
    }
  }
  if (o.type === 'request' && o.backend === 'redlock_part') {
    // one master's share of a Redlock step: the single-server script call, and its master
    return {
      request: {
        id: o.id,
        lock: o.lock,
        operation: o.operation,
        deadline_ms: o.deadlineMs,
        master: o.master,
        script: o.script,
        keys: [...o.keys],
        args: [...o.args]
      }
    }
  }
  if (o.type === 'request') {
    return {
      request: {
        id: o.id,
        lock: o.lock,
        operation: o.operation,
        deadline_ms: o.deadlineMs,
        script: o.script,
        keys: [...o.keys],
        args: [...o.args],
        ...(o.wait === undefined ? {} : { wait: { replicas: o.wait.replicas, timeout_ms: o.wait.timeoutMs } })
      }
    }
  }
  const e = { lock: o.lock, type: o.type }
  switch (o.type) {
    case 'acquired': e.token = o.token; e.valid_until_ms = o.validUntilMs; e.previous = o.previous; break
    case 'renewed': e.valid_until_ms = o.validUntilMs; break
    case 'lost': e.reason = o.reason; break
    case 'released': break
    case 'acquire_failed':
      e.reason = o.reason
      if (o.reason === 'timeout') e.last_error = o.message
      else e.error = o.message
      break
    default: return { unexpected_output: o }
  }
  return { event: e }
}

function renderUsageError (error) {
  if (error instanceof ClockError) return { usage_error: { kind: error.kind } }
  if (!(error instanceof ConfigError)) {
    return { usage_error: { unexpected: `${error && error.constructor && error.constructor.name}: ${error && error.message}` } }
  }
  const out = { kind: error.kind }
  if (error.kind === 'invalid_option') {
    out.option = CORE_OPTION[error.option] ?? `(${error.option})`
    if (!error.message.startsWith(`${error.option}: `)) out.message_does_not_name_the_option = error.message
  }
  return { usage_error: out }
}

// ---- matching (README "Matching rules", as core/tests/scenarios.rs) -----------------------

/** Keys a vector may leave out (then they are not checked). */
const OPTIONAL_KEYS = ['last_error', 'error', 'previous']

/** round(ms × 1e6), as the Rust runner rounds. */
const msToNs = (ms) => Math.round(Number(ms) * 1e6)

class Owners {
  constructor (byName = new Map()) { this.byName = byName }
  clone () { return new Owners(new Map(this.byName)) }
  check (name, actual) {
    if (!/^[0-9a-f]{32}$/.test(actual)) return false
    if (this.byName.has(name)) return this.byName.get(name) === actual
    for (const v of this.byName.values()) if (v === actual) return false // another name's
    this.byName.set(name, actual)
    return true
  }

  disguise (v) {
    if (typeof v === 'string') {
      for (const [name, hex] of this.byName) if (hex === v) return name
      return v
    }
    if (Array.isArray(v)) return v.map((x) => this.disguise(x))
    if (v !== null && typeof v === 'object' && !(v instanceof Error)) {
      return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, this.disguise(x)]))
    }
    return v
  }
}

const isNumeric = (v) => typeof v === 'number' || typeof v === 'bigint'
const isPlainObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v)

function matches (key, expected, actual, owners) {
  if (key.endsWith('_ms') && isPlainObject(expected) && typeof actual === 'number') {
    const a = msToNs(actual)
    return Object.keys(expected).every((k) => k === 'at_least' || k === 'at_most') &&
      (expected.at_least === undefined || msToNs(expected.at_least) <= a) &&
      (expected.at_most === undefined || a <= msToNs(expected.at_most))
  }
  if (key.endsWith('_ms') && isNumeric(expected) && typeof actual === 'number') {
    return msToNs(expected) === msToNs(actual)
  }
  if (typeof expected === 'string' && typeof actual === 'string') {
    if (expected.startsWith('$')) return owners.check(expected, actual)
    if (OPTIONAL_KEYS.includes(key)) return actual.includes(expected)
    return expected === actual
  }
  if (Array.isArray(expected) && Array.isArray(actual)) {
    return expected.length === actual.length && expected.every((e, i) => matches(key, e, actual[i], owners))
  }
  if (isPlainObject(expected) && isPlainObject(actual)) {
    const ek = Object.keys(expected)
    const ak = Object.keys(actual)
    return ek.every((k) => Object.hasOwn(actual, k) || OPTIONAL_KEYS.includes(k)) &&
      ak.every((k) => Object.hasOwn(expected, k) || OPTIONAL_KEYS.includes(k)) &&
      ek.every((k) => Object.hasOwn(actual, k) && matches(k, expected[k], actual[k], owners))
  }
  if (isNumeric(expected) && isNumeric(actual)) {
    // integers exactly (tokens are bigint); anything else as JSON numbers
    const bothIntegers = [expected, actual].every((v) => typeof v === 'bigint' || Number.isInteger(v))
    return bothIntegers ? BigInt(expected) === BigInt(actual) : expected === actual
  }
  return expected === actual
}

// ---- replay -----------------------------------------------------------------------------

function show (v) {
  return JSON.stringify(v, (k, x) => typeof x === 'bigint' ? Number.isSafeInteger(Number(x)) ? Number(x) : `${x}n` : x)
}

function replay (file, flavourName) {
  const scenario = load(file)
  const flavour = FLAVOURS[flavourName]
  const machine = new LockMachine({
    keyPrefix: scenario.keyPrefix,
    fair: scenario.fair,
    cluster: scenario.cluster,
    seed: scenario.seed,
    ...(scenario.kind === 'etcd' ? { kind: 'etcd', sharedLease: scenario.sharedLease } : {}),
    ...(scenario.kind === 'redlock' ? { kind: 'redlock', masters: scenario.masters } : {}),
    ...(scenario.kind === 'zookeeper' ? { kind: 'zookeeper' } : {}),
    ...(scenario.kind === 'kubernetes' ? { kind: 'kubernetes', namespace: scenario.namespace } : {})
  })
  const textReplies = ['etcd', 'zookeeper', 'kubernetes'].includes(scenario.kind)
  const owners = new Owners()
  let accepted = 0
  scenario.steps.forEach((step, index) => {
    const input = step.input
    const now = step.at_ms
    const actual = []
    try {
      switch (input.type) {
        case 'acquire': {
          const lock = machine.acquire(now, input.name, lockOptions(scenario.options, input.options ?? {}))
          accepted += 1
          assert.equal(lock, accepted, `step ${index}: the n-th accepted acquire is lock n`)
          break
        }
        case 'release': machine.release(now, Number(input.lock)); break
        case 'extend': machine.extend(now, Number(input.lock)); break
        case 'reply': machine.reply(now, Number(input.request), textReplies ? etcdReply(input.reply, flavourName) : reply(input.reply, flavour)); break
        case 'transport_error': machine.transportError(now, Number(input.request), input.message); break
        case 'timeout': machine.timeout(now); break
      }
    } catch (error) {
      if (error instanceof VectorError || error instanceof assert.AssertionError) throw error
      actual.push(renderUsageError(error))
    }
    const { outputs, nextTimeoutMs } = machine.poll()
    for (const o of outputs) {
      actual.push(renderOutput(o))
      if (o.type === 'request' && (o.backend === 'redis' || o.backend === 'redlock_part') && (o.operation === 'acquire' || o.operation === 'renew')) {
        const owner = machine.owner(o.lock)
        if (owner !== null && owner !== o.args[0]) {
          assert.fail(`step ${index}: owner(${o.lock}) is ${owner}, but its ${o.operation} request carries ${o.args[0]}`)
        }
      }
    }
    actual.push(nextTimeoutMs === null ? { idle: true } : { next_timeout_ms: nextTimeoutMs })
    if (!matches('', step.expect, actual, owners)) {
      assert.fail(mismatch(scenario.name, flavourName, index, step, actual, owners))
    }
  })
  return scenario.steps.length
}

function mismatch (name, flavourName, index, step, actual, owners) {
  const lines = [`${name} (${flavourName} replies)`, `  step ${index} at ${step.at_ms} ms, input ${show(step.input)}`]
  const trial = owners.clone()
  for (let i = 0; i < Math.max(step.expect.length, actual.length); i++) {
    const [e, a] = [step.expect[i], actual[i]]
    const shown = (v) => v === undefined ? '(nothing)' : show(owners.disguise(v))
    if (e !== undefined && a !== undefined && matches('', e, a, trial)) {
      lines.push(`      [${i}] ${shown(e)}`)
    } else {
      lines.push(`  >>> [${i}] expected ${shown(e)}`, `  >>> [${i}] actual   ${shown(a)}`)
    }
  }
  lines.push(`  owner ids so far: ${show(Object.fromEntries(owners.byName))}`)
  return lines.join('\n')
}

// ---- the tests ----------------------------------------------------------------------------

test(`at least ${MIN_VECTORS} scenario vectors`, () => {
  assert.ok(VECTORS.length >= MIN_VECTORS, `only ${VECTORS.length} vectors in ${SCENARIO_DIR}`)
})

for (const file of [...VECTORS, ...ETCD_VECTORS, ...REDLOCK_VECTORS]) {
  for (const flavour of Object.keys(FLAVOURS)) {
    test(`vector ${path.basename(file, '.json')} (${flavour} replies)`, () => {
      assert.ok(replay(file, flavour) > 0)
    })
  }
}

for (const [kind, files] of Object.entries(KIND_VECTORS)) {
  const carried = carries(kind)
  test(`${kind} vectors exist; this package ${carried ? 'replays them' : 'refuses the kind'}`, () => {
    assert.ok(files.length > 0, `no ${kind} vectors`)
    // a Lease machine needs only fetch: both packages carry it
    if (kind === 'kubernetes') assert.ok(carried, 'this package refuses kind "kubernetes"')
    if (!carried) {
      assert.throws(() => new LockMachine({ kind }), (e) => e instanceof ConfigError && e.message.includes(`kind "${kind}" is not available in the WebAssembly package`))
    }
  })
  for (const file of carried ? files : []) {
    for (const flavour of Object.keys(FLAVOURS)) {
      test(`vector ${path.basename(file, '.json')} (${flavour} replies)`, () => {
        assert.ok(replay(file, flavour) > 0)
      })
    }
  }
}

const runPending = process.env.FENCEPOST_PENDING_VECTORS === '1'
for (const file of PENDING) {
  test(`pending vector ${path.basename(file, '.json')}`, { skip: !runPending && 'set FENCEPOST_PENDING_VECTORS=1 to replay pending vectors' }, () => {
    replay(file, 'client')
  })
}

test('the runner itself: times, ranges, owner placeholders, lossless tokens', () => {
  assert.equal(msToNs(333.333333), 333_333_333)
  assert.ok(matches('deadline_ms', 666.666666, 666_666_666 / 1e6, new Owners()))
  assert.ok(matches('next_timeout_ms', { at_least: 5, at_most: 15 }, 15, new Owners()))
  assert.ok(!matches('next_timeout_ms', { at_least: 5, at_most: 15 }, 15.000001, new Owners()))
  const owners = new Owners()
  const [x, y] = ['0'.repeat(32), 'f'.repeat(32)]
  assert.ok(matches('args', ['$a', '$a'], [x, x], owners))
  assert.ok(!matches('args', ['$a'], [y], owners))
  assert.ok(!matches('args', ['$b'], [x], owners))
  assert.ok(matches('args', ['$b'], [y], owners))
  assert.ok(!matches('args', ['$c'], ['1000'], owners))
  const big = parseJson('{"token": 9223372036854775807}').token
  assert.equal(big, 9223372036854775807n)
  assert.ok(matches('token', big, 9223372036854775807n, owners))
  assert.ok(!matches('token', big, 9223372036854775806n, owners))
  assert.deepEqual(reply([null, 1, 'x', { status: 'OK' }, [[]]], FLAVOURS.client), [null, 1, 'x', 'OK', [[]]])
  assert.throws(() => reply({ oops: 1 }, FLAVOURS.client), VectorError)
  // etcd: gateway calls read back into the core's request form, int64 exact
  const watch = renderOutput({ type: 'request', backend: 'etcd', id: 5, lock: 2, operation: 'wait', deadlineMs: 843.333333, call: 'watch', path: '/v3/watch', timeoutMs: 331, body: '{"create_request":{"filters":["NOPUT"],"key":"YS/DqQ==","start_revision":"4"}}' })
  assert.deepEqual(watch, { request: { id: 5, lock: 2, operation: 'wait', deadline_ms: 843.333333, etcd: { call: 'watch', key: 'a/é', start_revision: 4n, timeout_ms: 331 }, wait_timeout_ms: 331 } })
  const grant = renderOutput({ type: 'request', backend: 'etcd', id: 1, lock: 1, operation: 'acquire', deadlineMs: 1, call: 'lease_grant', path: '/v3/lease/grant', body: '{"ID":"9223372036854775807","TTL":"2"}' })
  assert.equal(grant.request.etcd.id, 2n ** 63n - 1n)
  assert.equal(toJsonText({ ID: 2n ** 63n - 1n, a: ['x', 1, null] }), '{"ID":9223372036854775807,"a":["x",1,null]}')
  // a fair machine's blocking pop, in the Rust runner's words
  assert.deepEqual(
    renderOutput({ type: 'request', backend: 'redis_blpop', id: 2, lock: 1, operation: 'wait', deadlineMs: 30, key: 'k', timeoutMs: 7 }),
    { request: { id: 2, lock: 1, operation: 'wait', deadline_ms: 30, wait_key: 'k', wait_timeout_ms: 7 } }
  )
})

// ---- fence vectors (tests/scenarios/fence/*.json, README "Fence vectors") ----------------
// Every write through `Fence` and through the fenced-SET script on `MemoryServer`: a write
// with an `owner` uses the owner-bound rule, one without it the token-only rule.

const FENCE_VECTORS = vectorsIn(path.join(SCENARIO_DIR, 'fence'))

/** What a fence answered, in the vectors' vocabulary. */
function fenceOutcome (write) {
  try {
    write()
    return 'accepted'
  } catch (error) {
    if (!(error instanceof fencepost.StaleTokenError)) throw error
    return { refused: error.reason, highest: error.highest }
  }
}

test('at least 3 fence vectors', () => {
  assert.ok(FENCE_VECTORS.length >= 3, `fence vectors: ${FENCE_VECTORS.length}`)
})

for (const file of FENCE_VECTORS) {
  test(`fence vector ${path.basename(file, '.json')}`, async () => {
    const vector = parseJson(fs.readFileSync(file, 'utf8'))
    assert.equal(vector.name, path.basename(file, '.json'))
    const fence = new fencepost.Fence()
    const server = new fencepost.MemoryServer()
    const warned = []
    const onWarning = (w) => { if (w.code === 'FENCEPOST_DUPLICATE_GRANT') warned.push(w) }
    const proc = globalThis.process
    const hooks = proc !== undefined && typeof proc.on === 'function'
    if (hooks) proc.on('warning', onWarning)
    try {
      for (const [i, w] of vector.writes.entries()) {
        const token = BigInt(w.token)
        const expect = typeof w.expect === 'string' ? w.expect : { refused: w.expect.refused, highest: BigInt(w.expect.highest) }
        const inMemory = fenceOutcome(() => fence.check(w.resource, token, w.owner))
        assert.deepEqual(inMemory, expect, `${vector.name} write ${i}: Fence`)
        const command = fencepost.redisFencedSet(w.resource, `fence:${w.resource}`, token, 'v', w.owner)
        const reply = server.execute(command)
        const scripted = fenceOutcome(() => fencepost.readRedisFencedSet(w.resource, token, reply))
        assert.deepEqual(scripted, expect, `${vector.name} write ${i}: MemoryServer`)
      }
    } finally {
      if (hooks) {
        await new Promise((resolve) => setTimeout(resolve, 0)) // warnings are emitted on the next tick
        proc.off('warning', onWarning)
      }
    }
    const duplicates = vector.writes.filter((w) => w.expect.refused === 'duplicate_grant').length
    if (hooks) assert.equal(warned.length, duplicates * 2, 'one FENCEPOST_DUPLICATE_GRANT warning per duplicate-grant refusal')
  })
}

// The same vectors through the SQL guard on a real PostgreSQL ($FENCEPOST_PG_URL), as
// tests/python/test_fence_vectors.py replays them: `fencedUpdate` on node-postgres. Node
// only: the WASM package has no PostgreSQL.
const PG_URL = globalThis.process?.env?.FENCEPOST_PG_URL
const pgSkip = IMPL !== 'napi'
  ? 'PostgreSQL is Node-only: the WASM package has no fencedUpdate (workers cannot reach PostgreSQL)'
  : PG_URL ? false : 'FENCEPOST_PG_URL is not set (scripts/test starts PostgreSQL)'

for (const file of FENCE_VECTORS) {
  test(`fence vector ${path.basename(file, '.json')} on PostgreSQL`, { skip: pgSkip }, async () => {
    const vector = parseJson(fs.readFileSync(file, 'utf8'))
    const pg = devRequire('pg')
    const client = new pg.Client({ connectionString: PG_URL })
    await client.connect()
    const table = `fv_${globalThis.crypto.randomUUID().replaceAll('-', '').slice(0, 12)}`
    await client.query(`CREATE TABLE ${table} (id text PRIMARY KEY, body text, last_token bigint NOT NULL DEFAULT 0, last_owner text NOT NULL DEFAULT '')`)
    const warned = []
    const onWarning = (w) => { if (w.code === 'FENCEPOST_DUPLICATE_GRANT') warned.push(w) }
    process.on('warning', onWarning)
    try {
      for (const [i, w] of vector.writes.entries()) {
        await client.query(`INSERT INTO ${table} (id) VALUES ($1) ON CONFLICT DO NOTHING`, [w.resource])
        const token = BigInt(w.token)
        const expect = typeof w.expect === 'string' ? w.expect : { refused: w.expect.refused, highest: BigInt(w.expect.highest) }
        let got = 'accepted'
        try {
          await fencepost.fencedUpdate(client, table, {
            idColumn: 'id', tokenColumn: 'last_token', rowId: w.resource, token, values: { body: `write ${i}` },
            ownerColumn: w.owner ? 'last_owner' : null, ownerId: w.owner ?? null
          })
        } catch (error) {
          if (!(error instanceof fencepost.StaleTokenError)) throw error
          got = { refused: error.reason, highest: error.highest }
        }
        assert.deepEqual(got, expect, `${vector.name} write ${i}: PostgreSQL`)
      }
      await new Promise((resolve) => setTimeout(resolve, 0)) // warnings are emitted on the next tick
      assert.equal(warned.length, vector.writes.filter((w) => w.expect.refused === 'duplicate_grant').length)
    } finally {
      process.off('warning', onWarning)
      await client.query(`DROP TABLE ${table}`)
      await client.end()
    }
  })
}
