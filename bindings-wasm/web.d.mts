// Types of the `fencepost-wasm` web and workerd entries: the same interface as Node's
// (fencepost.d.ts), plus init() / initSync(), which the web entry needs before first use.
export * from './dist/fencepost.js'
import * as fencepost from './dist/fencepost.js'
export default fencepost

/** Where the WebAssembly module comes from: a URL to fetch, a fetch Response, its bytes,
 * or a compiled module. Default: `fencepost_wasm_bg.wasm` next to the glue module. */
export type InitInput = RequestInfo | URL | Response | BufferSource | WebAssembly.Module

/** Instantiates the module (once); resolves to the API object. */
export declare function init (input?: InitInput | Promise<InitInput>): Promise<typeof fencepost>

/** Instantiates a compiled module (or its bytes) synchronously (once); returns the API. */
export declare function initSync (module: BufferSource | WebAssembly.Module): typeof fencepost
