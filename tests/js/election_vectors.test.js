'use strict'
// Replays the election vectors tests/scenarios/election/*.json through the package's
// Election on a fresh MemoryBackend each (napi, or WASM with FENCEPOST_IMPL=wasm). The
// format, the actions and what a candidate records are in tests/scenarios/README.md
// ("Election vectors"); the Rust runner is rust/tests/election_vectors.rs, the Python one
// tests/python/test_election_vectors.py.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')

const { fencepost, REPO, sleep } = require('./impl')

const { Election, MemoryBackend, AcquireTimeoutError, LockLostError } = fencepost

const DIR = path.join(REPO, 'tests', 'scenarios', 'election')
/** How long a step waits for what it expects, then how long it watches for more. */
const STEP_BOUND_MS = 5_000
const SETTLE_MS = 100

/** The vector's options in the package's spelling (milliseconds, camelCase). */
const OPTION_NAMES = {
  ttl_ms: 'ttlMs',
  renew_every_ms: 'renewEveryMs',
  retry_base_ms: 'retryBaseMs',
  retry_max_ms: 'retryMaxMs',
  acquire_timeout_ms: 'acquireTimeoutMs'
}

function lockOptions (...layers) {
  const out = {}
  for (const layer of layers) {
    for (const [key, value] of Object.entries(layer ?? {})) {
      assert.ok(key in OPTION_NAMES, `unknown option ${key} in the vector`)
      out[OPTION_NAMES[key]] = value
    }
  }
  return out
}

/** What a failed campaign or run records. */
function failure (error, signal) {
  if (signal !== null && signal.aborted && error === signal.reason) return 'failed cancelled'
  if (error instanceof AcquireTimeoutError) return 'failed timeout'
  if (error instanceof LockLostError) return `failed lost ${error.reason}`
  return `failed ${error.code ?? error.name}`
}

/** One candidate: its Election, what it recorded, and what a step may act on. */
class Candidate {
  constructor (backend, name, spec, options) {
    this.log = []
    this.controller = null
    this.leadership = null
    this.finishWork = null
    this.election = new Election(backend, name, spec.identity, {
      ...lockOptions(options, spec.options),
      value: spec.value ?? null,
      onStartedLeading: (leadership) => this.log.push(`started ${leadership.token}`),
      onStoppedLeading: (leadership, reason) => this.log.push(`stopped ${leadership.token} ${reason}`)
    })
  }

  campaign () {
    const controller = this.controller = new AbortController()
    this.election.campaign({ signal: controller.signal }).then((leadership) => {
      this.leadership = leadership
      this.log.push(`leading ${leadership.token}`)
    }, (error) => this.log.push(failure(error, controller.signal)))
  }

  run () {
    const controller = this.controller = new AbortController()
    const work = (signal, leadership) => {
      this.leadership = leadership
      this.log.push(`working ${leadership.token}`)
      return new Promise((resolve) => {
        this.finishWork = resolve
        signal.addEventListener('abort', () => resolve(), { once: true })
      })
    }
    this.election.run(work, { signal: controller.signal }).then(
      () => this.log.push('returned'),
      (error) => this.log.push(failure(error, controller.signal)))
  }
}

async function replay (file) {
  const vector = JSON.parse(fs.readFileSync(path.join(DIR, file), 'utf8'))
  assert.equal(`${vector.name}.json`, file, 'name is the file stem')
  const backend = new MemoryBackend()
  const candidates = {}
  for (const [id, spec] of Object.entries(vector.candidates)) {
    candidates[id] = new Candidate(backend, vector.name, spec, vector.options)
  }
  const follower = new Election(backend, vector.name, 'follower', lockOptions(vector.options))
  try {
    for (const [i, step] of vector.steps.entries()) {
      const where = `${file} step ${i} (${step.do}${step.candidate ? ` ${step.candidate}` : ''})`
      const c = step.candidate === undefined ? null : candidates[step.candidate]
      const seen = Object.fromEntries(Object.entries(candidates).map(([id, cand]) => [id, cand.log.length]))
      if (step.do === 'leader') {
        const leader = await follower.leader()
        const got = leader === null ? null : { identity: leader.identity, value: leader.value, token: leader.token }
        const want = step.expect.leader === null ? null : { ...step.expect.leader, token: BigInt(step.expect.leader.token) }
        assert.deepEqual(got, want, where)
        continue
      }
      switch (step.do) {
        case 'campaign': c.campaign(); break
        case 'run': c.run(); break
        case 'finish': assert.ok(c.finishWork, `${where}: no work running`); c.finishWork(); break
        case 'resign': assert.ok(c.leadership, `${where}: no term`); await c.leadership.resign(); break
        case 'cancel': c.controller.abort(); break
        case 'force_release': assert.equal(await backend.forceRelease(vector.name), true, `${where}: the lock was held`); break
        default: assert.fail(`${where}: unknown action`)
      }
      const expected = step.expect
      const recorded = () => Object.fromEntries(Object.entries(candidates)
        .map(([id, cand]) => [id, cand.log.slice(seen[id])])
        .filter(([, entries]) => entries.length > 0))
      const deadline = performance.now() + STEP_BOUND_MS
      while (performance.now() < deadline &&
        Object.entries(expected).some(([id, want]) => candidates[id].log.length - seen[id] < want.length)) {
        await sleep(5)
      }
      await sleep(SETTLE_MS)
      assert.deepEqual(recorded(), expected, where)
    }
  } finally {
    for (const cand of Object.values(candidates)) cand.controller?.abort()
    await backend.close()
  }
}

const files = fs.readdirSync(DIR).filter((f) => f.endsWith('.json')).sort()

test('the election vectors are there', () => {
  assert.ok(files.length >= 8, `only ${files.length} election vectors`)
})

for (const file of files) {
  test(`election vector ${file}`, { timeout: 60_000 }, () => replay(file))
}
