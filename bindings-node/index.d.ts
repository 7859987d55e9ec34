// Types of the `fencepost` package (CommonJS entry). The interface itself is fencepost.d.ts,
// shared word for word with the WebAssembly package, plus PostgreSQL, ZooKeeper and
// Kubernetes configuration files (postgres.d.ts, zookeeper.d.ts, kubernetes.d.ts: Node only).
export * from './fencepost'
export * from './postgres'
export * from './zookeeper'
export * from './kubernetes'
