// fencepost-wasm (web entry: browsers, Deno, bundlers, Service/Web Workers). The module is
// fetched and instantiated by `await init()` (or `initSync(module)`); until then the named
// exports below are `undefined`. They are live bindings: after init, `import { Lock }` sees
// the class. In workerd / Cloudflare Workers the package's "workerd" entry (workerd.mjs)
// does this at import time from a statically imported .wasm module.
//
//   import { init, Lock, EtcdBackend } from 'fencepost-wasm'
//   await init()                    // fetches dist/web/fencepost_wasm_bg.wasm next to the glue
//   await init(wasmUrlOrResponse)   // or from where you serve it (a URL, Response, bytes, Module)
//
// init() and initSync() resolve to the same frozen API object the Node entries export
// (also this module's default export, once initialised); calling them again is a no-op.
import initWasm, { initSync as initWasmSync } from './dist/web/fencepost_wasm.js'
import * as native from './dist/web/fencepost_wasm.js'
import api from './dist/web/fencepost_api.mjs'

let fencepost
export let Lock, Lease, Election, Leadership, STOP_REASONS, Backend, RedisProtocolBackend, MemoryBackend, MemoryServer, RedisBackend,
  UpstashRedisBackend, RedlockBackend, EtcdBackend, KubernetesLeaseBackend, backendFromUrl, backendFromEnv, standardMetadata, Fence, sqlFencedUpdate, redisFencedSet, readRedisFencedSet,
  redisScripts, etcdHolderKey, etcdFencedTxn, readEtcdFencedTxn, LockMachine, diagnosticsChannel, OBSERVATION_EVENTS, OBSERVATION_WARNINGS, FencepostError, ConfigError, ClockError, LockLostError, AcquireTimeoutError,
  StaleTokenError, ProtocolError, BackendError, coreVersion, implementation
export { fencepost as default }

function ready () {
  if (fencepost === undefined) {
    const f = api.createFencepost(native, 'wasm');
    ({
      Lock, Lease, Election, Leadership, STOP_REASONS, Backend, RedisProtocolBackend, MemoryBackend, MemoryServer, RedisBackend,
      UpstashRedisBackend, RedlockBackend, EtcdBackend, KubernetesLeaseBackend, backendFromUrl, backendFromEnv, standardMetadata, Fence, sqlFencedUpdate, redisFencedSet, readRedisFencedSet,
      redisScripts, etcdHolderKey, etcdFencedTxn, readEtcdFencedTxn, LockMachine, diagnosticsChannel, OBSERVATION_EVENTS, OBSERVATION_WARNINGS, FencepostError, ConfigError, ClockError, LockLostError, AcquireTimeoutError,
      StaleTokenError, ProtocolError, BackendError, coreVersion, implementation
    } = f)
    fencepost = f
  }
  return fencepost
}

/** Fetches (or takes) the WebAssembly module and instantiates it; resolves to the API. */
export async function init (input) {
  if (fencepost !== undefined) return fencepost
  await initWasm(input === undefined ? undefined : { module_or_path: input })
  return ready()
}

/** Instantiates a compiled `WebAssembly.Module` (or the module's bytes) synchronously. */
export function initSync (module) {
  if (fencepost !== undefined) return fencepost
  initWasmSync({ module })
  return ready()
}
