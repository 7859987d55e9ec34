'use strict'
// A small Redis REST proxy speaking the Upstash protocol, for the tests of fetch-based
// adapters (UpstashRedisBackend in Node, in workerd and in Chromium): workers and browsers
// cannot open Redis sockets, so they reach the test Redis through this.
//
//   POST /   body: a JSON array, one command (["EVALSHA", sha1, "2", "k1", "k2", "a1"])
//            → 200 { "result": … }        the reply (strings, integers, null, arrays)
//            → 400 { "error": "…" }       the server's error reply (NOSCRIPT, WRONGTYPE, …)
//            → 401 { "error": "Unauthorized" }  without `Authorization: Bearer <token>`
//            → 502 { "error": "…" }       Redis could not be reached
//
// Blocking commands (BLPOP and friends) run on a connection of their own, so one parked
// request never delays another. Bound to 127.0.0.1 on a free port. CORS is open (the
// Chromium page may live on another port). Faults for tests: `failNext(n, status, body)`.
//
// Usage as a program (for trying the edge quickstart by hand):
//   node tests/js/rest-proxy.js redis://127.0.0.1:6379/0 [token]   → prints the URL

const http = require('node:http')
const path = require('node:path')
const { createRequire } = require('node:module')

const REPO = path.resolve(__dirname, '..', '..')
const IORedis = createRequire(path.join(REPO, 'bindings-node', 'package.json'))('ioredis')

const BLOCKING = new Set(['BLPOP', 'BRPOP', 'BLMOVE', 'BRPOPLPUSH', 'BZPOPMIN', 'BZPOPMAX', 'BLMPOP', 'BZMPOP', 'XREAD', 'XREADGROUP', 'WAIT'])

/**
 * Starts the proxy. Resolves to `{ url, token, commands, failNext, close }`:
 * `commands` lists every command name received, in order (for assertions);
 * `close()` stops the server and its Redis connections.
 */
async function startRestProxy ({ redisUrl, token = null, host = '127.0.0.1' } = {}) {
  if (!redisUrl) throw new Error('startRestProxy needs redisUrl')
  const redis = new IORedis(redisUrl, { maxRetriesPerRequest: 1, enableOfflineQueue: true })
  redis.on('error', () => {}) // surfaced per command
  const blockers = new Set()
  const commands = []
  const faults = []

  function send (res, status, body) {
    const text = typeof body === 'string' ? body : JSON.stringify(body)
    res.writeHead(status, {
      'content-type': typeof body === 'string' ? 'text/plain' : 'application/json',
      'access-control-allow-origin': '*'
    })
    res.end(text)
  }

  async function run (argv) {
    const [name, ...args] = argv
    if (!BLOCKING.has(String(name).toUpperCase())) return redis.call(name, ...args)
    const conn = redis.duplicate()
    conn.on('error', () => {})
    blockers.add(conn)
    try {
      return await conn.call(name, ...args)
    } finally {
      blockers.delete(conn)
      conn.disconnect()
    }
  }

  const server = http.createServer((req, res) => {
    if (req.method === 'OPTIONS') {
      res.writeHead(204, {
        'access-control-allow-origin': '*',
        'access-control-allow-methods': 'POST',
        'access-control-allow-headers': 'authorization, content-type'
      })
      return res.end()
    }
    const chunks = []
    req.on('data', (c) => chunks.push(c))
    req.on('end', async () => {
      if (req.method !== 'POST') return send(res, 405, { error: 'POST a JSON command array' })
      if (token !== null && req.headers.authorization !== `Bearer ${token}`) {
        return send(res, 401, { error: 'Unauthorized' })
      }
      let argv
      try {
        argv = JSON.parse(Buffer.concat(chunks).toString('utf8'))
      } catch {
        return send(res, 400, { error: 'ERR the body is not JSON' })
      }
      if (!Array.isArray(argv) || argv.length === 0 || argv.some((a) => typeof a !== 'string' && typeof a !== 'number')) {
        return send(res, 400, { error: 'ERR the body must be a JSON array of strings and numbers' })
      }
      commands.push(String(argv[0]).toUpperCase())
      const fault = faults.shift()
      if (fault !== undefined) return send(res, fault.status, fault.body)
      try {
        send(res, 200, { result: await run(argv.map(String)) })
      } catch (error) {
        if (error && error.name === 'ReplyError') send(res, 400, { error: error.message })
        else send(res, 502, { error: `proxy: ${error && error.message}` })
      }
    })
  })
  await new Promise((resolve, reject) => {
    server.once('error', reject)
    server.listen(0, host, resolve)
  })
  const { port } = server.address()
  return {
    url: `http://${host}:${port}/`,
    token,
    commands,
    /** The next `n` commands are answered with `status` and `body` (JSON or text), unrun. */
    failNext (n, status, body) {
      for (let i = 0; i < n; i++) faults.push({ status, body })
    },
    async close () {
      for (const conn of blockers) conn.disconnect()
      server.closeAllConnections?.()
      await new Promise((resolve) => server.close(resolve))
      await redis.quit().catch(() => redis.disconnect())
    }
  }
}

module.exports = { startRestProxy }

if (require.main === module) {
  const [redisUrl, token] = process.argv.slice(2)
  if (!redisUrl) {
    console.error('usage: node tests/js/rest-proxy.js REDIS_URL [token]')
    process.exit(2)
  }
  startRestProxy({ redisUrl, token: token ?? null }).then((proxy) => {
    console.log(proxy.url)
    const stop = () => proxy.close().then(() => process.exit(0))
    process.on('SIGINT', stop)
    process.on('SIGTERM', stop)
  })
}
