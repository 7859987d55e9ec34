'use strict'
// A short smoke test of fencepost's Node adapters on each installed client version.
// Run by scripts/test-clients against the real Redis at $FENCEPOST_REDIS_URL:
//
//   node tests/clients/smoke_node.js NODE_MODULES_DIR ALIAS=EXPECTED_MAJOR …
//
// Each alias (an npm alias such as `ioredis6` for `ioredis@6`, installed under
// NODE_MODULES_DIR) is loaded, its version checked, and a client of it acquires, renews
// past the TTL, writes through the fence (a stale token is refused), releases, and hands a
// contended fair lock to a waiter parked in BLPOP on a duplicate of the client.

const assert = require('node:assert/strict')
const crypto = require('node:crypto')
const fs = require('node:fs')
const path = require('node:path')

const REPO = path.resolve(__dirname, '..', '..')
const { Lock, RedisBackend } = require(path.join(REPO, 'bindings-node'))

const URL = process.env.FENCEPOST_REDIS_URL
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

/** A connected client of the package at `dir` (ioredis or node-redis) and its closer. */
async function connect (dir) {
  const pkg = require(dir)
  if (typeof pkg.Redis !== 'function') { // node-redis: createClient, no Redis class (ioredis 6 has both)
    const client = pkg.createClient({ url: URL })
    client.on('error', () => {})
    await client.connect() // node-redis does not connect by itself
    return { client, get: (k) => client.get(k), close: () => client.quit() }
  }
  const client = new pkg.Redis(URL, { maxRetriesPerRequest: 2 })
  return { client, get: (k) => client.get(k), close: () => client.quit() }
}

async function smoke (dir) {
  const { client, get, close } = await connect(dir)
  const prefix = `fpclients:${crypto.randomBytes(4).toString('hex')}:`
  const backend = new RedisBackend(client, { keyPrefix: prefix })
  const fair = new RedisBackend(client, { keyPrefix: `${prefix}fair:`, fair: true })
  try {
    await new Lock(backend, 'smoke', { ttlMs: 600, acquireTimeoutMs: 5_000 }).using(async (signal, lease) => {
      assert.ok(lease.token >= 1n)
      await sleep(800) // past the 600 ms TTL: only renewals keep it
      lease.check()
      assert.notEqual(await get(`${prefix}{smoke}:lock`), null, 'renewed: the key is still there')
      await backend.fencedSet(`${prefix}data`, `${prefix}fence`, lease.token, 'node')
      // a newer holder's write (token + 1) makes this lease's token stale
      await backend.fencedSet(`${prefix}other`, `${prefix}fence`, lease.token + 1n, 'newer')
      await assert.rejects(backend.fencedSet(`${prefix}data`, `${prefix}fence`, lease.token, 'stale'), { code: 'ERR_STALE_TOKEN' })
    })
    assert.equal(await get(`${prefix}{smoke}:lock`), null, 'released')
    assert.equal(await get(`${prefix}data`), 'node', 'the fenced write landed')

    const options = { ttlMs: 5_000, acquireTimeoutMs: 5_000, retryMaxMs: 1_000 }
    const first = await new Lock(fair, 'fair', options).acquire()
    const waiting = new Lock(fair, 'fair', options).acquire()
    await sleep(200) // the waiter queues and parks in BLPOP
    const released = performance.now()
    await first.release()
    const second = await waiting
    assert.ok(performance.now() - released < 500, 'handed off at once, not after the 1 s park')
    assert.ok(second.token > first.token, 'tokens rise')
    await second.release()

    // WAIT on the script's connection: a lone server has no replica, so minReplicas 1 is
    // never confirmed, the acquisition times out and its grant is released
    await assert.rejects(
      new Lock(backend, 'wait', { ttlMs: 5_000, minReplicas: 1, replicaTimeoutMs: 10, acquireTimeoutMs: 1_000 }).acquire(),
      (e) => e.code === 'ERR_ACQUIRE_TIMEOUT' && /WAIT confirmed the grant on 0 of 1/.test(e.message)
    )
    for (let i = 0; i < 100 && await get(`${prefix}{wait}:lock`) !== null; i++) await sleep(10)
    assert.equal(await get(`${prefix}{wait}:lock`), null, 'the unconfirmed grant was released')
  } finally {
    backend.close()
    fair.close()
    await close()
  }
}

async function main () {
  assert.ok(URL, 'FENCEPOST_REDIS_URL is not set')
  const [modules, ...specs] = process.argv.slice(2)
  for (const spec of specs) {
    const [alias, major] = spec.split('=')
    const dir = path.resolve(modules, alias)
    const { name, version } = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8'))
    assert.equal(version.split('.')[0], major, `${alias}: expected ${name} ${major}.x, got ${version}`)
    const started = performance.now()
    await smoke(dir)
    console.log(`${name} ${version}: acquire, renew, fenced write, release, fair hand-off, WAIT ok in ${((performance.now() - started) / 1000).toFixed(1)} s`)
  }
}

main().catch((error) => { console.error(error); process.exit(1) }) // open clients must not keep a failed run alive
