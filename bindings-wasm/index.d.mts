// Types of the `fencepost-wasm` package (ES module entry, Node): the same interface.
export * from './dist/fencepost.js'
import * as fencepost from './dist/fencepost.js'
export default fencepost
