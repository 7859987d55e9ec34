// etcd v3 through its JSON gateway with nothing but fetch: a correctness lock whose writes
// are fenced inside etcd (type-checked, not run here; tests/js/etcd.test.js and
// tests/wasm/workerd.test.js run the same against a real etcd on 127.0.0.1).
import { Lock, EtcdBackend, StaleTokenError, type StreamingFetchLike } from 'fencepost'

export async function closeTheBooks (endpoints: string[]): Promise<bigint> {
  const backend = new EtcdBackend({ endpoints, keyPrefix: 'app/locks/' })
  try {
    // etcd's tokens never go backwards: 'correctness' needs no opt-in. ttlMs is rounded
    // up to whole seconds for the etcd lease (2 500 ms → a 3 s lease).
    const lock = new Lock(backend, 'books-2026-11', { ttlMs: 2_500, purpose: 'correctness' })
    return await lock.using(async (signal, lease) => {
      const leaseId: bigint = backend.leaseId(lease.ownerId) // never a lossy number
      console.log(`holding ${backend.holderKey(lease.name, lease.ownerId)} (lease ${leaseId})`)
      signal.throwIfAborted()
      // written only while this lease still holds the lock; resolves to etcd's revision
      return await backend.fencedTxn(lease, {
        puts: [['app/books/2026-11', 'closed'], [`app/books/log/${lease.token}`, 'closed']],
        deletes: ['app/books/draft']
      })
    })
  } catch (error) {
    if (error instanceof StaleTokenError) console.log(`a newer holder (token ${error.highest}) took over`)
    throw error
  } finally {
    backend.close()
  }
}

// Headers (an auth token, a proxy's) go through a fetch of your own; keep the body stream.
export function authenticated (endpoint: string, authorization: string): EtcdBackend {
  const fetch: StreamingFetchLike = (url, init) =>
    globalThis.fetch(url, { ...init, headers: { ...init.headers, authorization } })
  return new EtcdBackend({ endpoints: endpoint, fetch })
}
