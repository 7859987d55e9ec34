'use strict'
// Kubernetes Lease over `fetch`: KubernetesLeaseBackend runs the lock machine's Lease calls
// (the machine's `kubernetes` requests: stamp the wall-clock fields, send, hand back the
// response body), as Python's KubernetesLeaseBackend does over httpx. Shared by both
// packages: every host with `fetch` (Node, browsers, edge workers, Deno) reaches the API
// server with `{ server, token, namespace, fetch }`. What needs Node's files and
// node:https (a kubeconfig, the pod's service account, the cluster's CA) is
// bindings-node/kubernetes.js, on top of this class.

const check = require('./check')
const { now, deadlineSignal, eitherSignal } = require('./driver')
const { BackendError, ConfigError, ProtocolError } = require('./errors')

function createKubernetesLease (native, Backend) {
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
   * Locks on Kubernetes `coordination.k8s.io/v1` Leases over `fetch`; see fencepost.d.ts
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
      const limit = check.listArguments(prefix, options)
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

  return { KubernetesLeaseBackend }
}

module.exports = { createKubernetesLease }
