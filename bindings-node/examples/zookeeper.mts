// ZooKeeper and Kubernetes Lease locks from Node (type-checked, not run here;
// tests/js/zookeeper.test.js and tests/js/kubernetes.test.js run the same against a real
// ZooKeeper and the project's Lease API server on 127.0.0.1).
import { Lock, ZooKeeperBackend, KubernetesLeaseBackend, kubernetesFromKubeconfig, StaleTokenError } from 'fencepost'

export async function compactOnce (hosts: string): Promise<void> {
  // the session is the lease: ttlMs at most the session timeout the server negotiated
  const backend = await ZooKeeperBackend.connect(hosts, { root: '/locks', sessionTimeoutMs: 10_000 })
  try {
    const lock = new Lock(backend, 'compaction', { ttlMs: backend.sessionTimeoutMs, purpose: 'correctness' })
    await lock.using(async (signal, lease) => {
      // written only while this lease's own node exists (a multi-op transaction)
      await backend.fencedCommit(lease, (txn) => { txn.setData('/jobs/compaction', new TextEncoder().encode(String(lease.token)), -1) })
      signal.throwIfAborted()
    })
  } catch (error) {
    if (error instanceof StaleTokenError) console.log(`lease ${error.token} no longer held: nothing written`)
    throw error
  } finally {
    await backend.close()
  }
}

export async function leadOnce (kubeconfig?: string): Promise<bigint> {
  const backend: KubernetesLeaseBackend = kubernetesFromKubeconfig(kubeconfig, { namespace: 'jobs' })
  try {
    const lease = await new Lock(backend, 'scheduler', { ttlMs: 15_000 }).acquire()
    const stored = await backend.readLease('scheduler')
    console.log(`holder ${stored?.spec?.holderIdentity}, token ${lease.token}`)
    await lease.release()
    return lease.token
  } finally {
    await backend.close()
  }
}
