'use strict'
// Kubernetes configuration from Node: kubernetesFromKubeconfig and kubernetesInCluster build
// the shared KubernetesLeaseBackend (js/kubernetes.js, over `fetch`) from a kubeconfig file
// (the current context's server, CA, bearer token or client certificate) or the pod's
// service account, as Python's from_kubeconfig / in_cluster read them, giving the backend a
// fetch on node:https with the cluster's TLS settings (the global fetch takes no CA or
// client certificate) and a token read again whenever its file changes (projected
// service-account tokens are rotated). kubeconfig files are YAML: parsed with `yaml` (an
// optional peer dependency; a missing one is a ConfigError naming it).

const fs = require('node:fs')
const http = require('node:http')
const https = require('node:https')
const os = require('node:os')
const path = require('node:path')
const check = require('./dist/js/check.js')

/** Where a pod's service account is mounted. */
const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount'

function createKubernetes (fp) {
  const { KubernetesLeaseBackend, ConfigError, BackendError } = fp

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

  return { kubernetesFromKubeconfig, kubernetesInCluster }
}

module.exports = { createKubernetes }
