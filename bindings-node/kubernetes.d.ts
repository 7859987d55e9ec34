// Types of Kubernetes Lease in the `fencepost` Node package (kubernetes.js beside this
// file). Not in fencepost.d.ts, which the WebAssembly package shares: its module carries no
// Lease machine.
import { Backend, ExecuteOptions, MachineKubernetesRequest } from './fencepost'

export interface KubernetesLeaseBackendOptions {
  /** The API server's URL (`'https://10.0.0.1:6443'`). */
  server: string
  /** A bearer token sent with every request, or a function returning one (called per
   * request: a rotated service-account token). */
  token?: string | (() => string | Promise<string>)
  /** The namespace of the Leases (`'default'`; a DNS-1123 label, checked when a lock is built). */
  namespace?: string
  /** The fetch to use (default the global one). Give one with the cluster's TLS settings
   * when its CA is not the runtime's; in Node, `kubernetesFromKubeconfig` and
   * `kubernetesInCluster` make one. */
  fetch?: (url: string, init: { method: string, headers: Record<string, string>, body?: string, signal?: AbortSignal }) => Promise<{ status: number, text(): Promise<string> }>
  /** Each API call ends after this long, in ms, or at its request deadline if sooner
   * (default 1000; keep it well below `ttlMs / 3`). */
  requestTimeoutMs?: number
}

/**
 * Locks on Kubernetes `coordination.k8s.io/v1` Leases, one Lease per lock name, over
 * `fetch`, with the same recipe and semantics as Python's `KubernetesLeaseBackend`. The
 * Node package only: the WebAssembly module carries no Lease machine (it would add 5.2 KiB
 * gzipped, over its size budget; its `LockMachine` refuses the kind). The
 * service account needs `get`, `create`, `update` and `patch` on `leases`. Tested against
 * the project's Lease API server (tests/kube/lease_server.py), not a real cluster.
 *
 * **One lock, one Lease.** `new Lock(backend, 'my-app')` is the Lease `my-app` in the
 * backend's namespace (a lock name must be a DNS-1123 subdomain; `ttlMs` whole seconds, at
 * least 1000). The fields mean what client-go's leader election makes them mean, so a
 * fencepost lock and a client-go elector on one Lease exclude each other:
 * `holderIdentity` (the owner id, `''` when free), `leaseDurationSeconds` (the TTL),
 * `acquireTime` / `renewTime` (wall-clock `MicroTime`s this adapter stamps just before
 * sending; no decision reads them), `leaseTransitions`.
 *
 * **Tokens**: `leaseTransitions`, raised by one on every grant (client-go raises it only
 * when the holder changes), always by a compare-and-set on `resourceVersion` (a 409 means
 * another candidate won the round): it never goes back while the Lease exists, so
 * `purpose: 'correctness'` needs no opt-in. Deleting the Lease restarts it at 1.
 *
 * **Expiry** is never judged from `renewTime` and this machine's clock: a contender treats
 * a Lease as expired once it stayed unchanged for the `leaseDurationSeconds` it states,
 * counted on its own monotonic clock. The holder's validity is measured from the send of
 * its last successful write, and it is lost on time even when the API server hangs.
 *
 * **Holder metadata, inspection, followers.** The `metadata` lock option is stored in the
 * Lease's `fencepost.dev/holder-metadata` annotation with the owner id (client-go keeps
 * annotations and never reads it; a reader shows it only while that owner is the
 * `holderIdentity`). `inspect(name)` reads one Lease (owner = holderIdentity, token =
 * leaseTransitions, `ttlLeftMs` = leaseDurationSeconds as an upper bound, waiters null);
 * `list(prefix, { limit })` pages `GET …/leases?limit=500` with `continue` (at most 100
 * pages); an election's followers (`leader()`, `observe()`) read the leader's record
 * from that annotation.
 *
 * Every JSON body the API server answers (a Lease or a `Status`, whatever the HTTP
 * status) goes to the machine; a body that is not JSON is a transport failure.
 *
 * @throws ConfigError (`ERR_CONFIG`) for a `server` that is not an http(s) URL, a `token`
 *   that is neither a string nor a function, a `fetch` that is not a function, an unknown
 *   option.
 */
export declare class KubernetesLeaseBackend extends Backend {
  constructor(options: KubernetesLeaseBackendOptions)
  /** The API server's URL. */
  readonly server: string
  /** The namespace of the Leases. */
  readonly namespace: string
  /** The API path of lock `name`'s Lease. */
  leasePath(name: string): string
  /** The Lease of lock `name` as stored (holder, count, times: for observers), or null
   * when there is none.
   * @throws BackendError (`ERR_BACKEND`) the server could not be reached;
   *   ProtocolError (`ERR_PROTOCOL`) any other error status. */
  readLease(name: string): Promise<Record<string, any> | null>
  /** Runs one call of a Kubernetes lock machine; resolves to the response body (JSON
   * text), rejects for a transport failure. */
  execute(request: MachineKubernetesRequest, options?: ExecuteOptions): Promise<string>
}

export interface KubeconfigOptions {
  /** The context to use; default the file's `current-context`. */
  context?: string
  /** The Leases' namespace; default the context's, else `'default'`. */
  namespace?: string
  /** Each API call ends after this long, in ms (default 1000; keep it well below `ttlMs / 3`). */
  requestTimeoutMs?: number
}

export interface InClusterOptions {
  /** The Leases' namespace; default the service account's (`namespace` file). */
  namespace?: string
  /** Each API call ends after this long, in ms (default 1000). */
  requestTimeoutMs?: number
  /** Where the service account is mounted (`/var/run/secrets/kubernetes.io/serviceaccount`). */
  serviceAccountDir?: string
  /** Replaces `process.env` (tests). */
  env?: Record<string, string | undefined>
}

/**
 * A KubernetesLeaseBackend for a kubeconfig context, on a node:https fetch it makes and
 * `close()` ends. `file` defaults to the first file of `$KUBECONFIG`, else
 * `~/.kube/config`. Reads the cluster's `server`, `certificate-authority` /
 * `certificate-authority-data` and `insecure-skip-tls-verify`, and the user's `token`,
 * `tokenFile` (read again when it changes), `client-certificate` /
 * `client-certificate-data` and `client-key` / `client-key-data`; relative paths are
 * relative to the file. Needs the `yaml` package (`npm install yaml`).
 * @throws ConfigError (`ERR_CONFIG`): the file is missing or not a kubeconfig; the
 *   context, its cluster or user is not in it; the user authenticates with `exec` or
 *   `auth-provider` plugins (not run: give a token or a client certificate); a TLS file
 *   cannot be read; `yaml` is not installed.
 */
export declare function kubernetesFromKubeconfig(file?: string | null, options?: KubeconfigOptions): KubernetesLeaseBackend

/**
 * A KubernetesLeaseBackend for the cluster this pod runs in: the API server at
 * `https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`, the service account's
 * `token` (read again when rotated) and `ca.crt`, and its `namespace` unless given.
 * @throws ConfigError (`ERR_CONFIG`): not in a pod (the variables or files are missing).
 */
export declare function kubernetesInCluster(options?: InClusterOptions): KubernetesLeaseBackend
