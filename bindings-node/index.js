'use strict'
// fencepost (CommonJS entry): the shared JavaScript API (dist/js/, the repository's js/
// copied by scripts/copy-js.mjs) over the napi-rs addon, loaded by the napi-rs generated
// loader (native.js: a local *.node build, or the prebuilt package for this platform),
// plus what only Node can reach: PostgreSQL (postgres.js), ZooKeeper (zookeeper.js) and
// Kubernetes configuration from files and the pod's service account (kubernetes.js).
const { createFencepost } = require('./dist/js/index.js')
const { createPostgres } = require('./postgres.js')
const { createZooKeeper } = require('./zookeeper.js')
const { createKubernetes } = require('./kubernetes.js')

const native = require('./native.js')
const fencepost = createFencepost(native, 'napi')

module.exports = Object.freeze({ ...fencepost, ...createPostgres(native, fencepost), ...createZooKeeper(native, fencepost), ...createKubernetes(fencepost) })
