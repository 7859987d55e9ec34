//! The PostgreSQL lease-rows server of the model checker ([`ModelBackend::PostgresLease`]):
//! one [`MemoryPostgres`] on the true clock, and the hosts' `LISTEN` waits parked on
//! it, woken by a release's notification or ended at their timeout — the simulator's
//! rules ([`crate::sim::SimBackend::PostgresLease`]), without restarts.
//!
//! [`ModelBackend::PostgresLease`]: super::ModelBackend::PostgresLease

use crate::backends::{Operation, PgConnection, Reply, RequestBody, SqlValue};
use crate::memory::MemoryPostgres;
use crate::sim::{new_grant, s2_postgres, statement_owner, wait_over, Belief, Checker, Outcome};
use crate::{Instant, Request, RequestId};

/// The database and what the hosts' listening connections know.
#[derive(Clone, Debug)]
pub(super) struct PgServer {
    pub(super) db: MemoryPostgres,
    /// Waits parked: client, request, channel, in arrival order.
    waits: Vec<(usize, RequestId, String)>,
    /// Per client, when it last sent an acquire, and since when its host listens.
    acquire_sent: Vec<Instant>,
    listening_since: Vec<Option<Instant>>,
}

impl PgServer {
    pub(super) fn new(clients: usize) -> Self {
        PgServer {
            db: MemoryPostgres::default(),
            waits: Vec::new(),
            acquire_sent: vec![Instant::ZERO; clients],
            listening_since: vec![None; clients],
        }
    }

    pub(super) fn fingerprint(&self, out: &mut impl core::fmt::Write) -> core::fmt::Result {
        self.db.fingerprint(out)?;
        write!(
            out,
            "{:?}{:?}{:?}",
            self.waits, self.acquire_sent, self.listening_since
        )
    }

    /// The host sent `request` at `now`.
    pub(super) fn sent(&mut self, client: usize, now: Instant, request: &Request) {
        if request.operation == Operation::Acquire {
            self.acquire_sent[client] = now;
        }
    }

    /// The host ended a wait at its timeout: it is no longer parked.
    pub(super) fn forget(&mut self, client: usize, request: RequestId) {
        self.waits
            .retain(|(c, r, _)| !(*c == client && *r == request));
    }

    /// A statement reaches the server at `now`: its reply (`None`: a wait parked), the
    /// grant it made recorded with `checker`, and the waits its notification woke.
    pub(super) fn serve(
        &mut self,
        now: Instant,
        client: usize,
        request: &Request,
        checker: &mut Checker,
        outcome: &mut Outcome,
    ) -> (Option<Reply>, Vec<(usize, RequestId)>) {
        let RequestBody::Sql(statement) = &request.body else {
            return (None, Vec::new());
        };
        if statement.connection == PgConnection::Listen {
            let channel = match statement.params.first() {
                Some(SqlValue::Text(c)) => c.clone(),
                _ => String::new(),
            };
            let sent = self.acquire_sent[client];
            let since = *self.listening_since[client].get_or_insert(now);
            let missed = self.db.last_notify(&channel).is_some_and(|n| n >= sent);
            if since > sent || missed {
                return (Some(wait_over()), Vec::new());
            }
            self.waits.push((client, request.id, channel));
            return (None, Vec::new());
        }
        let before = self.db.row(crate::sim::LOCK_NAME).cloned();
        let reply = self.db.execute(now, &request.body);
        if request.operation == Operation::Acquire {
            if let Some((token, owner)) =
                new_grant(before.as_ref(), &reply, statement_owner(request))
            {
                checker.grant(now, token, Some(owner), outcome);
            }
        }
        let mut woken = Vec::new();
        for channel in self.db.take_notifications() {
            let (hit, kept) = core::mem::take(&mut self.waits)
                .into_iter()
                .partition(|(_, _, ch)| *ch == channel);
            self.waits = kept;
            woken.extend(hit.into_iter().map(|(c, r, _)| (c, r)));
        }
        (Some(reply), woken)
    }

    /// S2 against the lease row.
    pub(super) fn s2(&self, beliefs: Vec<Belief>) -> Option<String> {
        s2_postgres(&self.db, beliefs)
    }
}
