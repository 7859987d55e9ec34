'use strict'
// A process that campaigns in one etcd election (forked by election.test.js, like a
// separate service). Arguments: etcd url, key prefix, election name, terms; or `lead`,
// etcd url, key prefix, election name (see lead() below).
//
// It tells the parent it is ready, waits for 'go', then `terms` times runs a term with
// Election.run: writes a fenced log entry into etcd (fencedTxn: applied only while the
// lease still holds the lock, the key named by the token so the parent reads it in token
// order), holds a moment, checks the term, and sends [start_ns, end_ns, token, pid,
// callbacks] to the parent. Times are process.hrtime.bigint(): CLOCK_MONOTONIC, one clock
// for every process on Linux. Exits non-zero on any failure.

const { fencepost, sleep } = require('./impl')

async function main () {
  const [url, prefix, name, termsText] = process.argv.slice(2)
  const backend = new fencepost.EtcdBackend({ endpoints: url, keyPrefix: prefix })
  const seen = []
  const election = new fencepost.Election(backend, name, `pid-${process.pid}`, {
    ttlMs: 3_000,
    acquireTimeoutMs: 90_000,
    purpose: 'correctness',
    onStartedLeading: (l) => seen.push(['started', String(l.token)]),
    onStoppedLeading: (l, reason) => seen.push(['stopped', String(l.token), reason])
  })
  const go = new Promise((resolve) => process.once('message', resolve))
  process.send('ready')
  await go
  for (let i = 0; i < Number(termsText); i++) {
    const span = await election.run(async (signal, leadership) => {
      const start = process.hrtime.bigint()
      const key = `${prefix}log/${String(leadership.token).padStart(12, '0')}`
      await backend.fencedTxn(leadership.lease, { puts: [[key, `${process.pid}:${i}`]] })
      await sleep(5)
      leadership.check()
      return [String(start), String(process.hrtime.bigint()), String(leadership.token)]
    })
    process.send([...span, process.pid, seen.splice(0)])
  }
  await backend.close()
  process.disconnect()
}

/** `lead` mode: leads once (ttl 2 s) with work that writes the fenced log, tells the
 * parent 'leading', and keeps working (the parent SIGSTOPs this process past its lease).
 * On resume the term has ended: the work's signal aborted; a fenced write with the old
 * term is tried. Sends { aborted, stopped, refused, token }. */
async function lead (url, prefix, name) {
  const backend = new fencepost.EtcdBackend({ endpoints: url, keyPrefix: prefix })
  const stopped = []
  const election = new fencepost.Election(backend, name, 'old', {
    ttlMs: 2_000,
    purpose: 'correctness',
    onStoppedLeading: (l, reason) => stopped.push(reason)
  })
  let term = null
  let aborted = false
  try {
    await election.run(async (signal, leadership) => {
      term = leadership
      await backend.fencedTxn(leadership.lease, { puts: [[`${prefix}log/first`, 'old']] })
      process.send('leading')
      while (!signal.aborted) await sleep(50) // stopped in here
      aborted = true
    })
  } catch (error) {
    if (!(error instanceof fencepost.LockLostError)) throw error
  }
  let refused = false
  try {
    await backend.fencedTxn(term.lease, { puts: [[`${prefix}log/stale`, 'old']] })
  } catch (error) {
    if (!(error instanceof fencepost.StaleTokenError)) throw error
    refused = true
  }
  process.send({ aborted, stopped, refused, token: String(term.token) })
  await backend.close()
  process.disconnect()
}

const running = process.argv[2] === 'lead' ? lead(...process.argv.slice(3)) : main()
running.catch((error) => {
  console.error(error)
  process.exit(1)
})
