'use strict'
// fencepost-wasm in headless Chromium (Debian `chromium`, driven by npm `playwright-core`):
// a page served from 127.0.0.1 loads the web build (web.mjs, which fetches the .wasm like
// a site would) and replays every tests/scenarios/*.json, etcd/*.json and kubernetes/*.json
// vector with the Node runner itself, tests/js/scenarios.test.js, bundled unchanged with
// browser stand-ins for node:test, node:assert, node:fs, node:path and ./impl
// (browser/shims/). The results are asserted
// here: every vector in both reply flavours, as `FENCEPOST_IMPL=wasm node --test` runs them.
//
// A second test takes etcd locks in the page with EtcdBackend (fetch, a streaming watch)
// through this server, which forwards /etcd/* to $FENCEPOST_ETCD_URL as it streams (a page
// reaches the gateway same-origin, as a site would put it behind its own origin).
//
// Needs /usr/bin/chromium (scripts/setup installs it) and a built package.

const { test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const crypto = require('node:crypto')
const fs = require('node:fs')
const http = require('node:http')
const path = require('node:path')
const { createRequire } = require('node:module')
const { pathToFileURL } = require('node:url')

const REPO = path.resolve(__dirname, '..', '..')
const PKG = path.join(REPO, 'bindings-wasm')
const CHROMIUM = process.env.FENCEPOST_CHROMIUM || '/usr/bin/chromium'
const skip = fs.existsSync(CHROMIUM) ? false : `${CHROMIUM} is missing (scripts/setup installs Debian's chromium)`

const ETCD = process.env.FENCEPOST_ETCD_URL
const skipEtcd = skip || (ETCD ? false : 'FENCEPOST_ETCD_URL is not set (scripts/test starts etcd and sets it)')

const SCENARIOS = path.join(REPO, 'tests', 'scenarios')
const SHIMS = path.join(__dirname, 'browser', 'shims')

const TYPES = { '.html': 'text/html', '.mjs': 'text/javascript', '.js': 'text/javascript', '.wasm': 'application/wasm', '.json': 'application/json' }

/** Every vector file (and pending/) under the virtual path the impl shim names. */
function vectors () {
  const files = {}
  const walk = (dir, rel) => {
    for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
      if (entry.isDirectory()) walk(path.join(dir, entry.name), `${rel}/${entry.name}`)
      else if (entry.name.endsWith('.json')) files[`/repo/tests/scenarios${rel}/${entry.name}`] = fs.readFileSync(path.join(dir, entry.name), 'utf8')
    }
  }
  walk(SCENARIOS, '')
  return files
}

let server = null
let browser = null
/** gateway path → calls the page made through /etcd, and the watches open now */
const etcdCalls = {}
let etcdOpenWatches = 0

/** Forwards a request under /etcd to the etcd gateway, streaming the answer back; a page
 * that aborts its request (a watch it no longer needs) closes the upstream one. */
function forwardToEtcd (req, res, gatewayPath) {
  etcdCalls[gatewayPath] = (etcdCalls[gatewayPath] ?? 0) + 1
  const watch = gatewayPath === '/v3/watch'
  if (watch) etcdOpenWatches++
  let closed = false
  const done = () => { if (watch && !closed) { closed = true; etcdOpenWatches-- } }
  const upstream = http.request(ETCD + gatewayPath, { method: 'POST', headers: { 'content-type': 'application/json' } }, (up) => {
    res.writeHead(up.statusCode, { 'content-type': up.headers['content-type'] ?? 'application/json', 'cache-control': 'no-store' })
    up.pipe(res)
  })
  upstream.on('error', () => { done(); res.destroy() })
  res.on('close', () => { done(); upstream.destroy() })
  req.pipe(upstream)
}
let base = null
let runner = null

before(async () => {
  if (skip) return
  for (const f of ['web.mjs', 'dist/web/fencepost_wasm.js', 'dist/web/fencepost_wasm_bg.wasm', 'dist/web/fencepost_api.mjs']) {
    if (!fs.existsSync(path.join(PKG, f))) throw new Error(`bindings-wasm/${f} is missing: build the package (cd bindings-wasm && npm run build)`)
  }
  const { bundleCjs } = await import(pathToFileURL(path.join(PKG, 'scripts', 'bundle-cjs.mjs')).href)
  runner = bundleCjs(path.join(REPO, 'tests', 'js', 'scenarios.test.js'), {
    shims: {
      'node:test': path.join(SHIMS, 'node-test.js'),
      'node:assert/strict': path.join(SHIMS, 'node-assert.js'),
      'node:fs': path.join(SHIMS, 'node-fs.js'),
      'node:path': path.join(SHIMS, 'node-path.js'),
      './impl': path.join(SHIMS, 'impl.js')
    }
  }).source
  const vectorJson = JSON.stringify(vectors())

  server = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://x')
    if (ETCD && url.pathname.startsWith('/etcd/')) return forwardToEtcd(req, res, url.pathname.slice('/etcd'.length))
    let body = null
    let file = null
    if (url.pathname === '/') file = path.join(__dirname, 'browser', 'index.html')
    else if (url.pathname === '/page.mjs') file = path.join(__dirname, 'browser', 'page.mjs')
    else if (url.pathname === '/runner.mjs') body = runner
    else if (url.pathname === '/vectors.json') body = vectorJson
    else if (url.pathname === '/pkg/web.mjs' || /^\/pkg\/dist\/web\/[\w.]+$/.test(url.pathname)) file = path.join(PKG, url.pathname.slice('/pkg/'.length))
    if (file !== null && fs.existsSync(file)) body = fs.readFileSync(file)
    if (body === null) {
      res.writeHead(404).end('not found')
      return
    }
    const ext = path.extname(file ?? url.pathname)
    res.writeHead(200, { 'content-type': TYPES[ext] ?? 'application/octet-stream', 'cache-control': 'no-store' })
    res.end(body)
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  base = `http://127.0.0.1:${server.address().port}`

  const { chromium } = createRequire(path.join(PKG, 'package.json'))('playwright-core')
  const started = performance.now()
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    chromiumSandbox: false,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-dev-shm-usage']
  })
  console.log(`# chromium ${browser.version()} launched in ${(performance.now() - started).toFixed(0)} ms`)
})

after(async () => {
  if (browser !== null) await browser.close()
  if (server !== null) await new Promise((resolve) => server.close(resolve))
})

test('Chromium: the web build replays every scenario vector, both reply flavours, like Node', { skip, timeout: 60_000 }, async () => {
  const page = await browser.newPage()
  const console_ = []
  page.on('console', (m) => console_.push(`${m.type()}: ${m.text()}`))
  page.on('pageerror', (e) => console_.push(`pageerror: ${e.message}`))
  await page.goto(`${base}/`)
  await page.waitForFunction(() => window.__results !== undefined, null, { timeout: 50_000 })
  const outcome = await page.evaluate(() => window.__results)
  await page.close()
  assert.equal(outcome.error, undefined, `${outcome.error}\nconsole:\n${console_.join('\n')}`)
  assert.equal(outcome.implementation, 'wasm')
  console.log(`# web build initialised in the page in ${outcome.initMs.toFixed(1)} ms (fetch + compile + instantiate)`)

  const byName = new Map(outcome.results.map((r) => [r.name, r]))
  const failed = outcome.results.filter((r) => r.status === 'fail')
  assert.deepEqual(failed, [], failed.map((r) => `${r.name}\n${r.error}`).join('\n\n'))
  const files = fs.readdirSync(SCENARIOS).filter((f) => f.endsWith('.json'))
  assert.ok(files.length >= 25)
  // the etcd vectors too: gateway calls rendered and JSON-text replies read by the web build
  const etcd = fs.readdirSync(path.join(SCENARIOS, 'etcd')).filter((f) => f.endsWith('.json'))
  assert.ok(etcd.length >= 4)
  files.push(...etcd)
  // and the Kubernetes Lease vectors: requests rendered, response bodies read by the web build
  const kube = fs.readdirSync(path.join(SCENARIOS, 'kubernetes')).filter((f) => f.endsWith('.json'))
  assert.ok(kube.length >= 4)
  files.push(...kube)
  for (const f of files) {
    for (const flavour of ['client', 'tagged']) {
      const name = `vector ${path.basename(f, '.json')} (${flavour} replies)`
      assert.equal(byName.get(name)?.status, 'pass', `${name}: ${JSON.stringify(byName.get(name))}`)
    }
  }
  assert.equal(byName.get('the runner itself: times, ranges, owner placeholders, lossless tokens')?.status, 'pass')
  const passed = outcome.results.filter((r) => r.status === 'pass').length
  console.log(`# ${passed} passed, ${outcome.results.length - passed} skipped (pending vectors) in Chromium`)
})

test('Chromium: EtcdBackend in the page — a waiter parks on a streaming watch, FIFO hand-off, fenced writes, StaleTokenError', { skip: skipEtcd, timeout: 60_000 }, async () => {
  const page = await browser.newPage()
  const console_ = []
  page.on('console', (m) => console_.push(`${m.type()}: ${m.text()}`))
  page.on('pageerror', (e) => console_.push(`pageerror: ${e.message}`))
  await page.goto(`${base}/?init-only`)
  await page.waitForFunction(() => window.__results !== undefined, null, { timeout: 20_000 })
  const ready = await page.evaluate(() => window.__results)
  assert.equal(ready.error, undefined, `${ready.error}\nconsole:\n${console_.join('\n')}`)
  const name = `chromium-${crypto.randomBytes(6).toString('hex')}`
  const parked = page.evaluate(async ({ endpoint, name }) => {
    const { Lock, EtcdBackend } = globalThis.__fencepost
    const a = new EtcdBackend({ endpoints: endpoint })
    const b = new EtcdBackend({ endpoints: [endpoint] })
    globalThis.__etcd = { a, b }
    const first = await new Lock(a, name, { ttlMs: 2_000, purpose: 'correctness' }).acquire()
    globalThis.__etcd.first = first
    globalThis.__etcd.waiting = new Lock(b, name, { ttlMs: 2_000, purpose: 'correctness' }).acquire()
    return { token: String(first.token), typeofToken: typeof first.token, leaseId: String(a.leaseId(first.ownerId)) }
  }, { endpoint: `${base}/etcd`, name })
  const first = await parked
  assert.equal(first.typeofToken, 'bigint')
  // the waiter is parked on one open watch (no polling), across a keep-alive interval
  const until = performance.now() + 5_000
  while (etcdOpenWatches !== 1 && performance.now() < until) await new Promise((resolve) => setTimeout(resolve, 20))
  assert.equal(etcdOpenWatches, 1, `watches open: ${etcdOpenWatches}, calls: ${JSON.stringify(etcdCalls)}`)
  const callsParked = Object.values(etcdCalls).reduce((x, y) => x + y, 0)
  await new Promise((resolve) => setTimeout(resolve, 1_000))
  const callsLater = Object.values(etcdCalls).reduce((x, y) => x + y, 0)
  assert.ok(callsLater - callsParked <= 8, `${callsLater - callsParked} calls in 1 s while parked: ${JSON.stringify(etcdCalls)}`)
  const outcome = await page.evaluate(async ({ name }) => {
    const { a, b, first, waiting } = globalThis.__etcd
    const key = `fpchromium/${name}`
    await a.fencedTxn(first, { puts: [[key, 'first']] })
    const released = performance.now()
    await first.release()
    const second = await waiting
    const handOffMs = performance.now() - released
    let stale = null
    try {
      await a.fencedTxn(first, { puts: [[key, 'stale']] })
    } catch (error) {
      stale = { name: error.name, code: error.code, highest: String(error.highest), token: String(error.token) }
    }
    const revision = await b.fencedTxn(second, { puts: [[key, 'second']], deletes: [] })
    await second.release()
    a.close()
    b.close()
    return { second: String(second.token), stale, revision: String(revision), typeofRevision: typeof revision, handOffMs }
  }, { name })
  await page.close()
  assert.ok(BigInt(outcome.second) > BigInt(first.token), `tokens rise: ${first.token}, ${outcome.second}`)
  assert.deepEqual(outcome.stale, { name: 'StaleTokenError', code: 'ERR_STALE_TOKEN', highest: outcome.second, token: first.token })
  assert.equal(outcome.typeofRevision, 'bigint')
  assert.ok(outcome.handOffMs < 1_000, `hand-off took ${outcome.handOffMs.toFixed(0)} ms`)
  assert.ok(etcdCalls['/v3/watch'] >= 1)
  // what the page wrote, read from etcd directly
  const doc = await (await fetch(`${ETCD}/v3/kv/range`, { method: 'POST', body: JSON.stringify({ key: Buffer.from(`fpchromium/${name}`).toString('base64') }) })).json()
  assert.equal(Buffer.from(doc.kvs[0].value, 'base64').toString(), 'second')
  assert.equal(BigInt(doc.kvs[0].mod_revision), BigInt(outcome.revision))
  await fetch(`${ETCD}/v3/kv/deleterange`, { method: 'POST', body: JSON.stringify({ key: Buffer.from(`fpchromium/${name}`).toString('base64') }) })
  console.log(`# Chromium: etcd hand-off ${outcome.handOffMs.toFixed(1)} ms after the release, through a streaming watch`)
})

test('Chromium: observations without node:diagnostics_channel — the stand-in channels and onEvent', { skip, timeout: 60_000 }, async () => {
  const page = await browser.newPage()
  const console_ = []
  page.on('console', (m) => console_.push(`${m.type()}: ${m.text()}`))
  page.on('pageerror', (e) => console_.push(`pageerror: ${e.message}`))
  await page.goto(`${base}/?init-only`)
  await page.waitForFunction(() => window.__results !== undefined, null, { timeout: 20_000 })
  const ready = await page.evaluate(() => window.__results)
  assert.equal(ready.error, undefined, `${ready.error}\nconsole:\n${console_.join('\n')}`)
  const outcome = await page.evaluate(async () => {
    const { Lock, MemoryBackend, diagnosticsChannel } = globalThis.__fencepost
    const channel = []
    const onAcquired = (o, name) => channel.push([name, o.event, typeof o.fields.token])
    diagnosticsChannel.subscribe('fencepost:acquired', onAcquired)
    const backend = new MemoryBackend()
    const seen = []
    backend.observe({ onEvent: (o) => seen.push(o.event), heldLongTtls: 2 })
    await new Lock(backend, 'page', { ttlMs: 100 }).using(() => new Promise((resolve) => setTimeout(resolve, 260)))
    diagnosticsChannel.unsubscribe('fencepost:acquired', onAcquired)
    await backend.close()
    return { channel, seen, hasProcess: typeof globalThis.process?.getBuiltinModule }
  })
  await page.close()
  assert.equal(outcome.hasProcess, 'undefined') // no Node module to load: the stand-in serves
  assert.deepEqual(outcome.channel, [['fencepost:acquired', 'acquired', 'bigint']])
  assert.deepEqual(outcome.seen.slice(0, 2), ['acquiring', 'acquired'])
  assert.ok(outcome.seen.includes('held_long') && outcome.seen.at(-1) === 'released', outcome.seen.join(', '))
})
