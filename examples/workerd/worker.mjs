// A worker that takes a fencepost lock from workerd (Cloudflare's Workers runtime) with
// nothing but fetch: `POST /` on Redis through an Upstash-protocol REST endpoint, `POST
// /etcd` on etcd's v3 JSON gateway (a correctness lock). Run it locally with
// scripts/workerd-example (config.capnp beside this file; README "Edge workers").
import { Lock, UpstashRedisBackend, EtcdBackend } from 'fencepost-wasm'

/** Stands in for the request's own awaited I/O (the clock moves, renewals can run). */
const fetchTheNumbers = (signal) => new Promise((resolve) => setTimeout(resolve, 50))

async function redisReport (env) {
  // One backend per request, created in the handler: owner ids come from Web Crypto,
  // which workers provide only inside handlers, and a request's timers and I/O belong to it.
  const backend = new UpstashRedisBackend({ url: env.UPSTASH_REDIS_REST_URL, token: env.UPSTASH_REDIS_REST_TOKEN })
  try {
    const token = await new Lock(backend, 'nightly-report', { ttlMs: 10_000, clockMarginMs: 50, acquireTimeoutMs: 5_000 })
      .using(async (signal, lease) => {
        await fetchTheNumbers(signal)     // awaited I/O: the clock moves, renewals run
        lease.check()                     // still ours? (throws LockLostError if not)
        await backend.fencedSet('report:data', 'report:fence', lease.token, 'draft')
        return lease.token
      })
    return new Response(`written with fencing token ${token}\n`)
  } finally {
    backend.close() // before the response: nothing of this request outlives it
  }
}

async function etcdBooks (env) {
  const backend = new EtcdBackend({ endpoints: env.ETCD_ENDPOINTS.split(','), requestTimeoutMs: 1_000 })
  try {
    const revision = await new Lock(backend, 'books-2026-11', { ttlMs: 5_000, purpose: 'correctness', clockMarginMs: 50, acquireTimeoutMs: 5_000 })
      .using((signal, lease) =>         // waiters park on a streaming /v3/watch of their predecessor
        backend.fencedTxn(lease, { puts: [['books/2026-11', 'closed']] })) // StaleTokenError once not the holder
    return new Response(`closed at etcd revision ${revision}\n`)  // revisions, tokens, lease ids: bigint
  } finally {
    backend.close()
  }
}

export default {
  async fetch (request, env) {
    const { pathname } = new URL(request.url)
    try {
      if (pathname === '/') return await redisReport(env)
      if (pathname === '/etcd') return await etcdBooks(env)
      return new Response('routes: / (Redis over REST), /etcd (etcd gateway)\n', { status: 404 })
    } catch (error) {
      return new Response(`${error.code ?? error.name}: ${error.message}\n`, { status: 500 })
    }
  }
}
