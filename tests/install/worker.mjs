// The worker scripts/test-install bundles with esbuild from the installed fencepost-wasm
// (export condition `workerd`, the .wasm copied beside the bundle) and serves in workerd:
// POST /memory takes a lock on the in-memory backend; every other request goes to the
// edge quickstart, examples/workerd/worker.mjs (copied beside this file as example.mjs).
import { Lock, MemoryBackend } from 'fencepost-wasm'
import example from './example.mjs'

export default {
  async fetch (request, env, ctx) {
    if (new URL(request.url).pathname !== '/memory') return example.fetch(request, env, ctx)
    const backend = new MemoryBackend() // in a handler: owner ids come from Web Crypto
    try {
      const token = await new Lock(backend, 'nightly-report', { ttlMs: 10_000, acquireTimeoutMs: 5_000 })
        .using(async (signal, lease) => {
          await backend.fencedSet('report:data', 'report:fence', lease.token, 'draft')
          return lease.token
        })
      return new Response(`memory: written with fencing token ${token}\n`)
    } finally {
      backend.close()
    }
  }
}
