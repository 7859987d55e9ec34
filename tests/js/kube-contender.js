'use strict'
// A process that contends for one Kubernetes Lease lock (forked by kubernetes.test.js, like
// a separate service). Arguments: server URL, bearer token, lock name, mode, log file, then:
//
// * `rounds N`: N times takes the lock, appends [token, owner, 'section'] to the fenced log,
//   holds a moment, checks the lease, and sends [start_ns, end_ns, token].
// * `hold`: takes the lock (ttl 2 s), appends 'first', sends 'held', waits up to 10 s for
//   its lease to be lost (the test SIGSTOPs this process past its lease), tries a fenced
//   append 'stale' and sends [lost?, refused?, token].
//
// The log is the protected resource: `fencedAppend` refuses a lower token, or the same
// token of another owner. Times are process.hrtime.bigint() (CLOCK_MONOTONIC).

const fs = require('node:fs')

const { fencepost, sleep } = require('./impl')

/** Runs `fn` holding an exclusive lock on `log` (a directory beside it: mkdir is atomic). */
function exclusive (log, fn) {
  const dir = `${log}.lock`
  for (let i = 0; ; i++) {
    try {
      fs.mkdirSync(dir)
      break
    } catch (error) {
      if (error.code !== 'EEXIST' || i > 100_000) throw error
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1)
    }
  }
  try {
    return fn()
  } finally {
    fs.rmdirSync(dir)
  }
}

/** Appends `[token, owner, what]` unless a higher token, or the same token of another
 * owner, was logged; returns whether it was written. */
function fencedAppend (log, token, owner, what) {
  return exclusive(log, () => {
    const lines = fs.existsSync(log) ? fs.readFileSync(log, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l)) : []
    if (lines.length > 0) {
      const [top, topOwner] = lines[lines.length - 1]
      if (BigInt(token) < BigInt(top) || (BigInt(token) === BigInt(top) && owner !== topOwner)) return false
    }
    fs.appendFileSync(log, JSON.stringify([String(token), owner, what]) + '\n')
    return true
  })
}

async function main () {
  const [server, token, name, mode, log, roundsText] = process.argv.slice(2)
  const backend = new fencepost.KubernetesLeaseBackend({ server, token })
  if (mode === 'hold') {
    const lease = await new fencepost.Lock(backend, name, { ttlMs: 2_000, purpose: 'correctness' }).acquire()
    fencedAppend(log, lease.token, lease.ownerId, 'first')
    process.send('held')
    await sleep(1_000) // stopped in here
    const lost = await Promise.race([
      new Promise((resolve) => lease.signal.aborted ? resolve(true) : lease.signal.addEventListener('abort', () => resolve(true), { once: true })),
      sleep(10_000).then(() => false)
    ])
    const refused = !fencedAppend(log, lease.token, lease.ownerId, 'stale')
    process.send([lost, refused, String(lease.token)])
  } else {
    const lock = new fencepost.Lock(backend, name, { ttlMs: 3_000, acquireTimeoutMs: 60_000, purpose: 'correctness', retryMaxMs: 50 })
    const go = new Promise((resolve) => process.once('message', resolve))
    process.send('ready')
    await go
    for (let i = 0; i < Number(roundsText); i++) {
      await lock.using(async (signal, lease) => {
        const start = process.hrtime.bigint()
        if (!fencedAppend(log, lease.token, lease.ownerId, 'section')) throw new Error(`fenced append refused for token ${lease.token}`)
        await sleep(2)
        lease.check()
        const end = process.hrtime.bigint()
        process.send([String(start), String(end), String(lease.token)])
      })
    }
  }
  await backend.close()
}

if (require.main === module) {
  main().then(() => process.exit(0), (error) => {
    console.error(error)
    process.exit(1)
  })
}

module.exports = { fencedAppend }
