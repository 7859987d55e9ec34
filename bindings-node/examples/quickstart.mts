// The Node quickstart as a typed, runnable example (ES module, `await using`).
// Type-checked by `tsc -p bindings-node/examples` (strict); scripts/test also runs it.
import { Fence, Lock, LockLostError, MemoryBackend, StaleTokenError } from 'fencepost'

const backend = new MemoryBackend() // or new RedisBackend(new Redis()) with ioredis / node-redis
const fence = new Fence() // the resource side: remembers the highest token per resource
const lock = new Lock(backend, 'nightly-report', { ttlMs: 30_000, acquireTimeoutMs: 5_000 })

{
  await using lease = await lock.acquire() // renewed every ttl/3 on this event loop
  const token: bigint = lease.token
  fence.check('report', token) // the write carries the token; a stale one throws
  await writeReport(lease.signal) // aborted (reason: LockLostError) if the lease is lost
  console.log(`wrote the report with fencing token ${token}; valid ${lease.validForMs().toFixed(0)} ms more`)
} // released here

// The same with a callback: release in `finally`, LockLostError if the lease was lost.
const pages: number = await lock.using(async (signal, lease) => {
  fence.check('report', lease.token)
  await writeReport(signal)
  return 12
})

// A holder paused past its lease is refused by the fence.
try {
  fence.check('report', 1n)
} catch (error) {
  if (error instanceof StaleTokenError) console.log(`stale write refused: ${error.token} < ${error.highest}`)
  else throw error
}

async function writeReport (signal: AbortSignal): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(resolve, 5)
    signal.addEventListener('abort', () => { clearTimeout(timer); reject(signal.reason as LockLostError) }, { once: true })
  })
}

backend.close()
console.log(`done: ${pages} pages`)
