'use strict'
// node:test for the browser: test() registers, the page runs them in order
// (globalThis.__fencepostRunTests()).
// Only what tests/js/scenarios.test.js uses: test(name, [options], fn), options.skip.
const tests = []

function test (name, options, fn) {
  if (typeof options === 'function') [options, fn] = [{}, options]
  tests.push({ name, skip: options && options.skip ? String(options.skip) : null, fn })
}

/** Runs every registered test: [{ name, status: 'pass'|'fail'|'skip', error?, ms }]. */
async function run () {
  const results = []
  for (const t of tests) {
    if (t.skip !== null) {
      results.push({ name: t.name, status: 'skip', reason: t.skip })
      continue
    }
    const started = performance.now()
    try {
      await t.fn({ name: t.name })
      results.push({ name: t.name, status: 'pass', ms: performance.now() - started })
    } catch (error) {
      results.push({ name: t.name, status: 'fail', error: String(error && error.stack ? `${error.message}\n${error.stack}` : error) })
    }
  }
  return results
}

// The page reaches the runner through here (the bundle's own export is the test file's).
globalThis.__fencepostRunTests = run

module.exports = { test, run }
