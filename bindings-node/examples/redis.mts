// Adapters: the same Lock over ioredis and node-redis clients (type-checked, not run here;
// tests/js/redis.test.js runs them against a real server).
import { Redis } from 'ioredis'
import { createClient } from 'redis'
import { Lock, RedisBackend, sqlFencedUpdate } from 'fencepost'

export async function withIoredis (url: string): Promise<bigint> {
  const client = new Redis(url)
  const backend = new RedisBackend(client, { keyPrefix: 'app:' })
  const token = await new Lock(backend, 'ledger', { ttlMs: 10_000 }).using(async (signal, lease) => {
    await backend.fencedSet('app:{ledger}:data', 'app:{ledger}:fence', lease.token, 'v1')
    signal.throwIfAborted()
    return lease.token
  })
  client.disconnect()
  return token
}

export async function withNodeRedis (url: string): Promise<void> {
  const client = createClient({ url })
  await client.connect()
  const backend = new RedisBackend(client)
  await using lease = await new Lock(backend, 'ledger', { ttlMs: 10_000, purpose: 'correctness', acceptFailoverRisk: true }).acquire()
  // node-postgres: UPDATE … WHERE id = $1 AND last_token <= $2 — zero rows means stale.
  const sql: string = sqlFencedUpdate('ledger', 'id', 'last_token', ['balance'])
  console.log(sql, [42, lease.token, 100])
  await client.quit()
}

// Fair hand-off: waiters are served in order, woken the moment the lock is released; each
// parked waiter blocks on a duplicate of the client, never on the client itself.
export async function fairQueue (url: string): Promise<bigint[]> {
  const client = new Redis(url)
  const backend = new RedisBackend(client, { keyPrefix: 'app:', fair: true })
  const lock = new Lock(backend, 'queue', { ttlMs: 10_000 })
  const tokens = await Promise.all([1, 2, 3].map(() => lock.using((signal, lease) => lease.token)))
  const fair: boolean = backend.fair
  console.log(fair, tokens)
  backend.close() // closes the blocking connections too
  client.disconnect()
  return tokens
}

// The types are exact: these are compile errors.
declare const backend: RedisBackend
// @ts-expect-error tokens are bigint, never a lossy number
backend.fencedSet('d', 'f', 5, 'v')
// @ts-expect-error durations are milliseconds, named ...Ms
new Lock(backend, 'x', { ttl: 30 })
// @ts-expect-error purpose is 'efficiency' | 'correctness'
new Lock(backend, 'x', { purpose: 'safety' })
// @ts-expect-error fair is true or false
new RedisBackend(backend.client, { fair: 'yes' })
