'use strict'
// fencepost-wasm (CommonJS entry, Node): the shared JavaScript API (dist/js/, the repository's js/
// word for word) over the WebAssembly module built for Node (dist/node/, wasm-bindgen
// --target nodejs: compiled and instantiated synchronously on first require). The same
// objects as the napi package's entry, with `implementation: 'wasm'`.
const { createFencepost } = require('./dist/js/index.js')

module.exports = createFencepost(require('./dist/node/fencepost_wasm.js'), 'wasm')
