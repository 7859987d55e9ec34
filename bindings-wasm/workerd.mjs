// fencepost-wasm (workerd / Cloudflare Workers entry): the web entry, instantiated at import
// time from the statically imported module (workerd and wrangler import a .wasm file as a
// compiled WebAssembly.Module; fetching it by URL is not possible there). Import the
// named exports and use them: no init() needed (it is exported, and a no-op, for code
// shared with the browser).
//
// Create backends and locks inside a handler, one backend per request: owner ids come from
// Web Crypto, which workers provide only while handling a request, and a worker's timers
// and I/O belong to the request that started them (a renewal timer set by one request
// cannot fire in another). See README "Edge workers".
import wasm from './dist/web/fencepost_wasm_bg.wasm'
import { initSync } from './web.mjs'

initSync(wasm)

export * from './web.mjs'
export { default } from './web.mjs'
