'use strict'
// Locks on a real Redis Cluster (three masters on 127.0.0.1, started by this file with
// scripts/services/redis-cluster.sh) through ioredis' Cluster client: plain and fair,
// fenced writes, 8 contending processes with a fenced log. Mirrors
// tests/python/test_redis_cluster.py; runs where the Redis tests run ($FENCEPOST_REDIS_URL).

const { test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const { execFileSync, fork } = require('node:child_process')
const path = require('node:path')
const crypto = require('node:crypto')

const { fencepost, REPO, devRequire, sleep, waitUntil } = require('./impl')

const { Lock, RedisBackend, ConfigError, StaleTokenError } = fencepost
const IORedis = devRequire('ioredis')

const skip = process.env.FENCEPOST_REDIS_URL ? false : 'FENCEPOST_REDIS_URL is not set (scripts/test starts Redis; this file starts its own cluster)'
const SCRIPT = path.join(REPO, 'scripts', 'services', 'redis-cluster.sh')
let nodes = []

before(() => {
  if (skip) return
  nodes = execFileSync(SCRIPT, ['start'], { encoding: 'utf8', timeout: 120_000 }).trim().split(',')
})
after(() => { if (!skip) execFileSync(SCRIPT, ['stop'], { timeout: 60_000 }) })

function cluster () {
  const [host, port] = nodes[0].split(':')
  return new IORedis.Cluster([{ host, port: Number(port) }])
}

const prefix = () => `fpc:${crypto.randomBytes(4).toString('hex')}:`

for (const fair of [false, true]) {
  test(`ioredis Cluster${fair ? ', fair' : ''}: acquire, renew past the TTL, release and fence on every master`, { skip }, async () => {
    const client = cluster()
    const p = prefix()
    const backend = new RedisBackend(client, { keyPrefix: p, fair })
    const names = ['n0', 'n1', 'n2', 'n3', 'n4', 'n5']
    for (const name of names) {
      const token = await new Lock(backend, name, { ttlMs: 1_000 }).using(async (signal, lease) => {
        if (name === names[0]) await sleep(1_300) // longer than the TTL: renewals keep it
        lease.check()
        assert.equal(await client.get(backend.lockKey(name)), lease.ownerId)
        await backend.fencedSet(`${p}{${name}}:data`, `${p}{${name}}:fence`, lease.token, 'v', { ownerId: lease.ownerId })
        return lease.token
      })
      assert.equal(token, 1n)
      assert.equal(await client.exists(backend.lockKey(name)), 0)
    }
    await backend.fencedSet(`${p}{x}:data`, `${p}{x}:fence`, 7n, 'seven')
    await assert.rejects(backend.fencedSet(`${p}{x}:data`, `${p}{x}:fence`, 6n, 'six'), StaleTokenError)
    assert.throws(() => new Lock(backend, 'w', { minReplicas: 1 }), (e) => e instanceof ConfigError && /cluster client routes WAIT/.test(e.message))
    backend.close()
    await client.quit()
  })
}

test('ioredis Cluster: leases renewing together renew in one call per hash slot, and stay held', { skip }, async () => {
  const client = cluster()
  const p = prefix()
  const names = new Map()
  for (const [name, { sha1, source }] of Object.entries(fencepost.redisScripts())) {
    names.set(sha1, name)
    names.set(source, name)
  }
  const calls = []
  for (const method of ['eval', 'evalsha']) {
    const own = client[method]
    client[method] = function (script, numkeys, ...rest) {
      calls.push({ script: names.get(script), keys: rest.slice(0, numkeys) })
      return own.call(this, script, numkeys, ...rest)
    }
  }
  const backend = new RedisBackend(client, { keyPrefix: p })
  // 'job:244' and 'job:1000' share a hash slot (the slot is the hash tag's: any prefix)
  const lockNames = ['job:244', 'job:1000', 'n0', 'n1', 'n2', 'n3', 'n4', 'n5']
  const slot = (key) => client.cluster('KEYSLOT', key)
  assert.equal(await slot(backend.lockKey('job:244')), await slot(backend.lockKey('job:1000')))
  const leases = await Promise.all(lockNames.map((name) => new Lock(backend, name, { ttlMs: 600 }).acquire()))
  await sleep(1_200)
  for (const lease of leases) {
    lease.check()
    assert.equal(await client.get(backend.lockKey(lease.name)), lease.ownerId)
  }
  const batches = calls.filter((c) => c.script === 'renew_many')
  assert.ok(batches.length > 0, JSON.stringify(calls))
  for (const { keys } of batches) assert.equal(new Set(await Promise.all(keys.map(slot))).size, 1, keys.join(' '))
  assert.ok(batches.some(({ keys }) => keys.join(' ') === `${backend.lockKey('job:244')} ${backend.lockKey('job:1000')}`))
  await Promise.all(leases.map((l) => l.release()))
  backend.close()
  await client.quit()
})

test('ioredis Cluster, fair: a queued waiter is handed the lock by the release', { skip }, async () => {
  const client = cluster()
  const p = prefix()
  const backend = new RedisBackend(client, { keyPrefix: p, fair: true })
  const holder = await new Lock(backend, 'ff', { ttlMs: 5_000 }).acquire()
  const waiting = new Lock(backend, 'ff', { ttlMs: 5_000 }).acquire()
  assert.ok(await waitUntil(async () => (await client.zcard(`${p}{ff}:queue`)) === 1, 3_000))
  await holder.release()
  const lease = await waiting
  assert.equal(lease.token, holder.token + 1n)
  await lease.release()
  backend.close()
  await client.quit()
})

for (const fair of [false, true]) {
  test(`8 processes on ioredis Cluster${fair ? ', fair' : ''}: sections never overlap, tokens rise, the fenced log is in token order`, { skip, timeout: 60_000 }, async () => {
    const client = cluster()
    const p = prefix()
    const processes = 8
    const rounds = 6
    const children = Array.from({ length: processes }, () => fork(
      path.join(__dirname, 'contender.js'),
      [`redis://${nodes[0]}`, p, 'contended', String(rounds), 'ioredis-cluster', fair ? 'fair' : 'plain'],
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
        new Promise((resolve, reject) => { timer = setTimeout(() => reject(new Error('contenders still running after 50 s')), 50_000) })
      ]).finally(() => clearTimeout(timer))
      assert.deepEqual(codes, Array(processes).fill(0))
    } finally {
      for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
    }
    const records = (await client.lrange(`${p}log`, 0, -1)).map((r) => {
      const [start, end, token] = JSON.parse(r)
      return { start: BigInt(start), end: BigInt(end), token: BigInt(token) }
    }).sort((a, b) => (a.start < b.start ? -1 : a.start > b.start ? 1 : 0))
    assert.equal(records.length, processes * rounds)
    for (let i = 1; i < records.length; i++) {
      assert.ok(records[i - 1].end < records[i].start, 'critical sections overlap')
      assert.ok(records[i - 1].token < records[i].token, 'tokens do not rise in order of start')
    }
    assert.equal(BigInt(await client.get(`${p}{fenced}fence`)), records[records.length - 1].token)
    await client.quit()
  })
}
