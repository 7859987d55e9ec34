//! The timeline on PostgreSQL: [`ScriptedPostgres`] answers each statement with the
//! next reply the test scripted, and keeps the statements it was sent for the test to
//! inspect; `MemoryPostgres` (the core's, which executes the lease-row statements as
//! PostgreSQL does) serves stories that need a server of their own.

use std::collections::VecDeque;

use fencepost_core::memory::MemoryPostgres;
use fencepost_core::{
    Backend, Instant, PostgresBackend, Reply, Request, RequestBody, SqlReply, SqlStatement,
};

use super::{Server, Timeline};

#[derive(Default)]
pub struct ScriptedPostgres {
    /// The replies of the next statements, in order.
    pub replies: VecDeque<SqlReply>,
    /// Every statement executed, in order.
    pub statements: Vec<SqlStatement>,
}

impl ScriptedPostgres {
    /// The next statement executed gets `reply`.
    pub fn script(&mut self, reply: SqlReply) {
        self.replies.push_back(reply);
    }
}

impl Server for ScriptedPostgres {
    type Backend = PostgresBackend;

    fn backend(backend: PostgresBackend) -> Backend {
        Backend::Postgres(backend)
    }

    fn execute(&mut self, _now: Instant, body: &RequestBody) -> Reply {
        let RequestBody::Sql(statement) = body else {
            panic!("not a SQL request: {body:?}");
        };
        self.statements.push(statement.clone());
        let reply = self
            .replies
            .pop_front()
            .unwrap_or_else(|| panic!("no reply scripted for {statement:?}"));
        Reply::Sql(reply)
    }
}

impl Timeline<ScriptedPostgres> {
    /// `n` clients (machines seeded 1..=n) of a PostgreSQL backend configured as
    /// `backend`, against a server that answers with the replies the test scripts.
    pub fn postgres(n: usize, backend: PostgresBackend) -> Self {
        Self::with_backend(n, backend)
    }

    /// Delivers `reply` as the server's reply to `req`.
    pub fn reply_sql(&mut self, c: usize, req: &Request, reply: SqlReply) {
        self.reply(c, req, Reply::Sql(reply));
    }
}

impl Server for MemoryPostgres {
    type Backend = PostgresBackend;

    fn backend(backend: PostgresBackend) -> Backend {
        Backend::Postgres(backend)
    }

    fn execute(&mut self, now: Instant, body: &RequestBody) -> Reply {
        MemoryPostgres::execute(self, now, body)
    }
}

impl Timeline<MemoryPostgres> {
    /// `n` clients of lease rows configured as `backend`, which must not `notify` (a
    /// `LISTEN` wait here would end at once), against one `MemoryPostgres`.
    pub fn memory_postgres(n: usize, backend: PostgresBackend) -> Self {
        assert!(
            !backend.notify,
            "waits are not simulated here: notify must be off"
        );
        let mut t = Self::with_backend(n, backend.clone());
        t.server = MemoryPostgres::new(&backend);
        t
    }
}
