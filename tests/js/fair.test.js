'use strict'
// Fair, instant hand-off (`fair: true`): waiters queue on the server in FIFO order and park
// on a blocking pop; a release grants the lock to the first live waiter and wakes it, so
// the releaser cannot barge back in. On the in-memory backend (MemoryServer emulates BLPOP)
// and on a real Redis at $FENCEPOST_REDIS_URL (ioredis, node-redis v4 and v5; 8 forked
// processes). Mirrors core/tests/fair.rs.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { fork, spawnSync } = require('node:child_process')
const path = require('node:path')
const crypto = require('node:crypto')

const { fencepost, IMPL, PACKAGES, devRequire, sleep, waitUntil } = require('./impl')

const { Lock, LockMachine, MemoryBackend, MemoryServer, RedisBackend, ConfigError } = fencepost

const URL = process.env.FENCEPOST_REDIS_URL
const skip = URL ? false : 'FENCEPOST_REDIS_URL is not set (scripts/test starts Redis and sets it)'

/** Waits of up to 1 s: were a wake-up missed, the backoff fallback would show as seconds. */
const SLOW_BACKOFF = { retryBaseMs: 1_000, retryMaxMs: 1_000 }

const showTokens = (xs) => JSON.stringify(xs, (k, v) => (typeof v === 'bigint' ? `${v}n` : v))

// ---- the sans-IO machine ----------------------------------------------------------------------

test('a fair LockMachine parks a contended acquisition on a blocking pop and is woken by the release', async () => {
  const server = new MemoryServer()
  const a = new LockMachine({ seed: 1, fair: true })
  const b = new LockMachine({ seed: 2, fair: true })
  const serve = (m, t, request) => m.reply(t, request.id, server.execute(request))
  const la = a.acquire(0, 'r', { ttlMs: 10_000, retryMaxMs: 500 })
  let [request] = a.poll().outputs
  assert.equal(request.script, 'acquire_fair')
  serve(a, 1, request)
  assert.equal(a.poll().outputs[0].type, 'acquired')

  b.acquire(2, 'r', { ttlMs: 10_000, retryMaxMs: 500 })
  ;[request] = b.poll().outputs
  serve(b, 3, request) // contended: queued on the server
  const { outputs } = b.poll()
  assert.equal(outputs.length, 1)
  const [wait] = outputs
  assert.equal(wait.type, 'request')
  assert.equal(wait.backend, 'redis_blpop')
  assert.equal(wait.operation, 'wait')
  assert.equal(wait.key, `fencepost:{r}:wake:${b.owner(1)}`)
  // the wake-up ends the park; its timeout is only the fallback: retryMaxMs with equal jitter
  assert.ok(Number.isInteger(wait.timeoutMs) && wait.timeoutMs >= 250 && wait.timeoutMs <= 500, `timeoutMs ${wait.timeoutMs}`)
  assert.ok(wait.deadlineMs > 3 + wait.timeoutMs)
  assert.equal(wait.script, undefined)

  // the pop blocks until the release pushes the wake-up
  const popped = server.execute(wait)
  assert.ok(popped instanceof Promise)
  a.release(4, la)
  ;[request] = a.poll().outputs
  assert.equal(request.script, 'release_fair')
  serve(a, 4, request)
  assert.equal(server.get('fencepost:{r}:lock'), b.owner(1), 'granted to the first waiter')
  const reply = await popped
  assert.deepEqual(reply, [wait.key, 'g:2 released'])
  b.reply(5, wait.id, reply) // the wake-up is the grant: no second round trip
  assert.deepEqual(b.poll().outputs.map((o) => [o.type, o.token]), [['acquired', 2n]])
})

test('MemoryServer.blpop: at once when the list has an item, null at the timeout, rejects on abort', async () => {
  const server = new MemoryServer()
  const started = performance.now()
  assert.equal(await server.blpop('k', 30), null)
  assert.ok(performance.now() - started >= 25)
  const controller = new AbortController()
  const abandoned = server.blpop('k', 10_000, { signal: controller.signal })
  controller.abort(new Error('gone'))
  await assert.rejects(abandoned, { message: 'gone' })
  await assert.rejects(server.blpop('k', 10, { signal: AbortSignal.abort() }), { name: 'AbortError' })
  assert.throws(() => server.blpop(5, 10), ConfigError)
  assert.throws(() => server.blpop('k', -1), ConfigError)
})

// ---- in-memory backend ------------------------------------------------------------------------

/**
 * H holds the lock; W1, W2, W3 start waiting in that order (each on its own backend, as
 * separate processes would); H releases and at once asks again. Returns who got the lock
 * in which order, with tokens, and how long it all took after H's release.
 */
async function releaserAndThreeWaiters (backends, fair) {
  const options = { ttlMs: 10_000, ...SLOW_BACKOFF }
  const order = []
  const holder = await new Lock(backends[0], 'queue', options).acquire()
  const waiters = []
  for (let i = 1; i <= 3; i++) {
    waiters.push(new Lock(backends[i], 'queue', options).using(async (signal, lease) => {
      order.push([`W${i}`, lease.token])
      await sleep(5)
    }))
    await sleep(20) // queued (and parked) in this order
  }
  const released = performance.now()
  await holder.release()
  const again = new Lock(backends[0], 'queue', options).using(async (signal, lease) => { order.push(['H', lease.token]) })
  await Promise.all([...waiters, again])
  return { order, holderToken: holder.token, elapsedMs: performance.now() - released }
}

test('memory, fair: three waiters are served in FIFO order and the releaser cannot barge', async () => {
  const server = new MemoryServer()
  const backends = Array.from({ length: 4 }, () => new MemoryBackend({ server, fair: true }))
  assert.equal(backends[0].fair, true)
  const { order, holderToken, elapsedMs } = await releaserAndThreeWaiters(backends, true)
  assert.deepEqual(order, [['W1', holderToken + 1n], ['W2', holderToken + 2n], ['W3', holderToken + 3n], ['H', holderToken + 4n]], showTokens(order))
  assert.ok(elapsedMs < 600, `hand-offs took ${elapsedMs.toFixed(1)} ms: woken, not polling`)
  assert.equal(server.lockOwner('queue'), null, 'nobody waiting: the lock is free')
  for (const b of backends) b.close()
})

test('memory, not fair (the default): the releaser barges in ahead of the waiters', async () => {
  const server = new MemoryServer()
  const backends = Array.from({ length: 4 }, () => new MemoryBackend({ server }))
  assert.equal(backends[0].fair, false)
  const { order, holderToken } = await releaserAndThreeWaiters(backends, false)
  assert.deepEqual(order[0], ['H', holderToken + 1n], showTokens(order))
  for (const b of backends) b.close()
})

test('memory, fair: a waiter cancelled by its AbortSignal leaves the queue and is skipped', async () => {
  const server = new MemoryServer()
  const [a, b, c] = Array.from({ length: 3 }, () => new MemoryBackend({ server, fair: true }))
  const options = { ttlMs: 10_000, ...SLOW_BACKOFF }
  const holder = await new Lock(a, 'c', options).acquire()
  const controller = new AbortController()
  const cancelled = new Lock(b, 'c', options).acquire({ signal: controller.signal })
  await sleep(20)
  const next = new Lock(c, 'c', options).acquire()
  await sleep(20)
  controller.abort(new Error('not needed any more'))
  await assert.rejects(cancelled, { message: 'not needed any more' })
  await sleep(10) // its release (leaving the queue) lands
  const released = performance.now()
  await holder.release()
  const lease = await next
  assert.ok(performance.now() - released < 300, `woke the next live waiter after ${(performance.now() - released).toFixed(1)} ms`)
  assert.equal(lease.token, holder.token + 1n)
  assert.equal(server.lockOwner('c'), lease.ownerId)
  await lease.release()
  for (const backend of [a, b, c]) backend.close()
})

test('memory, fair: fifty concurrent users never overlap and are served in the order they queued', async () => {
  const backend = new MemoryBackend({ fair: true })
  const lock = new Lock(backend, 'hot', { ttlMs: 5_000, retryBaseMs: 1, retryMaxMs: 200 })
  const first = await lock.acquire()
  const served = []
  let inside = 0
  const users = []
  for (let i = 0; i < 50; i++) {
    users.push(lock.using(async (signal, lease) => {
      inside += 1
      assert.equal(inside, 1, 'two holders at once')
      served.push([i, lease.token])
      await sleep(i % 2)
      inside -= 1
    }))
    await sleep(1) // each queues (and re-parks) before the next arrives
  }
  await first.release()
  await Promise.all(users)
  for (let k = 1; k < served.length; k++) assert.ok(served[k - 1][1] < served[k][1])
  const inOrder = served.filter(([i], k) => i === k).length
  assert.ok(inOrder >= 45, `served in queue order: ${inOrder} of 50 (${served.map(([i]) => i).join(' ')})`)
  backend.close()
})

test('memory, fair: a cancelled or closed parked waiter never keeps the process alive', () => {
  const pkg = JSON.stringify(PACKAGES[IMPL])
  // a parked waiter blocks for up to a minute; cancelling it (and closing) must end that
  const out = spawnSync(process.execPath, ['-e', `
    const fp = require(${pkg})
    const server = new fp.MemoryServer()
    const a = new fp.MemoryBackend({ server, fair: true })
    const b = new fp.MemoryBackend({ server, fair: true })
    const options = { ttlMs: 120000, retryBaseMs: 60000, retryMaxMs: 60000 }
    ;(async () => {
      const lease = await new fp.Lock(a, 'x', options).acquire()
      const controller = new AbortController()
      const waiting = new fp.Lock(b, 'x', options).acquire({ signal: controller.signal }).catch((e) => e.name)
      await new Promise((r) => setTimeout(r, 50))
      controller.abort()
      console.log(await waiting)
      const closed = new fp.Lock(b, 'x', options).acquire().catch((e) => e.code)
      await new Promise((r) => setTimeout(r, 50))
      b.close()
      console.log(await closed)
      await lease.release()
    })()
  `], { encoding: 'utf8', timeout: 20_000 })
  assert.equal(out.status, 0, out.stderr)
  assert.deepEqual(out.stdout.trim().split('\n'), ['AbortError', 'ERR_BACKEND'])
})

test('fair is checked: a boolean; on RedisBackend, a client that can duplicate itself and adds no key prefix', () => {
  assert.throws(() => new MemoryBackend({ fair: 'yes' }), (e) => e instanceof ConfigError && /fair must be true or false/.test(e.message))
  assert.throws(() => new LockMachine({ fair: 1 }), ConfigError)
  const IORedis = devRequire('ioredis')
  const prefixed = new IORedis({ lazyConnect: true, keyPrefix: 'app:' })
  assert.throws(() => new RedisBackend(prefixed, { fair: true }), (e) => e instanceof ConfigError && e.option === 'fair' && /keyPrefix/.test(e.message))
  new RedisBackend(prefixed).close() // without fair the client's own prefix is fine
  const bare = { evalsha: async () => null, eval: async () => null }
  assert.throws(() => new RedisBackend(bare, { fair: true }), /duplicate\(\)/)
  prefixed.disconnect()
})

// ---- real Redis -------------------------------------------------------------------------------

const IORedis = devRequire('ioredis')
const nodeRedis4 = devRequire('redis')
const nodeRedis5 = devRequire('redis5')

const CLIENTS = {
  ioredis: async () => new IORedis(URL, { maxRetriesPerRequest: 2 }),
  'node-redis v4': async () => { const c = nodeRedis4.createClient({ url: URL }); await c.connect(); return c },
  'node-redis v5': async () => { const c = nodeRedis5.createClient({ url: URL }); await c.connect(); return c }
}

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

const blockedClients = async (redis) => Number(/blocked_clients:(\d+)/.exec(await redis.info('clients'))[1])

for (const kind of Object.keys(CLIENTS)) {
  test(`${kind}, fair: FIFO hand-off without barging; a cancelled waiter is skipped; the shared client never blocks`, { skip, timeout: 20_000 }, async () => {
    const { redis, prefix, done } = await admin()
    const clients = await Promise.all([0, 1, 2, 3].map(() => CLIENTS[kind]()))
    const backends = clients.map((client) => new RedisBackend(client, { keyPrefix: prefix, fair: true }))
    try {
      const blockedBefore = await blockedClients(redis)
      // FIFO, and the releaser queues behind the waiters
      const { order, holderToken, elapsedMs } = await releaserAndThreeWaiters(backends, true)
      assert.deepEqual(order, [['W1', holderToken + 1n], ['W2', holderToken + 2n], ['W3', holderToken + 3n], ['H', holderToken + 4n]], showTokens(order))
      assert.ok(elapsedMs < 600, `hand-offs took ${elapsedMs.toFixed(1)} ms: woken, not polling`)

      // a cancelled waiter leaves the queue; the next live one is woken
      const [a, b, c] = backends
      const options = { ttlMs: 10_000, retryBaseMs: 5_000, retryMaxMs: 5_000 }
      const queue = `${prefix}{c}:queue`
      const holder = await new Lock(a, 'c', options).acquire()
      const controller = new AbortController()
      const cancelled = new Lock(b, 'c', options).acquire({ signal: controller.signal })
      assert.ok(await waitUntil(async () => (await redis.zcard(queue)) === 1, 2_000))
      const next = new Lock(c, 'c', options).acquire()
      assert.ok(await waitUntil(async () => (await redis.zcard(queue)) === 2, 2_000))
      assert.ok(await waitUntil(async () => (await blockedClients(redis)) >= blockedBefore + 2, 2_000), 'both waiters block in BLPOP')

      // the parked waiter's own client is free: another lock on it is taken at once
      const t0 = performance.now()
      const other = await new Lock(b, 'other', { ttlMs: 10_000 }).acquire()
      assert.ok(performance.now() - t0 < 200, `the shared client answered after ${(performance.now() - t0).toFixed(1)} ms`)
      await other.release()

      controller.abort(new Error('not needed any more'))
      await assert.rejects(cancelled, { message: 'not needed any more' })
      assert.ok(await waitUntil(async () => (await redis.zcard(queue)) === 1, 2_000), 'the cancelled waiter left the queue')
      assert.ok(await waitUntil(async () => (await blockedClients(redis)) === blockedBefore + 1, 2_000), 'its BLPOP was abandoned, not waited out')
      const released = performance.now()
      await holder.release()
      const lease = await next
      assert.ok(performance.now() - released < 300, `woke the next live waiter after ${(performance.now() - released).toFixed(1)} ms`)
      assert.equal(lease.token, holder.token + 1n)
      assert.equal(await redis.get(backends[0].lockKey('c')), lease.ownerId)
      await lease.release()
      assert.equal(await redis.get(backends[0].lockKey('c')), null)
      assert.equal(await redis.exists(queue), 0)
    } finally {
      for (const backend of backends) backend.close()
      await Promise.all(clients.map((client) => client.quit()))
      await done()
    }
  })
}

/** Forks `processes` contenders (tests/js/contender.js, alternating ioredis and node-redis)
 * for `rounds` critical sections each, each asking again the moment it released; returns
 * their log records in order of start. */
async function contend (prefix, redis, processes, rounds, mode) {
  const children = Array.from({ length: processes }, (_, i) => fork(
    path.join(__dirname, 'contender.js'),
    [URL, prefix, 'contended', String(rounds), i % 2 === 0 ? 'ioredis' : 'node-redis', mode, '0'],
    { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] }
  ))
  const exits = children.map((child) => new Promise((resolve) => child.once('exit', (code, signal) => resolve(code ?? signal))))
  const started = performance.now()
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
  const elapsedMs = performance.now() - started
  const records = (await redis.lrange(`${prefix}log`, 0, -1)).map((r) => {
    const [start, end, token, pid, kind] = JSON.parse(r)
    return { start: BigInt(start), end: BigInt(end), token: BigInt(token), pid, kind }
  })
  records.sort((a, b) => (a.start < b.start ? -1 : a.start > b.start ? 1 : 0))
  return { records, elapsedMs }
}

/** Checks exclusion and token order; returns the hand-off statistics. */
function handOffs (records) {
  let toOther = 0
  const gaps = []
  for (let i = 1; i < records.length; i++) {
    const [before, after] = [records[i - 1], records[i]]
    assert.ok(before.end < after.start, `critical sections overlap: ${showTokens([before, after])}`)
    assert.ok(before.token < after.token, `tokens do not rise in order of start: ${before.token}, ${after.token}`)
    if (after.pid !== before.pid) toOther += 1
    gaps.push(Number(after.start - before.end) / 1e6)
  }
  gaps.sort((x, y) => x - y)
  return { grants: records.length, toOther, medianGapMs: gaps[Math.floor(gaps.length / 2)] }
}

test('8 processes asking again at once, fair: exclusion holds, tokens rise, nearly every grant goes to another worker (vs. not fair)', { skip, timeout: 100_000 }, async (t) => {
  const processes = 8
  const rounds = 10
  const results = {}
  for (const mode of ['fair', 'plain']) {
    const { redis, prefix, done } = await admin()
    try {
      const { records, elapsedMs } = await contend(prefix, redis, processes, rounds, mode)
      assert.equal(records.length, processes * rounds)
      assert.equal(new Set(records.map((r) => r.pid)).size, processes)
      assert.deepEqual(new Set(records.map((r) => r.kind)), new Set(['ioredis', 'node-redis']))
      const stats = handOffs(records)
      const last = records[records.length - 1]
      assert.equal(BigInt(await redis.get(`${prefix}fence`)), last.token, 'every fenced write landed')
      if (mode === 'fair') assert.equal(await redis.zcard(`${prefix}{contended}:queue`), 0, 'nobody left in the queue')
      results[mode] = { ...stats, elapsedMs: Math.round(elapsedMs) }
      t.diagnostic(`${mode}: ${stats.grants} grants, ${stats.toOther} hand-offs to another worker ` +
        `(of ${stats.grants - 1} possible), median gap between sections ${stats.medianGapMs.toFixed(2)} ms, ${Math.round(elapsedMs)} ms in all`)
    } finally {
      await done()
    }
  }
  const fair = results.fair
  // FIFO: a releaser queues behind everyone waiting, so the next grant is another
  // worker's unless nobody else was waiting (the last worker's final rounds), or the woken
  // waiter was not scheduled within its claim window (retryMaxMs, 20 ms here: a loaded
  // machine). Without fair hand-off the releaser, asking again at once, mostly takes the
  // lock straight back.
  assert.ok(fair.toOther >= (fair.grants - 1) * 0.8, `fair: only ${fair.toOther} of ${fair.grants - 1} grants went to another worker`)
  assert.ok(fair.toOther > results.plain.toOther, `fair ${fair.toOther} vs. not fair ${results.plain.toOther} hand-offs to another worker`)
})
