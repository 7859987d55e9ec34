'use strict'
// KubernetesLeaseBackend (fetch) against the project's Lease API server
// (tests/kube/lease_server.py, started by scripts/test with scripts/services/kube-lease.sh
// at $FENCEPOST_KUBE_URL with the bearer token $FENCEPOST_KUBE_TOKEN): no kube-apiserver
// can be installed here, so this is not a real cluster. Its test controls (409 storms,
// 5xx, hanging PUTs) are global to the server: a file's tests run one after another, and
// no other file of this suite uses it. The WebAssembly package carries no Lease machine:
// there a lock on the backend is a ConfigError saying why (tested here too).

const { test, afterEach } = require('node:test')
const assert = require('node:assert/strict')
const { execFileSync, fork, spawn } = require('node:child_process')
const crypto = require('node:crypto')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')

const { fencepost, IMPL, REPO, sleep } = require('./impl')

const { Lock, KubernetesLeaseBackend, ConfigError, ProtocolError, LockLostError, AcquireTimeoutError } = fencepost

const URL_ = process.env.FENCEPOST_KUBE_URL
const TOKEN = process.env.FENCEPOST_KUBE_TOKEN
const skip = IMPL !== 'napi'
  ? 'the WebAssembly module carries no Lease machine (its size budget)'
  : URL_ && TOKEN
    ? false
    : 'FENCEPOST_KUBE_URL / FENCEPOST_KUBE_TOKEN are not set (scripts/test starts scripts/services/kube-lease.sh and sets them)'
const MICROTIME = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/
const PYTHON = path.join(REPO, '.venv', 'bin', 'python')

const unique = (prefix) => `${prefix}-${crypto.randomBytes(4).toString('hex')}`
const backend = (options = {}) => new KubernetesLeaseBackend({ server: URL_, token: TOKEN, ...options })

/** A raw call to the test server, as another client (client-go, kubectl) makes it. */
async function api (method, path, body) {
  const response = await fetch(URL_ + path, {
    method,
    headers: { Authorization: `Bearer ${TOKEN}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body)
  })
  return [response.status, await response.json()]
}

async function control (what, body) {
  const [code, doc] = await api('POST', `/_control/${what}`, body)
  assert.equal(code, 200, JSON.stringify(doc))
}

async function stored (name) {
  const [code, doc] = await api('GET', `/apis/coordination.k8s.io/v1/namespaces/default/leases/${name}`)
  assert.equal(code, 200, JSON.stringify(doc))
  return doc
}

if (!skip) {
  afterEach(async () => {
    await control('pause', { on: false })
    await control('hang_puts', { on: false })
    await control('conflicts', { count: 0 })
    await control('errors', { count: 0 })
  })
}

test('the WebAssembly package refuses a Lease machine with a ConfigError saying why', { skip: IMPL !== 'wasm' && 'the WebAssembly package only' }, () => {
  assert.equal(fencepost.KubernetesLeaseBackend, undefined, 'the Node package\'s alone')
  assert.throws(() => new fencepost.LockMachine({ kind: 'kubernetes' }), (e) => e instanceof ConfigError && /not available in the WebAssembly package \(the Lease backend would add [\d.]+ KiB gzipped/.test(e.message))
})

test('configuration errors name the option; bad names and ttls are refused when the lock is built', { skip: IMPL !== 'napi' && 'the Node package' }, () => {
  assert.throws(() => new KubernetesLeaseBackend({ server: 'ftp://x' }), (e) => e instanceof ConfigError && e.option === 'server')
  assert.throws(() => new KubernetesLeaseBackend({ server: 'http://x', token: 5 }), (e) => e instanceof ConfigError && e.option === 'token')
  assert.throws(() => new KubernetesLeaseBackend({ server: 'http://x', hosts: 1 }), (e) => e instanceof ConfigError && e.option === 'hosts')
  const b = new KubernetesLeaseBackend({ server: 'http://127.0.0.1:1' })
  assert.throws(() => new Lock(b, 'Not_A_Name', { ttlMs: 2_000 }), (e) => e instanceof ConfigError && /DNS-1123 subdomain/.test(e.message))
  assert.throws(() => new Lock(b, 'ok', { ttlMs: 1_500 }), (e) => e instanceof ConfigError && e.option === 'ttlMs')
  assert.throws(() => new Lock(new KubernetesLeaseBackend({ server: 'http://x', namespace: 'Bad' }), 'ok', { ttlMs: 2_000 }), (e) => e instanceof ConfigError && /namespace/.test(e.message))
  assert.equal(b.leasePath('ok'), '/apis/coordination.k8s.io/v1/namespaces/default/leases/ok')
})

test('acquire, renew, release: every Lease field written as client-go writes it', { skip, timeout: 20_000 }, async () => {
  const b = backend()
  const name = unique('fields')
  try {
    await new Lock(b, name, { ttlMs: 3_000, purpose: 'correctness' }).using(async (signal, lease) => {
      assert.equal(lease.token, 1n)
      const first = await stored(name)
      const spec = first.spec
      assert.equal(spec.holderIdentity, lease.ownerId)
      assert.equal(spec.leaseDurationSeconds, 3)
      assert.equal(spec.leaseTransitions, 1)
      assert.match(spec.acquireTime, MICROTIME)
      assert.equal(spec.renewTime, spec.acquireTime)
      assert.ok(Math.abs(Date.parse(spec.acquireTime) - Date.now()) < 5_000)
      await sleep(1_300) // one renewal (every ttl / 3)
      lease.check()
      const renewed = await stored(name)
      assert.notEqual(renewed.metadata.resourceVersion, first.metadata.resourceVersion)
      assert.equal(renewed.spec.acquireTime, spec.acquireTime)
      assert.ok(renewed.spec.renewTime > spec.renewTime)
      assert.equal(renewed.spec.leaseTransitions, 1)
      assert.equal(renewed.metadata.uid, first.metadata.uid)
    })
    // released as client-go's ReleaseOnCancel leaves it
    const spec = (await stored(name)).spec
    assert.equal(spec.holderIdentity, '')
    assert.equal(spec.leaseDurationSeconds, 1)
    assert.equal(spec.leaseTransitions, 1)
    assert.match(spec.renewTime, MICROTIME)
    assert.deepEqual((await b.readLease(name)).spec, spec)
    assert.equal(await b.readLease(unique('absent')), null)
    // the next grant counts on: every grant raises leaseTransitions
    const again = await new Lock(b, name, { ttlMs: 2_000 }).acquire()
    assert.equal(again.token, 2n)
    await again.release()
  } finally {
    await b.close()
  }
})

test('a 409 storm delays the grant; renewals ride out conflicts; 5xx replies are retried', { skip, timeout: 40_000 }, async () => {
  const b = backend()
  try {
    await control('conflicts', { count: 15 })
    const start = performance.now()
    await new Lock(b, unique('storm'), { ttlMs: 3_000, acquireTimeoutMs: 20_000 }).using(async (signal, lease) => {
      assert.equal(lease.token, 1n)
      assert.ok(performance.now() - start < 20_000)
      // each 409 re-reads the Lease, finds it still ours and writes again (or retries later)
      await control('conflicts', { count: 4 })
      await sleep(2_500)
      lease.check()
      assert.equal((await stored(lease.name)).spec.holderIdentity, lease.ownerId)
    })
    await control('errors', { count: 3, code: 503 })
    await new Lock(b, unique('errors'), { ttlMs: 2_000, acquireTimeoutMs: 10_000 }).using(async (signal, lease) => {
      assert.equal(lease.token, 1n)
      await control('errors', { count: 2, code: 500 })
      await sleep(1_500)
      lease.check()
    })
  } finally {
    await b.close()
  }
})

test('an API server hanging while the leader renews: lost at the validity of the last renewal, never later', { skip, timeout: 20_000 }, async () => {
  const b = backend({ requestTimeoutMs: 5_000 })
  try {
    const lease = await new Lock(b, unique('hang'), { ttlMs: 3_000 }).acquire()
    const deadline = lease.validUntilMs
    const lost = new Promise((resolve) => lease.signal.addEventListener('abort', () => resolve(performance.now()), { once: true }))
    await control('hang_puts', { on: true }) // every renewal hangs from now on
    const start = performance.now()
    const at = await lost
    assert.ok(lease.validUntilMs >= deadline)
    assert.ok(at <= lease.validUntilMs + 150, `lost ${(at - lease.validUntilMs).toFixed(0)} ms after the validity deadline`)
    assert.ok(at - start < 3_200)
    assert.throws(() => lease.check(), (e) => e instanceof LockLostError && e.reason === 'expired')
  } finally {
    await control('hang_puts', { on: false })
    await b.close()
  }
})

test('a paused API server times the acquire out', { skip, timeout: 20_000 }, async () => {
  const b = backend()
  try {
    await control('pause', { on: true }) // every request hangs
    const start = performance.now()
    await assert.rejects(new Lock(b, unique('paused'), { ttlMs: 2_000, acquireTimeoutMs: 1_000 }).acquire(), AcquireTimeoutError)
    assert.ok(performance.now() - start < 3_000)
  } finally {
    await control('pause', { on: false })
    await b.close()
  }
})

test('a wrong token fails the acquire as a protocol error (401)', { skip, timeout: 20_000 }, async () => {
  const b = backend({ token: 'wrong' })
  try {
    await assert.rejects(new Lock(b, unique('auth'), { ttlMs: 2_000, acquireTimeoutMs: 2_000 }).acquire(), (e) => e instanceof AcquireTimeoutError || e instanceof ProtocolError ? /401|Unauthorized/.test(e.message + (e.lastError ?? '')) : false)
  } finally {
    await b.close()
  }
})

/** Forks `n` kube-contender.js processes; resolves to their spans. */
async function contend (name, log, n, rounds) {
  const spans = []
  const children = []
  const ready = []
  for (let i = 0; i < n; i++) {
    const child = fork(path.join(__dirname, 'kube-contender.js'), [URL_, TOKEN, name, 'rounds', log, String(rounds)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
    children.push(child)
    ready.push(new Promise((resolve) => child.on('message', (m) => m === 'ready' ? resolve() : spans.push(m.map(BigInt)))))
  }
  const exits = children.map((c) => new Promise((resolve) => c.on('exit', resolve)))
  await Promise.all(ready)
  for (const c of children) c.send('go')
  assert.deepEqual(await Promise.all(exits), children.map(() => 0), 'every contender exits 0')
  return spans
}

test('8 processes with a fenced log: one holder at a time, tokens 1..32 in grant order', { skip, timeout: 120_000 }, async () => {
  const name = unique('eight')
  const log = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'fp-kube-')), 'fenced.log')
  const spans = (await contend(name, log, 8, 4)).sort((a, b) => (a[0] < b[0] ? -1 : 1))
  for (let i = 1; i < spans.length; i++) assert.ok(spans[i - 1][1] <= spans[i][0], `critical sections overlap: ${spans[i - 1]} and ${spans[i]}`)
  const expected = Array.from({ length: 32 }, (_, i) => BigInt(i + 1))
  assert.deepEqual(spans.map((s) => s[2]), expected)
  assert.deepEqual(fs.readFileSync(log, 'utf8').trim().split('\n').map((l) => BigInt(JSON.parse(l)[0])), expected)
})

test('a holder SIGSTOPped past its lease is replaced; on resume its work is cancelled and its fenced write refused', { skip, timeout: 60_000 }, async () => {
  const b = backend()
  const name = unique('stopped')
  const log = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'fp-kube-')), 'fenced.log')
  const child = fork(path.join(__dirname, 'kube-contender.js'), [URL_, TOKEN, name, 'hold', log], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
  const messages = []
  const held = new Promise((resolve) => child.on('message', (m) => m === 'held' ? resolve() : messages.push(m)))
  const exit = new Promise((resolve) => child.on('exit', resolve))
  try {
    await held
    child.kill('SIGSTOP') // a GC pause, a frozen VM
    const start = performance.now()
    const lease = await new Lock(b, name, { ttlMs: 2_000, acquireTimeoutMs: 15_000, purpose: 'correctness' }).acquire()
    assert.ok(performance.now() - start >= 2_000, 'the old record\'s 2 s, observed')
    assert.ok(fencedAppend(log, lease.token, lease.ownerId, 'new holder'))
    child.kill('SIGCONT')
    assert.equal(await exit, 0)
    const [lost, refused, oldToken] = messages[0]
    assert.ok(lost && refused)
    assert.equal(lease.token, BigInt(oldToken) + 1n)
    await lease.release()
    assert.deepEqual(fs.readFileSync(log, 'utf8').trim().split('\n').map((l) => JSON.parse(l)[2]), ['first', 'new holder'])
  } finally {
    child.kill('SIGCONT')
    await b.close()
  }
})

const { fencedAppend } = require('./kube-contender.js')

test('kubernetesFromKubeconfig (CA + token file, client certificate) and kubernetesInCluster over TLS', { skip: skip || (!fs.existsSync(PYTHON) && 'no .venv (scripts/setup python)'), timeout: 60_000 }, async () => {
  const { kubernetesFromKubeconfig, kubernetesInCluster } = fencepost
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'fp-kube-tls-'))
  execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=127.0.0.1',
    '-addext', 'subjectAltName=IP:127.0.0.1', '-keyout', path.join(d, 'key.pem'), '-out', path.join(d, 'cert.pem')], { stdio: 'ignore' })
  const urlFile = path.join(d, 'url')
  const server = spawn(PYTHON, [path.join(REPO, 'tests', 'kube', 'lease_server.py'), '--token', 'tls-token', '--url-file', urlFile,
    '--tls-cert', path.join(d, 'cert.pem'), '--tls-key', path.join(d, 'key.pem'), '--tls-client-ca', path.join(d, 'cert.pem')], { stdio: 'ignore' })
  try {
    for (let i = 0; i < 200 && !fs.existsSync(urlFile); i++) await sleep(50)
    const url = fs.readFileSync(urlFile, 'utf8').trim()
    const ca = fs.readFileSync(path.join(d, 'cert.pem')).toString('base64')
    fs.writeFileSync(path.join(d, 'token'), 'tls-token\n')
    const config = path.join(d, 'config')
    fs.writeFileSync(config, [
      'apiVersion: v1', 'kind: Config', 'current-context: test',
      'clusters:', `- name: c`, '  cluster:', `    server: ${url}`, `    certificate-authority-data: ${ca}`,
      '- name: other', '  cluster:', '    server: https://10.0.0.1',
      'users:', '- name: u', '  user:', '    tokenFile: token',
      'contexts:', '- name: test', '  context:', '    cluster: c', '    user: u', '    namespace: apps', ''
    ].join('\n'))
    let b = kubernetesFromKubeconfig(config)
    assert.equal(b.server, url)
    assert.equal(b.namespace, 'apps')
    let lease = await new Lock(b, 'leader', { ttlMs: 2_000 }).acquire()
    assert.equal(lease.token, 1n)
    await lease.release()
    assert.equal((await b.readLease('leader')).metadata.namespace, 'apps')
    await b.close()
    assert.throws(() => kubernetesFromKubeconfig(config, { context: 'nope' }), (e) => e instanceof ConfigError && /no context named "nope"/.test(e.message))
    // a client certificate instead of a token (certificate-authority as a relative path)
    const cert = path.join(d, 'config-cert.yaml')
    const b64 = (f) => fs.readFileSync(path.join(d, f)).toString('base64')
    fs.writeFileSync(cert, [
      'apiVersion: v1', 'kind: Config', 'current-context: cert',
      'clusters:', '- name: c', '  cluster:', `    server: ${url}`, '    certificate-authority: cert.pem',
      'users:', '- name: u', '  user:', `    client-certificate-data: ${b64('cert.pem')}`, `    client-key-data: ${b64('key.pem')}`,
      'contexts:', '- name: cert', '  context:', '    cluster: c', '    user: u', ''
    ].join('\n'))
    b = kubernetesFromKubeconfig(cert)
    lease = await new Lock(b, 'by-cert', { ttlMs: 2_000 }).acquire()
    assert.equal(lease.token, 1n)
    await lease.release()
    await b.close()
    fs.writeFileSync(cert, fs.readFileSync(cert, 'utf8').replace(/users:[\s\S]*contexts:/, 'users:\n- name: u\n  user:\n    exec:\n      command: aws\ncontexts:'))
    assert.throws(() => kubernetesFromKubeconfig(cert), (e) => e instanceof ConfigError && /"exec"/.test(e.message))
    // in cluster: the service account's token, CA and namespace
    const sa = path.join(d, 'serviceaccount')
    fs.mkdirSync(sa)
    fs.writeFileSync(path.join(sa, 'token'), 'tls-token')
    fs.copyFileSync(path.join(d, 'cert.pem'), path.join(sa, 'ca.crt'))
    fs.writeFileSync(path.join(sa, 'namespace'), 'kube-system\n')
    const env = { KUBERNETES_SERVICE_HOST: '127.0.0.1', KUBERNETES_SERVICE_PORT: new URL(url).port }
    b = kubernetesInCluster({ serviceAccountDir: sa, env })
    assert.equal(b.namespace, 'kube-system')
    lease = await new Lock(b, 'controller', { ttlMs: 2_000 }).acquire()
    assert.equal(lease.token, 1n)
    await lease.release()
    await b.close()
    assert.throws(() => kubernetesInCluster({ serviceAccountDir: sa, env: {} }), (e) => e instanceof ConfigError && /KUBERNETES_SERVICE_HOST/.test(e.message))
  } finally {
    server.kill()
  }
})

// ---- holder metadata, inspection, followers (mirrors tests/python/test_inspect_kz.py) ----

test('inspect: metadata round-trips in an annotation; a client-go holder shows its identity and no stale metadata', { skip, timeout: 30_000 }, async () => {
  const b = backend()
  const name = unique('kinsp')
  try {
    assert.equal(await b.inspect(name), null) // no Lease
    const meta = fencepost.standardMetadata('nightly report')
    const lease = await new Lock(b, name, { ttlMs: 5_000, metadata: meta }).acquire()
    const found = await b.inspect(name)
    assert.deepEqual({ ...found, metadata: { ...found.metadata } }, { name, owner: lease.ownerId, token: lease.token, ttlLeftMs: 5_000, waiters: null, metadata: meta })
    const note = JSON.parse((await stored(name)).metadata.annotations['fencepost.dev/holder-metadata'])
    assert.deepEqual(note, { owner: lease.ownerId, metadata: meta })
    await sleep(1_800) // a renewal (every ttl / 3) keeps the annotation
    assert.deepEqual({ ...(await b.inspect(name)).metadata }, meta)
    await lease.release()
    assert.equal(await b.inspect(name), null) // released: no holderIdentity
    // a client-go elector takes it over, keeping the annotations
    const doc = await stored(name)
    doc.spec = { ...doc.spec, holderIdentity: 'pod-7_1234', leaseDurationSeconds: 15, leaseTransitions: doc.spec.leaseTransitions + 1 }
    const [code] = await api('PUT', `/apis/coordination.k8s.io/v1/namespaces/default/leases/${name}`, doc)
    assert.equal(code, 200)
    const theirs = await b.inspect(name)
    assert.deepEqual([theirs.owner, theirs.metadata, theirs.ttlLeftMs], ['pod-7_1234', null, 15_000])
  } finally {
    await b.close()
  }
})

test('list: pages with limit and continue, keeps the prefix and the limit', { skip, timeout: 30_000 }, async () => {
  const b = backend()
  b._listPage = 2 // pages of two Leases: the listing follows the server's continue tokens
  const prefix = unique('kjob')
  try {
    const names = ['a', 'b', 'c', 'd', 'e'].map((i) => `${prefix}-${i}`)
    const leases = []
    for (const n of names) leases.push(await new Lock(b, n, { ttlMs: 5_000, metadata: { i: n } }).acquire())
    await (await new Lock(b, `${prefix}-free`, { ttlMs: 5_000 }).acquire()).release()
    const before = (await api('GET', '/_control/state'))[1].counts.GET ?? 0
    const found = await b.list(prefix)
    const pages = (await api('GET', '/_control/state'))[1].counts.GET - before - 1
    assert.deepEqual(found.map((h) => h.name), names)
    assert.deepEqual(found.map((h) => h.metadata.i), names)
    assert.deepEqual(found.map((h) => h.token), leases.map((l) => l.token))
    assert.ok(pages >= 3, `${pages} pages`) // six Leases of this prefix alone need three pages of two
    assert.deepEqual((await b.list(prefix, { limit: 3 })).map((h) => h.name), names.slice(0, 3))
    assert.deepEqual(await b.list(unique('none')), [])
    for (const l of leases) await l.release()
    assert.deepEqual(await b.list(prefix), [])
  } finally {
    await b.close()
  }
})

test('followers read each leader from the Lease\'s annotation, in order', { skip, timeout: 30_000 }, async () => {
  const b = backend()
  const name = unique('kelect')
  try {
    const follower = new fencepost.Election(b, name, 'follower', { ttlMs: 3_000 })
    assert.equal(await follower.leader(), null)
    const controller = new AbortController()
    const seen = []
    const watching = (async () => {
      for await (const leader of follower.observe({ intervalMs: 20, signal: controller.signal })) seen.push(leader)
    })()
    await sleep(150)
    const expect = [null]
    for (const who of ['pod-a', 'pod-b', 'pod-c']) {
      const leadership = await new fencepost.Election(b, name, who, { value: `addr-${who}`, ttlMs: 3_000 }).campaign()
      assert.deepEqual(await follower.leader(), { identity: who, value: `addr-${who}`, token: leadership.token })
      await sleep(250)
      await leadership.resign()
      await sleep(250)
      expect.push({ identity: who, value: `addr-${who}`, token: leadership.token }, null)
    }
    controller.abort()
    await watching
    assert.deepEqual(seen, expect)
  } finally {
    await b.close()
  }
})
