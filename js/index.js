'use strict'
// The fencepost JavaScript API over a native addon. `createFencepost(native, implementation)`
// builds it from whichever addon a package loaded: the napi-rs addon (this package) or the
// wasm-bindgen module (the WASM package), which expose the same low-level interface (see
// bindings-js-common/src/lib.rs). Everything under js/ is shared word for word by both
// packages, and so is the type declaration file fencepost.d.ts.

const errors = require('./errors')
const { createLockMachine } = require('./machine')
const { createFence } = require('./fence')
const { createBackends } = require('./backends')
const { createKubernetesLease } = require('./kubernetes')
const { createLock, Lease } = require('./lock')
const observe = require('./observe')
const { createElection, Leadership, STOP_REASONS } = require('./election')

function createFencepost (native, implementation) {
  const LockMachine = createLockMachine(native)
  const fence = createFence(native)
  const backends = createBackends(native, LockMachine, fence)
  const { KubernetesLeaseBackend } = createKubernetesLease(native, backends.Backend)
  const Lock = createLock((b) => b instanceof backends.Backend)
  const Election = createElection(Lock)
  return Object.freeze({
    Lock,
    Lease,
    Election,
    Leadership,
    STOP_REASONS,
    Backend: backends.Backend,
    RedisProtocolBackend: backends.RedisProtocolBackend,
    MemoryBackend: backends.MemoryBackend,
    MemoryServer: backends.MemoryServer,
    RedisBackend: backends.RedisBackend,
    UpstashRedisBackend: backends.UpstashRedisBackend,
    RedlockBackend: backends.RedlockBackend,
    EtcdBackend: backends.EtcdBackend,
    KubernetesLeaseBackend,
    backendFromUrl: backends.backendFromUrl,
    backendFromEnv: backends.backendFromEnv,
    standardMetadata: backends.standardMetadata,
    Fence: fence.Fence,
    sqlFencedUpdate: fence.sqlFencedUpdate,
    redisFencedSet: fence.redisFencedSet,
    readRedisFencedSet: fence.readRedisFencedSet,
    redisScripts: fence.redisScripts,
    etcdHolderKey: fence.etcdHolderKey,
    etcdFencedTxn: fence.etcdFencedTxn,
    readEtcdFencedTxn: fence.readEtcdFencedTxn,
    LockMachine,
    diagnosticsChannel: observe.diagnosticsChannel,
    OBSERVATION_EVENTS: observe.EVENTS,
    OBSERVATION_WARNINGS: observe.WARNINGS,
    FencepostError: errors.FencepostError,
    ConfigError: errors.ConfigError,
    ClockError: errors.ClockError,
    LockLostError: errors.LockLostError,
    AcquireTimeoutError: errors.AcquireTimeoutError,
    StaleTokenError: errors.StaleTokenError,
    ProtocolError: errors.ProtocolError,
    BackendError: errors.BackendError,
    coreVersion: native.coreVersion(),
    implementation
  })
}

module.exports = { createFencepost }
