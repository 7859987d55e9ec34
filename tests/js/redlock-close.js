'use strict'
// A process that holds a Redlock lease and closes its backend (forked by redlock.test.js).
// Arguments: the masters (comma-separated: Redis URLs, or REST endpoint URLs), the kind
// ('ioredis' | 'node-redis' | 'node-redis v5' | 'rest'), the REST token, the key prefix.
//
// It acquires, starts a manual renewal, then awaits `backend.close()` (which releases) and
// closes its clients. It reports to the parent the timers still pending then (set with
// setTimeout by anyone in the process, unref'd ones too, with where they were set), and
// which fencepost warnings came after close() resolved, and must then exit by itself:
// nothing of fencepost may keep it alive or fire later.

// Every timer fencepost's JavaScript (a package's dist/js/) sets from here on, until it
// fires or is cleared: timer → where it was set. (Client libraries keep timers of their
// own, e.g. fetch's idle connections: not fencepost's to clear.)
const timers = new Map()
const { setTimeout: realSetTimeout, clearTimeout: realClearTimeout } = globalThis
globalThis.setTimeout = function (fn, ms, ...args) {
  const timer = realSetTimeout(function () { timers.delete(timer); return fn.apply(this, args) }, ms)
  const ours = new Error().stack.split('\n').slice(2).find((frame) => frame.includes('/dist/js/'))
  if (ours !== undefined) timers.set(timer, ours.trim())
  return timer
}
globalThis.clearTimeout = function (timer) {
  timers.delete(timer)
  return realClearTimeout(timer)
}

const { fencepost, devRequire } = require('./impl')
const sleep = (ms) => new Promise((resolve) => realSetTimeout(resolve, ms))

async function open (list, kind, token) {
  if (kind === 'rest') return { masters: list.map((url) => ({ url, token })), close: async () => {} }
  if (kind === 'ioredis') {
    const IORedis = devRequire('ioredis')
    const masters = list.map((u) => new IORedis(u, { maxRetriesPerRequest: 1 }))
    return { masters, close: () => Promise.all(masters.map((c) => c.quit())) }
  }
  const v5 = kind === 'node-redis v5'
  const masters = await Promise.all(list.map(async (url) => {
    const c = devRequire(v5 ? 'redis5' : 'redis').createClient({ url })
    await c.connect()
    return c
  }))
  return { masters, close: () => Promise.all(masters.map((c) => v5 ? c.close() : c.quit())) }
}

async function main () {
  const [list, kind, token, prefix] = process.argv.slice(2)
  const warnings = []
  let closed = false
  process.on('warning', (w) => { if (closed && w.name === 'FencepostWarning') warnings.push(w.message) })
  const { masters, close } = await open(list.split(','), kind, token)
  const backend = new fencepost.RedlockBackend(masters, { keyPrefix: prefix })
  const lock = new fencepost.Lock(backend, 'job', { ttlMs: 1_000 })
  const lease = await lock.acquire()
  await sleep(50)
  lease.extend().catch(() => {}) // a renewal in flight when close() comes
  await backend.close()
  closed = true
  await close()
  const timersAfterClose = [...timers.values()]
  await sleep(1_500) // past every request deadline: a late timer or warning would show
  process.send({ key: backend.lockKey('job'), timersAfterClose, warningsAfterClose: warnings }, () => process.disconnect())
}

main().catch((error) => {
  console.error('redlock-close:', error)
  process.exitCode = 1
  process.disconnect?.()
})
