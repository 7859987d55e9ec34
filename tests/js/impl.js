'use strict'
// The implementation under test, chosen by FENCEPOST_IMPL: `napi` (default: the Node
// addon, bindings-node) or `wasm` (the WebAssembly package). Every test file gets the
// package from here, so the one suite runs unchanged against either.

const path = require('node:path')
const { createRequire } = require('node:module')

const REPO = path.resolve(__dirname, '..', '..')
const IMPL = process.env.FENCEPOST_IMPL || 'napi'

/** Where each implementation's package lives (its `main` is loaded). */
const PACKAGES = {
  napi: path.join(REPO, 'bindings-node'),
  wasm: path.join(REPO, 'bindings-wasm')
}

if (!Object.hasOwn(PACKAGES, IMPL)) {
  throw new Error(`FENCEPOST_IMPL must be one of ${Object.keys(PACKAGES).join(', ')}, got ${JSON.stringify(IMPL)}`)
}

// Both packages load a copy of the shared js/ (dist/js/): refuse to test a stale one.
{
  const fs = require('node:fs')
  const shared = path.join(REPO, 'js')
  const copy = path.join(PACKAGES[IMPL], 'dist', 'js')
  const rebuild = IMPL === 'napi' ? 'node bindings-node/scripts/copy-js.mjs' : 'node bindings-wasm/build.mjs --js-only'
  for (const f of fs.readdirSync(shared).filter((f) => f.endsWith('.js'))) {
    const theirs = path.join(copy, f)
    if (!fs.existsSync(theirs) || fs.readFileSync(theirs, 'utf8') !== fs.readFileSync(path.join(shared, f), 'utf8')) {
      throw new Error(`${path.relative(REPO, theirs)} is missing or differs from js/${f}: run ${rebuild}`)
    }
  }
}

const fencepost = require(PACKAGES[IMPL])
if (fencepost.implementation !== IMPL) {
  throw new Error(`FENCEPOST_IMPL=${IMPL} loaded a package that says it is ${JSON.stringify(fencepost.implementation)}`)
}

/** The suite's own dependencies (ioredis, redis): installed with the Node package. */
const devRequire = createRequire(path.join(REPO, 'bindings-node', 'package.json'))

/** Resolves after `ms` milliseconds. */
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

/** Polls `predicate` every `stepMs` until it holds or `timeoutMs` passes (bounded). */
async function waitUntil (predicate, timeoutMs = 5000, stepMs = 5) {
  const deadline = performance.now() + timeoutMs
  while (performance.now() < deadline) {
    if (await predicate()) return true
    await sleep(stepMs)
  }
  return Boolean(await predicate())
}

module.exports = { fencepost, IMPL, REPO, PACKAGES, devRequire, sleep, waitUntil }
