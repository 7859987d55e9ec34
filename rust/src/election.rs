//! Leader election on the lock API: an [`Election`] is a lock held indefinitely, so a
//! leader carries the lease's fencing token and its term ends when the lease is lost
//! (the core's `Event::Lost`). Nothing here decides validity, renewals or tokens.

use std::future::Future;
use std::sync::{Arc, Mutex};

use std::collections::BTreeMap;
use std::time::Duration;

use fencepost_core::{encode_metadata, FencingToken, Holder, LockOptions, LostReason, OwnerId};
use futures::{Stream, StreamExt};

use crate::{Client, Error, Lease};

/// Why a term ended (given to [`Election::on_stopped_leading`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StopReason {
    /// [`Leadership::resign`], or the work of [`Election::run`] finished.
    Resigned,
    /// The [`Leadership`] was dropped without a resign (its task cancelled, the
    /// future of [`Election::run`] dropped): the lease is released at once.
    Cancelled,
    /// The lease was lost (the core's reason).
    Lost(LostReason),
}

/// What the callbacks see of a term.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Term {
    /// The election's name (its lock's).
    pub name: String,
    /// The leader's identity.
    pub identity: String,
    /// The leader's value, if any.
    pub value: Option<String>,
    /// The term's fencing token (the lease's).
    pub token: FencingToken,
    /// The lease's owner id.
    pub owner: OwnerId,
}

/// The leader of an election as a follower reads it ([`Election::leader`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The leader's identity; `None` for a holder whose lock carries no election
    /// record (a plain lock of the same name, a candidate of another client, or an etcd
    /// key an instant before its record).
    pub identity: Option<String>,
    /// The value the leader published, if any.
    pub value: Option<String>,
    /// The term's fencing token, as the server counts it (zero when the server does
    /// not say).
    pub token: FencingToken,
}

impl Leader {
    fn from_holder(holder: Holder) -> Leader {
        let mut meta = holder.metadata.unwrap_or_default();
        Leader {
            identity: meta.remove("identity"),
            value: meta.remove("value"),
            token: holder.token.unwrap_or(FencingToken(0)),
        }
    }
}

type Started = Arc<dyn Fn(&Term) + Send + Sync>;
type Stopped = Arc<dyn Fn(&Term, StopReason) + Send + Sync>;

/// A leader election named `name` on a [`Client`], campaigned for as `identity`.
///
/// Built on [`Client::acquire`]: every backend with locks has it (Redis as an
/// efficiency election; PostgreSQL lease rows, etcd, ZooKeeper and Kubernetes for correctness).
/// Followers read [`Election::leader`] and [`Election::observe`]. Callbacks are
/// called exactly once per term, in order: [`Election::on_started_leading`] before
/// [`Election::campaign`] returns, [`Election::on_stopped_leading`] whatever ends the
/// term (a resign, the lease's loss, the [`Leadership`] dropped).
#[derive(Clone)]
pub struct Election {
    client: Client,
    name: String,
    identity: String,
    value: Option<String>,
    options: LockOptions,
    started: Option<Started>,
    stopped: Option<Stopped>,
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.name)
            .field("identity", &self.identity)
            .finish()
    }
}

impl Client {
    /// An election named `name`, campaigned for as `identity` with the lock options
    /// `options` (`auto_renew` must stay on: a term lasts as long as its lease is
    /// renewed). The leader's record (`{"identity", "value"}`) is the lease's metadata
    /// where the backend stores metadata: leave `options.metadata` unset, or yours is
    /// stored instead and [`Election::leader`] finds no identity or value (as in
    /// Python and JavaScript).
    ///
    /// Errors: [`Error::Config`] for an empty identity or `auto_renew` off;
    /// [`Error::Usage`] for a name or options the core refuses.
    pub fn election(
        &self,
        name: &str,
        identity: &str,
        options: LockOptions,
    ) -> Result<Election, Error> {
        if identity.is_empty() {
            return Err(Error::Config(
                "identity must be a non-empty string, got \"\"".into(),
            ));
        }
        if !options.auto_renew {
            return Err(Error::Config(
                "auto_renew must stay true for an election: a term lasts as long as its lease is renewed"
                    .into(),
            ));
        }
        self.backend().check_acquire(name, &options)?;
        Ok(Election {
            client: self.clone(),
            name: name.to_owned(),
            identity: identity.to_owned(),
            value: None,
            options,
            started: None,
            stopped: None,
        })
    }
}

impl Election {
    /// Sets the value a leader publishes beside its identity.
    pub fn with_value(mut self, value: impl Into<String>) -> Self {
        self.value = Some(value.into());
        self
    }

    /// Sets the callback called once per term when it starts. It must not block.
    pub fn on_started_leading(mut self, f: impl Fn(&Term) + Send + Sync + 'static) -> Self {
        self.started = Some(Arc::new(f));
        self
    }

    /// Sets the callback called once per term when it ends, whatever ends it. It must
    /// not block.
    pub fn on_stopped_leading(
        mut self,
        f: impl Fn(&Term, StopReason) + Send + Sync + 'static,
    ) -> Self {
        self.stopped = Some(Arc::new(f));
        self
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// This candidate's identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Waits until this candidate leads (as long as `options.acquire_timeout` allows)
    /// and returns the term. Dropping the future cancels the campaign (what the server
    /// granted is released); no callback is called then.
    ///
    /// Errors: as [`Client::acquire`].
    pub async fn campaign(&self) -> Result<Leadership, Error> {
        let lease = self.client.acquire(&self.name, self.lock_options()).await?;
        let term = Term {
            name: self.name.clone(),
            identity: self.identity.clone(),
            value: self.value.clone(),
            token: lease.token(),
            owner: lease.owner_id(),
        };
        let state = Arc::new(TermState {
            term,
            ended: Mutex::new(None),
            stopped: self.stopped.clone(),
        });
        if let Some(started) = &self.started {
            started(&state.term);
        }
        let watcher = {
            let state = state.clone();
            let lost = lease.lost();
            tokio::spawn(async move {
                let reason = lost.await;
                state.end(StopReason::Lost(reason));
            })
        };
        Ok(Leadership {
            lease: Some(lease),
            state,
            watcher,
        })
    }

    /// The lock options of a campaign: the election's, with the record followers read
    /// (`{"identity", "value"}`) as the lease's metadata where the backend stores
    /// metadata and the caller gave none.
    fn lock_options(&self) -> LockOptions {
        let mut options = self.options.clone();
        if options.metadata.is_none() && self.client.backend().stores_metadata() {
            let mut record = BTreeMap::from([("identity".to_owned(), self.identity.clone())]);
            if let Some(value) = &self.value {
                record.insert("value".to_owned(), value.clone());
            }
            options.metadata = Some(encode_metadata(&record));
        }
        options
    }

    /// The current leader, or `None` when nobody leads, as the server answers now
    /// (stale by the time it arrives: for display and routing, never for deciding who
    /// may write — that is the fencing token's job). Read with [`Client::status`]: the
    /// holder's metadata carries the leader's record on every backend that stores
    /// metadata (plain Redis, PostgreSQL lease rows, etcd, ZooKeeper, Kubernetes).
    ///
    /// Errors: [`Error::Config`] on a backend that keeps only the owner id with the
    /// lock (fair Redis, Redlock, PostgreSQL advisory locks); as [`Client::status`].
    pub async fn leader(&self) -> Result<Option<Leader>, Error> {
        if !self.client.backend().stores_metadata() {
            return Err(Error::Config(format!(
                "{} cannot say who leads an election: it keeps only the holder's owner id \
                 with the lock (leader() and observe() work on plain Redis, PostgreSQL lease \
                 rows, etcd, ZooKeeper and Kubernetes)",
                self.client.backend().name()
            )));
        }
        Ok(self
            .client
            .status(&self.name)
            .await?
            .map(Leader::from_holder))
    }

    /// The current leader, then every change of it (another token, identity or value,
    /// or nobody leading), in order, read every `interval`: a term shorter than the
    /// interval may be missed, never reordered. A holder without a record yet (an etcd
    /// key an instant before its record) is skipped. The stream ends after the first
    /// error, which it yields, and is fused: polled after its end it yields `None`
    /// again (safe in a `select!` loop). Errors: as [`Election::leader`].
    pub fn observe(
        &self,
        interval: Duration,
    ) -> impl Stream<Item = Result<Option<Leader>, Error>> + Send + 'static {
        struct State {
            election: Election,
            last: Option<Option<Leader>>,
            first: bool,
            done: bool,
        }
        let state = State {
            election: self.clone(),
            last: None,
            first: true,
            done: false,
        };
        futures::stream::unfold(state, move |mut st| async move {
            if st.done {
                return None;
            }
            loop {
                if !st.first {
                    tokio::time::sleep(interval).await;
                }
                st.first = false;
                let now = match st.election.leader().await {
                    Ok(now) => now,
                    Err(e) => {
                        st.done = true;
                        return Some((Err(e), st));
                    }
                };
                let pending = matches!(&now, Some(l) if l.identity.is_none() && l.value.is_none());
                if pending || st.last.as_ref() == Some(&now) {
                    continue;
                }
                st.last = Some(now.clone());
                return Some((Ok(now), st));
            }
        })
        .fuse()
    }

    /// Campaigns, then runs `work` with a view of the term, racing it against the
    /// term's loss: a lost term cancels `work` (its future dropped at its next
    /// `.await`). Work that finishes inside the term resigns it. Dropping the future
    /// of `run` resigns at once ([`StopReason::Cancelled`]).
    ///
    /// Errors: as [`Election::campaign`]; [`Error::Lost`] when the term was lost, or
    /// the resign found the lease gone on the server (then `work`'s result is
    /// discarded, as in [`Client::with_lock`]).
    pub async fn run<T, F, Fut>(&self, work: F) -> Result<T, Error>
    where
        F: FnOnce(Term) -> Fut,
        Fut: Future<Output = T>,
    {
        let leadership = self.campaign().await?;
        let lost = leadership.lost();
        let outcome = tokio::select! {
            reason = lost => Err(reason),
            value = work(leadership.term().clone()) => Ok(value),
        };
        match outcome {
            // as with_lock: a release that found the lease gone discards the result
            Ok(value) => match leadership.resign().await? {
                StopReason::Lost(reason) => Err(Error::Lost {
                    name: self.name.clone(),
                    reason,
                }),
                _ => Ok(value),
            },
            Err(reason) => {
                // before the drop, which would end the term as cancelled
                leadership.state.end(StopReason::Lost(reason.clone()));
                Err(Error::Lost {
                    name: self.name.clone(),
                    reason,
                })
            }
        }
    }
}

struct TermState {
    term: Term,
    ended: Mutex<Option<StopReason>>,
    stopped: Option<Stopped>,
}

impl TermState {
    /// Ends the term if nobody did: the first caller calls the callback.
    fn end(&self, reason: StopReason) -> bool {
        {
            let mut ended = self.ended.lock().unwrap_or_else(|e| e.into_inner());
            if ended.is_some() {
                return false;
            }
            *ended = Some(reason.clone());
        }
        if let Some(stopped) = &self.stopped {
            stopped(&self.term, reason);
        }
        true
    }
}

/// One term of an [`Election`]. Resign it with [`Leadership::resign`]; dropping it
/// releases the lease at once (best effort) and ends the term as
/// [`StopReason::Cancelled`].
pub struct Leadership {
    lease: Option<Lease>,
    state: Arc<TermState>,
    watcher: tokio::task::JoinHandle<()>,
}

impl Leadership {
    /// The term: name, identity, value, token, owner id.
    pub fn term(&self) -> &Term {
        &self.state.term
    }

    /// The term's fencing token: carry it on every write the leader makes.
    pub fn token(&self) -> FencingToken {
        self.state.term.token
    }

    /// Why the term ended, or `None` while it lasts.
    pub fn stop_reason(&self) -> Option<StopReason> {
        self.state
            .ended
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Resolves with the reason once the lease is lost (see [`Lease::lost`]).
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        match &self.lease {
            Some(lease) => futures::future::Either::Left(lease.lost()),
            None => futures::future::Either::Right(std::future::pending()),
        }
    }

    /// Releases the lease now (owner-checked, no waiting out the TTL) and ends the
    /// term: returns why it ended ([`StopReason::Resigned`], or the loss that came
    /// first, which includes a server that no longer held the lease at release).
    ///
    /// Errors: [`Error::DriverGone`].
    pub async fn resign(mut self) -> Result<StopReason, Error> {
        self.watcher.abort();
        let lease = self
            .lease
            .take()
            .expect("a leadership holds its lease until resigned");
        let reason = match lease.release().await {
            Ok(()) => StopReason::Resigned,
            Err(Error::Lost { reason, .. }) => StopReason::Lost(reason),
            Err(other) => {
                self.state.end(StopReason::Cancelled);
                return Err(other);
            }
        };
        self.state.end(reason.clone());
        Ok(self.stop_reason().unwrap_or(reason))
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        if self.lease.take().is_some() {
            // the lease's own drop releases it at once
            self.watcher.abort();
            self.state.end(StopReason::Cancelled);
        }
    }
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("term", &self.state.term)
            .field("stop_reason", &self.stop_reason())
            .finish()
    }
}
