// CommonJS: `require('fencepost')`, error handling by class and by stable `code`.
import fencepost = require('fencepost')

const { Lock, MemoryBackend, FencepostError, AcquireTimeoutError, LockLostError } = fencepost

async function main (): Promise<void> {
  const backend = new MemoryBackend()
  const holder = new Lock(backend, 'job', { ttlMs: 1_000 })
  const other = new Lock(backend, 'job', { ttlMs: 1_000, acquireTimeoutMs: 0 })
  const lease = await holder.acquire()
  try {
    await other.acquire()
  } catch (error) {
    if (error instanceof AcquireTimeoutError) console.log(error.code, error.lockName, error.lastError)
    else throw error
  }
  const controller = new AbortController()
  const waiting = other.acquire({ signal: controller.signal })
  controller.abort(new Error('shutting down'))
  await waiting.catch((error: unknown) => console.log('wait cancelled:', (error as Error).message))
  backend.server.deleteLock('job') // an operator deletes the key: the next renewal is refused
  await new Promise((resolve) => lease.signal.addEventListener('abort', resolve, { once: true }))
  const reason: unknown = lease.signal.reason
  if (reason instanceof LockLostError) console.log(reason.code, reason.reason, reason.token)
  try {
    new Lock(backend, 'job', { ttlMs: Number.NaN })
  } catch (error) {
    if (error instanceof FencepostError && error.code === 'ERR_CONFIG') console.log(error.message)
  }
  backend.close()
}

main().catch((error: unknown) => { console.error(error); process.exitCode = 1 })
