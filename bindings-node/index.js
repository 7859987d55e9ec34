'use strict'
// fencepost (CommonJS entry): the shared JavaScript API (dist/js/, the repository's js/
// copied by scripts/copy-js.mjs) over the napi-rs addon, loaded by the napi-rs generated
// loader (native.js: a local *.node build, or the prebuilt package for this platform).
const { createFencepost } = require('./dist/js/index.js')

module.exports = createFencepost(require('./native.js'), 'napi')
