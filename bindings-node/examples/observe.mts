// Observability: the core's events and warnings, wired to a log and to metrics.
// Type-checked by `tsc -p bindings-node/examples` (strict).
import diagnostics_channel from 'node:diagnostics_channel'
import { Lock, MemoryBackend, type Observation } from 'fencepost'

const backend = new MemoryBackend()

// 1. Every event and warning of the backend's locks, as one structured log line each.
backend.observe({
  onEvent: (o: Observation) => console.log(JSON.stringify({ level: o.level, event: o.event, lock: o.lock, ...o.fields, token: o.fields.token?.toString() })),
  heldLongTtls: 20 // warn once a lease was held 20 TTLs (default 10)
})

// 2. Or subscribe to a channel (no fencepost import needed where the channel is read).
const acquireLatencyMs: number[] = []
diagnostics_channel.subscribe('fencepost:acquired', (message) => {
  const o = message as Observation
  acquireLatencyMs.push(Number(o.fields.waitedMs)) // fencepost.acquire.duration
})

// 3. A lock with a callback of its own.
const lock = new Lock(backend, 'nightly-report', {
  ttlMs: 1_000,
  onEvent: (o) => { if (o.warning) console.warn(o.message) }
})
await lock.using(async () => {})
console.log(`acquire latencies: ${acquireLatencyMs.join(', ')} ms`)
await backend.close()
