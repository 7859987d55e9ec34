//! The PostgreSQL lease-rows side of a simulation ([`SimBackend::PostgresLease`]): one
//! [`MemoryPostgres`] whose clock is the true time, contenders parked on `LISTEN`
//! waits for a release's notification, and restarts that keep the data.
//!
//! [`SimBackend::PostgresLease`]: super::SimBackend::PostgresLease

use core::time::Duration;

use super::{is_hex_of, Belief, Ev, Msg, Property, Simulation, LOCK_NAME};
use crate::backends::{Operation, PgConnection, PostgresBackend, Reply, SqlReply, SqlValue};
use crate::memory::{MemoryPostgres, PgLeaseRow};
use crate::{FencingToken, Instant, OwnerId, Request, RequestBody, RequestId};

/// The PostgreSQL side of a simulation.
pub(super) struct PgSim {
    pub(super) server: MemoryPostgres,
    /// `LISTEN` waits parked on the server: client, request, channel.
    waits: Vec<(usize, RequestId, String)>,
    /// Per client, when (true time) it last sent an acquire, and since when its host's
    /// listening connection has listened (the wait's "answer at once" rules,
    /// [`PgConnection::Listen`]).
    acquire_sent: Vec<Instant>,
    listening_since: Vec<Option<Instant>>,
    /// The server restarts (recovering from its log, data kept) until then.
    pub(super) unavailable_until: Instant,
}

impl PgSim {
    pub(super) fn new(clients: usize) -> Self {
        PgSim {
            server: MemoryPostgres::new(&PostgresBackend::default()),
            waits: Vec::new(),
            acquire_sent: vec![Instant::ZERO; clients],
            listening_since: vec![None; clients],
            unavailable_until: Instant::ZERO,
        }
    }
}

/// The reply a host gives a wait that ended (notified, timed out, its connection gone):
/// no rows.
pub(crate) fn wait_over() -> Reply {
    Reply::Sql(SqlReply::Rows { rows: vec![] })
}

/// The owner id parameter of a lease statement (its second).
pub(crate) fn statement_owner(request: &Request) -> Option<&str> {
    match &request.body {
        RequestBody::Sql(s) => match s.params.get(1) {
            Some(SqlValue::Text(owner)) => Some(owner),
            _ => None,
        },
        _ => None,
    }
}

/// The wait's timeout of a `LISTEN` statement (its second parameter, ms).
pub(crate) fn listen_timeout(body: &RequestBody) -> Option<Duration> {
    match body {
        RequestBody::Sql(s) if s.connection == PgConnection::Listen => match s.params.get(1) {
            Some(SqlValue::Int(ms)) => Some(Duration::from_millis(u64::try_from(*ms).ok()?)),
            _ => None,
        },
        _ => None,
    }
}

/// Whether `row` shows a grant to `owner` that the row `before` did not: a new holder
/// (a retry of the same owner keeps its token and is no new grant). Returns its token.
pub(crate) fn new_grant(
    before: Option<&PgLeaseRow>,
    reply: &Reply,
    owner: Option<&str>,
) -> Option<(FencingToken, OwnerId)> {
    let Reply::Sql(SqlReply::Rows { rows }) = reply else {
        return None;
    };
    let [row] = rows.as_slice() else { return None };
    let (Some(SqlValue::Int(token)), Some(owner)) = (row.first(), owner) else {
        return None;
    };
    if before.is_some_and(|b| b.owner.as_deref() == Some(owner)) {
        return None;
    }
    Some((FencingToken(*token as u64), OwnerId::from_hex(owner)?))
}

/// S2 on PostgreSQL: every believer's owner holds the lease row (with the believer's
/// token, when known), expiring no earlier than the believed instant. The first breach,
/// described.
pub(crate) fn s2_postgres(
    server: &MemoryPostgres,
    beliefs: impl IntoIterator<Item = Belief>,
) -> Option<String> {
    let row = server.row(LOCK_NAME);
    let expires = row.and_then(|r| r.expires_at.instant());
    beliefs.into_iter().find_map(|b| {
        let ok = row.is_some_and(|r| {
            r.owner.as_deref().is_some_and(|o| is_hex_of(o, &b.owner))
                && b.token.is_none_or(|t| t.get() == r.token as u64)
        }) && expires.is_some_and(|e| e >= b.believed_until);
        (!ok).then(|| {
            format!(
                "c{} believes it holds lock {} (token {:?}) until {} (its clock: {}), \
                 but the lease row is {row:?}",
                b.client, b.lock, b.token, b.believed_until, b.valid_until
            )
        })
    })
}

impl Simulation {
    /// A statement reaches the database (or, for a wait, the host's listening
    /// connection on it).
    pub(super) fn deliver_pg(&mut self, client: usize, request: Request) {
        let RequestBody::Sql(statement) = &request.body else {
            return;
        };
        let reply = if self.now < self.pg.unavailable_until {
            Reply::Sql(SqlReply::Error {
                sqlstate: "57P03".into(),
                message: "the database system is starting up".into(),
            })
        } else if statement.connection == PgConnection::Listen {
            let channel = match statement.params.first() {
                Some(SqlValue::Text(c)) => c.clone(),
                _ => String::new(),
            };
            let sent = self.pg.acquire_sent[client];
            let since = *self.pg.listening_since[client].get_or_insert(self.now);
            let missed = self
                .pg
                .server
                .last_notify(&channel)
                .is_some_and(|n| n >= sent);
            if since > sent || missed {
                // a release may have come between the acquire and the wait
                self.trace(|| format!("server: c{client}'s wait ends at once"));
                wait_over()
            } else {
                self.trace(|| format!("server: c{client} listens on {channel}"));
                self.pg.waits.push((client, request.id, channel));
                return;
            }
        } else {
            let before = self.pg.server.row(LOCK_NAME).cloned();
            let reply = self.pg.server.execute(self.now, &request.body);
            if request.operation == Operation::Acquire {
                if let Some((token, owner)) =
                    new_grant(before.as_ref(), &reply, statement_owner(&request))
                {
                    self.outcome.grants += 1;
                    self.checker
                        .grant(self.now, token, Some(owner), &mut self.outcome);
                    self.trace(|| format!("server: grants token {token} to c{client}"));
                }
            }
            reply
        };
        self.trace(|| format!("server: {:?} from c{client} → {reply:?}", request.operation));
        self.send(Msg::Reply {
            client,
            request: request.id,
            reply,
        });
        self.serve_pg_waits();
    }

    /// The host sends a statement: an acquire's send time and a wait's timeout.
    pub(super) fn pg_sent(&mut self, c: usize, request: &Request) {
        if request.operation == Operation::Acquire {
            self.pg.acquire_sent[c] = self.now;
        }
        if let Some(timeout) = listen_timeout(&request.body) {
            // the host ends the wait at its timeout, on its own clock
            let local = self.clients[c].local(self.now) + timeout;
            let at = self.clients[c].true_of(local).max(self.now);
            self.push(
                at,
                Ev::WatchTimeout {
                    client: c,
                    request: request.id,
                },
            );
        }
    }

    /// A wait reached its timeout: the host ends it with no rows.
    pub(super) fn pg_wait_timeout(&mut self, client: usize, request: RequestId) {
        if self.clients[client].in_flight.contains_key(&request) {
            self.pg
                .waits
                .retain(|(c, r, _)| !(*c == client && *r == request));
            self.trace(|| format!("c{client}: wait {} timed out", request.0));
            self.deliver(Msg::Reply {
                client,
                request,
                reply: wait_over(),
            });
        }
    }

    /// Wakes the waits on every channel notified since, first parked first.
    fn serve_pg_waits(&mut self) {
        for channel in self.pg.server.take_notifications() {
            let (woken, kept) = core::mem::take(&mut self.pg.waits)
                .into_iter()
                .partition(|(_, _, ch)| *ch == channel);
            self.pg.waits = kept;
            for (client, request, _) in woken {
                self.trace(|| format!("server: notifies c{client}"));
                self.send(Msg::Reply {
                    client,
                    request,
                    reply: wait_over(),
                });
            }
        }
    }

    /// A restart: connections drop (the listening ones too: their waits end), the
    /// server recovers for up to one TTL, then runs with every committed row (inside
    /// the model: leases keep their server-clock expiry).
    pub(super) fn pg_restart(&mut self) {
        let down = self.uniform(self.cfg.options.ttl);
        self.trace(|| format!("server: postgres restarts, back in {down:?}"));
        self.pg.unavailable_until = self.now + down;
        for (client, request, _) in core::mem::take(&mut self.pg.waits) {
            self.send(Msg::Reply {
                client,
                request,
                reply: wait_over(),
            });
        }
        // a new listening connection has heard nothing yet
        self.pg.listening_since.iter_mut().for_each(|l| *l = None);
        self.server_epoch += 1;
        self.checker.server_restarted();
        let next = self.exp_interval(self.cfg.faults.p_server_restart);
        self.push(next, Ev::ServerRestart);
    }

    /// S1 at the server (grants, recorded as they are made), S2 and S4 against the
    /// lease row.
    pub(super) fn check_pg(&mut self) {
        let row = self.pg.server.row(LOCK_NAME);
        let held = row.is_some_and(|r| r.live(self.now));
        self.checker
            .idle_check(self.now, held, &self.clients, &mut self.outcome);
        if let Some(detail) = s2_postgres(&self.pg.server, self.beliefs()) {
            self.checker
                .violate(Property::S2, self.now, detail, &mut self.outcome);
        }
    }
}
