'use strict'
// tests/js/impl.js for the browser: the package under test is the web build of
// fencepost-wasm, initialised by the page (globalThis.__fencepost); the repository is the
// virtual tree of node-fs.js.
module.exports = { fencepost: globalThis.__fencepost, IMPL: 'wasm', REPO: '/repo' }
