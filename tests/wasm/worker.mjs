// The worker tests/wasm/workerd.test.js runs in workerd: fencepost-wasm's workerd entry
// (instantiated at import from the statically imported .wasm module), one backend per
// request, Redis reached over HTTP through the project's REST proxy (the Upstash protocol)
// and etcd through its v3 JSON gateway, both on loopback, with nothing but fetch.
//
// Routes (POST, JSON answers; bindings REST_URL, REST_TOKEN and ETCD_URL come from the
// config):
//   /critical?prefix=P&name=N&holdMs=H   take lock "shared", log "start N token" to the
//        Redis list P+log, write P+data = N through the fenced SET (fence key P+fence),
//        hold H ms across awaited I/O (a BLPOP with a timeout), log "end N token", release
//   /expire?prefix=P   a 300 ms lease that cannot renew, then 600 ms of awaited I/O:
//        reports whether the lease was lost, why, and whether its signal aborted
//   /etcd-critical?prefix=P&name=N&holdMs=H   the same on etcd: take correctness lock
//        "shared" (keys under P+"locks/"), write P+"log/{token}-1" = "start N" and
//        P+"data" = N in one fenced transaction, hold H ms across awaited I/O (a watch of a
//        key nobody writes, through the gateway), write P+"log/{token}-2" = "end N"
//        fenced, release; answers the revisions etcd gave the two writes
//   /entropy           what creating a lock machine at module scope said (workers have
//        no Web Crypto there), and that one inside the handler works

import { Lock, LockMachine, UpstashRedisBackend, EtcdBackend, implementation, coreVersion } from 'fencepost-wasm/workerd.mjs'

let atModuleScope
try {
  // eslint-disable-next-line no-new
  new LockMachine()
  atModuleScope = { ok: true }
} catch (error) {
  atModuleScope = { ok: false, name: error.name, code: error.code, message: error.message }
}

/** One Redis command through the REST endpoint (for the test's log and waits). */
async function redis (env, argv) {
  const response = await fetch(env.REST_URL, {
    method: 'POST',
    headers: { authorization: `Bearer ${env.REST_TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify(argv)
  })
  const body = await response.json()
  if (body.error !== undefined) throw new Error(`redis ${argv[0]}: ${body.error}`)
  return body.result
}

/** Awaited I/O that lasts `ms`: a BLPOP on a list nobody pushes to. */
const ioFor = (env, prefix, ms) => redis(env, ['BLPOP', `${prefix}never`, String(ms / 1000)])

async function critical (env, params) {
  const prefix = params.get('prefix')
  const name = params.get('name')
  const holdMs = Number(params.get('holdMs') ?? '200')
  const backend = new UpstashRedisBackend({ url: env.REST_URL, token: env.REST_TOKEN, keyPrefix: prefix })
  try {
    const lock = new Lock(backend, 'shared', { ttlMs: 3_000, retryBaseMs: 10, retryMaxMs: 50, acquireTimeoutMs: 10_000 })
    return await lock.using(async (signal, lease) => {
      await redis(env, ['RPUSH', `${prefix}log`, `start ${name} ${lease.token}`])
      await backend.fencedSet(`${prefix}data`, `${prefix}fence`, lease.token, name)
      await ioFor(env, prefix, holdMs)
      lease.check() // still ours before the last write
      await redis(env, ['RPUSH', `${prefix}log`, `end ${name} ${lease.token}`])
      return { name, token: String(lease.token), ownerId: lease.ownerId, lost: lease.lost }
    })
  } finally {
    backend.close()
  }
}

/** Awaited I/O through the etcd gateway that lasts `ms`: a watch of a key nobody writes,
 * read until the stream is aborted. */
async function etcdIoFor (env, prefix, ms) {
  const controller = new AbortController()
  const timer = setTimeout(() => controller.abort(), ms)
  const key = btoa(`${prefix}never`)
  try {
    const response = await fetch(`${env.ETCD_URL}/v3/watch`, {
      method: 'POST',
      body: JSON.stringify({ create_request: { key } }),
      signal: controller.signal
    })
    const reader = response.body.getReader()
    for (;;) if ((await reader.read()).done) break
  } catch (error) {
    if (!controller.signal.aborted) throw error
  } finally {
    clearTimeout(timer)
  }
}

async function etcdCritical (env, params) {
  const prefix = params.get('prefix')
  const name = params.get('name')
  const holdMs = Number(params.get('holdMs') ?? '200')
  const backend = new EtcdBackend({ endpoints: env.ETCD_URL, keyPrefix: `${prefix}locks/` })
  try {
    const lock = new Lock(backend, 'shared', { ttlMs: 3_000, acquireTimeoutMs: 10_000, purpose: 'correctness' })
    return await lock.using(async (signal, lease) => {
      const t = String(lease.token).padStart(20, '0')
      const start = await backend.fencedTxn(lease, { puts: [[`${prefix}log/${t}-1`, `start ${name}`], [`${prefix}data`, name]] })
      await etcdIoFor(env, prefix, holdMs)
      lease.check() // still ours before the last write
      const end = await backend.fencedTxn(lease, { puts: [[`${prefix}log/${t}-2`, `end ${name}`]] })
      return {
        name,
        token: String(lease.token),
        ownerId: lease.ownerId,
        leaseId: String(backend.leaseId(lease.ownerId)),
        holderKey: backend.holderKey('shared', lease.ownerId),
        revisions: [String(start), String(end)],
        lost: lease.lost
      }
    })
  } finally {
    backend.close()
  }
}

async function expire (env, params) {
  const prefix = params.get('prefix')
  const backend = new UpstashRedisBackend({ url: env.REST_URL, token: env.REST_TOKEN, keyPrefix: prefix })
  try {
    const lease = await new Lock(backend, 'expiring', { ttlMs: 300, autoRenew: false }).acquire()
    const validForAtStart = lease.validForMs()
    const t0 = performance.now()
    await ioFor(env, prefix, 600)
    const elapsedMs = performance.now() - t0
    const lostAfterIo = lease.lost
    let checkThrew = null
    try { lease.check() } catch (error) { checkThrew = error.code }
    let releaseError = null
    await lease.release().catch((error) => { releaseError = error.reason })
    return {
      validForAtStart,
      elapsedMs,
      lostAfterIo,
      lostReason: lease.lostReason,
      signalAborted: lease.signal.aborted,
      checkThrew,
      releaseError,
      validForAtEnd: lease.validForMs()
    }
  } finally {
    backend.close()
  }
}

function entropy () {
  const machine = new LockMachine()
  machine.acquire(performance.now(), 'entropy', { ttlMs: 1_000 })
  const { outputs } = machine.poll()
  return { atModuleScope, inHandler: { owner: machine.owner(1), requests: outputs.length }, implementation, coreVersion }
}

export default {
  async fetch (request, env) {
    const url = new URL(request.url)
    try {
      switch (url.pathname) {
        case '/critical': return Response.json(await critical(env, url.searchParams))
        case '/etcd-critical': return Response.json(await etcdCritical(env, url.searchParams))
        case '/expire': return Response.json(await expire(env, url.searchParams))
        case '/entropy': return Response.json(entropy())
        default: return new Response('not found', { status: 404 })
      }
    } catch (error) {
      return Response.json({ error: { name: error.name, code: error.code, message: error.message } }, { status: 500 })
    }
  }
}
