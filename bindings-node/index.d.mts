// Types of the `fencepost` package (ES module entry): the same interface as index.d.ts.
export * from './fencepost.js'
export * from './postgres.js'
export * from './zookeeper.js'
export * from './kubernetes.js'
import * as fencepost from './fencepost.js'
import * as postgres from './postgres.js'
import * as zookeeper from './zookeeper.js'
import * as kubernetes from './kubernetes.js'
declare const all: typeof fencepost & typeof postgres & typeof zookeeper & typeof kubernetes
export default all
