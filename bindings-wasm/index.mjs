// fencepost-wasm (ES module entry, Node): the same objects as the CommonJS entry.
import fencepost from './index.js'

export const {
  Lock,
  Lease,
  Backend,
  RedisProtocolBackend,
  MemoryBackend,
  MemoryServer,
  RedisBackend,
  UpstashRedisBackend,
  RedlockBackend,
  EtcdBackend,
  backendFromUrl,
  backendFromEnv,
  Fence,
  sqlFencedUpdate,
  redisFencedSet,
  readRedisFencedSet,
  redisScripts,
  etcdHolderKey,
  etcdFencedTxn,
  readEtcdFencedTxn,
  LockMachine,
  FencepostError,
  ConfigError,
  ClockError,
  LockLostError,
  AcquireTimeoutError,
  StaleTokenError,
  ProtocolError,
  BackendError,
  coreVersion,
  implementation
} = fencepost
export default fencepost
