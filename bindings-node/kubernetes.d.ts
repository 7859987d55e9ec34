// Types of Kubernetes configuration in the `fencepost` Node package (kubernetes.js beside
// this file): kubeconfig files and the pod's service account, which need Node's files and
// node:https. KubernetesLeaseBackend itself is in fencepost.d.ts, shared with the
// WebAssembly package.
import { KubernetesLeaseBackend } from './fencepost'

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
