'use strict'
// The fencepost-wasm package as built (bindings-wasm/dist): what it imports, what it exports,
// its size and start-up, that it carries the shared JavaScript layer and interface word for
// word, and that no input — however wrong — makes the module trap (the release profile
// aborts on panic, so a panic would be a wasm `unreachable` trap, and the module would be
// unusable after it).

const { test } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const zlib = require('node:zlib')
const { pathToFileURL } = require('node:url')

const REPO = path.resolve(__dirname, '..', '..')
const PKG = path.join(REPO, 'bindings-wasm')
const DIST = path.join(PKG, 'dist')
// The budget is build.mjs's, recorded in dist/build.json, so the two cannot disagree.
const BUDGET_GZIP = JSON.parse(fs.readFileSync(path.join(DIST, 'build.json'), 'utf8')).budgetGzip

const wasmFile = (target) => path.join(DIST, target, 'fencepost_wasm_bg.wasm')

test('the module imports nothing from "env": only wasm-bindgen\'s glue', () => {
  for (const target of ['web', 'node']) {
    const module = new WebAssembly.Module(fs.readFileSync(wasmFile(target)))
    const from = new Set(WebAssembly.Module.imports(module).map((i) => i.module))
    assert.deepEqual([...from], ['./fencepost_wasm_bg.js'], `${target}: imports from ${[...from]}`)
  }
})

test(`size: the web module is at most ${BUDGET_GZIP / 1024} KB gzipped`, () => {
  const bytes = fs.readFileSync(wasmFile('web'))
  const gz = zlib.gzipSync(bytes, { level: 9 }).length
  const js = ['fencepost_wasm.js', 'fencepost_api.mjs'].map((f) => zlib.gzipSync(fs.readFileSync(path.join(DIST, 'web', f)), { level: 9 }).length)
  console.log(`# web module ${bytes.length} bytes raw, ${gz} gzipped; glue + API JavaScript ${js[0]} + ${js[1]} gzipped`)
  assert.ok(gz <= BUDGET_GZIP, `${gz} bytes gzipped`)
})

test('the shared JavaScript layer and fencepost.d.ts are carried word for word', () => {
  const js = path.join(REPO, 'js')
  const ours = fs.readdirSync(path.join(DIST, 'js')).sort()
  assert.deepEqual(ours, fs.readdirSync(js).filter((f) => f.endsWith('.js')).sort())
  for (const f of ours) assert.equal(fs.readFileSync(path.join(DIST, 'js', f), 'utf8'), fs.readFileSync(path.join(js, f), 'utf8'), `dist/js/${f} is stale: npm run build`)
  assert.equal(fs.readFileSync(path.join(DIST, 'fencepost.d.ts'), 'utf8'), fs.readFileSync(path.join(REPO, 'bindings-node', 'fencepost.d.ts'), 'utf8'))
  const web = fs.readFileSync(path.join(DIST, 'web', 'fencepost_api.mjs'), 'utf8')
  for (const f of ours) assert.ok(web.includes(fs.readFileSync(path.join(js, f), 'utf8').trimEnd()), `fencepost_api.mjs lacks js/${f} as written`)
})

// What only the Node package has: PostgreSQL (bindings-node/postgres.js and its addon
// functions) and ZooKeeper (bindings-node/zookeeper.js), which WebAssembly hosts cannot
// reach (no sockets), and Kubernetes configuration from files (bindings-node/kubernetes.js:
// a kubeconfig, the pod's service account, node:https with the cluster's CA).
const NODE_ONLY = new Set(['PostgresBackend', 'xactLock', 'fencedUpdate', 'postgresMigration', 'advisoryKey',
  'ZooKeeperBackend', 'kubernetesFromKubeconfig', 'kubernetesInCluster'])
const NODE_ONLY_NATIVE = new Set(['postgresMigration', 'advisoryKey', 'xactLockStatement', 'readXactLock', 'lockStateStatement', 'readLockState',
  'zookeeperNodePrefix', 'readZookeeperFenced', 'zookeeperInspect', 'zookeeperListNames', 'readZookeeperContenders', 'readZookeeperHolder', 'readZookeeperList',
  'pgInspectStatement', 'pgListStatement', 'readPgHolders'])

test('every entry exports the same names as the napi package, less its Node-only PostgreSQL, ZooKeeper and Kubernetes configuration', async () => {
  const napiAll = Object.keys(require(path.join(REPO, 'bindings-node'))).sort()
  for (const name of NODE_ONLY) assert.ok(napiAll.includes(name), `bindings-node exports ${name}`)
  const napi = napiAll.filter((k) => !NODE_ONLY.has(k))
  const node = Object.keys(require(PKG)).sort()
  assert.deepEqual(node, napi)
  const esm = await import(pathToFileURL(path.join(PKG, 'index.mjs')).href)
  const web = await import(pathToFileURL(path.join(PKG, 'web.mjs')).href)
  const named = (ns) => Object.keys(ns).filter((k) => k !== 'default' && k !== 'init' && k !== 'initSync').sort()
  assert.deepEqual(named(esm), napi)
  assert.deepEqual(named(web), napi)
  const napiEsm = await import(pathToFileURL(path.join(REPO, 'bindings-node', 'index.mjs')).href)
  assert.deepEqual(named(napiEsm), napiAll, 'bindings-node/index.mjs names every export')
})

test('the low-level interface is the napi addon\'s, less its PostgreSQL and ZooKeeper functions: same functions, classes and members', () => {
  // wasm-bindgen adds free() and __destroy_into_raw() to its classes (explicit release of
  // the Rust object; a FinalizationRegistry frees it otherwise)
  const WASM_ONLY = new Set(['free', '__destroy_into_raw'])
  // (a class with no member but its constructor shows as a function, as napi's does)
  const members = (f) => Object.getOwnPropertyNames(f.prototype ?? {}).filter((p) => !WASM_ONLY.has(p)).sort()
  const shape = (m) => Object.fromEntries(Object.keys(m).filter((k) => !k.startsWith('__')).sort().map((k) => [
    k,
    typeof m[k] === 'function' && members(m[k]).length > 1 ? members(m[k]) : typeof m[k]
  ]))
  const napiAll = shape(require(path.join(REPO, 'bindings-node', 'native.js')))
  for (const name of NODE_ONLY_NATIVE) assert.equal(napiAll[name], 'function', `the napi addon has ${name}`)
  const napi = Object.fromEntries(Object.entries(napiAll).filter(([k]) => !NODE_ONLY_NATIVE.has(k)))
  const wasm = shape(require(path.join(DIST, 'node', 'fencepost_wasm.js')))
  assert.deepEqual(wasm, napi, 'bindings-wasm/src/lib.rs must follow bindings-node/src/lib.rs')
})

test('the web build in Node: init() from bytes, named exports become live, init is idempotent', async () => {
  const web = await import(pathToFileURL(path.join(PKG, 'web.mjs')).href)
  const bytes = fs.readFileSync(wasmFile('web'))
  const t0 = performance.now()
  const api = web.initSync(await WebAssembly.compile(bytes))
  console.log(`# web build: compile + instantiate + API in ${(performance.now() - t0).toFixed(2)} ms`)
  assert.equal(api, web.default)
  assert.equal(api.Lock, web.Lock)
  assert.equal(await web.init(), api)
  assert.equal(api.implementation, 'wasm')
  const lease = await new web.Lock(new web.MemoryBackend(), 'web', { ttlMs: 1_000 }).acquire()
  assert.equal(lease.token, 1n)
  await lease.release()
})

// ---- never a trap -------------------------------------------------------------------------

/** Values of every kind, including ones whose reading throws. */
function garbage () {
  const throwing = new Proxy({}, {
    get () { throw new Error('trap: get') },
    has () { throw new Error('trap: has') },
    ownKeys () { throw new Error('trap: ownKeys') },
    getPrototypeOf () { throw new Error('trap: getPrototypeOf') },
    getOwnPropertyDescriptor () { throw new Error('trap: descriptor') }
  })
  const { proxy: revoked, revoke } = Proxy.revocable({}, {})
  revoke()
  let deep = []
  for (let i = 0; i < 200; i++) deep = [deep]
  const getterThrows = Object.defineProperty({}, 'ttlMs', { enumerable: true, get () { throw new Error('getter') } })
  const arrayWithThrowingLength = new Proxy([], { get (t, k) { if (k === 'length') throw new Error('length'); return t[k] } })
  return [
    undefined, null, true, 0, -0, -1, 1.5, NaN, Infinity, -Infinity, 2 ** 53, Number.MAX_VALUE, 0n, -1n, 2n ** 64n, 2n ** 64n - 1n,
    '', 'x', '\ud800', 'x'.repeat(5000), Symbol('s'), () => 1, {}, [], [1, 'a', null], ['a', 2], new Uint8Array([0xff]),
    new Error('e'), { ttlMs: -1 }, { ttlMs: 'x', purpose: 5 }, { script: 'acquire', keys: 'no', args: [] },
    { script: 'nope', keys: [], args: [] }, { script: 'acquire', keys: [1], args: [] }, { status: 'OK' }, { error: 'ERR' },
    throwing, revoked, deep, getterThrows, arrayWithThrowingLength, new Map(), new Date(0), Promise.resolve(1)
  ]
}

test('no input traps the module: every export refuses garbage with an error or a value, and keeps working', () => {
  const native = require(path.join(DIST, 'node', 'fencepost_wasm.js'))
  const values = garbage()
  const pick = (i, k) => values[(i * 7 + k * 13) % values.length]
  const calls = 0
  let n = calls
  const attempt = (fn) => {
    n++
    try {
      fn()
    } catch (error) {
      // an Error (ours, or a TypeError of the glue for a Symbol); never a trap
      assert.ok(!(error instanceof WebAssembly.RuntimeError), `trapped: ${error && error.stack}`)
    }
  }
  const machine = new native.Machine(null, 5n, false)
  const etcdMachine = new native.Machine(null, 6n, false, 'etcd')
  const owner = 'ab'.repeat(16)
  const redis = new native.MemoryRedis()
  const fence = new native.Fence()
  for (let i = 0; i < values.length * 4; i++) {
    const [a, b, c, d, e] = [0, 1, 2, 3, 4].map((k) => pick(i, k))
    attempt(() => new native.Machine(a, b, c))
    attempt(() => new native.Machine(a, b, c, d))
    attempt(() => new native.Machine(null, 1n, false, a))
    attempt(() => machine.check(a, b))
    attempt(() => machine.acquire(a, b, c))
    attempt(() => machine.acquire(1, 'n', b))
    attempt(() => machine.release(a, b))
    attempt(() => machine.reply(a, b, c))
    attempt(() => machine.reply(i, 1, a))
    attempt(() => machine.transportError(a, b, c))
    attempt(() => machine.timeout(a))
    attempt(() => machine.owner(a))
    attempt(() => machine.validUntilMs(a))
    attempt(() => redis.execute(a, b))
    attempt(() => redis.execute(1, a))
    attempt(() => redis.get(a, b))
    attempt(() => redis.pttl(a, b))
    attempt(() => redis.lpop(a, b))
    attempt(() => redis.delete(a))
    attempt(() => fence.check(a, b))
    attempt(() => fence.highest(a))
    attempt(() => native.sqlFencedUpdate(a, b, c, d, e))
    attempt(() => native.sqlFencedUpdate('t', 'id', 'tok', a, 'dollar'))
    attempt(() => native.redisFencedSet(a, b, c, d))
    attempt(() => native.readRedisFencedSet('r', 1n, a))
    attempt(() => native.readRedisFencedSet(a, b, c))
    attempt(() => native.lockKey(a, b))
    attempt(() => native.tokenKey(a, b))
    attempt(() => machine.pollJson())
    // etcd: a reply of any kind is text or a protocol error; the helpers check every argument
    attempt(() => etcdMachine.acquire(i, `e${i}`, { ttlMs: 1_000 }))
    attempt(() => etcdMachine.reply(i, i, a))
    attempt(() => etcdMachine.pollJson())
    attempt(() => native.etcdHolderKey(a, b, c))
    attempt(() => native.etcdHolderKey('p/', 'n', a))
    attempt(() => native.etcdLeaseId(a))
    attempt(() => native.etcdFencedTxn(a, b, c, d, e, a))
    attempt(() => native.etcdFencedTxn('p/', 'n', owner, 1n, a, b))
    attempt(() => native.etcdFencedTxn('p/', 'n', owner, 1n, [[a, b]], [c]))
    attempt(() => native.readEtcdFencedTxn('n', 1n, a))
    attempt(() => native.readEtcdFencedTxn(a, b, c))
  }
  // still alive and correct after all of it (outputs decoded as the JavaScript half does)
  const decode = require(path.join(DIST, 'js', 'machine.js')).createDecoder(native)
  const fresh = new native.Machine('after:', 9n, false)
  const lock = fresh.acquire(1e6, 'alive', { ttlMs: 1_000 })
  const [request] = decode(fresh.pollJson()).outputs
  fresh.reply(1e6, request.id, redis.execute(1e6, request))
  const [acquired] = decode(fresh.pollJson()).outputs
  assert.equal(acquired.type, 'acquired')
  assert.equal(typeof acquired.token, 'bigint')
  assert.equal(fresh.owner(lock).length, 32)
  const etcd = new native.Machine('after/', 9n, false, 'etcd')
  etcd.acquire(2e6, 'alive', { ttlMs: 1_000 })
  const [grant] = decode(etcd.pollJson()).outputs
  assert.equal(grant.backend, 'etcd')
  assert.equal(native.etcdLeaseId(etcd.owner(1)).toString(), JSON.parse(grant.body).ID)
  assert.ok(n > values.length * 4 * 20)
})

test('errors of the native interface carry the codes the JavaScript layer translates', () => {
  const native = require(path.join(DIST, 'node', 'fencepost_wasm.js'))
  const machine = new native.Machine(null, 1n, false)
  machine.timeout(10)
  assert.throws(() => machine.timeout(5), (e) => e.code === 'ERR_CLOCK' && e.kind === 'time_went_backwards')
  assert.throws(() => machine.acquire(20, 'x', { ttlMs: 0 }), (e) => e.code === 'ERR_CONFIG' && e.kind === 'invalid_option' && e.option === 'ttlMs' && e.message === 'ttlMs: must be at least 1 ms, got 0 ms')
  assert.throws(() => machine.acquire(20, 'x', { purpose: 'correctness' }), (e) => e.kind === 'unsafe_purpose' && e.option === 'purpose')
  assert.throws(() => machine.release(20, 42), (e) => e.kind === 'unknown_lock')
  assert.throws(() => machine.acquire(20, 5, {}), (e) => e.code === 'ERR_CONFIG' && e.kind === 'invalid_argument')
  assert.throws(() => machine.acquire(20, 'x', { ttlMs: 1n }), (e) => e.kind === 'invalid_argument' && /ttlMs/.test(e.message))
  assert.equal(machine.owner(99), null)
  assert.equal(machine.validUntilMs(99), null)
  assert.equal(new native.Fence().highest('r'), null)
  assert.equal(new native.MemoryRedis().get(0, 'k'), null)
  // tokens are bigint on the way out, past 2^53 too
  const fence = new native.Fence()
  assert.equal(fence.check('r', 2n ** 64n - 1n), null)
  assert.equal(fence.highest('r'), 2n ** 64n - 1n)
  assert.equal(fence.check('r', 5n).highest, 2n ** 64n - 1n)
})
