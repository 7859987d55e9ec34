// Types of the `fencepost-wasm` package (CommonJS entry, Node). The interface itself is
// fencepost.d.ts of the Node package, copied word for word into dist/ by the build.
export * from './dist/fencepost'
