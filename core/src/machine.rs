//! [`Machine`]: inputs in, outputs out, one timer heap for every lock.

use core::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use rustc_hash::FxHashMap;

use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use serde::{Deserialize, Serialize};

use crate::backends::{Backend, BatchKey, Operation, Reply, RequestBody};
use crate::error::{EntropyError, UsageError};
use crate::lock::{Ctx, Lock};
use crate::observe::{Observation, ObserveOptions, Observed};
use crate::options::LockOptions;
use crate::{Instant, LockId, OwnerId, RequestId};

/// Something the host tells the machine. Every input carries the host's monotonic `now`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Input {
    /// Start acquiring `name`. The n-th accepted `Acquire` of a machine gets `LockId(n)`.
    Acquire {
        /// Host monotonic time of the call; never earlier than any `now` given before.
        now: Instant,
        /// The lock's name: 1 to 1024 bytes of UTF-8 with no NUL
        /// ([`crate::backends::check_lock_name`]).
        name: String,
        /// TTL, renewal, retry and safety settings, validated before anything changes.
        options: LockOptions,
    },
    /// Release a lock (or cancel its acquisition). A lock that already finished
    /// (released, lost, failed) ignores it, remembered or not; only an id this machine
    /// never issued is an error.
    Release {
        /// Host monotonic time of the call; never earlier than any `now` given before.
        now: Instant,
        /// The id the lock's `Acquire` got.
        lock: LockId,
    },
    /// Renew a held lease now (a manual extend), whether or not it renews itself. The
    /// outcome is the lease's next `Renewed` or `Lost` event; a lock not held ignores
    /// it, and only an id this machine never issued is an error.
    Extend {
        /// Host monotonic time of the call; never earlier than any `now` given before.
        now: Instant,
        /// The id the lock's `Acquire` got.
        lock: LockId,
    },
    /// The server's reply to a request.
    Reply {
        /// Host monotonic time the reply arrived; never earlier than any `now` given
        /// before.
        now: Instant,
        /// The answered [`Request::id`].
        request: RequestId,
        /// The server's answer as data, error replies included, of the request body's
        /// backend kind.
        reply: Reply,
    },
    /// The request failed in transport (connection reset, client timeout, cancelled at
    /// its deadline). Ambiguous: it may or may not have reached the server.
    TransportError {
        /// Host monotonic time the failure was seen (or the deadline passed); never
        /// earlier than any `now` given before.
        now: Instant,
        /// The failed [`Request::id`].
        request: RequestId,
        /// What failed, as text for people; it surfaces as a timeout's `last_error` and
        /// in observations.
        message: String,
    },
    /// Time passed. Early and spurious timeouts are harmless.
    Timeout {
        /// Host monotonic time of the wake-up; never earlier than any `now` given before.
        now: Instant,
    },
}

impl Input {
    /// The host's monotonic time the input carries.
    pub fn now(&self) -> Instant {
        match self {
            Input::Acquire { now, .. }
            | Input::Release { now, .. }
            | Input::Extend { now, .. }
            | Input::Reply { now, .. }
            | Input::TransportError { now, .. }
            | Input::Timeout { now } => *now,
        }
    }
}

/// A backend request for the host to execute.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// Quote it in the [`Input::Reply`] or [`Input::TransportError`] that answers.
    pub id: RequestId,
    /// The lock it is for.
    pub lock: LockId,
    /// Acquire, renew or release.
    pub operation: crate::backends::Operation,
    /// After this instant the outcome no longer matters: cancel the request and report
    /// an [`Input::TransportError`] (DESIGN.md rule 10).
    pub deadline: Instant,
    /// What to send.
    pub body: crate::backends::RequestBody,
}

/// Something the machine tells the host; drain with [`Machine::poll_output`] after every
/// input until it returns `Timeout` or `Idle`.
///
/// In JSON (serde) an output is `{"type": "request"|"event"|"timeout"|"idle", "data": …}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data", rename_all = "snake_case")]
pub enum Output {
    /// Execute this request and report its outcome.
    Request(Request),
    /// Act on this event.
    Event {
        /// The lock it concerns.
        lock: LockId,
        /// What happened to it.
        event: crate::Event,
    },
    /// Nothing more now: call again with [`Input::Timeout`] at (or after) this instant.
    Timeout(Instant),
    /// Nothing more now and no timer set: wait for the next input.
    Idle,
}

/// The lock state machine: many locks against one backend, no I/O, no clock. A clone
/// is an independent machine in the same state (same owner ids and jitter to come).
#[derive(Clone)]
pub struct Machine {
    backend: Backend,
    rng: ChaCha20Rng,
    last_now: Instant,
    next_lock: u64,
    next_request: u64,
    next_timer_gen: u64,
    // Keyed by ids this machine hands out in sequence, never by host input, so a fast
    // unkeyed hash is safe here (no collision flooding) and costs less per lookup.
    locks: FxHashMap<LockId, Lock>,
    requests: FxHashMap<RequestId, crate::lock::InFlight>,
    /// Batched renewals in flight: the host's request id (its first renewal's) → the
    /// renewals it carries, in order.
    batches: FxHashMap<RequestId, Vec<RequestId>>,
    /// What the recipe keeps across locks (etcd's shared session leases).
    shared: crate::backends::Shared,
    timers: BinaryHeap<Reverse<(Instant, LockId, u64)>>,
    outputs: VecDeque<Output>,
    /// `None`: nothing is observed, and no observation is built.
    observe: Option<ObserveOptions>,
    observations: VecDeque<Observed>,
    #[cfg(feature = "sabotage")]
    sabotage: crate::sabotage::Sabotage,
}

impl Machine {
    /// A machine for `backend`, drawing owner ids and jitter from a ChaCha20 CSPRNG
    /// seeded once from the operating system (`getrandom`).
    ///
    /// Errors: [`EntropyError`] when the platform has no secure randomness.
    pub fn new(backend: Backend) -> Result<Self, EntropyError> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| EntropyError(e.to_string()))?;
        Ok(Self::with_rng(backend, ChaCha20Rng::from_seed(seed)))
    }

    /// A deterministic machine for tests and simulation: the same seed gives the same
    /// owner ids and jitter. Never use it in production (owner ids become guessable).
    pub fn with_seed(backend: Backend, seed: u64) -> Self {
        Self::with_rng(backend, ChaCha20Rng::seed_from_u64(seed))
    }

    fn with_rng(backend: Backend, rng: ChaCha20Rng) -> Self {
        Machine {
            backend,
            rng,
            last_now: Instant::ZERO,
            next_lock: 0,
            next_request: 0,
            next_timer_gen: 0,
            locks: FxHashMap::default(),
            requests: FxHashMap::default(),
            batches: FxHashMap::default(),
            shared: crate::backends::Shared::default(),
            timers: BinaryHeap::new(),
            outputs: VecDeque::new(),
            observe: None,
            observations: VecDeque::new(),
            #[cfg(feature = "sabotage")]
            sabotage: crate::sabotage::Sabotage::default(),
        }
    }

    /// Breaks a safety rule on purpose, to show the simulator's checker catches it.
    /// Test-only (feature `sabotage`); never enable it in a build you ship.
    #[cfg(feature = "sabotage")]
    pub fn sabotage(&mut self, sabotage: crate::sabotage::Sabotage) {
        self.sabotage = sabotage;
    }

    /// Starts observing with `options` (events, warnings and their thresholds), or
    /// stops with `None` (observations not yet polled stay). Until it is called the
    /// machine builds no observation at all.
    ///
    /// Errors: [`UsageError::InvalidOption`] for a threshold out of range (see
    /// [`ObserveOptions`]); nothing changes.
    pub fn observe(&mut self, options: Option<ObserveOptions>) -> Result<(), UsageError> {
        if let Some(o) = &options {
            o.validate()?;
        }
        self.observe = options;
        Ok(())
    }

    /// The next observation, oldest first; `None` when there is none. Drain it after
    /// `poll_output` when observing (the order between the two queues is not kept).
    pub fn poll_observation(&mut self) -> Option<Observed> {
        self.observations.pop_front()
    }

    /// How many observations wait to be drained ([`Machine::poll_observation`]): a
    /// host may skip the drain, and the crossing into its language, when there are none.
    pub fn observations_pending(&self) -> usize {
        self.observations.len()
    }

    /// The backend this machine phrases requests for.
    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// Feeds one input. Timers due at `now` fire first, so a reply that arrives after a
    /// deadline is already late when it is read.
    ///
    /// Errors (the input is rejected and nothing changes):
    /// [`UsageError::TimeWentBackwards`], [`UsageError::TimeOutOfRange`]; for `Acquire`,
    /// [`UsageError::InvalidName`], [`UsageError::InvalidOption`],
    /// [`UsageError::UnsafePurpose`]; for `Release` and `Extend`,
    /// [`UsageError::UnknownLock`]. Replies to unknown requests are ignored.
    pub fn handle_input(&mut self, input: Input) -> Result<(), UsageError> {
        let now = input.now();
        if now < self.last_now {
            return Err(UsageError::TimeWentBackwards {
                now,
                last: self.last_now,
            });
        }
        if now > Instant::LATEST {
            return Err(UsageError::TimeOutOfRange { now });
        }
        // Validate before anything changes.
        match &input {
            Input::Acquire { name, options, .. } => self.check_acquire(name, options)?,
            Input::Release { lock, .. } | Input::Extend { lock, .. }
                if lock.0 == 0 || lock.0 > self.next_lock =>
            {
                return Err(UsageError::UnknownLock { lock: *lock });
            }
            _ => {}
        }
        self.last_now = now;
        let sent_before = self.outputs.len();
        self.fire_timers(now);
        match input {
            Input::Acquire { name, options, .. } => {
                self.next_lock += 1;
                let id = LockId(self.next_lock);
                let owner = crate::lock::Ctx::new_owner_from(&mut self.rng);
                if let Some(o) = self.observe {
                    self.observe_acquiring(id, &name, o);
                }
                let lock = Lock::new(id, name, options, owner, now);
                self.locks.insert(id, lock);
                self.with_lock(id, now, |lock, ctx| lock.start(ctx));
            }
            Input::Release { lock, .. } => self.with_lock(lock, now, |lock, ctx| lock.release(ctx)),
            Input::Extend { lock, .. } => self.with_lock(lock, now, |lock, ctx| lock.extend(ctx)),
            Input::Reply { request, reply, .. } => self.route(request, now, Ok(&reply)),
            Input::TransportError {
                request, message, ..
            } => self.route(request, now, Err(message)),
            Input::Timeout { .. } => {}
        }
        if self.backend.recipe().renew_batch_limit() > 1 {
            self.batch_renewals(sent_before, now);
        }
        Ok(())
    }

    /// Checks a lock name and options as [`Input::Acquire`] would, without acquiring:
    /// hosts call it to report bad options when a lock object is built.
    ///
    /// Errors: [`UsageError::InvalidName`] (empty, over 1024 bytes, or with a NUL),
    /// [`UsageError::InvalidOption`], [`UsageError::UnsafePurpose`].
    pub fn check_acquire(&self, name: &str, options: &LockOptions) -> Result<(), UsageError> {
        self.backend.check_acquire(name, options)
    }

    /// Starts acquiring `name`; returns the new lock's id. Same as [`Input::Acquire`].
    ///
    /// Errors: as [`Machine::handle_input`].
    pub fn acquire(
        &mut self,
        now: Instant,
        name: &str,
        options: LockOptions,
    ) -> Result<LockId, UsageError> {
        self.handle_input(Input::Acquire {
            now,
            name: name.to_owned(),
            options,
        })?;
        Ok(LockId(self.next_lock))
    }

    /// Releases `lock`, or cancels its acquisition. Same as [`Input::Release`].
    pub fn release(&mut self, now: Instant, lock: LockId) -> Result<(), UsageError> {
        self.handle_input(Input::Release { now, lock })
    }

    /// Renews `lock` now if it is held. Same as [`Input::Extend`].
    pub fn extend(&mut self, now: Instant, lock: LockId) -> Result<(), UsageError> {
        self.handle_input(Input::Extend { now, lock })
    }

    /// The next output. Call after every input until it returns `Timeout` or `Idle`.
    pub fn poll_output(&mut self) -> Output {
        if let Some(output) = self.outputs.pop_front() {
            return output;
        }
        while let Some(Reverse((at, lock, gen))) = self.timers.peek().copied() {
            if self.timer_is_live(at, lock, gen) {
                return Output::Timeout(at);
            }
            self.timers.pop();
        }
        Output::Idle
    }

    /// The owner id of `lock`'s current acquisition, if the lock is known.
    pub fn owner(&self, lock: LockId) -> Option<OwnerId> {
        self.locks.get(&lock).map(|l| l.acq.owner)
    }

    /// The validity deadline of `lock` while it is held.
    pub fn valid_until(&self, lock: LockId) -> Option<Instant> {
        self.locks.get(&lock).and_then(|l| l.valid_until())
    }

    /// How many locks the machine tracks (held, pending, or finished with requests in
    /// flight).
    pub fn lock_count(&self) -> usize {
        self.locks.len()
    }

    /// How many requests await a reply or transport error (a batched renewal is one).
    pub fn requests_in_flight(&self) -> usize {
        let carried = |renewals: &Vec<RequestId>| {
            let live = renewals.iter().filter(|r| self.requests.contains_key(r));
            live.count().saturating_sub(1)
        };
        self.requests.len() - self.batches.values().map(carried).sum::<usize>()
    }

    /// Feeds the machine's whole state to `h` in a canonical order (maps by key, live
    /// timers only), so that two machines in the same state hash alike whatever
    /// history led there. Test-only (feature `model`): the model checker's state hash
    /// (`crate::model`).
    #[cfg(feature = "model")]
    pub fn fingerprint(&self, h: &mut impl core::hash::Hasher) {
        use core::fmt::Write;
        use core::hash::Hash;
        struct Sink<'a, H>(&'a mut H);
        impl<H: core::hash::Hasher> Write for Sink<'_, H> {
            fn write_str(&mut self, s: &str) -> core::fmt::Result {
                self.0.write(s.as_bytes());
                Ok(())
            }
        }
        self.last_now.hash(h);
        (self.next_lock, self.next_request).hash(h);
        self.rng.get_word_pos().hash(h);
        let mut locks: Vec<_> = self.locks.iter().collect();
        locks.sort_by_key(|(id, _)| **id);
        let mut requests: Vec<_> = self.requests.iter().collect();
        requests.sort_by_key(|(id, _)| id.0);
        let mut batches: Vec<_> = self.batches.iter().collect();
        batches.sort_by_key(|(id, _)| id.0);
        let mut timers: Vec<_> = (self.timers.iter())
            .filter(|Reverse((at, lock, gen))| self.timer_is_live(*at, *lock, *gen))
            .map(|Reverse((at, lock, _))| (*at, *lock))
            .collect();
        timers.sort();
        // Debug is total over these types; a write to a hasher cannot fail
        let _ = write!(
            Sink(h),
            "{locks:?}{requests:?}{batches:?}{timers:?}{:?}{:?}",
            self.outputs,
            self.shared
        );
    }

    /// `acquiring`, and `hot_lock` when the pending acquisitions of `name` reach
    /// `hot_lock_waiters` (this one included).
    #[inline(never)]
    fn observe_acquiring(&mut self, id: LockId, name: &str, o: ObserveOptions) {
        let mut push = |observation| {
            self.observations.push_back(Observed {
                lock: id,
                name: name.to_owned(),
                observation,
            })
        };
        if o.events {
            push(Observation::Acquiring);
        }
        if o.warnings && o.hot_lock_waiters > 0 {
            let waiting = 1 + self
                .locks
                .values()
                .filter(|l| l.is_acquiring() && l.acq.name == name)
                .count();
            if u32::try_from(waiting).is_ok_and(|n| n == o.hot_lock_waiters) {
                push(Observation::HotLock {
                    found_held: None,
                    waiters: Some(o.hot_lock_waiters),
                });
            }
        }
    }

    fn timer_is_live(&self, at: Instant, lock: LockId, gen: u64) -> bool {
        self.locks.get(&lock).and_then(|l| l.acq.timer) == Some((at, gen))
    }

    fn fire_timers(&mut self, now: Instant) {
        while let Some(Reverse((at, lock, gen))) = self.timers.peek().copied() {
            if at > now {
                break;
            }
            self.timers.pop();
            if self.timer_is_live(at, lock, gen) {
                if let Some(l) = self.locks.get_mut(&lock) {
                    l.acq.timer = None;
                }
                self.with_lock(lock, now, |lock, ctx| lock.on_timer(ctx));
            }
        }
    }

    /// Renewals sent by the input just handled (`outputs[sent_before..]`): held leases
    /// due to renew soon join them ([`Lock::joins_renewal`]), and renewals phrased
    /// alike go out as one request per `renew_batch_limit` of them, under the first
    /// one's id. Each keeps its own id inside the machine, so its lock reads its own
    /// part of the reply as if it had gone alone (docs/DESIGN.md, "Batched renewals").
    fn batch_renewals(&mut self, sent_before: usize, now: Instant) {
        let renewal =
            |o: &Output| matches!(o, Output::Request(r) if r.operation == Operation::Renew);
        if !self.outputs.iter().skip(sent_before).any(renewal) {
            return;
        }
        let mut joining: Vec<LockId> = (self.locks.values())
            .filter(|l| l.joins_renewal(now))
            .map(Lock::id)
            .collect();
        joining.sort_unstable();
        for id in joining {
            self.with_lock(id, now, |lock, ctx| lock.extend(ctx));
        }
        let recipe = self.backend.recipe();
        let mut groups: Vec<(BatchKey, Vec<usize>)> = Vec::new();
        for (at, output) in self.outputs.iter().enumerate().skip(sent_before) {
            let Output::Request(r) = output else { continue };
            let key = (r.operation == Operation::Renew)
                .then(|| recipe.renew_batch_key(&r.body))
                .flatten();
            let Some(key) = key else { continue };
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, members)) => members.push(at - sent_before),
                None => groups.push((key, vec![at - sent_before])),
            }
        }
        if groups.iter().all(|(_, members)| members.len() < 2) {
            return;
        }
        // `members` index the outputs from `sent_before` on, which `sent` now holds
        let mut sent: Vec<Option<Output>> = self.outputs.drain(sent_before..).map(Some).collect();
        for (_, members) in groups {
            for chunk in members.chunks(recipe.renew_batch_limit().max(1)) {
                let renewals: Vec<&Request> = (chunk.iter())
                    .filter_map(|&at| match &sent[at] {
                        Some(Output::Request(r)) => Some(r),
                        _ => None,
                    })
                    .collect();
                let (Some(first), true) = (renewals.first(), renewals.len() > 1) else {
                    continue;
                };
                let bodies: Vec<&RequestBody> = renewals.iter().map(|r| &r.body).collect();
                let Some(body) = recipe.phrase_renew_batch(&bodies) else {
                    continue;
                };
                let batch = Request {
                    id: first.id,
                    lock: first.lock,
                    operation: Operation::Renew,
                    deadline: renewals
                        .iter()
                        .map(|r| r.deadline)
                        .min()
                        .unwrap_or(first.deadline),
                    body,
                };
                self.batches
                    .insert(batch.id, renewals.iter().map(|r| r.id).collect());
                for &at in chunk {
                    sent[at] = None;
                }
                // a chunk is never empty
                sent[chunk[0]] = Some(Output::Request(batch));
            }
        }
        self.outputs.extend(sent.into_iter().flatten());
    }

    fn route(&mut self, request: RequestId, now: Instant, reply: Result<&Reply, String>) {
        let Some(renewals) = self.batches.remove(&request) else {
            return self.route_one(request, now, reply);
        };
        let split = match &reply {
            Ok(r) => self.backend.recipe().split_renew_batch(r, renewals.len()),
            Err(_) => None,
        };
        for (i, renewal) in renewals.into_iter().enumerate() {
            let own = match (split.as_ref().and_then(|s| s.get(i)), &reply) {
                (Some(part), _) => Ok(part),
                (None, Ok(whole)) => Ok(*whole),
                (None, Err(message)) => Err(message.clone()),
            };
            self.route_one(renewal, now, own);
        }
    }

    fn route_one(&mut self, request: RequestId, now: Instant, reply: Result<&Reply, String>) {
        let Some(flight) = self.requests.remove(&request) else {
            return; // unknown, duplicate, or already given up on: harmless
        };
        let lock = flight.lock;
        if let Some(l) = self.locks.get_mut(&lock) {
            l.acq.in_flight = l.acq.in_flight.saturating_sub(1);
        }
        self.with_lock(lock, now, move |lock, ctx| {
            lock.on_reply(ctx, flight, reply)
        });
    }

    /// Runs `f` on a lock, then reschedules its timer and forgets it once finished.
    fn with_lock(&mut self, id: LockId, now: Instant, f: impl FnOnce(&mut Lock, &mut Ctx<'_>)) {
        let Some(lock) = self.locks.get_mut(&id) else {
            return;
        };
        let mut ctx = Ctx {
            now,
            recipe: self.backend.recipe(),
            shared: &mut self.shared,
            rng: &mut self.rng,
            next_request: &mut self.next_request,
            requests: &mut self.requests,
            outputs: &mut self.outputs,
            observe: self.observe.as_ref(),
            observations: &mut self.observations,
            #[cfg(feature = "sabotage")]
            sabotage: self.sabotage,
        };
        f(lock, &mut ctx);
        let wakeup = lock.wakeup();
        if wakeup != lock.acq.timer.map(|(at, _)| at) {
            lock.acq.timer = wakeup.map(|at| {
                self.next_timer_gen += 1;
                self.timers.push(Reverse((at, id, self.next_timer_gen)));
                (at, self.next_timer_gen)
            });
        }
        if lock.can_forget(now) {
            if lock.acq.in_flight > 0 {
                // Replies that never came: forget them too.
                self.requests.retain(|_, f| f.lock != id);
                let requests = &self.requests;
                (self.batches)
                    .retain(|_, renewals| renewals.iter().any(|r| requests.contains_key(r)));
            }
            self.locks.remove(&id);
        }
        // Stale heap entries are skipped lazily; rebuild when they dominate.
        if self.timers.len() > 64 + 2 * self.locks.len() {
            self.timers = self
                .locks
                .values()
                .filter_map(|l| l.acq.timer.map(|(at, gen)| Reverse((at, l.id(), gen))))
                .collect();
        }
    }
}
