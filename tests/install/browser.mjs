// Bundled by scripts/test-install with esbuild for the browser (the installed
// fencepost-wasm's `browser` export: web.mjs, which instantiates the module in init()) and
// run in Node, which has Web Crypto and WebAssembly as a browser does; the module's bytes
// are handed to init() as a page would hand it a URL or a Response.
import { init, Lock, MemoryBackend } from 'fencepost-wasm'

export async function run (wasmBytes) {
  const { implementation } = await init(wasmBytes)
  const backend = new MemoryBackend()
  try {
    const token = await new Lock(backend, 'nightly-report', { ttlMs: 10_000, acquireTimeoutMs: 5_000 })
      .using(async (signal, lease) => {
        await backend.fencedSet('report:data', 'report:fence', lease.token, 'draft')
        return lease.token
      })
    return `${implementation}: written with fencing token ${token}`
  } finally {
    backend.close()
  }
}
