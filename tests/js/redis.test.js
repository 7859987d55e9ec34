'use strict'
// Integration tests against a real Redis server at $FENCEPOST_REDIS_URL (scripts/test
// starts one on 127.0.0.1 and exports it), through ioredis and node-redis (v4 and v5).
// Each test uses its own key prefix and deletes its keys. Mirrors tests/python/test_redis.py.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { fork } = require('node:child_process')
const net = require('node:net')
const path = require('node:path')
const crypto = require('node:crypto')

const { fencepost, devRequire, sleep, waitUntil } = require('./impl')

const { Lock, RedisBackend, ConfigError, LockLostError, AcquireTimeoutError, ProtocolError, StaleTokenError, BackendError, redisScripts } = fencepost

const URL = process.env.FENCEPOST_REDIS_URL
const skip = URL ? false : 'FENCEPOST_REDIS_URL is not set (scripts/test starts Redis and sets it)'

const IORedis = devRequire('ioredis')
const nodeRedis4 = devRequire('redis')
const nodeRedis5 = devRequire('redis5')

/** The clients every adapter test runs with. */
const CLIENTS = {
  ioredis: {
    connect: async () => new IORedis(URL, { maxRetriesPerRequest: 2 }),
    close: (c) => c.quit()
  },
  'node-redis v4': {
    connect: async () => { const c = nodeRedis4.createClient({ url: URL }); await c.connect(); return c },
    close: (c) => c.quit()
  },
  'node-redis v5': {
    connect: async () => { const c = nodeRedis5.createClient({ url: URL }); await c.connect(); return c },
    close: (c) => c.quit()
  }
}

/** A raw ioredis connection for looking behind the backend's back, with the test's prefix;
 * `done()` deletes the prefix's keys and disconnects. */
async function admin () {
  const prefix = `fptest:${crypto.randomBytes(6).toString('hex')}:`
  const redis = new IORedis(URL, { maxRetriesPerRequest: 2 })
  return {
    redis,
    prefix,
    async done () {
      const keys = await redis.keys(`${prefix}*`)
      if (keys.length) await redis.del(...keys)
      await redis.quit()
    }
  }
}

/** Runs `fn(client)` with a fresh client of `kind`, closed afterwards. */
async function withClient (kind, fn) {
  const client = await CLIENTS[kind].connect()
  try {
    return await fn(client)
  } finally {
    await CLIENTS[kind].close(client)
  }
}

const aborted = (signal) => new Promise((resolve) => {
  if (signal.aborted) resolve(signal.reason)
  else signal.addEventListener('abort', () => resolve(signal.reason), { once: true })
})

// ---- many processes, one lock ---------------------------------------------------------------

test('8 processes × 10 critical sections never overlap, tokens rise, every fenced write lands', { skip, timeout: 50_000 }, async () => {
  const { redis, prefix, done } = await admin()
  const processes = 8
  const rounds = 10
  const started = performance.now()
  const children = Array.from({ length: processes }, (_, i) => fork(
    path.join(__dirname, 'contender.js'),
    [URL, prefix, 'contended', String(rounds), i % 2 === 0 ? 'ioredis' : 'node-redis'],
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
  } finally {
    for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
  }
  const records = (await redis.lrange(`${prefix}log`, 0, -1)).map((r) => {
    const [start, end, token, pid, kind] = JSON.parse(r)
    return { start: BigInt(start), end: BigInt(end), token: BigInt(token), pid, kind }
  })
  try {
    assert.equal(records.length, processes * rounds)
    records.sort((a, b) => (a.start < b.start ? -1 : a.start > b.start ? 1 : 0))
    assert.deepEqual(new Set(records.map((r) => r.kind)), new Set(['ioredis', 'node-redis']))
    assert.equal(new Set(records.map((r) => r.pid)).size, processes)
    for (let i = 1; i < records.length; i++) {
      const [before, after] = [records[i - 1], records[i]]
      assert.ok(before.end < after.start, `critical sections overlap: ${JSON.stringify([before, after], (k, v) => typeof v === 'bigint' ? String(v) : v)}`)
      assert.ok(before.token < after.token, `tokens do not rise in order of start: ${before.token}, ${after.token}`)
    }
    // every fenced write was accepted: the fence holds the last token, the data its write
    const last = records[records.length - 1]
    assert.equal(BigInt(await redis.get(`${prefix}fence`)), last.token)
    assert.ok((await redis.get(`${prefix}data`)).startsWith(`${last.pid}:`))
    assert.ok(performance.now() - started < 45_000)
  } finally {
    await done()
  }
})

// ---- loss -------------------------------------------------------------------------------------

for (const kind of Object.keys(CLIENTS)) {
  test(`${kind}: a lease whose key is deleted externally aborts its signal`, { skip }, async () => {
    const { redis, prefix, done } = await admin()
    try {
      await withClient(kind, async (client) => {
        const backend = new RedisBackend(client, { keyPrefix: prefix })
        let deletedAt = 0
        let signalReason = null
        const error = await new Lock(backend, 'victim', { ttlMs: 300 }).using(async (signal, lease) => { // renews every 100 ms
          assert.equal(await redis.get(backend.lockKey('victim')), lease.ownerId)
          assert.equal(await redis.del(backend.lockKey('victim')), 1)
          deletedAt = performance.now()
          signalReason = await aborted(signal)
          assert.ok(performance.now() - deletedAt < 100 + 150, `lost ${performance.now() - deletedAt} ms after the DEL`)
          return 'not reached as a success'
        }).then(() => null, (e) => e)
        assert.ok(error instanceof LockLostError)
        assert.equal(error, signalReason)
        assert.equal(error.reason, 'renew_rejected')
        assert.equal(error.token, 1n)
        assert.equal(await redis.get(backend.lockKey('victim')), null, 'a renewal never re-creates the key')
        backend.close()
      })
    } finally {
      await done()
    }
  })
}

test('release after expiry leaves the next holder\'s key alone', { skip }, async () => {
  const { redis, prefix, done } = await admin()
  try {
    await withClient('ioredis', (clientA) => withClient('node-redis v4', async (clientB) => {
      const a = new RedisBackend(clientA, { keyPrefix: prefix })
      const b = new RedisBackend(clientB, { keyPrefix: prefix })
      const leaseA = await new Lock(a, 'shared', { ttlMs: 300, autoRenew: false }).acquire()
      await sleep(350) // A's lease expires on the server
      const leaseB = await new Lock(b, 'shared', { ttlMs: 5_000, acquireTimeoutMs: 0 }).acquire()
      assert.equal(leaseB.token, leaseA.token + 1n)
      await assert.rejects(leaseA.release(), { code: 'ERR_LOCK_LOST', reason: 'expired' }) // A's machine knew
      await sleep(50) // let any release A might (wrongly) send land
      assert.equal(await redis.get(b.lockKey('shared')), leaseB.ownerId)
      await leaseB.release()
      a.close()
      b.close()
    }))
  } finally {
    await done()
  }
})

test('release of a key re-owned behind the holder\'s back is refused by the server', { skip }, async () => {
  const { redis, prefix, done } = await admin()
  try {
    await withClient('node-redis v5', async (client) => {
      const backend = new RedisBackend(client, { keyPrefix: prefix })
      const lease = await new Lock(backend, 'stolen', { ttlMs: 5_000, autoRenew: false }).acquire()
      await redis.set(backend.lockKey('stolen'), 'someone-else', 'PX', 5_000)
      await assert.rejects(lease.release(), { code: 'ERR_LOCK_LOST', reason: 'not_held_at_release' })
      assert.equal(await redis.get(backend.lockKey('stolen')), 'someone-else')
      backend.close()
    })
  } finally {
    await done()
  }
})

test('close() rejects a waiter sleeping in backoff with BackendError at once, and frees the held key', { skip }, async () => {
  const { redis, prefix, done } = await admin()
  try {
    await withClient('ioredis', async (client) => {
      const backend = new RedisBackend(client, { keyPrefix: prefix })
      const held = await new Lock(backend, 'backoff', { ttlMs: 30_000 }).acquire()
      // 10 s to wait, backoff steps up to 2 s: without the close it would still be waiting
      const waiting = new Lock(backend, 'backoff', { ttlMs: 30_000, acquireTimeoutMs: 10_000, retryBaseMs: 2_000, retryMaxMs: 2_000 }).acquire()
      const outcome = waiting.then(() => 'granted', (error) => error)
      // asleep between attempts: its first attempt was answered, no request is out
      const driver = backend._driver()
      assert.ok(await waitUntil(() => driver.pending.size === 0 && driver.acquisitions.size === 2, 2_000))
      const closedAt = performance.now()
      const closing = backend.close()
      const error = await Promise.race([outcome, sleep(1_000).then(() => 'still pending 1 s after close()')])
      assert.ok(error instanceof BackendError, String(error))
      assert.equal(error.code, 'ERR_BACKEND')
      assert.ok(performance.now() - closedAt < 1_000)
      assert.equal(held.lostReason, 'closed')
      await closing // the close's release of the held key has landed
      assert.equal(await redis.get(backend.lockKey('backoff')), null)
    })
  } finally {
    await done()
  }
})

// ---- scripts and replies --------------------------------------------------------------------

for (const kind of Object.keys(CLIENTS)) {
  test(`${kind}: a script goes by EVAL until the client ran it, then by EVALSHA; NOSCRIPT falls back to EVAL`, { skip }, async () => {
    const { redis, prefix, done } = await admin()
    try {
      await withClient(kind, async (client) => {
        // the client's own script calls, in the order the backend made them
        const calls = []
        for (const method of ['eval', 'evalsha', 'evalSha']) {
          const own = client[method]
          if (typeof own !== 'function') continue
          client[method] = function (...args) {
            calls.push(method.toLowerCase())
            return own.apply(this, args)
          }
        }
        const backend = new RedisBackend(client, { keyPrefix: prefix })
        const sha = redisScripts().acquire.sha1
        const lock = new Lock(backend, 'ns', { ttlMs: 5_000, autoRenew: false })
        const cycle = async () => {
          calls.length = 0
          const lease = await lock.acquire()
          await lease.release()
          return { token: lease.token, calls: [...calls] }
        }
        // a fresh client sends the source: nothing it sends later can overtake it
        assert.deepEqual(await cycle(), { token: 1n, calls: ['eval', 'eval'] })
        assert.deepEqual(await cycle(), { token: 2n, calls: ['evalsha', 'evalsha'] })
        await redis.script('FLUSH')
        assert.deepEqual(await redis.script('EXISTS', sha), [0])
        // each EVALSHA answered NOSCRIPT is followed by an EVAL (unless a test running
        // beside this one loaded the script again in between)
        const flushed = await cycle()
        assert.equal(flushed.token, 3n)
        assert.match(flushed.calls.join(' '), /^evalsha (eval )?evalsha( eval)?$/)
        assert.deepEqual(await redis.script('EXISTS', sha), [1])
        assert.deepEqual(await cycle(), { token: 4n, calls: ['evalsha', 'evalsha'] })
        backend.close()
      })
    } finally {
      await done()
    }
  })
}

/** Records `client`'s script calls as `{ script, keys }`, by the script's name. */
function recordScripts (client) {
  const names = new Map()
  for (const [name, { sha1, source }] of Object.entries(redisScripts())) {
    names.set(sha1, name)
    names.set(source, name)
  }
  const calls = []
  for (const method of ['eval', 'evalsha', 'evalSha']) {
    const own = client[method]
    if (typeof own !== 'function') continue
    client[method] = function (script, ...rest) {
      // ioredis: (script, numkeys, ...keys, ...args); node-redis: (script, { keys, arguments })
      const keys = typeof rest[0] === 'number' ? rest.slice(1, 1 + rest[0]) : rest[0].keys
      calls.push({ script: names.get(script), keys })
      return own.call(this, script, ...rest)
    }
  }
  return calls
}

for (const kind of Object.keys(CLIENTS)) {
  test(`${kind}: 30 leases renew in batches and stay held; one taken away is the only one lost`, { skip }, async () => {
    const { redis, prefix, done } = await admin()
    try {
      await withClient(kind, async (client) => {
        const calls = recordScripts(client)
        const backend = new RedisBackend(client, { keyPrefix: prefix })
        // ttl 600 ms: renewed every 200 ms
        const leases = await Promise.all(Array.from({ length: 30 }, (_, i) => new Lock(backend, `b${i}`, { ttlMs: 600 }).acquire()))
        await sleep(1_200)
        for (const lease of leases) {
          lease.check()
          assert.equal(await redis.get(backend.lockKey(lease.name)), lease.ownerId)
        }
        const renewals = calls.filter((c) => c.script === 'renew' || c.script === 'renew_many')
        const carried = renewals.reduce((n, c) => n + c.keys.length, 0)
        assert.ok(carried >= 30 * 4, `renewals carried ${carried}`)
        assert.ok(renewals.length <= carried / 10, `${renewals.length} calls for ${carried} renewals`)
        assert.equal(Math.max(...renewals.map((c) => c.keys.length)), 30)
        await redis.del(backend.lockKey('b7'))
        await waitUntil(() => leases[7].lost, 2_000)
        assert.equal(leases[7].lostReason, 'renew_rejected')
        await sleep(400)
        assert.deepEqual(leases.filter((l) => l.lost).map((l) => l.name), ['b7'])
        await Promise.all(leases.filter((l) => !l.lost).map((l) => l.release()))
        assert.deepEqual(await redis.keys(`${prefix}*:lock`), [])
        backend.close()
      })
    } finally {
      await done()
    }
  })
}

test('a script goes by EVAL until the client ran it, by EVALSHA after, and by EVAL again after NOSCRIPT', async () => {
  // a client whose server's script cache the test empties at will
  class ReplyError extends Error {}
  const cache = new Set()
  const calls = []
  const client = {
    async evalsha (sha1) {
      calls.push('evalsha')
      if (!cache.has(sha1)) throw new ReplyError('NOSCRIPT No matching script. Please use EVAL.')
      return 1
    },
    async eval (source) {
      calls.push('eval')
      cache.add(crypto.createHash('sha1').update(source).digest('hex'))
      return 1
    }
  }
  const backend = new RedisBackend(client)
  const { sha1 } = redisScripts().renew
  const renew = { backend: 'redis', script: 'renew', sha1, keys: ['k'], args: ['owner', '1000'] }
  const run = async () => {
    calls.length = 0
    assert.equal(await backend.execute(renew, {}), 1)
    return [...calls]
  }
  // two at once before any answered: both EVAL, so they stay in the order sent
  calls.length = 0
  assert.deepEqual(await Promise.all([backend.execute(renew, {}), backend.execute(renew, {})]), [1, 1])
  assert.deepEqual(calls, ['eval', 'eval'])
  assert.deepEqual(await run(), ['evalsha'])
  cache.clear() // SCRIPT FLUSH, or a restart
  assert.deepEqual(await run(), ['evalsha', 'eval'])
  assert.deepEqual(await run(), ['evalsha'])
  backend.close()
})

test('a wrong type at the lock key is a ProtocolError naming WRONGTYPE', { skip }, async () => {
  const { redis, prefix, done } = await admin()
  try {
    await withClient('ioredis', async (client) => {
      const backend = new RedisBackend(client, { keyPrefix: prefix })
      await redis.rpush(backend.lockKey('typed'), 'not a string')
      await assert.rejects(new Lock(backend, 'typed', { ttlMs: 5_000, acquireTimeoutMs: 1_000 }).acquire(), (e) => e instanceof ProtocolError && /WRONGTYPE/.test(e.message))
      backend.close()
    })
  } finally {
    await done()
  }
})

function freePort () {
  return new Promise((resolve, reject) => {
    const server = net.createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address()
      server.close(() => resolve(port)) // nothing listens there once closed
    })
  })
}

test('an unreachable server times out with the transport error', { skip }, async () => {
  const port = await freePort()
  const prefix = 'fptest:dead:'
  // ioredis: no reconnects, no offline queue, so a command fails at once
  const io = new IORedis({ host: '127.0.0.1', port, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, enableOfflineQueue: false })
  io.on('error', () => {})
  // (a node-redis client that is not connected is a ConfigError at acquire: tested above)
  const started = performance.now()
  for (const client of [io]) {
    const backend = new RedisBackend(client, { keyPrefix: prefix })
    const error = await new Lock(backend, 'x', { ttlMs: 1_000, acquireTimeoutMs: 0 }).acquire().then(() => null, (e) => e)
    assert.ok(error instanceof AcquireTimeoutError, String(error))
    assert.ok(error.lastError && /closed|connect|ECONNREFUSED|writeable/i.test(error.lastError), error.lastError)
    await assert.rejects(new Lock(backend, 'x', { ttlMs: 1_000, acquireTimeoutMs: 150, retryBaseMs: 10, retryMaxMs: 50 }).acquire(), AcquireTimeoutError)
    await assert.rejects(backend.fencedSet(`${prefix}d`, `${prefix}f`, 1n, 'v'), (e) => e instanceof BackendError && /fenced SET/.test(e.message))
    backend.close()
  }
  assert.ok(performance.now() - started < 3_000)
  io.disconnect()
})

test('an unreachable server behind ioredis\'s offline queue: lastError is the connection error, not the timeout', async () => {
  const port = await freePort()
  // ioredis's defaults: its commands wait in the offline queue while it reconnects, so
  // the acquire request fails by no reply in time; the cause comes as 'error' events
  const io = new IORedis({ host: '127.0.0.1', port, retryStrategy: () => 20 })
  const backend = new RedisBackend(io, { keyPrefix: 'fptest:queued:' })
  const warned = []
  const onWarning = (w) => warned.push(w)
  process.on('warning', onWarning)
  try {
    const error = await new Lock(backend, 'x', { ttlMs: 1_000, acquireTimeoutMs: 300 }).acquire().then(() => null, (e) => e)
    assert.ok(error instanceof AcquireTimeoutError, String(error))
    assert.match(error.lastError, /^Error: connect ECONNREFUSED 127\.0\.0\.1:\d+ \(reported by the client while the server was unreachable; the lock saw: .*no reply/, error.lastError)
    assert.equal(error.message, `could not acquire lock "x" before the acquire timeout; last error: ${error.lastError}`)
    // a lock held by another owner is no outage, whatever the client said before
    backend._reachability.succeeded()
    assert.equal(backend._driver().timeoutError(null), null)
  } finally {
    process.off('warning', onWarning)
    backend.close()
    io.disconnect()
  }
  assert.ok(warned.some((w) => w.code === 'FENCEPOST_UNREACHABLE'))
})

// ---- renewal, fenced writes, bad input ----------------------------------------------------------

for (const kind of Object.keys(CLIENTS)) {
  test(`${kind}: renewals keep a short lease, release frees it, the fence refuses stale writes`, { skip }, async () => {
    const { redis, prefix, done } = await admin()
    try {
      await withClient(kind, async (client) => {
        const backend = new RedisBackend(client, { keyPrefix: prefix })
        assert.equal(backend.clientKind, kind === 'ioredis' ? 'ioredis' : 'node-redis')
        const token = await new Lock(backend, 'r', { ttlMs: 300 }).using(async (signal, lease) => {
          const pttl = await redis.pttl(backend.lockKey('r'))
          assert.ok(pttl > 0 && pttl <= 300, `pttl ${pttl}`)
          await sleep(500) // longer than the TTL: renewals keep it
          lease.check()
          assert.equal(await redis.get(backend.lockKey('r')), lease.ownerId)
          await backend.fencedSet(`${prefix}doc`, `${prefix}doc:fence`, lease.token, 'v1')
          return lease.token
        })
        assert.equal(await redis.get(backend.lockKey('r')), null)
        assert.equal(BigInt(await redis.get(backend.tokenKey('r'))), token)
        assert.equal(await redis.get(`${prefix}doc`), 'v1')
        await backend.fencedSet(`${prefix}row`, `${prefix}row:fence`, 7n, 'seven')
        const stale = await backend.fencedSet(`${prefix}row`, `${prefix}row:fence`, 6n, 'six').then(() => null, (e) => e)
        assert.ok(stale instanceof StaleTokenError)
        assert.deepEqual([stale.resource, stale.token, stale.highest], [`${prefix}row`, 6n, 7n])
        assert.equal(await redis.get(`${prefix}row`), 'seven')
        await redis.rpush(`${prefix}list`, 'x') // a fence key of the wrong type: an error reply
        await assert.rejects(backend.fencedSet(`${prefix}d`, `${prefix}list`, 1n, 'x'), (e) => e instanceof ProtocolError && /WRONGTYPE/.test(e.message))
        backend.close()
      })
    } finally {
      await done()
    }
  })
}

test('a client that will send nothing (never connected, or closed) is a ConfigError at acquire, not an outage', async () => {
  // no traffic: node-redis clients that never connected, an ioredis client closed before
  // its lazy connect
  for (const redis of [nodeRedis4, nodeRedis5]) {
    const backend = new RedisBackend(redis.createClient({ url: 'redis://127.0.0.1:1' }))
    await assert.rejects(new Lock(backend, 'x').acquire(), (e) => e instanceof ConfigError && /not connected: await client.connect\(\)/.test(e.message))
    await backend.close()
  }
  const io = new IORedis('redis://127.0.0.1:1', { lazyConnect: true })
  io.disconnect()
  const backend = new RedisBackend(io)
  await assert.rejects(new Lock(backend, 'x').acquire(), (e) => e instanceof ConfigError && /ioredis client was closed/.test(e.message))
  await backend.close()
})

test('bad input is refused with ConfigError before any Redis traffic', { skip }, async () => {
  const { redis, prefix, done } = await admin()
  const scriptCalls = async () => {
    const stats = await redis.info('commandstats')
    let calls = 0
    for (const m of stats.matchAll(/^cmdstat_(evalsha|eval):calls=(\d+)/gm)) calls += Number(m[2])
    return calls
  }
  try {
    await withClient('ioredis', async (client) => {
      const backend = new RedisBackend(client, { keyPrefix: prefix })
      const before = await scriptCalls()
      for (const options of [{ ttlMs: 0 }, { ttlMs: -1 }, { ttlMs: NaN }, { ttlMs: Infinity }, { ttlMs: '30' }, { ttlMs: 1_000, renewEveryMs: 2_000 }, { ttl: 30_000 }, { purpose: 'correctness' }]) {
        assert.throws(() => new Lock(backend, 'cfg', options), ConfigError)
      }
      for (const name of [42, '', null]) assert.throws(() => new Lock(backend, name), ConfigError)
      await assert.rejects(backend.fencedSet(`${prefix}d`, `${prefix}f`, 5, 'v'), ConfigError) // a number where a bigint is needed
      await assert.rejects(new Lock(backend, 'cfg', { ttlMs: 1_000 }).acquire({ signal: 'x' }), ConfigError)
      assert.equal(await scriptCalls(), before)
      assert.equal(await redis.exists(backend.lockKey('cfg'), backend.tokenKey('cfg')), 0)
      assert.throws(() => new RedisBackend({ get () {} }), /client must be an ioredis client/)
      assert.throws(() => new RedisBackend(client, { keyPrefix: 5 }), ConfigError)
      backend.close()
    })
  } finally {
    await done()
  }
})

// ---- token floor: liveness after tokens went backwards -------------------------------------------

for (const kind of Object.keys(CLIENTS)) {
  for (const fair of [false, true]) {
    test(`${kind}${fair ? ', fair' : ''}: tokenFloor recovers a holder the fence refused after the counter regressed`, { skip }, async () => {
      const { redis, prefix, done } = await admin()
      try {
        await withClient(kind, async (client) => {
          const backend = new RedisBackend(client, { keyPrefix: prefix, fair })
          const [data, fenceKey] = [`${prefix}row`, `${prefix}row:fence`]
          await redis.set(backend.tokenKey('floor'), '4')
          await new Lock(backend, 'floor', { ttlMs: 5_000 }).using(async (signal, a) => {
            assert.equal(a.token, 5n)
            await backend.fencedSet(data, fenceKey, a.token, 'a', { ownerId: a.ownerId })
          })
          await redis.del(backend.tokenKey('floor')) // a restart without persistence
          const refused = await new Lock(backend, 'floor', { ttlMs: 5_000 }).using(async (signal, b) => {
            assert.equal(b.token, 1n)
            return backend.fencedSet(data, fenceKey, b.token, 'b', { ownerId: b.ownerId }).then(() => null, (e) => e)
          })
          assert.ok(refused instanceof StaleTokenError)
          assert.equal(refused.highest, 5n)
          const token = await new Lock(backend, 'floor', { ttlMs: 5_000, tokenFloor: refused.highest + 1n }).using(async (signal, b) => {
            await backend.fencedSet(data, fenceKey, b.token, 'b', { ownerId: b.ownerId })
            return b.token
          })
          assert.equal(token, 6n)
          // a floor below the counter changes nothing: max(counter + 1, floor); numbers work too
          assert.equal(await new Lock(backend, 'floor', { ttlMs: 5_000, tokenFloor: 2 }).using(async (s, c) => c.token), 7n)
          assert.equal(await redis.get(data), 'b')
          backend.close()
        })
      } finally {
        await done()
      }
    })
  }
}

test('a fair waiter with a tokenFloor is handed the floor by the release', { skip }, async () => {
  const { redis, prefix, done } = await admin()
  try {
    await withClient('ioredis', async (client) => {
      const backend = new RedisBackend(client, { keyPrefix: prefix, fair: true })
      const holder = await new Lock(backend, 'ff', { ttlMs: 5_000 }).acquire()
      assert.equal(holder.token, 1n)
      const waiting = new Lock(backend, 'ff', { ttlMs: 5_000, tokenFloor: 2n ** 60n }).acquire()
      assert.ok(await waitUntil(async () => (await redis.zcard(`${prefix}{ff}:queue`)) === 1, 2_000))
      await holder.release()
      const lease = await waiting
      assert.equal(lease.token, 2n ** 60n) // above 2^53: exact, as a string all the way
      await lease.release()
      backend.close()
    })
  } finally {
    await done()
  }
})

test('a bad tokenFloor is a ConfigError naming tokenFloor', { skip }, async () => {
  await withClient('ioredis', async (client) => {
    const backend = new RedisBackend(client)
    for (const [floor, message] of [[0n, /tokenFloor: must be in 1 \.\.= 2\^63 - 1, got 0/], [2n ** 63n, /tokenFloor: must be in/], [-1n, /tokenFloor must be a bigint/], [1.5, /tokenFloor must be a bigint/], ['5', /tokenFloor must be a bigint/]]) {
      assert.throws(() => new Lock(backend, 'cfg', { tokenFloor: floor }), (e) => e instanceof ConfigError && message.test(e.message) && e.option === 'tokenFloor', String(floor))
    }
    backend.close()
  })
})
