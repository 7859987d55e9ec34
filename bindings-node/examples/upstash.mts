// Redis over HTTP (the Upstash REST protocol) with nothing but fetch: the same Lock from
// Node, a browser or an edge worker (type-checked, not run here; tests/js/upstash.test.js
// and tests/wasm/workerd.test.js run it against a real Redis through a local REST proxy).
import { Lock, UpstashRedisBackend, type FetchLike } from 'fencepost'

export async function nightlyReport (url: string, token: string): Promise<bigint> {
  const backend = new UpstashRedisBackend({ url, token, keyPrefix: 'app:' })
  try {
    return await new Lock(backend, 'nightly-report', { ttlMs: 10_000 }).using(async (signal, lease) => {
      await backend.fencedSet('app:{report}:data', 'app:{report}:fence', lease.token, 'draft')
      signal.throwIfAborted()
      return lease.token
    })
  } finally {
    backend.close() // in a worker: before the response, the request owns its timers
  }
}

// Any fetch with the standard shape works: a logging wrapper, a runtime's own fetch.
export function loggingBackend (url: string): UpstashRedisBackend {
  const fetch: FetchLike = async (input, init) => {
    console.log('POST', input, init.body)
    return globalThis.fetch(input, init)
  }
  return new UpstashRedisBackend({ url, fetch, fair: true })
}
