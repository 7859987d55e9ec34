'use strict'
// fencepost (CommonJS entry): the shared JavaScript API (js/) over the napi-rs addon,
// loaded by the napi-rs generated loader (native.js: a local *.node build, or the
// prebuilt package for this platform).
const { createFencepost } = require('./js/index.js')

module.exports = createFencepost(require('./native.js'), 'napi')
