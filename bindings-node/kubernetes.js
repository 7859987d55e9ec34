'use strict'
// Kubernetes Lease from Node: KubernetesLeaseBackend runs the lock machine's Lease calls
// over `fetch` (the machine's `kubernetes` requests: stamp the wall-clock fields, send,
// hand back the response body), as Python's KubernetesLeaseBackend does over httpx. Node
// only, outside the shared js/: the WebAssembly module carries no Lease machine (it would
// add 5.2 KiB gzipped, over its size budget). Configuration: a kubeconfig file (the
// current context's server, CA, bearer token or client certificate) or the pod's service
// account, as Python's from_kubeconfig / in_cluster read them, giving the backend a fetch
// on node:https with the cluster's TLS settings (the global fetch takes no CA or client
// certificate) and a token read again whenever its file changes (projected
// service-account tokens are rotated). kubeconfig files are YAML: parsed with `yaml` (an
// optional peer dependency; a missing one is a ConfigError naming it).

const fs = require('node:fs')
const http = require('node:http')
const https = require('node:https')
const os = require('node:os')
const path = require('node:path')
const check = require('./dist/js/check.js')
const { now, deadlineSignal, eitherSignal } = require('./dist/js/driver.js')

/** Where a pod's service account is mounted. */
const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount'

function createKubernetes (native, fp) {
  const { Backend, ConfigError, BackendError, ProtocolError } = fp

  const KUBERNETES_OPTIONS = ['server', 'token', 'namespace', 'fetch', 'requestTimeoutMs']
  /** Default of KubernetesLeaseBackend's `requestTimeoutMs` (Python's clients: 1 s). */
  const KUBERNETES_REQUEST_TIMEOUT_MS = 1000
  /** Leases per page of a listing, and the most pages one reads (the core's KUBE_LIST_PAGE, KUBE_LIST_PAGES). */
  const LIST_PAGE = 500
  const LIST_PAGES = 100

  /** A holder the native reader gave: its metadata's JSON text parsed. */
  function holder (h) {
    return Object.freeze({ ...h, metadata: h.metadata === null ? null : Object.freeze(JSON.parse(h.metadata)) })
  }

  /** The wall clock now as a Kubernetes `MicroTime` (RFC 3339 UTC, six fractional digits). */
  function microTime () {
    return new Date().toISOString().replace(/\.(\d{3})Z$/, '.$1000Z')
  }

  /**
   * Locks on Kubernetes `coordination.k8s.io/v1` Leases over `fetch`; see kubernetes.d.ts
   * (`KubernetesLeaseBackend`) for the options, the recipe and the errors.
   */
  class KubernetesLeaseBackend extends Backend {
    constructor (options) {
      super()
      const o = check.plainObject(options, 'KubernetesLeaseBackend options')
      for (const key of Object.keys(o)) {
        if (!KUBERNETES_OPTIONS.includes(key)) {
          throw new ConfigError(`unknown KubernetesLeaseBackend option ${JSON.stringify(key)}; known options: ${KUBERNETES_OPTIONS.join(', ')}`, { option: key })
        }
      }
      let parsed = null
      try { parsed = typeof o.server === 'string' ? new URL(o.server) : null } catch {}
      if (parsed === null || (parsed.protocol !== 'http:' && parsed.protocol !== 'https:')) {
        throw new ConfigError(`server must be the API server's http:// or https:// URL, got ${check.describe(o.server)}`, { option: 'server' })
      }
      this._server = o.server.replace(/\/+$/, '')
      if (o.token !== undefined && typeof o.token !== 'string' && typeof o.token !== 'function') {
        throw new ConfigError(`token must be a bearer token (a string) or a function returning one (a rotated service-account token), got ${check.describe(o.token)}`, { option: 'token' })
      }
      this._token = o.token ?? null
      this._namespace = o.namespace === undefined ? 'default' : check.string(o.namespace, 'namespace')
      const fetch = o.fetch === undefined ? globalThis.fetch : o.fetch
      if (typeof fetch !== 'function') {
        throw new ConfigError(`fetch must be a function (the global fetch, or one with the cluster's TLS settings), got ${check.describe(o.fetch)}`, { option: 'fetch' })
      }
      // Called bare, never as a method of this object (workers' fetch refuses `this`).
      this._fetch = o.fetch === undefined ? (...args) => globalThis.fetch(...args) : fetch
      /** Leases per listing page (tests lower it to see the paging). */
      this._listPage = LIST_PAGE
      this._requestTimeoutMs = o.requestTimeoutMs === undefined ? KUBERNETES_REQUEST_TIMEOUT_MS : check.millis(o.requestTimeoutMs, 'requestTimeoutMs')
      if (!(this._requestTimeoutMs > 0)) {
        throw new ConfigError(`requestTimeoutMs must be above 0, got ${this._requestTimeoutMs}`, { option: 'requestTimeoutMs' })
      }
    }

    _machineOptions () {
      return { kind: 'kubernetes', namespace: this._namespace }
    }

    /** The API server's URL. */
    get server () { return this._server }
    /** The namespace of the Leases ('default'). */
    get namespace () { return this._namespace }

    /** The API path of lock `name`'s Lease. */
    leasePath (name) {
      return `/apis/coordination.k8s.io/v1/namespaces/${this._namespace}/leases/${check.string(name, 'lock name')}`
    }

    /**
     * The Lease of lock `name` as the API server stores it (holder, count, times, for
     * observers), or null when there is none. Rejects with BackendError (the server could
     * not be reached) or ProtocolError (any other error status).
     */
    async readLease (name) {
      const path = this.leasePath(name)
      const text = await this._operatorReply('readLease', name, () => this._send('GET', path, null, 'application/json', deadlineSignal(now() + this._requestTimeoutMs)))
      const doc = JSON.parse(text)
      if (doc.kind === 'Lease') return doc
      if (doc.kind === 'Status' && doc.code === 404) return null
      throw new ProtocolError(`readLease(${JSON.stringify(name)}): ${doc.code ?? ''} ${doc.reason ?? ''} ${doc.message ?? text.slice(0, 200)}`)
    }

    // -- operator queries: who holds it? which locks are held? elections' leaders --
    //
    // The core reads the replies: the holder is holderIdentity, the token
    // leaseTransitions, the metadata the fencepost.dev/holder-metadata annotation while it
    // names that holder.

    /** One operator GET's response body, bounded by requestTimeoutMs. */
    _get (what, name, path) {
      return this._operatorReply(what, name, () => this._send('GET', path, null, 'application/json', deadlineSignal(now() + this._requestTimeoutMs)))
    }

    /**
     * Who holds lock `name` now, read from its Lease (one GET), or null when there is no
     * Lease or no holderIdentity. `{ name, owner (holderIdentity: an owner id, or a
     * client-go elector's identity), token (leaseTransitions), ttlLeftMs (the record's
     * leaseDurationSeconds: an upper bound, since when the holder last renewed cannot be
     * told without comparing its wall-clock renewTime with this clock), waiters (null:
     * candidates leave no trace), metadata (from the annotation a grant with the
     * metadata option writes; null when it names another holder) }`. Rejects with
     * BackendError (unreachable), ProtocolError (a Status other than 404), ConfigError
     * (a name that is not a string).
     */
    async inspect (name) {
      const path = this.leasePath(name)
      const read = this._operatorResult('inspect', name, native.readKubernetesInspect(name, await this._get('inspect', name, path)))
      return read.holder === null ? null : holder(read.holder)
    }

    /**
     * The held locks of the namespace whose names start with `prefix` (default ''), at
     * most `options.limit` (default 100), sorted by name, as `inspect` reads them.
     * Paged: `GET …/leases?limit=500` and its `continue` token, at most 100 pages,
     * stopping once `limit` held locks are found (the API has no name-prefix selector:
     * the prefix is applied to each page). Rejects as `inspect`, and with ConfigError for
     * a prefix that is not a string or a limit that is not an integer >= 1.
     */
    async list (prefix = '', options) {
      check.string(prefix, 'prefix')
      const o = check.plainObject(options, 'list options')
      const limit = o.limit === undefined ? 100 : o.limit
      if (!Number.isSafeInteger(limit) || limit < 1) {
        throw new ConfigError(`limit must be an integer >= 1, got ${check.describe(limit)}`, { option: 'limit' })
      }
      const found = new Map()
      let token = null
      for (let page = 0; page < LIST_PAGES; page++) {
        const path = native.kubernetesListPage(this._namespace, this._listPage, token)
        const read = this._operatorResult('list', prefix, native.readKubernetesList(prefix, await this._get('list', prefix, path)))
        for (const h of read.holders) found.set(h.name, holder(h))
        token = read.continue
        if (token === null || found.size >= limit) break
      }
      return [...found.keys()].sort().slice(0, limit).map((n) => found.get(n))
    }

    /** An election keeps its leader's record in the Lease's metadata annotation. */
    _keepsLeaderMetadata () { return true }

    /** The leader of election `name` as `Election.leader()` reads it. */
    async _leader (name) {
      const found = await this.inspect(name)
      if (found === null) return null
      const meta = found.metadata
      if (meta === null || typeof meta.identity !== 'string') return { token: found.token, value: null, pending: true }
      return { token: found.token, value: JSON.stringify({ identity: meta.identity, value: meta.value ?? null }), pending: false }
    }

    async execute (request, options) {
      if (request === null || typeof request !== 'object' || request.backend !== 'kubernetes') {
        throw new BackendError(`KubernetesLeaseBackend cannot run this request: ${check.describe(request && request.backend)}`)
      }
      const signal = check.abortSignal(check.plainObject(options, 'execute options').signal, 'signal')
      let body = request.body
      if (body !== null && request.stamp.length > 0) {
        // the core reads no clock: the wall-clock fields are the host's, for people and client-go
        const doc = JSON.parse(body)
        const stamp = microTime()
        for (const field of request.stamp) doc.spec[field] = stamp
        body = JSON.stringify(doc)
      }
      const deadlineMs = Math.min(typeof request.deadlineMs === 'number' ? request.deadlineMs : Infinity, now() + this._requestTimeoutMs)
      return this._send(request.method, request.path, body, request.contentType, eitherSignal(signal, deadlineSignal(deadlineMs)))
    }

    /** Sends one call; returns the response body when it is a JSON object (a Lease or a
     * Status, whatever the HTTP status), else throws (a proxy's error page: a transport
     * failure). */
    async _send (method, path, body, contentType, signal) {
      const headers = { Accept: 'application/json' }
      if (body !== null) headers['Content-Type'] = contentType
      const token = typeof this._token === 'function' ? await this._token() : this._token
      if (token) headers.Authorization = `Bearer ${token}`
      const init = { method, headers }
      if (body !== null) init.body = body
      if (signal !== null) init.signal = signal
      const response = await this._fetch(this._server + path, init)
      const text = String(await response.text())
      if (!text.trimStart().startsWith('{')) {
        throw new Error(`HTTP ${response.status} from the API server at ${this._server} without a JSON body: ${JSON.stringify(text.slice(0, 200))}`)
      }
      return text
    }
  }


  function loadYaml () {
    try {
      return require('yaml')
    } catch (error) {
      throw new ConfigError('reading a kubeconfig needs the yaml package: npm install yaml', { cause: error })
    }
  }

  /** A fetch (the subset the backend uses: method, headers, body, signal; `status` and
   * `text()` of the response) on node:https with `tls` (`ca`, `cert`, `key`,
   * `rejectUnauthorized`), or node:http for an http:// server. */
  function tlsFetch (tls) {
    const agent = new https.Agent({ keepAlive: true, ...tls })
    const fetch = (url, init = {}) => new Promise((resolve, reject) => {
      const target = new URL(url)
      const lib = target.protocol === 'https:' ? https : http
      const req = lib.request(target, { method: init.method, headers: init.headers, signal: init.signal, ...(lib === https ? { agent } : {}) }, (res) => {
        const chunks = []
        res.on('data', (c) => chunks.push(c))
        res.on('error', reject)
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8')
          resolve({ status: res.statusCode, text: async () => text })
        })
      })
      req.on('error', reject)
      req.end(init.body)
    })
    return { fetch, close: () => agent.destroy() }
  }

  /** A token function rereading `file` when its modification time changes. */
  function tokenFile (file) {
    let seen = [-1, '']
    return () => {
      let mtime
      try {
        mtime = fs.statSync(file).mtimeMs
      } catch (error) {
        throw new BackendError(`cannot read the token file ${JSON.stringify(file)}: ${error.message}`, { cause: error })
      }
      if (mtime !== seen[0]) seen = [mtime, fs.readFileSync(file, 'utf8').trim()]
      return seen[1]
    }
  }

  function owned (options, tls) {
    const { fetch, close } = tlsFetch(tls)
    const backend = new KubernetesLeaseBackend({ ...options, fetch })
    backend._owned.push(close)
    return backend
  }

  /**
   * A KubernetesLeaseBackend for a kubeconfig context (kubernetes.d.ts says which fields
   * are read, and the errors).
   */
  function kubernetesFromKubeconfig (file, options) {
    const o = check.plainObject(options, 'kubernetesFromKubeconfig options')
    if (file === undefined || file === null) {
      const env = process.env.KUBECONFIG || ''
      file = env.split(path.delimiter).find((p) => p) || path.join(os.homedir(), '.kube', 'config')
    }
    check.string(file, 'kubeconfig path')
    const YAML = loadYaml()
    let doc
    try {
      doc = YAML.parse(fs.readFileSync(file, 'utf8'))
    } catch (error) {
      throw new ConfigError(`cannot read the kubeconfig ${JSON.stringify(file)}: ${error.message}`, { cause: error })
    }
    if (doc === null || typeof doc !== 'object' || Array.isArray(doc)) {
      throw new ConfigError(`${JSON.stringify(file)} is not a kubeconfig (a mapping with clusters, users, contexts)`)
    }
    const base = path.dirname(path.resolve(file))
    const named = (section, name) => {
      for (const entry of doc[section] || []) {
        if (entry && entry.name === name) {
          const inner = entry[section.slice(0, -1)]
          return inner && typeof inner === 'object' ? inner : {}
        }
      }
      throw new ConfigError(`kubeconfig ${JSON.stringify(file)} has no ${section.slice(0, -1)} named ${JSON.stringify(name)}`)
    }
    const contextName = o.context !== undefined ? check.string(o.context, 'context') : doc['current-context']
    if (!contextName) throw new ConfigError(`kubeconfig ${JSON.stringify(file)} has no current-context: pass context`)
    const context = named('contexts', contextName)
    const cluster = named('clusters', context.cluster)
    const user = context.user ? named('users', context.user) : {}
    for (const plugin of ['exec', 'auth-provider']) {
      if (plugin in user) {
        throw new ConfigError(`kubeconfig user ${JSON.stringify(context.user)} authenticates with ${JSON.stringify(plugin)}, which fencepost does not run: give the user a token or a client certificate`)
      }
    }
    if (typeof cluster.server !== 'string') throw new ConfigError(`kubeconfig cluster ${JSON.stringify(context.cluster)} has no server`)
    const resolve = (p) => p ? path.resolve(base, String(p).replace(/^~(?=$|\/)/, os.homedir())) : null
    const read = (data, p) => {
      if (data) return Buffer.from(String(data), 'base64')
      const f = resolve(p)
      if (f === null) return undefined
      try {
        return fs.readFileSync(f)
      } catch (error) {
        throw new ConfigError(`kubeconfig ${JSON.stringify(file)}: cannot load its TLS settings: ${error.message}`, { cause: error })
      }
    }
    const tls = cluster['insecure-skip-tls-verify']
      ? { rejectUnauthorized: false }
      : {
          ca: read(cluster['certificate-authority-data'], cluster['certificate-authority']),
          cert: read(user['client-certificate-data'], user['client-certificate']),
          key: read(user['client-key-data'], user['client-key'])
        }
    for (const k of Object.keys(tls)) if (tls[k] === undefined) delete tls[k]
    const token = user.token ? String(user.token) : user.tokenFile ? tokenFile(resolve(user.tokenFile)) : undefined
    const namespace = o.namespace ?? context.namespace ?? 'default'
    return owned({ server: cluster.server, namespace, ...(token === undefined ? {} : { token }), ...(o.requestTimeoutMs === undefined ? {} : { requestTimeoutMs: o.requestTimeoutMs }) }, tls)
  }

  /**
   * A KubernetesLeaseBackend for the cluster this pod runs in: the API server at
   * KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT, the service account's token (read
   * again when rotated) and CA, and its namespace unless given.
   */
  function kubernetesInCluster (options) {
    const o = check.plainObject(options, 'kubernetesInCluster options')
    const env = o.env ?? process.env
    const dir = o.serviceAccountDir === undefined ? SERVICE_ACCOUNT_DIR : check.string(o.serviceAccountDir, 'serviceAccountDir')
    let host = env.KUBERNETES_SERVICE_HOST
    const port = env.KUBERNETES_SERVICE_PORT
    if (!host || !port) {
      throw new ConfigError('not running in a Kubernetes pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set (use kubernetesFromKubeconfig)')
    }
    if (host.includes(':')) host = `[${host}]` // IPv6
    const token = path.join(dir, 'token')
    if (!fs.existsSync(token)) throw new ConfigError(`no service account token at ${JSON.stringify(token)}`)
    let namespace = o.namespace
    if (namespace === undefined) {
      try {
        namespace = fs.readFileSync(path.join(dir, 'namespace'), 'utf8').trim()
      } catch (error) {
        throw new ConfigError(`cannot read the service account's namespace: ${error.message}`, { cause: error })
      }
    }
    let ca
    try {
      ca = fs.readFileSync(path.join(dir, 'ca.crt'))
    } catch (error) {
      throw new ConfigError(`cannot load the service account's CA: ${error.message}`, { cause: error })
    }
    return owned({ server: `https://${host}:${port}`, namespace, token: tokenFile(token), ...(o.requestTimeoutMs === undefined ? {} : { requestTimeoutMs: o.requestTimeoutMs }) }, { ca })
  }

  return { KubernetesLeaseBackend, kubernetesFromKubeconfig, kubernetesInCluster }
}

module.exports = { createKubernetes }
