'use strict'
// RedlockBackend against five real Redis masters on 127.0.0.1, which this file starts
// itself with scripts/services/redis-masters.sh (and stops; scripts/test's trap stops them
// too). Masters are stopped with SIGSTOP and always resumed with SIGCONT in a `finally`.
// With FENCEPOST_IMPL=napi the masters are reached with ioredis and node-redis (v4, v5); with
// FENCEPOST_IMPL=wasm over REST (the Upstash protocol, fetch only), each master behind a
// REST proxy of its own (rest-proxy.js). Each test uses its own key prefix. Mirrors
// tests/python/test_redlock.py.

const { test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const { execFileSync, fork } = require('node:child_process')
const crypto = require('node:crypto')
const path = require('node:path')

const { fencepost, IMPL, REPO, devRequire, sleep, waitUntil } = require('./impl')
const { startRestProxy } = require('./rest-proxy')

const { Lock, RedlockBackend, ConfigError, LockLostError, AcquireTimeoutError } = fencepost

const IORedis = devRequire('ioredis')
const nodeRedis = devRequire('redis')
const nodeRedis5 = devRequire('redis5')

const SCRIPT = path.join(REPO, 'scripts', 'services', 'redis-masters.sh')
const skip = hasRedisServer() ? false : 'redis-server is not installed (scripts/services/redis.sh install)'

function hasRedisServer () {
  try {
    execFileSync('sh', ['-c', 'command -v redis-server'], { stdio: 'ignore' })
    return true
  } catch {
    return false
  }
}

/** The masters' URLs and PIDs, in the same order; probes: an ioredis client of each. */
let urls = []
let pids = []
let probes = []
/** With FENCEPOST_IMPL=wasm: one REST proxy in front of each master. */
let proxies = []
const REST_TOKEN = crypto.randomBytes(12).toString('hex')

before(async () => {
  if (skip) return
  urls = execFileSync(SCRIPT, ['start', '5'], { encoding: 'utf8' }).trim().split(',')
  pids = execFileSync(SCRIPT, ['pids'], { encoding: 'utf8' }).trim().split('\n').map(Number)
  probes = urls.map((u) => new IORedis(u, { maxRetriesPerRequest: 1 }))
  if (IMPL === 'wasm') proxies = await Promise.all(urls.map((redisUrl) => startRestProxy({ redisUrl, token: REST_TOKEN })))
})

after(async () => {
  for (const pid of pids) resume(pid)
  await Promise.all(proxies.map((p) => p.close()))
  await Promise.all(probes.map((p) => p.quit().catch(() => p.disconnect())))
  if (!skip) execFileSync(SCRIPT, ['stop'])
})

function resume (pid) {
  try { process.kill(pid, 'SIGCONT') } catch {}
}

/** Runs `fn` with the masters at `indices` stopped (SIGSTOP); always resumes them. */
async function stopped (indices, fn) {
  try {
    for (const i of indices) process.kill(pids[i], 'SIGSTOP')
    return await fn()
  } finally {
    for (const i of indices) resume(pids[i])
  }
}

/** How each kind of master reaches the five servers: `open()` → `{ masters, close }`. */
const KINDS = IMPL === 'wasm'
  ? {
      rest: async () => ({ masters: proxies.map((p) => ({ url: p.url, token: REST_TOKEN })), close: async () => {} })
    }
  : {
      ioredis: async () => {
        const masters = urls.map((u) => new IORedis(u, { maxRetriesPerRequest: 1 }))
        return { masters, close: () => Promise.all(masters.map((c) => c.quit())) }
      },
      'node-redis': async () => {
        const masters = await Promise.all(urls.map((url) => {
          const c = nodeRedis.createClient({ url })
          c.on('error', () => {})
          return c.connect().then(() => c)
        }))
        return { masters, close: () => Promise.all(masters.map((c) => c.quit())) }
      },
      'node-redis v5': async () => {
        const masters = await Promise.all(urls.map((url) => {
          const c = nodeRedis5.createClient({ url })
          c.on('error', () => {})
          return c.connect().then(() => c)
        }))
        return { masters, close: () => Promise.all(masters.map((c) => c.close())) }
      }
    }

/** A fresh key prefix. */
const prefixed = () => `fprl:${crypto.randomBytes(6).toString('hex')}:`

/** The value of `key` on the masters at `indices` (all by default). */
const holders = (key, indices = [0, 1, 2, 3, 4]) => Promise.all(indices.map((i) => probes[i].get(key)))
const none = (n) => Array(n).fill(null)

async function withBackend (kind, fn) {
  const { masters, close } = await KINDS[kind]()
  const backend = new RedlockBackend(masters, { keyPrefix: prefixed() })
  try {
    return await fn(backend)
  } finally {
    await backend.close()
    await close()
  }
}

// ---- bad input --------------------------------------------------------------------------------

test('bad master lists, correctness, tokenFloor and one-server calls are ConfigErrors', { skip }, async () => {
  const io = urls.map((u) => new IORedis(u, { lazyConnect: true }))
  const nr = nodeRedis.createClient({ url: urls[2] })
  try {
    const refused = (masters, pattern) => assert.throws(() => new RedlockBackend(masters), (e) => {
      assert.ok(e instanceof ConfigError, e)
      assert.equal(e.code, 'ERR_CONFIG')
      assert.equal(e.option, 'masters')
      assert.match(e.message, pattern)
      return true
    })
    refused([], /got none/)
    refused(io.slice(0, 1), /at least 3; got 1/)
    refused(io.slice(0, 4), /odd number of masters, got 4/)
    refused([io[0], io[1], new IORedis(urls[0], { lazyConnect: true })], /masters 0 and 2 are the same server/)
    refused([io[0], io[1], io[0]], /the same client as master 0/)
    refused([io[0], io[1], nr], /mix ioredis clients and node-redis clients/)
    refused([io[0], io[1], { url: 'http://127.0.0.1:1' }], /mix ioredis clients and REST endpoints/)
    refused([io[0], io[1], {}], /masters\[2\] must be an ioredis client/)
    refused('redis://127.0.0.1', /must be an array/)
    assert.throws(() => new RedlockBackend(io.slice(0, 3), { fair: true }), { code: 'ERR_CONFIG', option: 'fair' })

    const backend = new RedlockBackend(io.slice(0, 3))
    assert.deepEqual(backend.masters, urls.slice(0, 3).map((u) => u.replace(/^redis:\/\//, '')))
    assert.equal(backend.clientKind, 'ioredis')
    for (const acceptFailoverRisk of [false, true]) {
      assert.throws(() => new Lock(backend, 'x', { purpose: 'correctness', acceptFailoverRisk }), (e) => {
        assert.equal(e.code, 'ERR_CONFIG')
        assert.equal(e.option, 'purpose')
        for (const name of ['etcd', 'ZooKeeper', 'PostgreSQL lease rows']) assert.ok(e.message.includes(name), e.message)
        return true
      })
    }
    assert.throws(() => new Lock(backend, 'x', { tokenFloor: 10n }), { code: 'ERR_CONFIG', option: 'tokenFloor' })
    assert.throws(() => new Lock(backend, 'x', { minReplicas: 1 }), { code: 'ERR_CONFIG', option: 'minReplicas' })
    await assert.rejects(backend.isLocked('x'), { code: 'ERR_CONFIG', message: /concerns one server/ })
    await assert.rejects(backend.forceRelease('x'), { code: 'ERR_CONFIG', message: /concerns one server/ })
    await backend.close()
  } finally {
    for (const c of io) c.disconnect()
  }
})

// ---- a majority, and none ---------------------------------------------------------------------

for (const kind of Object.keys(KINDS)) {
  test(`${kind}: 2 of 5 stopped: acquire, renew and release on the majority; close() waits for the stopped two`, { skip, timeout: 15_000 }, async () => {
    const { masters, close } = await KINDS[kind]()
    const backend = new RedlockBackend(masters, { keyPrefix: prefixed() })
    const key = backend.lockKey('job')
    try {
      // the stopped masters' parts end at the attempt's deadline, 3 000 × 0.99 − 2 = 2 968 ms
      const lock = new Lock(backend, 'job', { ttlMs: 3_000, renewEveryMs: 250, acquireTimeoutMs: 5_000 })
      // connections made and scripts loaded on every master (the first call of each script
      // on each client is an EVAL of its source), so the timing below is the lock's
      await (await lock.acquire()).release()
      let closing
      await stopped([3, 4], async () => {
        const started = performance.now()
        const lease = await lock.acquire()
        const tookMs = performance.now() - started
        assert.ok(tookMs < 2_000, `granted by the three running masters, not at the deadline: ${tookMs} ms`)
        assert.ok(lease.token >= 1n)
        assert.deepEqual(await holders(key, [0, 1, 2]), Array(3).fill(lease.ownerId))
        await sleep(800) // three renewals on the three running masters
        lease.check()
        // unrenewed, 3 000 − 800 = 2 200 ms would be left
        for (const i of [0, 1, 2]) assert.ok(await probes[i].pttl(key) > 2_500)
        await lease.release()
        assert.deepEqual(await holders(key, [0, 1, 2]), none(3))
        // the releases of the two stopped masters are still out: close() waits for them
        closing = backend.close()
        let settled = false
        closing.then(() => { settled = true })
        await sleep(100)
        assert.equal(settled, false, 'close() resolved before the stopped masters answered')
      })
      await closing
      assert.deepEqual(await holders(key), none(5), 'every master released once close() resolved')
    } finally {
      await backend.close()
      await close()
    }
  })

  test(`${kind}: 3 of 5 stopped: fails within the acquire timeout; after they resume no key is left`, { skip, timeout: 15_000 }, async () => {
    await withBackend(kind, async (backend) => {
      // a TTL far beyond the test: a key gone afterwards was released, not expired
      const lock = new Lock(backend, 'job', { ttlMs: 30_000, acquireTimeoutMs: 500 })
      const key = backend.lockKey('job')
      await stopped([2, 3, 4], async () => {
        const started = performance.now()
        await assert.rejects(lock.acquire(), AcquireTimeoutError)
        assert.ok(performance.now() - started < 500 + 300)
        // the release of every master went out with the failure; the running two answer at once
        assert.ok(await waitUntil(async () => (await holders(key, [0, 1])).every((v) => v === null), 1_000), 'the two running masters were released')
      })
      // resumed: the hung acquires run on the three masters, then the releases after them
      assert.ok(await waitUntil(async () => (await holders(key)).every((v) => v === null), 5_000, 25), 'no key left on any master')
    })
  })

  test(`${kind}: a majority answering after the validity is not acquired, and its grants are released`, { skip, timeout: 15_000 }, async () => {
    await withBackend(kind, async (backend) => {
      // one try (acquireTimeoutMs 0) with all its validity: 300 × 0.99 − 2 = 295 ms
      const lock = new Lock(backend, 'job', { ttlMs: 300, acquireTimeoutMs: 0, autoRenew: false })
      const key = backend.lockKey('job')
      let attempt
      await stopped([2, 3, 4], async () => {
        attempt = lock.acquire()
        attempt.catch(() => {})
        await sleep(500) // past the validity: the majority answers too late
      })
      await assert.rejects(attempt, AcquireTimeoutError)
      assert.ok(await waitUntil(async () => (await holders(key)).every((v) => v === null), 5_000, 25), 'no key left on any master')
    })
  })

  // ---- renewal ------------------------------------------------------------------------------

  test(`${kind}: a renewal losing its majority is lost at once and the work's signal aborted`, { skip, timeout: 15_000 }, async () => {
    await withBackend(kind, async (backend) => {
      const lock = new Lock(backend, 'job', { ttlMs: 3_000, renewEveryMs: 200 })
      const key = backend.lockKey('job')
      let deletedAt = 0
      let abortedAt = 0
      await assert.rejects(lock.using(async (signal, lease) => {
        // granted by the first three to answer: wait for all five
        assert.ok(await waitUntil(async () => (await holders(key)).every((v) => v === lease.ownerId), 1_000))
        // three masters restart without persistence
        for (const i of [2, 3, 4]) assert.equal(await probes[i].del(key), 1)
        deletedAt = performance.now()
        await new Promise((resolve) => signal.addEventListener('abort', () => { abortedAt = performance.now(); resolve() }, { once: true }))
      }), (e) => {
        assert.ok(e instanceof LockLostError, e)
        assert.equal(e.reason, 'renew_rejected')
        return true
      })
      // at the next renewal (200 ms), long before the validity deadline (~2 968 ms)
      assert.ok(abortedAt - deletedAt < 200 + 300, `aborted ${abortedAt - deletedAt} ms after the deletes`)
      // the two masters that renewed are released
      assert.ok(await waitUntil(async () => (await holders(key)).every((v) => v === null), 2_000, 10))
    })
  })
}

// ---- close() leaves nothing running -------------------------------------------------------------

for (const kind of Object.keys(KINDS)) {
  test(`${kind}: after await backend.close() no timer or request of fencepost is left: the process exits by itself`, { skip, timeout: 20_000 }, async () => {
    const child = fork(path.join(__dirname, 'redlock-close.js'), [kind === 'rest' ? proxies.map((p) => p.url).join(',') : urls.join(','), kind, REST_TOKEN, prefixed()], {
      stdio: ['ignore', 'pipe', 'inherit', 'ipc']
    })
    let out = ''
    child.stdout.on('data', (d) => { out += d })
    const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal, at: performance.now() })))
    const report = await new Promise((resolve, reject) => {
      child.once('message', resolve)
      child.once('exit', () => reject(new Error(`redlock-close.js exited without a report: ${out}`)))
    })
    let timer
    const exit = await Promise.race([
      exited,
      new Promise((resolve) => { timer = setTimeout(() => resolve(null), 5_000) })
    ]).finally(() => clearTimeout(timer))
    if (exit === null) child.kill('SIGKILL')
    assert.notEqual(exit, null, `the process was still alive 5 s after close(): ${JSON.stringify(report)}`)
    assert.equal(exit.code, 0, out)
    // nothing of fencepost's left: no timer after close() resolved, no warning after it
    assert.deepEqual(report.timersAfterClose, [], JSON.stringify(report))
    assert.deepEqual(report.warningsAfterClose, [])
    assert.deepEqual(await holders(report.key), none(5), 'close() released the lease on every master')
  })
}

// ---- eight processes --------------------------------------------------------------------------

test('8 processes × 8 critical sections on one Redlock over five masters never overlap', { skip: skip || (process.env.FENCEPOST_REDIS_URL ? false : 'FENCEPOST_REDIS_URL is not set (the log server)'), timeout: 50_000 }, async () => {
  const logUrl = process.env.FENCEPOST_REDIS_URL
  const log = new IORedis(logUrl, { maxRetriesPerRequest: 2 })
  const prefix = prefixed()
  const processes = 8
  const rounds = 8
  const children = Array.from({ length: processes }, (_, i) => fork(
    path.join(__dirname, 'redlock-contender.js'),
    [urls.join(','), logUrl, prefix, 'contended', String(rounds), i % 2 === 0 ? 'ioredis' : 'node-redis'],
    { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] }
  ))
  const exits = children.map((child) => new Promise((resolve) => child.once('exit', (code, signal) => resolve(code ?? signal))))
  try {
    await Promise.all(children.map((child) => new Promise((resolve, reject) => {
      child.once('message', resolve)
      child.once('exit', () => reject(new Error(`contender ${child.pid} exited before it was ready`)))
    })))
    for (const child of children) child.send('go')
    let timer
    const codes = await Promise.race([
      Promise.all(exits),
      new Promise((resolve, reject) => { timer = setTimeout(() => reject(new Error('contenders still running after 40 s')), 40_000) })
    ]).finally(() => clearTimeout(timer))
    assert.deepEqual(codes, Array(processes).fill(0))
    const records = (await log.lrange(`${prefix}log`, 0, -1)).map((r) => {
      const [start, end, token, pid, kind] = JSON.parse(r)
      return { start: BigInt(start), end: BigInt(end), token: BigInt(token), pid, kind }
    })
    assert.equal(records.length, processes * rounds)
    records.sort((a, b) => (a.start < b.start ? -1 : a.start > b.start ? 1 : 0))
    assert.deepEqual(new Set(records.map((r) => r.kind)), new Set(['ioredis', 'node-redis']))
    assert.equal(new Set(records.map((r) => r.pid)).size, processes)
    for (let i = 1; i < records.length; i++) {
      const [a, b] = [records[i - 1], records[i]]
      assert.ok(a.end < b.start, `critical sections overlap: ${JSON.stringify([a, b], (k, v) => typeof v === 'bigint' ? String(v) : v)}`)
    }
  } finally {
    for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
    await log.del(`${prefix}log`)
    await log.quit()
  }
})
