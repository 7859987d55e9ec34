// Redlock: one lock over a majority of independent Redis masters (type-checked, not run
// here; tests/js/redlock.test.js runs it against five real masters on loopback). An
// efficiency lock: the token is no fencing token, so the work must be safe to repeat.
import { Lock, RedlockBackend, ConfigError } from 'fencepost'
import { Redis } from 'ioredis'

export async function nightlyReport (urls: string[]): Promise<void> {
  const clients = urls.map((url) => new Redis(url))      // 3 or 5 independent masters
  const backend = new RedlockBackend(clients, { keyPrefix: 'app:' })
  try {
    await new Lock(backend, 'nightly-report', { ttlMs: 10_000, acquireTimeoutMs: 5_000 })
      .using(async (signal, lease) => {
        // granted by a majority; lost at once (signal aborted) when a majority refuses a renewal
        console.log(`held until ${lease.validUntilMs} ms, majority counter ${lease.token}`)
        signal.throwIfAborted()
      })
  } finally {
    await backend.close()                                 // waits for the releases still out
    await Promise.all(clients.map((c) => c.quit()))
  }
}

// The same lock from an edge worker or a browser: each master behind a REST endpoint.
export function restBackend (endpoints: Array<{ url: string, token: string }>): RedlockBackend {
  return new RedlockBackend(endpoints)
}

// A correctness lock is refused whatever acceptFailoverRisk says: use etcd, ZooKeeper or
// PostgreSQL lease rows for that.
export function refused (backend: RedlockBackend): string {
  try {
    new Lock(backend, 'ledger', { purpose: 'correctness', acceptFailoverRisk: true })
    return 'accepted'
  } catch (error) {
    return error instanceof ConfigError ? `${error.code} ${error.option}` : 'other'
  }
}
