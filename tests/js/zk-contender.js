'use strict'
// A process that contends for one ZooKeeper lock (forked by zookeeper.test.js, like a
// separate service). Arguments: hosts, lock name (under root /locks), mode, then:
//
// * `rounds LOG N`: N times takes the lock, writes a fenced log node (a persistent
//   sequential node under LOG holding the token, created only while the lease's own node
//   exists), holds a moment, checks the lease, and sends [start_ns, end_ns, token, pid].
// * `hold LOG`: takes the lock once (ttl = the negotiated session timeout), sends 'held',
//   then waits up to 20 s for its lease to be lost (the test SIGSTOPs this process past
//   its session), tries a fenced write anyway and sends ['lost' | 'held', refused].
//
// Times are process.hrtime.bigint(): CLOCK_MONOTONIC, one clock for every process on
// Linux. Exits non-zero on any failure.

const { fencepost, devRequire, sleep } = require('./impl')

const HOLD_MS = 2

async function main () {
  const [hosts, name, mode, log, roundsText] = process.argv.slice(2)
  const zk = devRequire('node-zookeeper-client')
  const backend = await fencepost.ZooKeeperBackend.connect(hosts, { root: '/locks', sessionTimeoutMs: mode === 'hold' ? 2_000 : 4_000 })
  const write = (lease) => (txn) => txn.create(`${log}/e-`, Buffer.from(String(lease.token)), zk.CreateMode.PERSISTENT_SEQUENTIAL)
  const lock = new fencepost.Lock(backend, name, { ttlMs: backend.sessionTimeoutMs, acquireTimeoutMs: 60_000, purpose: 'correctness' })
  if (mode === 'hold') {
    await lock.using(async (signal, lease) => {
      process.send('held')
      const lost = new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }))
      await Promise.race([lost, sleep(20_000)])
      let refused = false
      try {
        await backend.fencedCommit(lease, write(lease))
      } catch (error) {
        if (!(error instanceof fencepost.StaleTokenError)) throw error
        refused = true
      }
      process.send([signal.aborted ? 'lost' : 'held', refused])
    }).catch((error) => { if (!(error instanceof fencepost.LockLostError)) throw error })
  } else {
    const go = new Promise((resolve) => process.once('message', resolve))
    process.send('ready')
    await go
    for (let i = 0; i < Number(roundsText); i++) {
      await lock.using(async (signal, lease) => {
        const start = process.hrtime.bigint()
        await backend.fencedCommit(lease, write(lease))
        await sleep(HOLD_MS)
        lease.check()
        const end = process.hrtime.bigint()
        process.send([String(start), String(end), String(lease.token), process.pid])
      })
    }
  }
  await backend.close()
}

main().then(() => process.exit(0), (error) => {
  console.error(error)
  process.exit(1)
})
