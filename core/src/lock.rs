//! One lock's state and its transitions, one function per input. This file never
//! knows which server it talks to: requests are phrased and replies read by
//! [`crate::backends::Backend`].

use core::time::Duration;
use std::collections::{HashMap, VecDeque};

use rand_chacha::ChaCha20Rng;
use rand_core::RngCore;

use crate::backends::{
    AcquireOutcome, Backend, Operation, OwnerCheck, Progress, Reply, ReplyError,
};
use crate::event::{AcquireFailedReason, Event, LostReason};
use crate::options::LockOptions;
use crate::{FencingToken, Instant, LockId, Output, OwnerId, Request, RequestId};

/// How many times a release is sent before it is given up as unconfirmed.
const RELEASE_ATTEMPTS: u32 = 3;

/// The requests a lock phrases from its name and options alone (a wait is phrased by
/// the backend with its timeout).
#[derive(Clone, Copy, Debug)]
enum Phrase {
    Acquire,
    Renew,
    /// The user's release (`true`: of a held lease) or cancellation (`false`).
    Release(bool),
    /// Free whatever the server may hold for an owner id given up on.
    Cleanup,
}

/// A request the machine is waiting on.
#[derive(Clone, Debug)]
pub(crate) struct InFlight {
    pub lock: LockId,
    pub operation: Operation,
    /// The owner id the request was phrased for (it can differ from the lock's current
    /// owner id after a too-late grant).
    pub owner: OwnerId,
    /// A release sent to clean up after a lease the machine gave up on; it is retried
    /// on failure `attempt < RELEASE_ATTEMPTS` times and reported to nobody.
    pub cleanup: bool,
    pub attempt: u32,
    pub deadline: Instant,
}

/// What one input needs besides the lock: the backend, randomness, and the queues.
pub(crate) struct Ctx<'a> {
    pub now: Instant,
    pub backend: &'a Backend,
    pub rng: &'a mut ChaCha20Rng,
    pub next_request: &'a mut u64,
    pub requests: &'a mut HashMap<RequestId, InFlight>,
    pub outputs: &'a mut VecDeque<Output>,
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

    /// A uniform draw from `0 ..= max` (full jitter).
    fn jitter(&mut self, max: Duration) -> Duration {
        let nanos = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
        if nanos == 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos(self.rng.next_u64() % nanos.saturating_add(1))
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
}

/// A lock's state. The request id in a state is the only reply that state accepts;
/// any other reply is late and handled by [`Lock::on_late_reply`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum State {
    Acquiring {
        request: RequestId,
        sent_at: Instant,
        attempt: u32,
    },
    Waiting {
        retry_at: Instant,
        attempt: u32,
        /// An earlier attempt's outcome is unknown: the server may hold the lock for
        /// this owner id, so giving up must release it (DESIGN.md rule 5).
        ambiguous: bool,
    },
    /// Queued on the server and blocked until a release wakes this waiter, or until
    /// the backoff the wait stands in for has passed (fair hand-off).
    Parked {
        request: RequestId,
        /// The validity base of a grant the wait brings back: the send of the acquire
        /// that found the lock held by another (the grant was made after that acquire
        /// ran, so the lease the releasing holder set runs from later than this).
        sent_at: Instant,
        attempt: u32,
        /// When to stop waiting for the wait's reply and try anyway.
        give_up_at: Instant,
    },
    Held {
        token: FencingToken,
        valid_until: Instant,
        /// `Instant::MAX` when auto-renew is off.
        renew_at: Instant,
    },
    Renewing {
        token: FencingToken,
        valid_until: Instant,
        request: RequestId,
        sent_at: Instant,
    },
    Releasing {
        /// `None` while waiting to retry.
        request: Option<RequestId>,
        retry_at: Instant,
        attempt: u32,
        /// After this the key has expired on its own; the release is moot.
        deadline: Instant,
        /// Whether the lease had been granted (else this cancels an acquisition).
        was_held: bool,
    },
    /// Released, lost or failed. Replies still in flight are awaited until
    /// `forget_at` (late grants must be released); then the lock is forgotten.
    Finished { forget_at: Instant },
}

pub(crate) struct Lock {
    pub id: LockId,
    pub name: String,
    pub options: LockOptions,
    pub owner: OwnerId,
    pub acquire_deadline: Option<Instant>,
    pub state: State,
    /// Requests sent for this lock whose reply has not come back.
    pub in_flight: u32,
    /// The wakeup currently in the machine's timer heap, with its generation.
    pub timer: Option<(Instant, u64)>,
    /// Owner ids with a cleanup release in flight (usually none or one).
    cleanups: Vec<OwnerId>,
    /// Progress through a multi-step acquire (etcd), for the current owner id.
    progress: Progress,
    /// The send of the last acquire that found the lock held by another: the validity
    /// base of a grant a fair wake-up brings (see `State::Parked`).
    contended_sent_at: Option<Instant>,
    /// What a two-step release's first step found (etcd: the delete transaction,
    /// before the lease is revoked).
    release_verdict: Option<OwnerCheck>,
    last_error: Option<String>,
}

impl Lock {
    pub(crate) fn new(
        id: LockId,
        name: String,
        options: LockOptions,
        owner: OwnerId,
        now: Instant,
    ) -> Self {
        let acquire_deadline = options.acquire_timeout.map(|t| now + t);
        Lock {
            id,
            name,
            options,
            owner,
            acquire_deadline,
            state: State::Waiting {
                retry_at: now,
                attempt: 0,
                ambiguous: false,
            },
            in_flight: 0,
            timer: None,
            cleanups: Vec::new(),
            progress: Progress::default(),
            contended_sent_at: None,
            release_verdict: None,
            last_error: None,
        }
    }

    /// Finished and nothing left to wait for: the machine may forget the lock.
    pub(crate) fn can_forget(&self, now: Instant) -> bool {
        match self.state {
            State::Finished { forget_at } => self.in_flight == 0 || now >= forget_at,
            _ => false,
        }
    }

    fn finish(&mut self, ctx: &mut Ctx<'_>, event: Event) {
        self.state = State::Finished {
            forget_at: ctx.now + self.options.ttl,
        };
        self.emit(ctx, event);
    }

    /// The next instant at which [`Lock::on_timer`] has something to do.
    pub(crate) fn wakeup(&self) -> Option<Instant> {
        match self.state {
            State::Acquiring { sent_at, .. } => Some(self.attempt_deadline(sent_at)),
            State::Waiting { retry_at, .. } => Some(retry_at),
            State::Parked { give_up_at, .. } => Some(give_up_at),
            State::Held {
                valid_until,
                renew_at,
                ..
            } => Some(valid_until.min(renew_at)),
            State::Renewing { valid_until, .. } => Some(valid_until),
            State::Releasing {
                request,
                retry_at,
                deadline,
                ..
            } => Some(if request.is_none() {
                retry_at.min(deadline)
            } else {
                deadline
            }),
            State::Finished { forget_at } => (self.in_flight > 0).then_some(forget_at),
        }
    }

    pub(crate) fn valid_until(&self) -> Option<Instant> {
        match self.state {
            State::Held { valid_until, .. } | State::Renewing { valid_until, .. } => {
                Some(valid_until)
            }
            _ => None,
        }
    }

    fn emit(&self, ctx: &mut Ctx<'_>, event: Event) {
        ctx.outputs.push_back(Output::Event {
            lock: self.id,
            event,
        });
    }

    /// Phrases and sends an acquire, renew or release of `owner`.
    fn send(
        &mut self,
        ctx: &mut Ctx<'_>,
        phrase: Phrase,
        owner: OwnerId,
        deadline: Instant,
        cleanup: bool,
        attempt: u32,
    ) -> RequestId {
        let ttl_ms = self.options.ttl_ms();
        let retry_max_ms = u64::try_from(self.options.retry_max.as_millis()).unwrap_or(u64::MAX);
        let (operation, body) = match phrase {
            Phrase::Acquire => (
                Operation::Acquire,
                ctx.backend.acquire(
                    &self.name,
                    &owner,
                    ttl_ms,
                    retry_max_ms,
                    &mut self.progress,
                    self.options.renew_interval(),
                    ctx.now,
                ),
            ),
            Phrase::Renew => (
                Operation::Renew,
                ctx.backend.renew(&self.name, &owner, ttl_ms),
            ),
            // a fair release reserves the lock for an older waiter for one backoff step
            Phrase::Release(was_held) => (
                Operation::Release,
                ctx.backend.release(
                    &self.name,
                    &owner,
                    retry_max_ms,
                    &mut self.progress,
                    was_held,
                ),
            ),
            Phrase::Cleanup => (
                Operation::Release,
                ctx.backend.cleanup(&self.name, &owner, retry_max_ms),
            ),
        };
        self.send_body(ctx, operation, owner, deadline, cleanup, attempt, body)
    }

    #[allow(clippy::too_many_arguments)]
    fn send_body(
        &mut self,
        ctx: &mut Ctx<'_>,
        operation: Operation,
        owner: OwnerId,
        deadline: Instant,
        cleanup: bool,
        attempt: u32,
        body: crate::backends::RequestBody,
    ) -> RequestId {
        *ctx.next_request += 1;
        let id = RequestId(*ctx.next_request);
        ctx.requests.insert(
            id,
            InFlight {
                lock: self.id,
                operation,
                owner,
                cleanup,
                attempt,
                deadline,
            },
        );
        self.in_flight += 1;
        ctx.outputs.push_back(Output::Request(Request {
            id,
            lock: self.id,
            operation,
            deadline,
            body,
        }));
        id
    }

    /// Releases `owner` on the server for a lease this machine gave up on, so it is
    /// not orphaned until its TTL (DESIGN.md rules 4 and 5). Nobody is told.
    pub(crate) fn send_cleanup(&mut self, ctx: &mut Ctx<'_>, owner: OwnerId, attempt: u32) {
        let deadline = ctx.now + self.options.ttl;
        self.cleanups.push(owner);
        self.send(ctx, Phrase::Cleanup, owner, deadline, true, attempt);
    }

    /// When an acquire sent at `sent_at` is given up on: at the end of the validity it
    /// would grant, or at the acquire deadline if that comes first and came after the
    /// send (the last try, made at the deadline or with timeout 0, gets its full time).
    fn attempt_deadline(&self, sent_at: Instant) -> Instant {
        let validity_end = sent_at + self.options.validity();
        match self.acquire_deadline {
            Some(deadline) if deadline > sent_at => deadline.min(validity_end),
            _ => validity_end,
        }
    }

    fn send_acquire(&mut self, ctx: &mut Ctx<'_>, attempt: u32) {
        let deadline = self.attempt_deadline(ctx.now);
        let request = self.send(ctx, Phrase::Acquire, self.owner, deadline, false, attempt);
        self.state = State::Acquiring {
            request,
            sent_at: ctx.now,
            attempt,
        };
    }

    /// The backoff before retry number `attempt + 1`: full jitter over
    /// `min(retry_max, retry_base · 2^attempt)`, clamped to the acquire deadline and,
    /// when the holder's remaining TTL is known, to when it expires.
    fn backoff(
        &self,
        ctx: &mut Ctx<'_>,
        attempt: u32,
        holder_remaining: Option<Duration>,
    ) -> Instant {
        let step = self
            .options
            .retry_base
            .saturating_mul(1u32 << attempt.min(20))
            .min(self.options.retry_max);
        // Waiting longer than the holder's remaining TTL is pointless; jitter below it
        // so contenders told the same TTL still spread out.
        let cap = holder_remaining.map_or(step, |r| step.min(r));
        let wait = ctx.jitter(cap);
        let retry_at = ctx.now + wait;
        match self.acquire_deadline {
            Some(deadline) => retry_at.min(deadline),
            None => retry_at,
        }
    }

    /// When a queued fair Redis waiter stops waiting on its wake list. The release
    /// wakes it (and grants it the lock), so this timeout is only the fallback for a
    /// missed wake-up and need not start short like a polling backoff (short parks
    /// would send a queued waiter back to the server again and again while it waits
    /// its turn): `retry_max`, or the holder's remaining TTL when that is shorter (a
    /// holder that dies wakes nobody), with equal jitter (half fixed, half random) so
    /// waiters told the same TTL spread out. At most the acquire deadline.
    fn park_timeout(&self, ctx: &mut Ctx<'_>, holder_remaining: Option<Duration>) -> Instant {
        let retry_max = self.options.retry_max;
        let cap = holder_remaining.map_or(retry_max, |r| retry_max.min(r));
        let half = cap / 2;
        let retry_at = ctx.now + half + ctx.jitter(cap - half);
        match self.acquire_deadline {
            Some(deadline) => retry_at.min(deadline),
            None => retry_at,
        }
    }

    fn acquire_deadline_passed(&self, now: Instant) -> bool {
        self.acquire_deadline.is_some_and(|d| now >= d)
    }

    /// An attempt did not get the lock. Retry after a backoff, or give up at the
    /// acquire deadline (releasing first if the server might hold it for us).
    /// `contended`: another owner holds the lock (rather than an error); on a fair
    /// backend that also means this owner is queued there.
    fn attempt_failed(
        &mut self,
        ctx: &mut Ctx<'_>,
        attempt: u32,
        ambiguous: bool,
        holder_remaining: Option<Duration>,
        contended: bool,
    ) {
        // Queued on the server: giving up or cancelling must leave the queue.
        let ambiguous = ambiguous || (contended && ctx.backend.notifies_waiters());
        if self.acquire_deadline_passed(ctx.now) {
            if ambiguous {
                self.send_cleanup(ctx, self.owner, 0);
            }
            let last_error = self.last_error.take();
            self.finish(
                ctx,
                Event::AcquireFailed {
                    reason: AcquireFailedReason::Timeout { last_error },
                },
            );
            return;
        }
        let mut retry_at = if contended && ctx.backend.grants_in_wait() {
            self.park_timeout(ctx, holder_remaining)
        } else {
            self.backoff(ctx, attempt, holder_remaining)
        };
        if contended {
            // etcd: the watch stands in for the backoff, until the waiter's own lease
            // needs its keep-alive (or the acquire deadline).
            if let Some(until) = ctx.backend.park_until(
                &self.owner,
                &mut self.progress,
                self.options.renew_interval(),
            ) {
                retry_at = until.max(ctx.now);
                if let Some(deadline) = self.acquire_deadline {
                    retry_at = retry_at.min(deadline);
                }
            }
            // Queued on a backend that wakes waiters: block until woken, with the
            // timeout above as the fallback if a wake-up is missed (fair Redis:
            // `park_timeout`; etcd: until its keep-alive is due). At most half the
            // validity: a grant the wake-up brings is measured from `base`.
            let base = self.contended_sent_at.unwrap_or(ctx.now);
            let retry_at = retry_at.min(base + self.options.validity() / 2);
            let wait = retry_at.saturating_duration_since(ctx.now);
            let wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
            if wait_ms > 0 {
                if let Some(body) =
                    ctx.backend
                        .wait(&self.name, &self.owner, wait_ms, &mut self.progress)
                {
                    let give_up_at = retry_at + self.options.retry_max;
                    let request = self.send_body(
                        ctx,
                        Operation::Wait,
                        self.owner,
                        give_up_at,
                        false,
                        0,
                        body,
                    );
                    self.state = State::Parked {
                        request,
                        sent_at: base,
                        attempt: attempt + 1,
                        give_up_at,
                    };
                    return;
                }
            }
        }
        self.state = State::Waiting {
            retry_at,
            attempt: attempt + 1,
            ambiguous,
        };
    }

    fn lose(&mut self, ctx: &mut Ctx<'_>, reason: LostReason) {
        if reason == LostReason::Expired {
            // A renewal may have landed without its reply reaching us: free the key.
            self.send_cleanup(ctx, self.owner, 0);
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

    pub(crate) fn on_timer(&mut self, ctx: &mut Ctx<'_>) {
        if self.expire_if_due(ctx) {
            return;
        }
        let now = ctx.now;
        match self.state.clone() {
            State::Acquiring { sent_at, .. } if now >= self.attempt_deadline(sent_at) => {
                // No reply in time: the outcome is unknown. A reply that still comes
                // is late, and `on_late_reply` releases what it granted.
                self.on_acquire_ambiguous(
                    ctx,
                    "the acquire request got no reply in time".to_owned(),
                );
            }
            State::Waiting {
                retry_at, attempt, ..
            } if now >= retry_at => self.send_acquire(ctx, attempt),
            // The wait got no reply in time (a host that does not cancel it): try anyway.
            State::Parked {
                attempt,
                give_up_at,
                ..
            } if now >= give_up_at => self.send_acquire(ctx, attempt),
            State::Held {
                token,
                valid_until,
                renew_at,
            } if now >= renew_at => {
                let request = self.send(ctx, Phrase::Renew, self.owner, valid_until, false, 0);
                self.state = State::Renewing {
                    token,
                    valid_until,
                    request,
                    sent_at: now,
                };
            }
            State::Releasing {
                request: None,
                retry_at,
                attempt,
                deadline,
                was_held,
            } if now >= retry_at && now < deadline => {
                self.send_release(ctx, attempt, deadline, was_held)
            }
            State::Releasing { deadline, .. } if now >= deadline => {
                // The key has expired on its own by now; the release is moot.
                self.finish(ctx, Event::Released);
            }
            _ => {}
        }
    }

    pub(crate) fn start(&mut self, ctx: &mut Ctx<'_>) {
        self.send_acquire(ctx, 0);
    }

    fn send_release(&mut self, ctx: &mut Ctx<'_>, attempt: u32, deadline: Instant, was_held: bool) {
        let phrase = Phrase::Release(was_held);
        let request = self.send(ctx, phrase, self.owner, deadline, false, attempt);
        self.state = State::Releasing {
            request: Some(request),
            retry_at: deadline,
            attempt,
            deadline,
            was_held,
        };
    }

    /// The user releases the lock, or cancels the acquisition.
    pub(crate) fn release(&mut self, ctx: &mut Ctx<'_>) {
        if self.expire_if_due(ctx) {
            return;
        }
        let deadline = ctx.now + self.options.ttl;
        match self.state {
            State::Held { .. } | State::Renewing { .. } => {
                // A renew in flight becomes late; if it lands after the release, its
                // reply triggers a cleanup release.
                self.send_release(ctx, 0, deadline, true);
            }
            State::Acquiring { .. }
            | State::Parked { .. }
            | State::Waiting {
                ambiguous: true, ..
            } => {
                // Cancelling: the server may hold the lock for us already.
                self.send_release(ctx, 0, deadline, false);
            }
            State::Waiting {
                ambiguous: false, ..
            } => {
                self.finish(ctx, Event::Released);
            }
            State::Releasing { .. } | State::Finished { .. } => {}
        }
    }

    /// A reply, or a transport error (`reply = None`, with its message), for a request
    /// of this lock.
    pub(crate) fn on_reply(
        &mut self,
        ctx: &mut Ctx<'_>,
        request: RequestId,
        flight: InFlight,
        reply: Result<&Reply, String>,
    ) {
        if flight.cleanup {
            self.on_cleanup_reply(ctx, flight, reply);
            return;
        }
        let expired = self.expire_if_due(ctx);
        let current = match self.state {
            State::Acquiring { request: r, .. }
            | State::Parked { request: r, .. }
            | State::Renewing { request: r, .. }
            | State::Releasing {
                request: Some(r), ..
            } => r == request,
            _ => false,
        };
        if expired || !current {
            self.on_late_reply(ctx, flight, reply);
            return;
        }
        match (self.state.clone(), flight.operation) {
            (
                State::Acquiring {
                    sent_at, attempt, ..
                },
                Operation::Acquire,
            ) => self.on_acquire_reply(ctx, sent_at, attempt, reply),
            (
                State::Parked {
                    attempt, sent_at, ..
                },
                Operation::Wait,
            ) => {
                match reply.map(|r| ctx.backend.read_wait(r)) {
                    // the releasing holder granted us the lock (fair Redis): validity
                    // from the wait's send (DESIGN.md rule 1)
                    Ok(Ok(Some(token))) => self.on_granted(ctx, token, sent_at, attempt),
                    // woken, or the wait timed out: try now
                    Ok(Ok(None)) => self.send_acquire(ctx, attempt),
                    // the blocking call failed: fall back on the plain backoff
                    Ok(Err(_)) | Err(_) => {
                        let retry_at = self.backoff(ctx, attempt, None);
                        self.state = State::Waiting {
                            retry_at,
                            attempt,
                            ambiguous: true,
                        };
                    }
                }
            }
            (
                State::Renewing {
                    token,
                    valid_until,
                    sent_at,
                    ..
                },
                Operation::Renew,
            ) => self.on_renew_reply(ctx, token, valid_until, sent_at, reply),
            (
                State::Releasing {
                    attempt,
                    deadline,
                    was_held,
                    ..
                },
                Operation::Release,
            ) => self.on_release_reply(ctx, attempt, deadline, was_held, reply),
            _ => {}
        }
    }

    fn on_acquire_ambiguous(&mut self, ctx: &mut Ctx<'_>, error: String) {
        let attempt = match self.state {
            State::Acquiring { attempt, .. } => attempt,
            _ => 0,
        };
        // Keep the first real error: "no reply in time" after a connection error says
        // less than the connection error did.
        self.last_error = Some(match self.last_error.take() {
            Some(earlier) if earlier != error => format!("{error} (earlier: {earlier})"),
            _ => error,
        });
        // Retrying with the same owner id is idempotent (DESIGN.md rule 5).
        self.attempt_failed(ctx, attempt, true, None, false);
    }

    fn on_acquire_reply(
        &mut self,
        ctx: &mut Ctx<'_>,
        sent_at: Instant,
        attempt: u32,
        reply: Result<&Reply, String>,
    ) {
        let outcome = match reply {
            Err(transport) => return self.on_acquire_ambiguous(ctx, transport),
            Ok(reply) => ctx.backend.read_acquire(
                &self.name,
                &self.owner,
                reply,
                &mut self.progress,
                sent_at,
            ),
        };
        match outcome {
            Ok((AcquireOutcome::Continue, _)) => {
                // The next step of the same attempt, at once.
                self.send_acquire(ctx, attempt);
            }
            Ok((AcquireOutcome::Granted(token), base)) => {
                // The validity base is the request's send, or for etcd the send of the
                // lease's last confirmed grant or keep-alive (never later than this
                // request's send).
                let base = base.map_or(sent_at, |b| b.min(sent_at));
                self.on_granted(ctx, token, base, attempt);
            }
            Ok((AcquireOutcome::Contended { remaining }, _)) => {
                self.contended_sent_at = Some(sent_at);
                self.last_error = None;
                self.attempt_failed(ctx, attempt, false, remaining, true)
            }
            Err(ReplyError::Transient(e)) => self.on_acquire_ambiguous(ctx, e),
            Err(ReplyError::Protocol(error)) => {
                self.send_cleanup(ctx, self.owner, 0);
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
    /// send of the request whose reply brought the grant, or etcd's lease base).
    fn on_granted(&mut self, ctx: &mut Ctx<'_>, token: FencingToken, base: Instant, attempt: u32) {
        let valid_until = ctx.validity_base(base) + self.options.validity();
        if ctx.now >= valid_until {
            // The reply came too late to use (a pause, a slow network): release
            // it, and try again under a fresh owner id so the release cannot
            // race a retry of ours.
            self.send_cleanup(ctx, self.owner, 0);
            self.owner = ctx.new_owner();
            self.last_error =
                Some("the lock was granted only after its validity had passed".to_owned());
            return self.attempt_failed(ctx, attempt, false, None, false);
        }
        let renew_at = if self.options.auto_renew {
            (base + self.options.renew_interval()).max(ctx.now)
        } else {
            Instant::MAX
        };
        self.state = State::Held {
            token,
            valid_until,
            renew_at,
        };
        self.emit(ctx, Event::Acquired { token, valid_until });
    }

    fn on_renew_reply(
        &mut self,
        ctx: &mut Ctx<'_>,
        token: FencingToken,
        valid_until: Instant,
        sent_at: Instant,
        reply: Result<&Reply, String>,
    ) {
        let outcome = reply.map(|r| ctx.backend.read_owner_check(r));
        match outcome {
            Ok(Ok(OwnerCheck::Done)) => {
                let valid_until =
                    valid_until.max(ctx.validity_base(sent_at) + self.options.validity());
                let renew_at = (sent_at + self.options.renew_interval()).max(ctx.now);
                self.state = State::Held {
                    token,
                    valid_until,
                    renew_at,
                };
                self.emit(ctx, Event::Renewed { valid_until });
            }
            // A renewal never re-creates a missing key (DESIGN.md rule 3).
            Ok(Ok(OwnerCheck::NotHeld)) => self.lose(ctx, LostReason::RenewRejected),
            // A connection-bound lock (PostgreSQL session mode) lives and dies with
            // its connection: a failed heartbeat means the session, and the lock with
            // it, is gone.
            Err(_) | Ok(Err(_)) if ctx.backend.connection_bound() => {
                self.lose(ctx, LostReason::RenewRejected)
            }
            // Transient: retry until the validity deadline; the timer decides loss.
            Err(_) | Ok(Err(_)) => {
                let retry = (self.options.renew_interval() / 4).max(Duration::from_millis(1));
                self.state = State::Held {
                    token,
                    valid_until,
                    renew_at: ctx.now + retry,
                };
            }
        }
    }

    fn on_release_reply(
        &mut self,
        ctx: &mut Ctx<'_>,
        attempt: u32,
        deadline: Instant,
        was_held: bool,
        reply: Result<&Reply, String>,
    ) {
        let outcome = reply.map(|r| ctx.backend.read_owner_check(r));
        if was_held && ctx.backend.cleanup_after_release() {
            if let Ok(Ok(check)) = outcome {
                // etcd: the key is deleted (or was no longer ours); revoke the lease
                // before reporting, so nothing is left running after the release.
                self.release_verdict = Some(check);
                self.send_release(ctx, 0, deadline, false);
                return;
            }
        }
        match outcome {
            Ok(Ok(check)) => {
                // A cancelled acquisition (or etcd's revoke) reports what the release
                // transaction found, if there was one.
                let check = if was_held {
                    check
                } else {
                    self.release_verdict.unwrap_or(OwnerCheck::Done)
                };
                self.finish_release(ctx, check);
            }
            Err(_) | Ok(Err(_)) => {
                let attempt = attempt + 1;
                if attempt >= RELEASE_ATTEMPTS || ctx.now >= deadline {
                    if was_held && ctx.backend.cleanup_after_release() {
                        // the key's fate is unknown: revoking the lease frees it
                        self.send_cleanup(ctx, self.owner, 0);
                    }
                    let check = self.release_verdict.unwrap_or(OwnerCheck::Done);
                    self.finish_release(ctx, check);
                } else {
                    let retry_at =
                        ctx.now + ctx.jitter(self.options.retry_base.saturating_mul(1 << attempt));
                    self.state = State::Releasing {
                        request: None,
                        retry_at,
                        attempt,
                        deadline,
                        was_held,
                    };
                }
            }
        }
    }

    /// Reports the end of a release: `NotHeld` means the server no longer held the
    /// lease for this owner (only possible for a lease that was held).
    fn finish_release(&mut self, ctx: &mut Ctx<'_>, check: OwnerCheck) {
        let lost = check == OwnerCheck::NotHeld
            && matches!(self.state, State::Releasing { was_held: true, .. })
            || self.release_verdict == Some(OwnerCheck::NotHeld);
        if lost {
            self.finish(
                ctx,
                Event::Lost {
                    reason: LostReason::NotHeldAtRelease,
                },
            );
        } else {
            // Done, or a cancelled acquisition that never took the lock.
            self.finish(ctx, Event::Released);
        }
    }

    /// A reply for a request this lock no longer waits for (DESIGN.md rule 4): it never
    /// changes the state, but if it shows (or might show) that the server holds the
    /// lock for an owner id this machine gave up on, that owner is released.
    fn on_late_reply(
        &mut self,
        ctx: &mut Ctx<'_>,
        flight: InFlight,
        reply: Result<&Reply, String>,
    ) {
        let may_hold = match (flight.operation, reply) {
            (Operation::Release, _) => false,
            // a wake-up may carry a grant (fair Redis); a lost one might have
            (Operation::Wait, Ok(r)) => matches!(ctx.backend.read_wait(r), Ok(Some(_))),
            (Operation::Wait, Err(_)) => ctx.backend.grants_in_wait(),
            (_, Err(_)) => true,
            (Operation::Acquire, Ok(r)) => ctx.backend.late_acquire_may_hold(r),
            (Operation::Renew, Ok(r)) => {
                !matches!(ctx.backend.read_owner_check(r), Ok(OwnerCheck::NotHeld))
            }
        };
        if !may_hold {
            return;
        }
        let still_ours = flight.owner == self.owner
            && matches!(
                self.state,
                State::Acquiring { .. }
                    | State::Waiting { .. }
                    | State::Parked { .. }
                    | State::Held { .. }
                    | State::Renewing { .. }
            );
        if still_ours {
            if let State::Waiting { ambiguous, .. } = &mut self.state {
                // An earlier attempt was granted too late to use, or its outcome stays
                // unknown, and no retry is in flight: release it and retry under a
                // fresh owner id, which the release cannot race.
                *ambiguous = false;
                self.send_cleanup(ctx, flight.owner, 0);
                self.owner = ctx.new_owner();
            }
            // Otherwise a retry with this owner id is in flight (acquiring), or the
            // next attempt after the wake-up uses it (parked), and re-acquires it
            // idempotently; a release sent now could race that retry. Held or
            // renewing: a duplicate of the reply already used.
            return;
        }
        if flight.operation == Operation::Renew && self.cleanups.contains(&flight.owner) {
            // A renewal never creates the key, so it took effect before the cleanup
            // release already in flight for this owner, which will remove it. (A late
            // *grant* may have landed after that release: it gets its own.)
            return;
        }
        self.send_cleanup(ctx, flight.owner, 0);
    }

    fn on_cleanup_reply(
        &mut self,
        ctx: &mut Ctx<'_>,
        flight: InFlight,
        reply: Result<&Reply, String>,
    ) {
        if let Some(i) = self.cleanups.iter().position(|o| *o == flight.owner) {
            self.cleanups.swap_remove(i);
        }
        let failed = !matches!(reply.map(|r| ctx.backend.read_owner_check(r)), Ok(Ok(_)));
        if failed && flight.attempt + 1 < RELEASE_ATTEMPTS && ctx.now < flight.deadline {
            self.send_cleanup(ctx, flight.owner, flight.attempt + 1);
        }
    }
}
