// The page: initialises the web build (fetching its .wasm from this server, as a site
// would), then runs tests/js/scenarios.test.js — the Node runner itself, bundled with
// browser stand-ins for node:test, node:assert, node:fs, node:path and ./impl — over the
// vectors fetched from /vectors.json. The results land in window.__results for the test.
// With `?init-only` it stops after init (window.__fencepost set): the etcd test drives the
// page itself.
import { init } from '/pkg/web.mjs'

const out = document.getElementById('out')

async function main () {
  const t0 = performance.now()
  const fencepost = await init()
  const initMs = performance.now() - t0
  globalThis.__fencepost = fencepost
  if (new URLSearchParams(location.search).has('init-only')) {
    out.textContent = 'initialised'
    return { implementation: fencepost.implementation, initMs, results: [] }
  }
  globalThis.__fencepostFiles = await (await fetch('/vectors.json')).json()
  globalThis.process ??= { env: {} }
  globalThis.Buffer ??= { from: (text) => new TextEncoder().encode(text) }
  await import('/runner.mjs')
  const results = await globalThis.__fencepostRunTests()
  const failed = results.filter((r) => r.status === 'fail').length
  out.textContent = `${results.length} tests, ${failed} failed`
  return { implementation: fencepost.implementation, coreVersion: fencepost.coreVersion, initMs, results }
}

try {
  window.__results = await main()
} catch (error) {
  window.__results = { error: String(error && error.stack ? `${error.message}\n${error.stack}` : error) }
  out.textContent = window.__results.error
}
