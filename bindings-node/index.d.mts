// Types of the `fencepost` package (ES module entry): the same interface as index.d.ts.
export * from './fencepost.js'
import * as fencepost from './fencepost.js'
export default fencepost
