// Adapters: the same Lock over ioredis and node-redis clients, run against a real server:
//   node examples/dist/redis.mjs redis://127.0.0.1:6379/0   (scripts/test runs it)
// Importing this module runs nothing: the functions are exported, the type errors are only
// compiled (typeErrors is never called).
import { pathToFileURL } from 'node:url'
import { Redis } from 'ioredis'
import { createClient } from 'redis'
import { Lock, RedisBackend, backendFromUrl, sqlFencedUpdate } from 'fencepost'

export async function withIoredis (url: string): Promise<bigint> {
  const client = new Redis(url)
  const backend = new RedisBackend(client, { keyPrefix: 'app:' })
  const token = await new Lock(backend, 'ledger', { ttlMs: 10_000, acquireTimeoutMs: 5_000 }).using(async (signal, lease) => {
    await backend.fencedSet('app:{ledger}:data', 'app:{ledger}:fence', lease.token, 'v1')
    signal.throwIfAborted()
    return lease.token
  })
  backend.close()
  client.disconnect() // the client keeps the process alive
  return token
}

export async function withNodeRedis (url: string): Promise<bigint> {
  const client = createClient({ url })
  await client.connect() // node-redis clients must be connected before use
  const backend = new RedisBackend(client, { keyPrefix: 'app:' })
  let token: bigint
  {
    // `await using` is TypeScript 5.2+ (or Node >= 24 JavaScript); in plain JavaScript on
    // Node 20 use lock.using(...) or try/finally with lease.release()
    await using lease = await new Lock(backend, 'ledger', { ttlMs: 10_000, acquireTimeoutMs: 5_000, purpose: 'correctness', acceptFailoverRisk: true }).acquire()
    // node-postgres: UPDATE … WHERE id = $1 AND last_token <= $2 — zero rows means stale.
    const sql: string = sqlFencedUpdate('ledger', 'id', 'last_token', ['balance'])
    console.log(sql, [42, lease.token, 100])
    token = lease.token
  } // released here, while the client is still connected
  backend.close()
  await client.quit()
  return token
}

// Fair hand-off: waiters are served in order, woken the moment the lock is released; each
// parked waiter blocks on a duplicate of the client, never on the client itself.
export async function fairQueue (url: string): Promise<bigint[]> {
  const client = new Redis(url)
  const backend = new RedisBackend(client, { keyPrefix: 'app:', fair: true })
  const lock = new Lock(backend, 'queue', { ttlMs: 10_000, acquireTimeoutMs: 5_000 })
  const tokens = await Promise.all([1, 2, 3].map(() => lock.using((signal, lease) => lease.token)))
  const fair: boolean = backend.fair
  console.log(fair, tokens)
  backend.close() // closes the blocking connections too
  client.disconnect()
  return tokens
}

// From a URL (FENCEPOST_BACKEND_URL with backendFromEnv): the shared JavaScript loads no
// Redis library itself, so a redis:// URL takes the function that makes the client. The
// backend owns that client: close() disconnects it.
export async function fromUrl (url: string): Promise<bigint> {
  const backend = await backendFromUrl(url, { redis: (u) => new Redis(u), keyPrefix: 'app:' })
  const token = await new Lock(backend, 'ledger', { ttlMs: 10_000, acquireTimeoutMs: 5_000 }).using((signal, lease) => lease.token)
  backend.close()
  return token
}

// The types are exact: these are compile errors.
export function typeErrors (backend: RedisBackend): void {
  // @ts-expect-error tokens are bigint, never a lossy number
  backend.fencedSet('d', 'f', 5, 'v')
  // @ts-expect-error durations are milliseconds, named ...Ms
  new Lock(backend, 'x', { ttl: 30 })
  // @ts-expect-error purpose is 'efficiency' | 'correctness'
  new Lock(backend, 'x', { purpose: 'safety' })
  // @ts-expect-error fair is true or false
  new RedisBackend(backend.client, { fair: 'yes' })
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const url = process.argv[2] ?? process.env.FENCEPOST_REDIS_URL ?? 'redis://127.0.0.1:6379/0'
  const a = await withIoredis(url)
  const b = await withNodeRedis(url)
  const fair = await fairQueue(url)
  const c = await fromUrl(url)
  if (!(a < b && b < c) || new Set(fair).size !== 3) throw new Error(`tokens must rise: ${a} ${b} ${c} ${fair}`)
  console.log(`redis example: tokens ${a} (ioredis) < ${b} (node-redis) < ${c} (from a URL); fair ${fair.join(', ')}`)
}
