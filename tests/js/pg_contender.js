'use strict'
// A process that contends for one PostgreSQL lock (forked by postgres.test.js, like a
// separate service would be). Arguments: url, lock name, rounds, mode ('lease',
// 'session' or 'xact'), client ('pg-pool', 'pg-client' or 'postgres.js'), log table, job
// row id.
//
// It connects, tells the parent it is ready, waits for 'go', then `rounds` times: takes the
// lock, writes the job row through the fenced update with the lease's token, holds it a
// moment, checks the lease, and inserts (start_ns, end_ns, token, pid, mode) into the log
// table. Times are process.hrtime.bigint(): CLOCK_MONOTONIC, one clock for every process
// on Linux. Exits non-zero on any failure.

const { fencepost, devRequire, sleep } = require('./impl')

const HOLD_MS = 1 // inside the critical section
const PAUSE_MS = 4 // at most, between sections: lets the others in

function connect (url, kind) {
  if (kind === 'postgres.js') {
    const sql = devRequire('postgres')(url, { max: 2, onnotice: () => {} })
    return { client: sql, close: () => sql.end() }
  }
  const pg = devRequire('pg')
  if (kind === 'pg-pool') {
    const pool = new pg.Pool({ connectionString: url, max: 2 })
    pool.on('error', () => {})
    return { client: pool, close: () => pool.end() }
  }
  const client = new pg.Client({ connectionString: url })
  client.on('error', () => {})
  return { client, ready: client.connect(), close: () => client.end() }
}

async function main () {
  const [url, name, roundsText, mode, kind, logTable, job] = process.argv.slice(2)
  const rounds = Number(roundsText)
  const { client, ready, close } = connect(url, kind)
  await ready
  const backend = mode === 'session'
    ? new fencepost.PostgresBackend(null, { mode: 'session', connectionString: url })
    : new fencepost.PostgresBackend(client)
  const lock = new fencepost.Lock(backend, name, { ttlMs: 3_000, acquireTimeoutMs: 40_000, retryBaseMs: 2, retryMaxMs: 20, purpose: 'correctness' })
  const go = new Promise((resolve) => process.once('message', resolve))
  process.send('ready')
  await go
  const section = async (tx, token, check) => {
    const start = process.hrtime.bigint()
    await fencepost.fencedUpdate(tx, 'fp_jobs', { idColumn: 'id', tokenColumn: 'last_token', rowId: job, token, values: { body: `${process.pid}:${token}` } })
    await sleep(HOLD_MS)
    check()
    const end = process.hrtime.bigint()
    return [start, end]
  }
  const log = (start, end, token) => insert(client, kind, logTable, [String(start), String(end), String(token), process.pid, mode])
  for (let i = 0; i < rounds; i++) {
    if (mode === 'xact') {
      // tries once: held → AcquireTimeoutError, try again after a pause
      for (;;) {
        try {
          const [start, end, token] = await fencepost.xactLock(client, name, async (tx, token) => [...await section(tx, token, () => {}), token])
          await log(start, end, token)
          break
        } catch (error) {
          if (!(error instanceof fencepost.AcquireTimeoutError)) throw error
          await sleep(1 + Math.random() * 3)
        }
      }
    } else {
      await lock.using(async (signal, lease) => {
        const [start, end] = await section(client, lease.token, () => lease.check())
        await log(start, end, lease.token)
      })
    }
    await sleep(Math.random() * PAUSE_MS)
  }
  backend.close()
  await close()
}

function insert (client, kind, table, row) {
  const sql = `INSERT INTO ${table} (start_ns, end_ns, token, pid, mode) VALUES ($1, $2, $3, $4, $5)`
  return kind === 'postgres.js' ? client.unsafe(sql, row) : client.query(sql, row)
}

main().then(
  () => { process.exitCode = 0; process.disconnect?.() },
  (error) => { console.error(`pg contender ${process.pid}:`, error); process.exitCode = 1; process.disconnect?.() }
)
