// Leader election as a typed, runnable example (ES module): one leader at a time, its
// work aborted when the term ends. Type-checked by `tsc -p bindings-node/examples` (strict).
import { Election, Fence, type Leadership, MemoryBackend, type StopReason } from 'fencepost'

const backend = new MemoryBackend() // or an EtcdBackend for a correctness election
const fence = new Fence()
const election = new Election(backend, 'scheduler', 'pod-a', {
  value: '10.0.0.1:8080',
  ttlMs: 10_000,
  onStartedLeading: (l: Leadership) => console.log(`leading with token ${l.token}`),
  onStoppedLeading: (l: Leadership, reason: StopReason) => console.log(`stopped leading: ${reason}`)
})

const shutdown = new AbortController()
const ticks: number = await election.run(async (signal, leadership) => {
  let n = 0
  while (!signal.aborted && n < 3) {
    fence.check('schedule', leadership.token) // every write carries the term's token
    n++
  }
  return n
}, { signal: shutdown.signal })
console.log(`scheduled ${ticks} times, then resigned`)

const term = await election.campaign({ timeoutMs: 1_000 })
await term.resign()
await backend.close()
