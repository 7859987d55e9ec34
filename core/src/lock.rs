//! One lock's state and its transitions, one function per input. This file decides
//! *when*: validity, the renew schedule, backoff, deadlines, loss and cleanup. How each
//! step is phrased and how its replies read is the recipe's business
//! ([`crate::backends`]); this file never knows which server it talks to.

use core::mem;
use core::time::Duration;
use std::collections::VecDeque;

use rand_chacha::ChaCha20Rng;
use rand_core::RngCore;
use rustc_hash::FxHashMap;

use crate::backends::{
    Ending, Phrased, Progress, Read, ReadError, Recipe, Reply, RequestBody, Shared, Step, StepCx,
    Waiting as WaitStyle,
};
use crate::event::{AcquireFailedReason, Event, LostReason};
use crate::observe::{Observation, ObserveOptions, Observed};
use crate::options::LockOptions;
use crate::retry::{self, Jitter, RELEASE_ATTEMPTS};
use crate::{FencingToken, Instant, LockId, Output, OwnerId, Request, RequestId};

/// The id a state holds for a step the recipe phrased as no request at all: no reply
/// can match it, so the state waits for its own deadline (request ids start at 1).
const NO_REQUEST: RequestId = RequestId(0);

/// Whom a request's reply concerns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// A step of the lock's own acquisition, renewal, release or wait.
    Lock,
    /// A release sent to free what the server may hold for an owner id the lock gave
    /// up on; retried on failure and reported to nobody. `attempt` counts from 0.
    Cleanup { attempt: u32 },
}

/// A request the machine is waiting on.
#[derive(Clone, Debug)]
pub(crate) struct InFlight {
    pub lock: LockId,
    pub step: Step,
    /// The step this request belongs to: the id of its first request (a step fanned
    /// out to several servers sends several requests).
    pub group: RequestId,
    /// Which of the step's requests this is, from 0.
    pub part: u16,
    /// The owner id the request was phrased for (it can differ from the lock's current
    /// owner id after a too-late grant).
    pub owner: OwnerId,
    pub role: Role,
    pub sent_at: Instant,
}

/// What one input needs besides the lock: the backend, randomness, and the queues.
pub(crate) struct Ctx<'a> {
    pub now: Instant,
    /// How the lock's server is spoken to.
    pub recipe: &'a dyn Recipe,
    /// What the recipe keeps across this machine's locks.
    pub shared: &'a mut Shared,
    pub rng: &'a mut ChaCha20Rng,
    pub next_request: &'a mut u64,
    pub requests: &'a mut FxHashMap<RequestId, InFlight>,
    pub outputs: &'a mut VecDeque<Output>,
    /// `None`: nothing is observed (no observation is built).
    pub observe: Option<&'a ObserveOptions>,
    pub observations: &'a mut VecDeque<Observed>,
    #[cfg(feature = "sabotage")]
    pub sabotage: crate::sabotage::Sabotage,
}

impl Ctx<'_> {
    /// Where validity is measured from: the send (DESIGN.md rule 1), or — only when a
    /// test sabotages the rule to show the checker catches it — the reply.
    fn validity_base(&self, sent_at: Instant) -> Instant {
        #[cfg(feature = "sabotage")]
        if self.sabotage.validity_from_reply {
            return self.now;
        }
        sent_at
    }

    pub(crate) fn new_owner(&mut self) -> OwnerId {
        Self::new_owner_from(self.rng)
    }

    /// 128 bits from the machine's CSPRNG.
    pub(crate) fn new_owner_from(rng: &mut ChaCha20Rng) -> OwnerId {
        let mut bytes = [0u8; 16];
        rng.fill_bytes(&mut bytes);
        OwnerId(bytes)
    }

    fn emit(&mut self, lock: LockId, event: Event) {
        self.outputs.push_back(Output::Event { lock, event });
    }

    /// Reports the event `f` builds, if events are observed, or it is one logged at
    /// warning level and warnings are (`f` runs only then).
    fn event(&mut self, acq: &Acquisition, f: impl FnOnce() -> Observation) {
        if let Some(o) = self.observe.filter(|o| o.events || o.warnings) {
            self.push_event(acq, f(), o.events);
        }
    }

    /// The non-generic half of [`Ctx::event`] (one copy, not one per call site).
    #[inline(never)]
    fn push_event(&mut self, acq: &Acquisition, observation: Observation, events: bool) {
        if events || observation.level() == "warning" {
            self.push_observed(acq, observation);
        }
    }

    /// Reports the warning `f` decides on with the thresholds, if warnings are
    /// observed (`f` runs only then).
    fn warn(&mut self, acq: &Acquisition, f: impl FnOnce(&ObserveOptions) -> Option<Observation>) {
        if let Some(observation) = self.observe.filter(|o| o.warnings).and_then(f) {
            self.push_observed(acq, observation);
        }
    }

    #[inline(never)]
    fn push_observed(&mut self, acq: &Acquisition, observation: Observation) {
        self.observations.push_back(Observed {
            lock: acq.id,
            name: acq.name.clone(),
            observation,
        });
    }
}

impl Jitter for Ctx<'_> {
    /// A uniform draw from `0 ..= max`.
    fn draw(&mut self, max: Duration) -> Duration {
        let nanos = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
        if nanos == 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos(self.rng.next_u64() % nanos.saturating_add(1))
    }
}

// ---- states --------------------------------------------------------------------------

/// What every state of an acquisition in progress carries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Trying {
    /// Attempts made so far (the backoff's exponent).
    pub attempt: u32,
    /// When acquiring gives up (`None`: never).
    pub deadline: Option<Instant>,
    /// The last error seen while trying, reported if acquiring times out.
    pub last_error: Option<String>,
    /// The first error of the current run of ambiguous acquire errors, which
    /// `last_error` names beside the latest; `None` outside a run.
    pub first_error: Option<String>,
}

impl Trying {
    /// Replaces the errors seen so far with `error` (or with none), ending a run.
    pub fn set_error(&mut self, error: Option<String>) {
        self.last_error = error;
        self.first_error = None;
    }
}

/// An acquire step in flight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Acquiring {
    pub trying: Trying,
    pub request: RequestId,
    pub sent_at: Instant,
}

/// Backing off before the next attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Backoff {
    pub trying: Trying,
    pub retry_at: Instant,
}

/// Queued on the server and blocked until a release wakes this waiter, or until the
/// backoff the wait stands in for has passed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Parked {
    pub trying: Trying,
    pub request: RequestId,
    /// The validity base of a grant the wait brings back: the send of the acquire that
    /// found the lock held by another (the grant was made after that acquire ran, so
    /// the lease the releasing holder set runs from later than this).
    pub sent_at: Instant,
    /// When to stop waiting for the wait's reply and try anyway.
    pub give_up_at: Instant,
}

/// The lease is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Held {
    pub token: FencingToken,
    pub valid_until: Instant,
    /// `Instant::MAX` when auto-renew is off.
    pub renew_at: Instant,
}

/// A renewal in flight; the lease is held until `valid_until` whatever its reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Renewing {
    pub token: FencingToken,
    pub valid_until: Instant,
    pub request: RequestId,
    pub sent_at: Instant,
}

/// A release (or a cancellation) in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Releasing {
    pub ending: Ending,
    pub request: RequestId,
    pub attempt: u32,
    /// After this the key has expired on its own; the release is moot.
    pub deadline: Instant,
    pub sent: Sent,
}

/// What the earlier attempts of a release of a held lease may have done, and until
/// when the lease was valid (a release sent before then found the key ours).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sent {
    pub valid_until: Instant,
    /// An earlier attempt sent inside the validity has an unknown outcome, or a cleanup
    /// of the same owner is under way beside the release: either may have deleted the
    /// key, so a release finding it gone is the release, not a loss.
    pub maybe_deleted: bool,
}

/// A release whose reply was not an outcome (a transport failure, a retryable or
/// unreadable reply), waiting to be sent again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReleaseBackoff {
    pub ending: Ending,
    pub retry_at: Instant,
    pub attempt: u32,
    pub deadline: Instant,
    pub sent: Sent,
}

/// A lock's state. The request id in a state is the only reply that state accepts;
/// any other reply is late and handled by [`Lock::on_late_reply`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum State {
    Acquiring(Acquiring),
    /// Backing off; the server holds nothing for the current owner id.
    Waiting(Backoff),
    /// Backing off after an attempt whose outcome is unknown, or while queued on the
    /// server: the server may hold the lock (or a queue place) for the current owner
    /// id, so giving up must release it (DESIGN.md rule 5).
    Unsure(Backoff),
    Parked(Parked),
    Held(Held),
    Renewing(Renewing),
    Releasing(Releasing),
    ReleaseBackoff(ReleaseBackoff),
    /// Released, lost or failed. Replies still in flight are awaited until
    /// `forget_at` (late grants must be released); then the lock is forgotten.
    Finished {
        forget_at: Instant,
    },
}

impl State {
    /// The step id the state waits on, if any.
    fn request(&self) -> Option<RequestId> {
        match self {
            State::Acquiring(Acquiring { request, .. })
            | State::Parked(Parked { request, .. })
            | State::Renewing(Renewing { request, .. })
            | State::Releasing(Releasing { request, .. }) => Some(*request),
            _ => None,
        }
    }

    /// Takes the acquisition's progress out of an acquiring state (a fresh one
    /// otherwise), leaving it empty.
    fn take_trying(&mut self) -> Trying {
        match self {
            State::Acquiring(Acquiring { trying, .. })
            | State::Waiting(Backoff { trying, .. })
            | State::Unsure(Backoff { trying, .. })
            | State::Parked(Parked { trying, .. }) => mem::take(trying),
            _ => Trying::default(),
        }
    }
}

// ---- the lock ------------------------------------------------------------------------

/// One acquisition's facts, beside its state: what the lock is, and what it has sent.
#[derive(Clone, Debug)]
pub(crate) struct Acquisition {
    pub id: LockId,
    pub name: String,
    pub options: LockOptions,
    pub owner: OwnerId,
    /// An acquire attempt under `owner` ended without a known outcome (a transport
    /// error, an ambiguous reply): it may still be granted later, whatever later
    /// attempts find, so giving up or cancelling releases `owner` (DESIGN.md rule 5).
    /// Cleared only with the owner id ([`Acquisition::retire_owner`]).
    unresolved: bool,
    /// Requests sent for this lock whose reply has not come back.
    pub in_flight: u32,
    /// The wakeup currently in the machine's timer heap, with its generation.
    pub timer: Option<(Instant, u64)>,
    /// Cleanup releases in flight (usually none or one).
    cleanups: Vec<Cleanup>,
    /// The recipe's progress through a multi-step protocol, for the current owner id.
    progress: Progress,
    /// What observations report (kept whether observed or not: a few integers).
    seen: Seen,
}

/// An acquisition's history as observations report it.
#[derive(Clone, Copy, Debug)]
struct Seen {
    started: Instant,
    /// Attempts that did not get the lock.
    misses: u32,
    /// Of those, the ones that found it held by another holder than the attempt before
    /// (every one on a backend that does not mark its grants: `Read::Contended::holder`).
    found_held: u32,
    /// The grant mark the last contended attempt found.
    last_holder: Option<u64>,
    /// When the lease was granted.
    held_since: Option<Instant>,
    held_long_reported: bool,
    /// Since when attempts end ambiguous (the server unreachable), and when that was
    /// last reported.
    failing_since: Option<Instant>,
    unreachable_reported: Option<Instant>,
}

/// A cleanup release in flight: for which owner id, as which step.
#[derive(Clone, Copy, Debug)]
struct Cleanup {
    owner: OwnerId,
    group: RequestId,
}

#[derive(Clone, Debug)]
pub(crate) struct Lock {
    pub acq: Acquisition,
    pub state: State,
}

/// What the recipe may read about a step of lock `name`.
fn step_cx<'a>(
    name: &'a str,
    options: &'a LockOptions,
    owner: &'a OwnerId,
    sent_at: Instant,
    part: u16,
) -> StepCx<'a> {
    StepCx {
        name,
        owner,
        ttl_ms: options.ttl_ms(),
        retry_max_ms: u64::try_from(options.retry_max.as_millis()).unwrap_or(u64::MAX),
        renew_session: false,
        sent_at,
        now: sent_at,
        token_floor: options.token_floor,
        min_replicas: options.min_replicas,
        replica_timeout_ms: options.replica_timeout_ms(),
        part,
        metadata: options.metadata.as_deref(),
        drift_factor: options.drift_factor,
    }
}

impl Acquisition {
    /// Phrases `step` for `owner` and sends it; returns the step's id, or
    /// [`NO_REQUEST`] when the recipe phrased nothing.
    fn send(
        &mut self,
        ctx: &mut Ctx<'_>,
        step: Step,
        owner: OwnerId,
        deadline: Instant,
        role: Role,
    ) -> RequestId {
        let renew_session = step == Step::Acquire && self.session_renewal_due(ctx, &owner);
        let mut cx = step_cx(&self.name, &self.options, &owner, ctx.now, 0);
        cx.renew_session = renew_session;
        let phrased = ctx.recipe.phrase(step, &cx, &mut self.progress, ctx.shared);
        self.send_phrased(ctx, step, owner, deadline, role, phrased)
    }

    fn send_phrased(
        &mut self,
        ctx: &mut Ctx<'_>,
        step: Step,
        owner: OwnerId,
        deadline: Instant,
        role: Role,
        phrased: Phrased,
    ) -> RequestId {
        let group = RequestId(*ctx.next_request + 1);
        let mut push = |this: &mut Self, part: u16, body: RequestBody| {
            *ctx.next_request += 1;
            let id = RequestId(*ctx.next_request);
            ctx.requests.insert(
                id,
                InFlight {
                    lock: this.id,
                    step,
                    group,
                    part,
                    owner,
                    role,
                    sent_at: ctx.now,
                },
            );
            this.in_flight += 1;
            ctx.outputs.push_back(Output::Request(Request {
                id,
                lock: this.id,
                operation: step.operation(),
                deadline,
                body,
            }));
        };
        match phrased {
            Phrased::One(body) => push(self, 0, body),
            Phrased::FanOut(bodies) => {
                if bodies.is_empty() {
                    return NO_REQUEST;
                }
                for (part, body) in bodies.into_iter().enumerate() {
                    push(self, u16::try_from(part).unwrap_or(u16::MAX), body);
                }
            }
            Phrased::Nothing => return NO_REQUEST,
        }
        group
    }

    /// When the session carrying a contender's queue place (a lease its key rides on) must be
    /// renewed: a renew interval after its last confirmed grant or renewal.
    fn session_renewal_at(&mut self, ctx: &Ctx<'_>, owner: &OwnerId) -> Option<Instant> {
        ctx.recipe
            .session_since(owner, &mut self.progress)
            .map(|since| since + self.options.renew_interval())
    }

    /// Whether an acquire step sent now must renew the session. Within 1 ms of due
    /// counts as due: a wait times out in whole milliseconds (rounded down), so it
    /// returns up to 1 ms before the renewal it stands in for; without the slack the
    /// waiter would check its place, find itself still queued, and renew a fraction of
    /// a millisecond later.
    fn session_renewal_due(&mut self, ctx: &Ctx<'_>, owner: &OwnerId) -> bool {
        self.session_renewal_at(ctx, owner)
            .is_some_and(|due| ctx.now + Duration::from_millis(1) > due)
    }

    /// Releases `owner` on the server for a lease this machine gave up on, so it is
    /// not orphaned until its TTL (DESIGN.md rules 4 and 5). Nobody is told.
    /// Releases the current owner id (a cleanup) and draws a fresh one for the next
    /// attempts, which that release cannot race.
    fn retire_owner(&mut self, ctx: &mut Ctx<'_>) {
        let owner = self.owner;
        self.send_cleanup(ctx, owner, 0);
        self.owner = ctx.new_owner();
        self.unresolved = false;
    }

    fn send_cleanup(&mut self, ctx: &mut Ctx<'_>, owner: OwnerId, attempt: u32) {
        let deadline = ctx.now + self.options.ttl;
        let role = Role::Cleanup { attempt };
        let group = self.send(ctx, Step::Cleanup, owner, deadline, role);
        self.cleanups.push(Cleanup { owner, group });
    }

    /// When an acquire sent at `sent_at` is given up on: at the end of the validity it
    /// would grant, or at the acquire deadline if that comes first and came after the
    /// send (the last try, made at the deadline or with timeout 0, gets its full time).
    fn attempt_deadline(&self, trying: &Trying, sent_at: Instant) -> Instant {
        let validity_end = sent_at + self.options.validity();
        match trying.deadline {
            Some(deadline) if deadline > sent_at => deadline.min(validity_end),
            _ => validity_end,
        }
    }

    fn finish(&self, ctx: &mut Ctx<'_>, event: Event) -> State {
        ctx.emit(self.id, event);
        State::Finished {
            forget_at: ctx.now + self.options.ttl,
        }
    }
}

/// `at`, but no later than the acquire deadline.
fn by_deadline(at: Instant, trying: &Trying) -> Instant {
    trying.deadline.map_or(at, |d| at.min(d))
}

impl Lock {
    pub(crate) fn new(
        id: LockId,
        name: String,
        options: LockOptions,
        owner: OwnerId,
        now: Instant,
    ) -> Self {
        let deadline = options.acquire_timeout.map(|t| now + t);
        Lock {
            acq: Acquisition {
                id,
                name,
                options,
                owner,
                unresolved: false,
                in_flight: 0,
                timer: None,
                cleanups: Vec::new(),
                progress: Progress::default(),
                seen: Seen {
                    started: now,
                    misses: 0,
                    found_held: 0,
                    last_holder: None,
                    held_since: None,
                    held_long_reported: false,
                    failing_since: None,
                    unreachable_reported: None,
                },
            },
            state: State::Waiting(Backoff {
                trying: Trying {
                    attempt: 0,
                    deadline,
                    last_error: None,
                    first_error: None,
                },
                retry_at: now,
            }),
        }
    }

    /// Finished and nothing left to wait for: the machine may forget the lock.
    pub(crate) fn can_forget(&self, now: Instant) -> bool {
        match self.state {
            State::Finished { forget_at } => self.acq.in_flight == 0 || now >= forget_at,
            _ => false,
        }
    }

    /// The next instant at which [`Lock::on_timer`] has something to do.
    pub(crate) fn wakeup(&self) -> Option<Instant> {
        match &self.state {
            State::Acquiring(a) => Some(self.acq.attempt_deadline(&a.trying, a.sent_at)),
            State::Waiting(w) | State::Unsure(w) => Some(w.retry_at),
            State::Parked(p) => Some(p.give_up_at),
            State::Held(h) => Some(h.valid_until.min(h.renew_at)),
            State::Renewing(r) => Some(r.valid_until),
            State::Releasing(r) => Some(r.deadline),
            State::ReleaseBackoff(r) => Some(r.retry_at.min(r.deadline)),
            State::Finished { forget_at } => (self.acq.in_flight > 0).then_some(*forget_at),
        }
    }

    pub(crate) fn valid_until(&self) -> Option<Instant> {
        match self.state {
            State::Held(Held { valid_until, .. })
            | State::Renewing(Renewing { valid_until, .. }) => Some(valid_until),
            _ => None,
        }
    }

    pub(crate) fn id(&self) -> LockId {
        self.acq.id
    }

    /// Not granted yet and still trying.
    pub(crate) fn is_acquiring(&self) -> bool {
        matches!(
            self.state,
            State::Acquiring(_) | State::Waiting(_) | State::Unsure(_) | State::Parked(_)
        )
    }

    fn finish(&mut self, ctx: &mut Ctx<'_>, event: Event) {
        if ctx.observe.is_some() {
            self.observe_end(ctx, &event);
        }
        self.state = self.acq.finish(ctx, event);
    }

    /// The observations of an acquisition's end: `released`, `lost`,
    /// `acquire_timed_out` or `acquire_failed`, and `hot_lock` for one that found the
    /// lock held `hot_lock_attempts` times without getting it.
    #[inline(never)]
    fn observe_end(&self, ctx: &mut Ctx<'_>, event: &Event) {
        let seen = self.acq.seen;
        let now = ctx.now;
        let held_for = seen.held_since.map(|s| now.saturating_duration_since(s));
        let waited = now.saturating_duration_since(seen.started);
        ctx.event(&self.acq, || match event {
            Event::Lost { reason } => Observation::Lost {
                reason: reason.clone(),
                held_for,
            },
            Event::AcquireFailed {
                reason: AcquireFailedReason::Timeout { last_error },
            } => Observation::AcquireTimedOut {
                waited,
                attempts: seen.misses,
                last_error: last_error.clone(),
            },
            Event::AcquireFailed {
                reason: AcquireFailedReason::Protocol { error },
            } => Observation::AcquireFailed {
                waited,
                error: error.to_string(),
            },
            _ => Observation::Released { held_for },
        });
        if matches!(event, Event::AcquireFailed { .. }) {
            self.observe_found_held(ctx);
        }
    }

    /// `hot_lock` when this acquisition found the lock held `hot_lock_attempts` times.
    fn observe_found_held(&self, ctx: &mut Ctx<'_>) {
        let n = self.acq.seen.found_held;
        ctx.warn(&self.acq, |o| {
            (o.hot_lock_attempts > 0 && n >= o.hot_lock_attempts).then_some(Observation::HotLock {
                found_held: Some(n),
                waiters: None,
            })
        });
    }

    fn send_acquire(&mut self, ctx: &mut Ctx<'_>, trying: Trying) {
        let deadline = self.acq.attempt_deadline(&trying, ctx.now);
        let owner = self.acq.owner;
        let request = self
            .acq
            .send(ctx, Step::Acquire, owner, deadline, Role::Lock);
        self.state = State::Acquiring(Acquiring {
            trying,
            request,
            sent_at: ctx.now,
        });
    }

    fn send_release(
        &mut self,
        ctx: &mut Ctx<'_>,
        ending: Ending,
        attempt: u32,
        deadline: Instant,
        sent: Sent,
    ) {
        let owner = self.acq.owner;
        let request = self
            .acq
            .send(ctx, Step::Release(ending), owner, deadline, Role::Lock);
        self.state = State::Releasing(Releasing {
            ending,
            request,
            attempt,
            deadline,
            sent,
        });
    }

    /// An attempt did not get the lock. Retry after a backoff, or give up at the
    /// acquire deadline (releasing first if the server might hold it for us).
    fn attempt_failed(&mut self, ctx: &mut Ctx<'_>, mut trying: Trying, miss: Miss) {
        // A refusal proves nothing held for the owner id only at that instant: an
        // earlier attempt of it whose outcome is unknown may still land.
        self.acq.unresolved |= matches!(miss, Miss::Ambiguous);
        let unsure = self.acq.unresolved
            || !matches!(
                miss,
                Miss::Contended { queued: false, .. } | Miss::TooLate | Miss::Unreached
            );
        let seen = &mut self.acq.seen;
        seen.misses = seen.misses.saturating_add(1);
        if let Miss::Contended { holder, .. } = miss {
            // One holder found again and again is a long hold, not contention: where the
            // backend marks each grant, count the holders found, else the attempts.
            if holder.is_none() || holder != seen.last_holder {
                seen.found_held = seen.found_held.saturating_add(1);
            }
            seen.last_holder = holder;
            seen.failing_since = None;
            seen.unreachable_reported = None;
        } else if matches!(miss, Miss::Ambiguous | Miss::Unreached) && ctx.observe.is_some() {
            self.observe_unreachable(ctx, &trying);
        }
        let retries_spent = self
            .acq
            .options
            .retry_count
            .is_some_and(|n| trying.attempt >= n);
        if retries_spent || trying.deadline.is_some_and(|d| ctx.now >= d) {
            if unsure {
                let owner = self.acq.owner;
                self.acq.send_cleanup(ctx, owner, 0);
            }
            let last_error = trying.last_error;
            self.finish(
                ctx,
                Event::AcquireFailed {
                    reason: AcquireFailedReason::Timeout { last_error },
                },
            );
            return;
        }
        let options = &self.acq.options;
        let (holder_remaining, contended_at) = match miss {
            Miss::Contended {
                remaining, sent_at, ..
            } => (remaining, Some(sent_at)),
            Miss::Ambiguous | Miss::TooLate | Miss::Unreached => (None, None),
        };
        let style = ctx.recipe.waiting();
        let wait = if contended_at.is_some() && style == WaitStyle::Handoff {
            retry::park_timeout(options, holder_remaining, ctx)
        } else {
            retry::acquire_backoff(options, trying.attempt, holder_remaining, ctx)
        };
        let mut retry_at = by_deadline(ctx.now + wait, &trying);
        if let Some(base) = contended_at.filter(|_| style != WaitStyle::Poll) {
            if style == WaitStyle::Notify {
                // The notification stands in for the backoff, until the waiter's own
                // session needs renewing (or the acquire deadline).
                let owner = self.acq.owner;
                if let Some(until) = self.acq.session_renewal_at(ctx, &owner) {
                    retry_at = by_deadline(until.max(ctx.now), &trying);
                }
            }
            trying = match self.park(ctx, trying, base, retry_at) {
                Ok(parked) => {
                    self.state = State::Parked(parked);
                    return;
                }
                Err(trying) => trying,
            };
        }
        let backoff = Backoff {
            trying: Trying {
                attempt: trying.attempt.saturating_add(1),
                ..trying
            },
            retry_at,
        };
        self.state = if unsure {
            State::Unsure(backoff)
        } else {
            State::Waiting(backoff)
        };
    }

    /// `server_unreachable` every `unreachable_every` while attempts of an acquisition
    /// that never gives up end without an answer.
    #[inline(never)]
    fn observe_unreachable(&mut self, ctx: &mut Ctx<'_>, trying: &Trying) {
        let options = &self.acq.options;
        if options.acquire_timeout.is_some() || options.retry_count.is_some() {
            return;
        }
        let now = ctx.now;
        let seen = self.acq.seen;
        let since = *self.acq.seen.failing_since.get_or_insert(now);
        let last = seen.unreachable_reported.unwrap_or(since);
        let mut reported = false;
        ctx.warn(&self.acq, |o| {
            reported = now.saturating_duration_since(last) >= o.unreachable_every;
            reported.then(|| Observation::ServerUnreachable {
                unreachable_for: now.saturating_duration_since(since),
                attempts: seen.misses,
                last_error: trying.last_error.clone(),
            })
        });
        if reported {
            self.acq.seen.unreachable_reported = Some(now);
        }
    }

    /// Blocks a queued waiter on the server's wake-up until `retry_at`, at most half the
    /// validity after `base` (a grant the wake-up brings is measured from `base`).
    /// Gives `trying` back when there is nothing to wait on or no time to wait.
    fn park(
        &mut self,
        ctx: &mut Ctx<'_>,
        trying: Trying,
        base: Instant,
        retry_at: Instant,
    ) -> Result<Parked, Trying> {
        let retry_at = retry_at.min(base + self.acq.options.validity() / 2);
        let wait = retry_at.saturating_duration_since(ctx.now);
        let timeout_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
        if timeout_ms == 0 {
            return Err(trying);
        }
        let owner = self.acq.owner;
        let step = Step::Wait { timeout_ms };
        let cx = step_cx(&self.acq.name, &self.acq.options, &owner, ctx.now, 0);
        let phrased = (ctx.recipe).phrase(step, &cx, &mut self.acq.progress, ctx.shared);
        if phrased.is_nothing() {
            return Err(trying);
        }
        let give_up_at = retry_at + self.acq.options.retry_max;
        let request = self
            .acq
            .send_phrased(ctx, step, owner, give_up_at, Role::Lock, phrased);
        Ok(Parked {
            trying: Trying {
                attempt: trying.attempt.saturating_add(1),
                ..trying
            },
            request,
            sent_at: base,
            give_up_at,
        })
    }

    fn lose(&mut self, ctx: &mut Ctx<'_>, reason: LostReason) {
        if reason == LostReason::Expired {
            // A renewal may have landed without its reply reaching us: free the key.
            let owner = self.acq.owner;
            self.acq.send_cleanup(ctx, owner, 0);
        }
        self.finish(ctx, Event::Lost { reason });
    }

    /// Held or renewing past the validity deadline: lost, whatever else is happening
    /// (DESIGN.md rule 2). Returns whether it expired.
    fn expire_if_due(&mut self, ctx: &mut Ctx<'_>) -> bool {
        match self.valid_until() {
            Some(valid_until) if ctx.now >= valid_until => {
                self.lose(ctx, LostReason::Expired);
                true
            }
            _ => false,
        }
    }

    // ---- inputs ------------------------------------------------------------------

    pub(crate) fn start(&mut self, ctx: &mut Ctx<'_>) {
        let trying = self.state.take_trying();
        self.send_acquire(ctx, trying);
    }

    pub(crate) fn on_timer(&mut self, ctx: &mut Ctx<'_>) {
        if self.expire_if_due(ctx) {
            return;
        }
        let now = ctx.now;
        match &mut self.state {
            State::Acquiring(a) if now >= self.acq.attempt_deadline(&a.trying, a.sent_at) => {
                // No reply in time: the outcome is unknown. A reply that still comes
                // is late, and `on_late_reply` releases what it granted.
                let trying = mem::take(&mut a.trying);
                self.on_acquire_ambiguous(
                    ctx,
                    trying,
                    "the acquire request got no reply in time".to_owned(),
                );
            }
            State::Waiting(w) | State::Unsure(w) if now >= w.retry_at => {
                let trying = mem::take(&mut w.trying);
                self.send_acquire(ctx, trying);
            }
            // The wait got no reply in time (a host that does not cancel it): try anyway.
            State::Parked(p) if now >= p.give_up_at => {
                let trying = mem::take(&mut p.trying);
                self.send_acquire(ctx, trying);
            }
            State::Held(h) if now >= h.renew_at => {
                let held = *h;
                self.send_renew(ctx, held);
            }
            State::ReleaseBackoff(r) if now >= r.deadline => {
                // The key has expired on its own by now; the release is moot.
                self.finish(ctx, Event::Released);
            }
            State::ReleaseBackoff(r) if now >= r.retry_at => {
                let ReleaseBackoff {
                    ending,
                    attempt,
                    deadline,
                    sent,
                    ..
                } = *r;
                self.send_release(ctx, ending, attempt, deadline, sent);
            }
            State::Releasing(r) if now >= r.deadline => {
                self.finish(ctx, Event::Released);
            }
            _ => {}
        }
    }

    fn send_renew(&mut self, ctx: &mut Ctx<'_>, held: Held) {
        let owner = self.acq.owner;
        let request = self
            .acq
            .send(ctx, Step::Renew, owner, held.valid_until, Role::Lock);
        self.state = State::Renewing(Renewing {
            token: held.token,
            valid_until: held.valid_until,
            request,
            sent_at: ctx.now,
        });
    }

    /// Whether this held lease, renewing itself within half a renew interval, renews
    /// now instead ([`Lock::extend`]), beside a renewal going out now, so that one
    /// request renews both (the machine batches them). Renewing early is safe: validity runs from the send
    /// of the request that renews (DESIGN.md rule 1) and never moves back; the lease's
    /// next renewal is then due a renew interval after it, with the others'.
    pub(crate) fn joins_renewal(&self, now: Instant) -> bool {
        match self.state {
            State::Held(h) => {
                now < h.valid_until
                    && h.renew_at != Instant::MAX
                    && h.renew_at <= now + self.acq.options.renew_interval() / 2
            }
            _ => false,
        }
    }

    /// The user extends the lease now (a manual renewal, auto-renew on or off): a held
    /// lease sends its renewal at once; a renewal already in flight answers for it.
    /// Its outcome is the usual `Renewed` or `Lost`; any other state ignores it.
    pub(crate) fn extend(&mut self, ctx: &mut Ctx<'_>) {
        if self.expire_if_due(ctx) {
            return;
        }
        if let State::Held(held) = self.state {
            self.send_renew(ctx, held);
        }
    }

    /// The user releases the lock, or cancels the acquisition.
    pub(crate) fn release(&mut self, ctx: &mut Ctx<'_>) {
        if self.expire_if_due(ctx) {
            return;
        }
        let deadline = ctx.now + self.acq.options.ttl;
        let sent = Sent {
            valid_until: self.valid_until().unwrap_or(ctx.now),
            maybe_deleted: false,
        };
        match self.state {
            // A renew in flight becomes late; if it lands after the release, its
            // reply triggers a cleanup release.
            State::Held(_) | State::Renewing(_) => {
                self.send_release(ctx, Ending::Held, 0, deadline, sent)
            }
            // Cancelling: the server may hold the lock (or a queue place) for us already.
            State::Acquiring(_) | State::Parked(_) | State::Unsure(_) => {
                self.send_release(ctx, Ending::Cancel, 0, deadline, sent)
            }
            State::Waiting(_) => self.finish(ctx, Event::Released),
            State::Releasing(_) | State::ReleaseBackoff(_) | State::Finished { .. } => {}
        }
    }

    /// A reply, or a transport error (`Err` with its message), for a request of this
    /// lock.
    pub(crate) fn on_reply(
        &mut self,
        ctx: &mut Ctx<'_>,
        flight: InFlight,
        reply: Result<&Reply, String>,
    ) {
        let reply = reply.as_ref().map_err(String::as_str).copied();
        if let Role::Cleanup { attempt } = flight.role {
            self.on_cleanup_reply(ctx, &flight, attempt, reply);
            return;
        }
        let expired = self.expire_if_due(ctx);
        if expired || self.state.request() != Some(flight.group) {
            self.on_late_reply(ctx, &flight, reply);
            return;
        }
        let owner = self.acq.owner;
        let acq = &mut self.acq;
        let mut cx = step_cx(&acq.name, &acq.options, &owner, flight.sent_at, flight.part);
        cx.now = ctx.now;
        let read = (ctx.recipe).read(flight.step, &cx, &mut acq.progress, ctx.shared, reply);
        if read == Ok(Read::Pending) {
            return;
        }
        if let Err(e) = &read {
            ctx.event(&self.acq, || Observation::BackendError {
                operation: flight.step.operation(),
                error: match e {
                    ReadError::Ambiguous(e) => e.clone(),
                    ReadError::Protocol(e) => e.to_string(),
                },
            });
        }
        match &mut self.state {
            State::Acquiring(a) if flight.step == Step::Acquire => {
                let trying = mem::take(&mut a.trying);
                let sent_at = a.sent_at;
                self.on_acquire_read(ctx, trying, sent_at, read);
            }
            State::Parked(p) if matches!(flight.step, Step::Wait { .. }) => {
                let trying = mem::take(&mut p.trying);
                let sent_at = p.sent_at;
                match read {
                    // the releasing holder granted us the lock: validity from the
                    // send of the acquire that queued us (DESIGN.md rule 1)
                    Ok(Read::Granted {
                        token, previous, ..
                    }) => self.on_granted(ctx, trying, token, sent_at, previous),
                    // woken, or the wait timed out: try now
                    Ok(_) => self.send_acquire(ctx, trying),
                    // the blocking call failed: fall back on the plain backoff
                    Err(_) => {
                        let retry_at = by_deadline(
                            ctx.now
                                + retry::acquire_backoff(
                                    &self.acq.options,
                                    trying.attempt,
                                    None,
                                    ctx,
                                ),
                            &trying,
                        );
                        self.state = State::Unsure(Backoff { trying, retry_at });
                    }
                }
            }
            State::Renewing(r) if flight.step == Step::Renew => {
                let renewing = *r;
                self.on_renew_read(ctx, renewing, read);
            }
            State::Releasing(r) if matches!(flight.step, Step::Release(_)) => {
                let releasing = *r;
                self.on_release_read(ctx, releasing, flight.sent_at, read);
            }
            _ => {}
        }
    }

    fn on_acquire_ambiguous(&mut self, ctx: &mut Ctx<'_>, mut trying: Trying, error: String) {
        // Keep the first real error beside the latest: "no reply in time" after a
        // connection error says less than the connection error did. The first only, not
        // each one between: an outage alternating two errors for hours stays two long.
        let first = trying
            .first_error
            .take()
            .or(trying.last_error.take())
            .unwrap_or_else(|| error.clone());
        trying.last_error = Some(if first == error {
            error
        } else {
            format!("{error} (earlier: {first})")
        });
        trying.first_error = Some(first);
        // Retrying with the same owner id is idempotent (DESIGN.md rule 5).
        self.attempt_failed(ctx, trying, Miss::Ambiguous);
    }

    fn on_acquire_read(
        &mut self,
        ctx: &mut Ctx<'_>,
        mut trying: Trying,
        sent_at: Instant,
        read: Result<Read, ReadError>,
    ) {
        match read {
            // The next step of the same attempt, at once.
            Ok(Read::Continue) => self.send_acquire(ctx, trying),
            Ok(Read::Granted {
                token,
                base,
                previous,
            }) => {
                // The validity base is the request's send, or the recipe's earlier one
                // (never later than this request's send).
                let base = base.map_or(sent_at, |b| b.min(sent_at));
                self.on_granted(ctx, trying, token, base, previous);
            }
            Ok(Read::Contended {
                remaining,
                queued,
                holder,
            }) => {
                trying.set_error(None);
                self.attempt_failed(
                    ctx,
                    trying,
                    Miss::Contended {
                        remaining,
                        queued,
                        holder,
                        sent_at,
                    },
                );
            }
            Ok(Read::NoQuorum {
                remaining,
                error,
                refused,
                holder,
            }) => {
                // A minority may hold the lock for this owner id: release it on every
                // server, and retry under a fresh owner id.
                self.acq.retire_owner(ctx);
                trying.set_error(error);
                let miss = if refused {
                    Miss::Contended {
                        remaining,
                        queued: false,
                        holder,
                        sent_at,
                    }
                } else {
                    Miss::Unreached
                };
                self.attempt_failed(ctx, trying, miss);
            }
            Ok(other) => self.on_acquire_ambiguous(
                ctx,
                trying,
                format!("the acquire got an outcome that is not one: {other:?}"),
            ),
            Err(ReadError::Ambiguous(e)) => self.on_acquire_ambiguous(ctx, trying, e),
            Err(ReadError::Protocol(error)) => {
                let owner = self.acq.owner;
                self.acq.send_cleanup(ctx, owner, 0);
                self.finish(
                    ctx,
                    Event::AcquireFailed {
                        reason: AcquireFailedReason::Protocol { error },
                    },
                );
            }
        }
    }

    /// The server granted the lock with `token`; validity is measured from `base` (the
    /// send of the request whose reply brought the grant, or the recipe's earlier one).
    fn on_granted(
        &mut self,
        ctx: &mut Ctx<'_>,
        mut trying: Trying,
        token: FencingToken,
        base: Instant,
        previous: crate::Previous,
    ) {
        let options = &self.acq.options;
        let valid_until = ctx.validity_base(base) + options.validity();
        if ctx.now >= valid_until {
            // The reply came too late to use (a pause, a slow network): release it,
            // and try again under a fresh owner id.
            self.acq.retire_owner(ctx);
            trying.set_error(Some(
                "the lock was granted only after its validity had passed".to_owned(),
            ));
            return self.attempt_failed(ctx, trying, Miss::TooLate);
        }
        let renew_at = if options.auto_renew {
            (base + options.renew_interval()).max(ctx.now)
        } else {
            Instant::MAX
        };
        self.state = State::Held(Held {
            token,
            valid_until,
            renew_at,
        });
        let seen = &mut self.acq.seen;
        seen.held_since = Some(ctx.now);
        seen.failing_since = None;
        let (waited, attempts) = (
            ctx.now.saturating_duration_since(seen.started),
            seen.misses.saturating_add(1),
        );
        ctx.event(&self.acq, || Observation::Acquired {
            token,
            waited,
            attempts,
        });
        self.observe_found_held(ctx);
        ctx.emit(
            self.acq.id,
            Event::Acquired {
                token,
                valid_until,
                previous,
            },
        );
    }

    fn on_renew_read(&mut self, ctx: &mut Ctx<'_>, r: Renewing, read: Result<Read, ReadError>) {
        let options = &self.acq.options;
        match read {
            Ok(Read::Done) => {
                let valid_until = r
                    .valid_until
                    .max(ctx.validity_base(r.sent_at) + options.validity());
                // a manual extend of a lease without auto-renew schedules nothing
                let renew_at = if options.auto_renew {
                    (r.sent_at + options.renew_interval()).max(ctx.now)
                } else {
                    Instant::MAX
                };
                self.state = State::Held(Held {
                    token: r.token,
                    valid_until,
                    renew_at,
                });
                if ctx.observe.is_some() {
                    self.observe_renewed(ctx, r.valid_until, valid_until);
                }
                ctx.emit(self.acq.id, Event::Renewed { valid_until });
            }
            // The recipe's next renewal step (a re-read after a conflict), at once;
            // validity comes from the send of the step that confirms it.
            Ok(Read::Continue) => self.send_renew(
                ctx,
                Held {
                    token: r.token,
                    valid_until: r.valid_until,
                    renew_at: Instant::MAX,
                },
            ),
            // A renewal never re-creates a missing key (DESIGN.md rule 3).
            Ok(Read::NotHeld) => self.lose(ctx, LostReason::RenewRejected),
            // No majority can confirm it: lost at once, and the servers that did
            // confirm are released.
            Ok(Read::NoQuorum { .. }) => {
                let owner = self.acq.owner;
                self.acq.send_cleanup(ctx, owner, 0);
                self.lose(ctx, LostReason::RenewRejected);
            }
            // Transient: retry until the validity deadline; the timer decides loss.
            other => {
                let retry_in = retry::renew_retry(options);
                self.state = State::Held(Held {
                    token: r.token,
                    valid_until: r.valid_until,
                    renew_at: ctx.now + retry_in,
                });
                let deadline_in = r.valid_until.saturating_duration_since(ctx.now);
                ctx.event(&self.acq, || Observation::RenewalFailing {
                    error: match other {
                        Err(ReadError::Ambiguous(e)) => e,
                        Err(ReadError::Protocol(e)) => e.to_string(),
                        Ok(read) => format!("the renewal got an outcome that is not one: {read:?}"),
                    },
                    retry_in,
                    deadline_in,
                });
            }
        }
    }

    /// `renewed`; `renewal_late` when less than `late_renewal_fraction` of the validity
    /// was left before `old` (the deadline the renewal extends); `held_long` once per
    /// lease held `held_long_ttls` TTLs.
    #[inline(never)]
    fn observe_renewed(&mut self, ctx: &mut Ctx<'_>, old: Instant, new: Instant) {
        let now = ctx.now;
        let options = &self.acq.options;
        let (validity, ttl) = (options.validity(), options.ttl);
        ctx.event(&self.acq, || Observation::Renewed {
            validity_left: new.saturating_duration_since(now),
        });
        let validity_left = old.saturating_duration_since(now);
        ctx.warn(&self.acq, |o| {
            (validity_left < validity.mul_f64(o.late_renewal_fraction)).then_some(
                Observation::RenewalLate {
                    validity_left,
                    validity,
                },
            )
        });
        let seen = self.acq.seen;
        let held_for = seen
            .held_since
            .map_or(Duration::ZERO, |s| now.saturating_duration_since(s));
        let mut reported = seen.held_long_reported;
        ctx.warn(&self.acq, |o| {
            let long = o.held_long_ttls > 0 && held_for >= ttl.saturating_mul(o.held_long_ttls);
            (long && !mem::replace(&mut reported, true))
                .then_some(Observation::HeldLong { held_for, ttl })
        });
        self.acq.seen.held_long_reported = reported;
    }

    fn on_release_read(
        &mut self,
        ctx: &mut Ctx<'_>,
        r: Releasing,
        sent_at: Instant,
        read: Result<Read, ReadError>,
    ) {
        match read {
            // The recipe's next release step (a lease revoked after its key is
            // deleted), before anything is reported.
            Ok(Read::Continue) => self.send_release(ctx, r.ending, 0, r.deadline, r.sent),
            Ok(found) => self.finish_release(ctx, r, &found),
            Err(_) => {
                let sent = Sent {
                    maybe_deleted: r.sent.maybe_deleted || sent_at < r.sent.valid_until,
                    ..r.sent
                };
                let attempt = r.attempt + 1;
                if attempt >= RELEASE_ATTEMPTS || ctx.now >= r.deadline {
                    let owner = self.acq.owner;
                    let unconfirmed =
                        ctx.recipe
                            .unconfirmed_release(r.ending, &owner, &mut self.acq.progress);
                    if unconfirmed.cleanup {
                        self.acq.send_cleanup(ctx, owner, 0);
                    }
                    let found = unconfirmed.found.unwrap_or(Read::Done);
                    self.finish_release(ctx, Releasing { sent, ..r }, &found);
                } else {
                    let retry_at = ctx.now + retry::release_retry(&self.acq.options, attempt, ctx);
                    self.state = State::ReleaseBackoff(ReleaseBackoff {
                        ending: r.ending,
                        retry_at,
                        attempt,
                        deadline: r.deadline,
                        sent,
                    });
                }
            }
        }
    }

    /// Reports the end of a release: a held lease the server no longer held for this
    /// owner was lost before the release, unless an earlier attempt sent inside the
    /// validity may have deleted it (its reply lost, its caller cancelled): then the
    /// key is gone by that attempt, which is the release. Anything else is released.
    fn finish_release(&mut self, ctx: &mut Ctx<'_>, r: Releasing, found: &Read) {
        let lost = r.ending == Ending::Held && *found == Read::NotHeld && !r.sent.maybe_deleted;
        let event = if lost {
            Event::Lost {
                reason: LostReason::NotHeldAtRelease,
            }
        } else {
            Event::Released
        };
        self.finish(ctx, event);
    }

    /// A reply for a request this lock no longer waits for (DESIGN.md rule 4): it never
    /// changes the state, but if it shows (or might show) that the server holds the
    /// lock for an owner id this machine gave up on, that owner is released.
    fn on_late_reply(&mut self, ctx: &mut Ctx<'_>, flight: &InFlight, reply: Result<&Reply, &str>) {
        if !ctx.recipe.late_may_hold(flight.step, reply) {
            return;
        }
        let still_ours = flight.owner == self.acq.owner
            && matches!(
                self.state,
                State::Acquiring(_)
                    | State::Waiting(_)
                    | State::Unsure(_)
                    | State::Parked(_)
                    | State::Held(_)
                    | State::Renewing(_)
            );
        if still_ours {
            if let State::Waiting(w) | State::Unsure(w) = &mut self.state {
                // An earlier attempt was granted too late to use, or its outcome stays
                // unknown, and no retry is in flight: release it and retry under a
                // fresh owner id, which the release cannot race.
                let backoff = Backoff {
                    trying: mem::take(&mut w.trying),
                    retry_at: w.retry_at,
                };
                self.state = State::Waiting(backoff);
                self.acq.retire_owner(ctx); // still_ours: the owner is flight.owner
            }
            // Otherwise a retry with this owner id is in flight (acquiring), or the
            // next attempt after the wake-up uses it (parked), and re-acquires it
            // idempotently; a release sent now could race that retry. Held or
            // renewing: a duplicate of the reply already used.
            return;
        }
        if flight.step == Step::Renew && self.acq.cleanups.iter().any(|c| c.owner == flight.owner) {
            // A renewal never creates the key, so it took effect before the cleanup
            // release already in flight for this owner, which will remove it. (A late
            // *grant* may have landed after that release: it gets its own.)
            return;
        }
        if flight.owner == self.acq.owner {
            // This owner's own release is under way (a fanned-out step's late part, an
            // ambiguous attempt's late grant) and a host may run the cleanup first, on
            // another connection: a release that then finds the key gone found this
            // cleanup's work, not a lease that ended before it.
            if let State::Releasing(Releasing { sent, .. })
            | State::ReleaseBackoff(ReleaseBackoff { sent, .. }) = &mut self.state
            {
                sent.maybe_deleted = true;
            }
        }
        self.acq.send_cleanup(ctx, flight.owner, 0);
    }

    fn on_cleanup_reply(
        &mut self,
        ctx: &mut Ctx<'_>,
        flight: &InFlight,
        attempt: u32,
        reply: Result<&Reply, &str>,
    ) {
        let acq = &mut self.acq;
        // once per cleanup: the first decided reply ends it; later parts of a
        // fanned-out cleanup find it gone
        let Some(i) = acq.cleanups.iter().position(|c| c.group == flight.group) else {
            return;
        };
        let cx = step_cx(
            &acq.name,
            &acq.options,
            &flight.owner,
            flight.sent_at,
            flight.part,
        );
        let read = ctx
            .recipe
            .read(Step::Cleanup, &cx, &mut acq.progress, ctx.shared, reply);
        if read == Ok(Read::Pending) {
            return;
        }
        acq.cleanups.swap_remove(i);
        // each send of a cleanup matters for one TTL: after that the server has
        // dropped the key anyway
        let deadline = flight.sent_at + acq.options.ttl;
        if read.is_err() && attempt + 1 < RELEASE_ATTEMPTS && ctx.now < deadline {
            // resent at once: a cleanup has no state of its own to wait in
            acq.send_cleanup(ctx, flight.owner, attempt + 1);
        }
    }
}

/// Why an attempt did not get the lock.
#[derive(Clone, Copy, Debug)]
enum Miss {
    /// Another owner holds it (the acquire sent at `sent_at` found it so); `holder` as
    /// `Read::Contended` has it.
    Contended {
        remaining: Option<Duration>,
        queued: bool,
        holder: Option<u64>,
        sent_at: Instant,
    },
    /// The outcome is unknown: the server may hold the lock for this owner id.
    Ambiguous,
    /// No server refused, too few answered: an outage, not contention. The servers
    /// that may hold the lock for this owner id are already being released.
    Unreached,
    /// A grant came too late to use; it is being released under the old owner id.
    TooLate,
}
