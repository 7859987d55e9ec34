'use strict'
// EtcdBackend (etcd v3 through its JSON gateway, fetch only) against the real etcd at
// $FENCEPOST_ETCD_URL (scripts/test starts one member with scripts/services/etcd.sh), and
// the etcd parts of the low-level interface without a server. Runs for both
// implementations (FENCEPOST_IMPL=napi|wasm): the adapter lives in the shared JavaScript
// layer. tests/wasm/workerd.test.js runs the same adapter inside workerd.
//
// The black-hole test pauses the member (SIGSTOP through scripts/services/etcd.sh, resumed
// in `finally`), only when that script started the member at $FENCEPOST_ETCD_URL under
// this $FENCEPOST_STATE; no other file of this suite uses etcd, and a file's tests run
// one after another.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { execFileSync } = require('node:child_process')
const crypto = require('node:crypto')
const fs = require('node:fs')
const net = require('node:net')
const path = require('node:path')

const { fencepost, IMPL, REPO, sleep, waitUntil } = require('./impl')

const {
  Lock, LockMachine, EtcdBackend, ConfigError, BackendError, ProtocolError, StaleTokenError,
  AcquireTimeoutError, etcdHolderKey, etcdFencedTxn, readEtcdFencedTxn
} = fencepost

const ETCD = process.env.FENCEPOST_ETCD_URL
const skip = ETCD
  ? false
  : 'FENCEPOST_ETCD_URL is not set (scripts/test starts etcd and sets it; or run scripts/services/etcd.sh start and export FENCEPOST_ETCD_URL=$(cat .state/etcd/url))'

const b64 = (s) => Buffer.from(s, 'utf8').toString('base64')
const unb64 = (s) => Buffer.from(s, 'base64').toString('utf8')

/** One raw JSON gateway call: the tests' own view of etcd (int64 fields stay strings). */
async function gateway (path, body) {
  const response = await fetch(ETCD + path, { method: 'POST', body: JSON.stringify(body) })
  const doc = JSON.parse((await response.text()).split('\n', 1)[0])
  return doc.result ?? doc
}

/** Every key under `prefix`, by key: { key, create, mod, lease } with bigint revisions. */
async function keysUnder (prefix) {
  const end = prefix.slice(0, -1) + String.fromCharCode(prefix.charCodeAt(prefix.length - 1) + 1)
  const doc = await gateway('/v3/kv/range', { key: b64(prefix), range_end: b64(end) })
  return (doc.kvs ?? []).map((kv) => ({
    key: unb64(kv.key),
    create: BigInt(kv.create_revision),
    mod: BigInt(kv.mod_revision),
    lease: BigInt(kv.lease ?? '0'),
    value: kv.value === undefined ? '' : unb64(kv.value)
  }))
}

/** The remaining TTL of a lease in seconds (-1: gone). The id goes out as a decimal string. */
async function leaseTtl (id) {
  return Number((await gateway('/v3/lease/timetolive', { ID: id.toString() })).TTL ?? '-1')
}

/** The TTL a lease was granted with, in seconds. */
async function grantedTtl (id) {
  return Number((await gateway('/v3/lease/timetolive', { ID: id.toString() })).grantedTTL ?? '0')
}

/** A 127.0.0.1 URL nothing listens on (connections are refused). */
function deadEndpoint () {
  return new Promise((resolve, reject) => {
    const server = net.createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address()
      server.close(() => resolve(`http://127.0.0.1:${port}`))
    })
  })
}

const unique = () => `fp-${crypto.randomBytes(6).toString('hex')}`

/**
 * A fetch that counts calls by path and knows the watches open right now (a watch is open
 * from its call until its signal aborts: EtcdBackend always aborts a watch when done).
 */
function countingFetch (options = {}) {
  const calls = {}
  const counter = {
    calls,
    openWatches: 0,
    refused: 0,
    total: () => Object.values(calls).reduce((a, b) => a + b, 0),
    fetch: async (url, init) => {
      const path = new URL(url).pathname
      if (options.dead !== undefined && url.startsWith(options.dead)) counter.refused++
      calls[path] = (calls[path] ?? 0) + 1
      if (path === '/v3/watch') {
        counter.openWatches++
        let closed = false
        const close = () => { if (!closed) { closed = true; counter.openWatches-- } }
        if (init.signal.aborted) close()
        else init.signal.addEventListener('abort', close, { once: true })
        try {
          return await fetch(url, init)
        } catch (error) {
          close()
          throw error
        }
      }
      return fetch(url, init)
    }
  }
  return counter
}

// ---- without a server ---------------------------------------------------------------------

test('EtcdBackend: configuration errors name the option; correctness locks need no opt-in', () => {
  const refuses = (options, pattern) => assert.throws(() => new EtcdBackend(options), (e) => e instanceof ConfigError && e.code === 'ERR_CONFIG' && pattern.test(e.message), JSON.stringify(options))
  refuses(undefined, /endpoints must be/)
  refuses({ endpoints: [] }, /at least one/)
  refuses({ endpoints: '127.0.0.1:2379' }, /endpoints\[0\] must be an http/)
  refuses({ endpoints: ['http://127.0.0.1:2379', 5] }, /endpoints\[1\]/)
  refuses({ endpoints: 'ftp://127.0.0.1' }, /http:\/\/ or https:\/\//)
  refuses({ endpoints: 'http://127.0.0.1:2379', keyPrefix: 3 }, /keyPrefix must be a string/)
  refuses({ endpoints: 'http://127.0.0.1:2379', fetch: 'no' }, /fetch must be a function/)
  refuses({ endpoints: 'http://127.0.0.1:2379', endpoint: 'x' }, /unknown EtcdBackend option "endpoint"/)
  refuses({ endpoints: 'http://127.0.0.1:2379', fair: true }, /unknown EtcdBackend option "fair"/)

  const backend = new EtcdBackend({ endpoints: ['http://127.0.0.1:2379/', 'https://10.0.0.2:2379'] })
  assert.deepEqual([...backend.endpoints], ['http://127.0.0.1:2379', 'https://10.0.0.2:2379'])
  assert.equal(backend.keyPrefix, 'fencepost/')
  assert.equal(backend.lockKey('report'), 'fencepost/report/')
  // etcd revisions never go backwards: a correctness lock is fine without acceptFailoverRisk
  const lock = new Lock(backend, 'money', { purpose: 'correctness', ttlMs: 2_500 })
  assert.equal(lock.backend, backend)
  assert.throws(() => new Lock(backend, 'money', { ttlMs: 0 }), (e) => e instanceof ConfigError && e.option === 'ttlMs')
  // its tokens are create revisions the server alone assigns: a floor is refused, never ignored
  assert.throws(() => new Lock(backend, 'money', { tokenFloor: 42n }), (e) => e instanceof ConfigError && e.option === 'tokenFloor' && /tokenFloor: not supported on etcd/.test(e.message))
  backend.close()
})

test('holder keys and lease ids: bigint, exact past 2^53, sign bit dropped, never 0', () => {
  const backend = new EtcdBackend({ endpoints: 'http://127.0.0.1:2379', keyPrefix: 'app/' })
  assert.equal(backend.holderKey('report', '00'.repeat(8) + 'ff'.repeat(8)), 'app/report/' + '0'.repeat(15) + '1')
  assert.equal(backend.leaseId('00'.repeat(8) + 'ff'.repeat(8)), 1n) // 0 would ask etcd to choose
  assert.equal(backend.leaseId('80' + '00'.repeat(15)), 1n) // the sign bit is dropped
  const max = backend.leaseId('ff'.repeat(16))
  assert.equal(typeof max, 'bigint')
  assert.equal(max, 2n ** 63n - 1n) // 9223372036854775807: as a number it would round to 2^63
  assert.equal(backend.leaseId('0020000000000001' + '00'.repeat(8)), 2n ** 53n + 1n) // the first integer a number cannot hold
  assert.equal(backend.holderKey('report', 'ff'.repeat(16)), 'app/report/7fffffffffffffff')
  assert.equal(etcdHolderKey('app/', 'report', 'ab'.repeat(16)), backend.holderKey('report', 'ab'.repeat(16)))
  for (const bad of ['xyz', 'g'.repeat(32), 'ab'.repeat(17)]) {
    assert.throws(() => backend.holderKey('report', bad), (e) => e instanceof ConfigError && /32 hex digits/.test(e.message))
    assert.throws(() => backend.leaseId(bad), (e) => e instanceof ConfigError && /32 hex digits/.test(e.message))
  }
  assert.throws(() => backend.leaseId(5), ConfigError)
  backend.close()
})

test('an etcd LockMachine emits JSON gateway calls; a reply that is not text is a protocol error, never a throw', () => {
  if (IMPL === 'napi') {
    assert.ok(new LockMachine({ kind: 'zookeeper' }), 'the Node package carries ZooKeeper (zookeeper.test.js)')
  } else {
    assert.throws(() => new LockMachine({ kind: 'zookeeper' }), (e) => e instanceof ConfigError && /'redis', 'etcd' or 'redlock'/.test(e.message))
    assert.throws(() => new LockMachine({ kind: 'zookeeper' }), (e) => e instanceof ConfigError && /workers have no sockets/.test(e.message))
  }
  assert.throws(() => new LockMachine({ kind: 'etcd', fair: true }), (e) => e instanceof ConfigError && /FIFO/.test(e.message))
  assert.throws(() => new LockMachine({ kind: 5 }), ConfigError)

  const machine = new LockMachine({ kind: 'etcd', keyPrefix: 'app/', seed: 7n })
  // 2 500 ms: etcd leases are whole seconds, rounded up
  const lock = machine.acquire(0, 'report', { ttlMs: 2_500 })
  const [grant] = machine.poll().outputs
  assert.equal(grant.type, 'request')
  assert.equal(grant.backend, 'etcd')
  assert.equal(grant.operation, 'acquire')
  assert.equal(grant.call, 'lease_grant')
  assert.equal(grant.path, '/v3/lease/grant')
  assert.equal(grant.timeoutMs, undefined)
  const body = JSON.parse(grant.body)
  assert.equal(body.TTL, '3')
  // the lease id travels as a decimal string, equal to the bigint leaseId gives
  const backend = new EtcdBackend({ endpoints: 'http://127.0.0.1:2379', keyPrefix: 'app/' })
  assert.equal(body.ID, backend.leaseId(machine.owner(lock)).toString())
  backend.close()

  machine.reply(1, grant.id, JSON.stringify({ header: { revision: '1' }, ID: body.ID, TTL: '3' }))
  const [txn] = machine.poll().outputs
  assert.equal(txn.call, 'txn')
  assert.equal(txn.path, '/v3/kv/txn')
  const put = JSON.parse(txn.body).success[0].request_put
  assert.equal(unb64(put.key), etcdHolderKey('app/', 'report', machine.owner(lock)))
  assert.equal(put.lease, body.ID)

  // not text: read as a protocol error (the acquisition fails; the lease is revoked)
  machine.reply(2, txn.id, 42)
  const outputs = machine.poll().outputs
  const failed = outputs.find((o) => o.type === 'acquire_failed')
  assert.equal(failed.reason, 'protocol')
  assert.match(failed.message, /not an etcd JSON reply/)
  assert.ok(outputs.some((o) => o.type === 'request' && o.call === 'lease_revoke'))

  // garbage of every kind into reply(): never a throw
  const other = new LockMachine({ kind: 'etcd', seed: 8n })
  const throwing = new Proxy({}, { get () { throw new Error('trap') }, getPrototypeOf () { throw new Error('trap') } })
  let t = 10
  for (const value of [undefined, null, {}, [], 1n, true, Symbol('s'), throwing, new Uint8Array([0xff]), '', 'not json', '{"error":"x","code":3}']) {
    other.acquire(t, `g${t}`, { ttlMs: 1_000 })
    for (const o of other.poll().outputs) if (o.type === 'request') other.reply(++t, o.id, value)
    other.poll()
  }
})

test('etcdFencedTxn / readEtcdFencedTxn: revisions and tokens stay exact past 2^53', () => {
  const owner = 'ab'.repeat(16)
  const token = 2n ** 53n + 1n
  const call = etcdFencedTxn('app/', 'books', owner, token, [['app/data', 'v1']], ['app/draft'])
  assert.equal(call.backend, 'etcd')
  assert.equal(call.call, 'txn')
  assert.equal(call.path, '/v3/kv/txn')
  const body = JSON.parse(call.body)
  assert.deepEqual(body.compare, [{ key: b64(etcdHolderKey('app/', 'books', owner)), target: 'CREATE', result: 'EQUAL', create_revision: '9007199254740993' }])
  assert.deepEqual(body.success, [{ request_put: { key: b64('app/data'), value: b64('v1') } }, { request_delete_range: { key: b64('app/draft') } }])

  assert.equal(readEtcdFencedTxn('books', token, '{"header":{"revision":"9007199254740995"},"succeeded":true}'), 9007199254740995n)
  const refused = '{"header":{"revision":"9007199254740999"},"responses":[{"response_range":{"kvs":[{"key":"eA==","create_revision":"9007199254740997"}],"count":"1"}}]}'
  assert.throws(() => readEtcdFencedTxn('books', token, refused), (e) =>
    e instanceof StaleTokenError && e.code === 'ERR_STALE_TOKEN' && e.resource === 'books' && e.token === token && e.highest === 9007199254740997n)
  assert.throws(() => readEtcdFencedTxn('books', token, '{"header":{"revision":"5"},"responses":[{"response_range":{}}]}'), (e) =>
    e instanceof StaleTokenError && e.highest === 0n && /nobody holds it/.test(e.message))
  assert.throws(() => readEtcdFencedTxn('books', token, '{"error":"etcdserver: request timed out","code":14,"message":"x"}'), (e) => e instanceof ProtocolError && e.code === 'ERR_PROTOCOL')
  assert.throws(() => readEtcdFencedTxn('books', token, 42), ProtocolError)

  assert.throws(() => etcdFencedTxn('app/', 'books', owner, 5, []), (e) => e instanceof ConfigError && /bigint/.test(e.message))
  assert.throws(() => etcdFencedTxn('app/', 'books', owner, 5n, [['k']]), (e) => e instanceof ConfigError && /puts\[0\]/.test(e.message))
  assert.throws(() => etcdFencedTxn('app/', 'books', owner, 5n, { k: 'v' }), (e) => e instanceof ConfigError && e.option === 'puts')
  assert.throws(() => etcdFencedTxn('app/', 'books', owner, 5n, [], 'k'), (e) => e instanceof ConfigError && e.option === 'deletes')
  assert.throws(() => etcdFencedTxn('app/', 'books', 'nope', 5n, []), (e) => e instanceof ConfigError && /ownerId/.test(e.message))
})

// ---- against etcd -------------------------------------------------------------------------

test('acquire, renew past the TTL by keep-alives, release: token = the key\'s create revision, ids exact', { skip, timeout: 20_000 }, async () => {
  const name = unique()
  const counter = countingFetch()
  const backend = new EtcdBackend({ endpoints: ETCD, fetch: counter.fetch })
  const prefix = backend.lockKey(name)
  try {
    const lease = await new Lock(backend, name, { ttlMs: 1_200, purpose: 'correctness' }).acquire()
    const [key] = await keysUnder(prefix)
    assert.equal(key.key, backend.holderKey(name, lease.ownerId))
    assert.equal(typeof lease.token, 'bigint')
    assert.equal(lease.token, key.create) // the fencing token is the key's create revision
    const leaseId = backend.leaseId(lease.ownerId)
    assert.equal(key.lease, leaseId) // read back from etcd's decimal string: the same bigint
    assert.equal(await grantedTtl(leaseId), 2) // 1 200 ms rounded up to whole seconds
    assert.ok(lease.validForMs() > 0 && lease.validForMs() <= 1_200 * 0.99 - 2)

    await sleep(2_500) // past the 2 s lease: only keep-alives keep it
    lease.check()
    assert.ok(counter.calls['/v3/lease/keepalive'] >= 5, JSON.stringify(counter.calls)) // every 400 ms
    assert.deepEqual((await keysUnder(prefix)).map((k) => [k.key, k.create, k.mod]), [[key.key, key.create, key.create]])

    await lease.release()
    assert.deepEqual(await keysUnder(prefix), [])
    assert.ok(await waitUntil(async () => (await leaseTtl(leaseId)) === -1, 2_000), 'lease revoked')
  } finally {
    backend.close()
  }
})

test('sharedLease: fifty locks ride on one lease, granted once and kept alive by one keep-alive a renew period; a release leaves the lease', { skip, timeout: 30_000 }, async () => {
  const name = unique()
  const counter = countingFetch()
  const backend = new EtcdBackend({ endpoints: ETCD, fetch: counter.fetch, sharedLease: true, requestTimeoutMs: 2_000 })
  assert.equal(backend.sharedLease, true)
  try {
    const names = Array.from({ length: 50 }, (_, i) => `${name}-${String(i).padStart(2, '0')}`)
    const leases = []
    for (const n of names) leases.push(await new Lock(backend, n, { ttlMs: 3_000, purpose: 'correctness' }).acquire())
    const attached = new Set()
    for (const n of names) attached.add((await keysUnder(backend.lockKey(n)))[0].lease)
    assert.equal(attached.size, 1)
    const [leaseId] = attached
    assert.equal(counter.calls['/v3/lease/grant'], 1, JSON.stringify(counter.calls))
    const kept = counter.calls['/v3/lease/keepalive'] ?? 0
    await sleep(4_500) // past the 3 s lease: only keep-alives keep it, every 1 s
    for (const lease of leases) lease.check()
    const renewals = (counter.calls['/v3/lease/keepalive'] ?? 0) - kept
    assert.ok(renewals >= 3 && renewals <= 12, `${renewals} keep-alives for 50 locks: ${JSON.stringify(counter.calls)}`)
    await leases[0].release()
    assert.deepEqual(await keysUnder(backend.lockKey(names[0])), [])
    assert.ok((await leaseTtl(leaseId)) > 0, 'the shared lease outlives one lock\'s release')
    assert.equal(counter.calls['/v3/lease/revoke'] ?? 0, 0)
    for (const lease of leases.slice(1)) await lease.release()
  } finally {
    backend.close()
  }
})

test('sharedLease: a LockMachine option of kind etcd only, checked as a boolean', () => {
  assert.throws(() => new EtcdBackend({ endpoints: 'http://127.0.0.1:2379', sharedLease: 'yes' }), (e) => e instanceof ConfigError && /sharedLease must be true or false/.test(e.message))
  assert.throws(() => new LockMachine({ kind: 'etcd', cluster: true }), (e) => e instanceof ConfigError && e.option === 'cluster')
  const machine = new LockMachine({ kind: 'etcd', sharedLease: true, seed: 1 })
  const id = machine.acquire(0, 'a', { ttlMs: 3_000 })
  assert.equal(typeof id, 'number')
})

test('three waiters are granted in FIFO order; each parks on a watch of its predecessor, no polling', { skip, timeout: 30_000 }, async () => {
  const name = unique()
  const counters = [0, 1, 2, 3].map(() => countingFetch())
  const backends = counters.map((c) => new EtcdBackend({ endpoints: ETCD, fetch: c.fetch }))
  const prefix = backends[0].lockKey(name)
  try {
    const first = await new Lock(backends[0], name, { ttlMs: 3_000 }).acquire()
    const order = []
    const waiters = []
    for (const [i, label] of ['B', 'C', 'D'].entries()) {
      const lock = new Lock(backends[i + 1], name, { ttlMs: 3_000, acquireTimeoutMs: 20_000 })
      waiters.push(lock.using(async (signal, lease) => {
        order.push([label, lease.token, performance.now()])
        await sleep(50)
      }))
      // queued in this order: each waiter's key exists before the next starts
      assert.ok(await waitUntil(async () => (await keysUnder(prefix)).length === i + 2, 5_000))
    }
    await sleep(1_500)
    for (const c of counters.slice(1)) {
      // grant, txn (queued), watch; then per keep-alive interval (1 s): keep-alive, txn,
      // watch; never a retry loop
      assert.ok(c.total() <= 9, JSON.stringify(c.calls))
      assert.equal(c.openWatches, 1, 'parked on one open watch')
    }
    const released = performance.now()
    await first.release()
    await Promise.all(waiters)
    assert.deepEqual(order.map(([label]) => label), ['B', 'C', 'D'])
    const tokens = [first.token, ...order.map(([, token]) => token)]
    assert.deepEqual([...tokens].sort((a, b) => (a < b ? -1 : 1)), tokens)
    assert.equal(new Set(tokens).size, 4)
    // woken by the watch, not by a backoff: B took over within a few round trips
    assert.ok(order[0][2] - released < 500, `B acquired ${(order[0][2] - released).toFixed(0)} ms after the release`)
    assert.deepEqual(await keysUnder(prefix), [])
    for (const c of counters) assert.equal(c.openWatches, 0)
  } finally {
    for (const b of backends) b.close()
  }
})

test('a stale fenced transaction is refused: StaleTokenError with the holder\'s token, then 0n', { skip, timeout: 20_000 }, async () => {
  const name = unique()
  const dataKey = `fpdata/${name}`
  const backend = new EtcdBackend({ endpoints: ETCD })
  try {
    const lock = new Lock(backend, name, { ttlMs: 2_000, purpose: 'correctness' })
    const stale = await lock.acquire()
    const revision = await backend.fencedTxn(stale, { puts: [[dataKey, 'old']] })
    assert.equal(typeof revision, 'bigint')
    assert.ok(revision > stale.token)
    await stale.release()

    const fresh = await lock.acquire()
    assert.ok(fresh.token > stale.token)
    await assert.rejects(backend.fencedTxn(stale, { puts: [[dataKey, 'stale write']] }), (e) =>
      e instanceof StaleTokenError && e.code === 'ERR_STALE_TOKEN' && e.resource === name &&
      e.token === stale.token && e.highest === fresh.token)
    await backend.fencedTxn(fresh, { puts: [[dataKey, 'new'], [`${dataKey}/log`, String(fresh.token)]] })
    await fresh.release()
    await assert.rejects(backend.fencedTxn(fresh, { deletes: [dataKey] }), (e) => e instanceof StaleTokenError && e.highest === 0n)
    assert.deepEqual((await keysUnder(`${dataKey}`)).map((k) => [k.key, k.value]), [[dataKey, 'new'], [`${dataKey}/log`, String(fresh.token)]])

    const other = new EtcdBackend({ endpoints: ETCD })
    await assert.rejects(other.fencedTxn(fresh, { puts: [] }), (e) => e instanceof ConfigError && /another backend/.test(e.message))
    await assert.rejects(backend.fencedTxn({ name, token: 1n, ownerId: 'ab'.repeat(16) }), (e) => e instanceof ConfigError && /Lease/.test(e.message))
    await assert.rejects(backend.fencedTxn(fresh, { put: [] }), (e) => e instanceof ConfigError && e.option === 'put')
    other.close()
    await gateway('/v3/kv/deleterange', { key: b64(dataKey), range_end: b64(dataKey + '0') })
  } finally {
    backend.close()
  }
})

test('fencedTxn on a hung member gives up at timeoutMs (BackendError: may or may not be applied) or at its signal', { skip, timeout: 20_000 }, async () => {
  let hang = false
  /** A fetch whose calls hang (until their signal aborts) while `hang` is set. */
  const fetchMaybeHung = (url, init) => hang
    ? new Promise((resolve, reject) => init.signal.addEventListener('abort', () => reject(init.signal.reason), { once: true }))
    : fetch(url, init)
  const backend = new EtcdBackend({ endpoints: ETCD, fetch: fetchMaybeHung })
  try {
    const lease = await new Lock(backend, unique(), { ttlMs: 5_000 }).acquire()
    hang = true
    const t0 = performance.now()
    await assert.rejects(backend.fencedTxn(lease, { puts: [['fpdata/hung', 'x']], timeoutMs: 200 }), (e) =>
      e instanceof BackendError && /may or may not have been applied/.test(e.message))
    const took = performance.now() - t0
    assert.ok(took >= 190 && took < 1_000, `gave up after ${took.toFixed(0)} ms`)
    const controller = new AbortController()
    const pending = backend.fencedTxn(lease, { puts: [['fpdata/hung', 'x']], signal: controller.signal })
    controller.abort(new Error('caller gave up'))
    await assert.rejects(pending, /caller gave up/)
    await assert.rejects(backend.fencedTxn(lease, { timeoutMs: -1 }), (e) => e instanceof ConfigError && /timeoutMs/.test(e.message))
    hang = false
    await lease.release()
  } finally {
    backend.close()
  }
})

test('a member that hangs mid-lease: each call ends after requestTimeoutMs, keep-alives move to the next member, the lease survives', { skip, timeout: 20_000 }, async () => {
  const HUNG = 'http://hung.example.invalid:2379'
  let hang = false
  /** The first "member" forwards to the real one until `hang`, then never answers. */
  const fetchVia = (url, init) => {
    if (!url.startsWith(HUNG)) return fetch(url, init)
    if (!hang) return fetch(ETCD + url.slice(HUNG.length), init)
    return new Promise((resolve, reject) => init.signal.addEventListener('abort', () => reject(init.signal.reason), { once: true }))
  }
  assert.throws(() => new EtcdBackend({ endpoints: ETCD, requestTimeoutMs: 0 }), (e) => e instanceof ConfigError && e.option === 'requestTimeoutMs')
  const backend = new EtcdBackend({ endpoints: [HUNG, ETCD], fetch: fetchVia, requestTimeoutMs: 400 })
  try {
    const name = unique()
    const lease = await new Lock(backend, name, { ttlMs: 3_000, purpose: 'correctness' }).acquire()
    hang = true // renewals now go to a member that hangs
    await sleep(4_000) // > the 3 s TTL: only keep-alives on the other member keep it
    lease.check()
    const keys = await keysUnder(backend.lockKey(name))
    assert.deepEqual(keys.map((k) => k.create), [lease.token])
    await lease.release()
    assert.deepEqual(await keysUnder(backend.lockKey(name)), [])
  } finally {
    backend.close()
  }
})

test('endpoints: a member that refuses connections is skipped at once; none reachable times out naming it', { skip, timeout: 20_000 }, async () => {
  const dead = await deadEndpoint()
  const counter = countingFetch({ dead })
  const backend = new EtcdBackend({ endpoints: [dead, ETCD], fetch: counter.fetch })
  try {
    const name = unique()
    const lease = await new Lock(backend, name, { ttlMs: 2_000 }).acquire()
    await backend.fencedTxn(lease, { puts: [[`fpdata/${name}`, 'x']] })
    await lease.release()
    assert.equal(counter.refused, 1, 'the dead member is tried once, then the live one goes first')
    await gateway('/v3/kv/deleterange', { key: b64(`fpdata/${name}`) })
  } finally {
    backend.close()
  }

  const nowhere = new EtcdBackend({ endpoints: [dead, await deadEndpoint()] })
  try {
    await assert.rejects(new Lock(nowhere, unique(), { ttlMs: 1_000, acquireTimeoutMs: 300 }).acquire(), (e) =>
      e instanceof AcquireTimeoutError && /no etcd endpoint reachable/.test(e.lastError))
  } finally {
    nowhere.close()
  }
})

test('close() while a waiter is parked on a watch ends the watch and rejects the acquisition', { skip, timeout: 20_000 }, async () => {
  const name = unique()
  const holderBackend = new EtcdBackend({ endpoints: ETCD })
  const counter = countingFetch()
  const waiterBackend = new EtcdBackend({ endpoints: ETCD, fetch: counter.fetch })
  try {
    const held = await new Lock(holderBackend, name, { ttlMs: 3_000 }).acquire()
    const waiting = new Lock(waiterBackend, name, { ttlMs: 3_000 }).acquire()
    assert.ok(await waitUntil(() => counter.openWatches === 1, 5_000), 'parked on a watch')
    waiterBackend.close()
    await assert.rejects(waiting, (e) => e instanceof BackendError && e.code === 'ERR_BACKEND')
    assert.equal(counter.openWatches, 0)
    // its key goes with its revoked lease (best-effort release at close)
    assert.ok(await waitUntil(async () => (await keysUnder(holderBackend.lockKey(name))).length === 1, 3_000))
    await held.release()
  } finally {
    holderBackend.close()
  }
})

test('a lease revoked behind the holder\'s back: the next keep-alive finds it gone, lost at once (renew_rejected), signal aborted', { skip, timeout: 20_000 }, async () => {
  const name = unique()
  const backend = new EtcdBackend({ endpoints: ETCD })
  try {
    const lease = await new Lock(backend, name, { ttlMs: 3_000 }).acquire()
    const lost = new Promise((resolve) => lease.signal.addEventListener('abort', () => resolve(performance.now()), { once: true }))
    // an operator (or a bug) revokes the lease: etcd deletes the holder key with it
    const revokedAt = performance.now()
    await gateway('/v3/lease/revoke', { ID: backend.leaseId(lease.ownerId).toString() })
    const lostAt = await lost
    assert.equal(lease.lostReason, 'renew_rejected')
    assert.ok(lostAt - revokedAt < 1_200, `lost ${(lostAt - revokedAt).toFixed(0)} ms after the revoke (keep-alive every 1 000 ms)`)
    assert.equal(lease.signal.reason.code, 'ERR_LOCK_LOST')
    assert.throws(() => lease.check(), (e) => e.code === 'ERR_LOCK_LOST')
    await assert.rejects(lease.release(), (e) => e.code === 'ERR_LOCK_LOST')
    assert.deepEqual(await keysUnder(backend.lockKey(name)), [])
  } finally {
    backend.close()
  }
})

test('acquireTimeoutMs on a held lock: AcquireTimeoutError, and the waiter leaves no key or lease behind', { skip, timeout: 20_000 }, async () => {
  const name = unique()
  const backend = new EtcdBackend({ endpoints: ETCD })
  try {
    const held = await new Lock(backend, name, { ttlMs: 3_000 }).acquire()
    const started = performance.now()
    const lock = new Lock(backend, name, { ttlMs: 3_000, acquireTimeoutMs: 300 })
    const attempt = lock.acquire()
    assert.ok(await waitUntil(async () => (await keysUnder(backend.lockKey(name))).length === 2, 5_000), 'the waiter queued its key')
    const waiterKey = (await keysUnder(backend.lockKey(name))).find((k) => k.create > held.token)
    await assert.rejects(attempt, (e) => e instanceof AcquireTimeoutError && e.code === 'ERR_ACQUIRE_TIMEOUT')
    const waited = performance.now() - started
    assert.ok(waited >= 290 && waited < 1_500, `gave up after ${waited.toFixed(0)} ms`)
    // its key goes when its lease is revoked; the holder is untouched
    assert.ok(await waitUntil(async () => (await keysUnder(backend.lockKey(name))).length === 1, 3_000), 'the waiter\'s key is gone')
    assert.ok(await waitUntil(async () => (await leaseTtl(waiterKey.lease)) === -1, 3_000), 'the waiter\'s lease is revoked')
    held.check()
    await held.release()
  } finally {
    backend.close()
  }
})

/** scripts/services/etcd.sh, when it started the member at $FENCEPOST_ETCD_URL (so pausing
 * it pauses that one): its state dir holds the URL. */
const ETCD_SH = path.join(REPO, 'scripts', 'services', 'etcd.sh')
const ETCD_STATE = path.join(process.env.FENCEPOST_STATE || path.join(REPO, '.state'), 'etcd')
const ownMember = () => ETCD !== undefined && fs.existsSync(path.join(ETCD_STATE, 'etcd.pid')) &&
  fs.readFileSync(path.join(ETCD_STATE, 'url'), 'utf8').trim() === ETCD
const skipPause = skip || (ownMember() ? false : `the etcd at $FENCEPOST_ETCD_URL was not started by scripts/services/etcd.sh with this FENCEPOST_STATE (${ETCD_STATE}): not pausing it`)

// ---- holder metadata and inspection: the metadata is the contender key's value ----------

test('metadata is the holder key\'s value; inspect reads holder, token, waiters, time left; list pages and is bounded', { skip, timeout: 30_000 }, async () => {
  const base = unique()
  const backend = new EtcdBackend({ endpoints: ETCD })
  try {
    assert.equal(await backend.inspect(base), null)
    const lease = await new Lock(backend, base, { ttlMs: 5_000, metadata: { host: 'h1', pid: '7' } }).acquire()
    const found = await backend.inspect(base)
    assert.equal(found.name, base)
    assert.equal(found.token, lease.token)
    assert.match(found.owner, /^lease:[0-9a-f]{16}$/)
    assert.deepEqual({ ...found.metadata }, { host: 'h1', pid: '7' })
    assert.equal(found.waiters, 0)
    assert.ok(found.ttlLeftMs >= 3_000 && found.ttlLeftMs <= 5_000, String(found.ttlLeftMs))
    const [key] = await keysUnder(backend.lockKey(base))
    const raw = await gateway('/v3/kv/range', { key: b64(key.key) })
    assert.deepEqual(JSON.parse(unb64(raw.kvs[0].value)), { host: 'h1', pid: '7' })
    // a waiter is one more key under the prefix
    await assert.rejects(new Lock(backend, base, { ttlMs: 5_000 }).acquire({ timeoutMs: 300 }), AcquireTimeoutError)
    const names = [`${base}/sub`, `${base}-a`, `${base}b`]
    const held = []
    for (const n of names) held.push(await new Lock(backend, n, { ttlMs: 5_000, metadata: { n } }).acquire())
    try {
      const every = await backend.list(base)
      assert.deepEqual(every.map((h) => h.name), [base, ...names].sort())
      assert.equal((await backend.list(base, { limit: 2 })).length, 2)
      assert.deepEqual((await backend.list(`${base}/`)).map((h) => h.name), [`${base}/sub`])
    } finally {
      for (const l of held) await l.release()
    }
    await lease.release()
    assert.equal(await backend.inspect(base), null)
    assert.deepEqual(await backend.list(base), [])
    const plain = await new Lock(backend, base, { ttlMs: 5_000 }).acquire()
    assert.equal((await backend.inspect(base)).metadata, null, 'the value is the owner id without metadata')
    await plain.release()
  } finally {
    backend.close()
  }
})

test('etcdctl lock queues behind a fencepost holder with metadata (it reads keys, never values)', { skip, timeout: 30_000 }, async () => {
  const name = unique()
  const backend = new EtcdBackend({ endpoints: ETCD })
  const { spawn } = require('node:child_process')
  try {
    const lease = await new Lock(backend, name, { ttlMs: 5_000, metadata: { who: 'holder' } }).acquire()
    const proc = spawn('etcdctl', [`--endpoints=${ETCD}`, 'lock', backend.lockKey(name).replace(/\/$/, ''), '--', 'true'], { env: { ...process.env, ETCDCTL_API: '3' }, stdio: 'ignore' })
    const exited = new Promise((resolve) => proc.on('exit', resolve))
    try {
      assert.ok(await waitUntil(async () => (await backend.inspect(name)).waiters === 1, 5_000), 'etcdctl queued')
      assert.equal(proc.exitCode, null, 'etcdctl still waits')
    } finally {
      await lease.release()
    }
    assert.equal(await exited, 0, 'etcdctl got the lock once released')
  } finally {
    backend.close()
  }
})

test('a black-holed member (SIGSTOP): keep-alives hang, the lease is lost at its validity deadline by the timer, not later', { skip: skipPause, timeout: 30_000 }, async () => {
  const name = unique()
  const backend = new EtcdBackend({ endpoints: ETCD })
  let paused = false
  try {
    const lease = await new Lock(backend, name, { ttlMs: 1_500, purpose: 'correctness' }).acquire()
    const lost = new Promise((resolve) => lease.signal.addEventListener('abort', () => resolve(performance.now()), { once: true }))
    await sleep(600) // one keep-alive confirmed
    execFileSync(ETCD_SH, ['pause'], { stdio: 'ignore' })
    paused = true
    await sleep(50)
    const deadline = lease.validUntilMs
    const lostAt = await Promise.race([lost, sleep(5_000).then(() => null)])
    assert.notEqual(lostAt, null, 'not lost within 5 s of a black-holed keep-alive')
    const late = lostAt - deadline
    assert.equal(lease.lostReason, 'expired')
    assert.ok(late >= 0 && late < 100, `lost ${late.toFixed(1)} ms after the validity deadline`)
  } finally {
    if (paused) execFileSync(ETCD_SH, ['resume'], { stdio: 'ignore' })
    backend.close()
  }
  assert.ok(await waitUntil(async () => {
    try { return (await (await fetch(`${ETCD}/health`)).json()).health === 'true' } catch { return false }
  }, 10_000, 100), 'etcd healthy again')
})

// ---- three members: the leader killed while the lock is held and waited for ----------------

const CLUSTER_SH = path.join(REPO, 'scripts', 'services', 'etcd-cluster.sh')

test('3 members, leader SIGKILLed 5 times while held and waited for: sections never overlap, tokens rise, the fenced log is in token order', { skip, timeout: 120_000 }, async () => {
  const urls = execFileSync(CLUSTER_SH, ['start'], { encoding: 'utf8' }).trim().split(',')
  const name = unique()
  const logPrefix = `fplog/${name}/`
  const sections = []
  let stop = false
  const problems = []
  /** Takes the lock again and again; each section writes two fenced log entries. Losing a
   * lease to a failover is allowed: the fence then refuses the stale holder's writes. */
  async function worker () {
    const backend = new EtcdBackend({ endpoints: urls })
    const lock = new Lock(backend, name, { ttlMs: 3_000, acquireTimeoutMs: 20_000, purpose: 'correctness' })
    try {
      while (!stop) {
        try {
          await lock.using(async (signal, lease) => {
            const start = performance.now()
            const t = String(lease.token).padStart(12, '0')
            await backend.fencedTxn(lease, { puts: [[`${logPrefix}${t}-a`, 'start']], signal })
            await sleep(20)
            await backend.fencedTxn(lease, { puts: [[`${logPrefix}${t}-b`, 'end']], signal })
            lease.check()
            sections.push([start, performance.now(), lease.token])
          })
        } catch (error) {
          if (!['ERR_LOCK_LOST', 'ERR_STALE_TOKEN', 'ERR_BACKEND', 'ERR_PROTOCOL', 'ERR_ACQUIRE_TIMEOUT'].includes(error.code) && !(error instanceof Error && error.name === 'AbortError')) {
            problems.push(error)
          }
          await sleep(50)
        }
      }
    } finally {
      backend.close()
    }
  }
  try {
    const workers = [worker(), worker(), worker()]
    for (let round = 0; round < 5; round++) {
      const before = sections.length
      await sleep(300)
      const killed = execFileSync(CLUSTER_SH, ['kill-leader'], { encoding: 'utf8' }).trim().split(/\s+/)[0]
      await sleep(1_000) // a new leader (0.7-1.3 s) with the member down
      execFileSync(CLUSTER_SH, ['restart', killed], { stdio: 'ignore' })
      assert.ok(await waitUntil(() => sections.length >= before + 2, 15_000, 50), `lock not usable after killing ${killed} (round ${round})`)
    }
    stop = true
    await Promise.all(workers)
    assert.deepEqual(problems, [])
    console.log(`# ${sections.length} sections through 5 leader kills`)
    sections.sort((a, b) => a[0] - b[0])
    for (let i = 1; i < sections.length; i++) {
      const [before, after] = [sections[i - 1], sections[i]]
      assert.ok(before[1] < after[0], `sections overlap: ${before} and ${after}`)
      assert.ok(before[2] < after[2], `tokens do not rise: ${before[2]} then ${after[2]}`)
    }
    // in etcd's order of application, no stale holder wrote after a newer one
    const doc = await (await fetch(`${urls[0]}/v3/kv/range`, {
      method: 'POST',
      body: JSON.stringify({ key: b64(logPrefix), range_end: b64(logPrefix.slice(0, -1) + '0') })
    })).json()
    const log = (doc.kvs ?? []).map((kv) => [BigInt(kv.mod_revision), BigInt(unb64(kv.key).slice(logPrefix.length).split('-')[0])])
      .sort((a, b) => (a[0] < b[0] ? -1 : 1))
    assert.ok(log.length >= 2 * sections.length)
    for (let i = 1; i < log.length; i++) assert.ok(log[i - 1][1] <= log[i][1], `a stale holder (token ${log[i][1]}) wrote after token ${log[i - 1][1]}`)
  } finally {
    stop = true
    execFileSync(CLUSTER_SH, ['stop'], { stdio: 'ignore' })
  }
})
