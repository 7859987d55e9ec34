//! PostgreSQL lease rows with tokio-postgres. Every statement of lease mode runs on
//! any connection in autocommit, so one shared client serves them all (tokio-postgres
//! pipelines concurrent queries); a closed connection is replaced on the next call.
//! Statements go out with `query_typed` (parameter types given, an unnamed statement
//! in one round trip: no prepared statements, so a transaction-pooling PgBouncer works).
//! Session mode (`?mode=session`) runs each lock on a dedicated connection of its own
//! ([`Dedicated`]), closed once the lock is done with. With the
//! cargo feature `tls`, a URL with `sslmode=require` (or `verify-ca`, `verify-full`)
//! opens every connection over TLS with tokio-postgres-rustls, checking the server's
//! certificate chain and host name.
//!
//! Waiters listen for the release's `pg_notify` on one more connection ([`Listener`]),
//! opened on the first wait; a wait ends at a notification on its channel or at its
//! timeout (the backoff it stands in for).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use fencepost_core::{
    FencingToken, LockId, PgMode, PostgresBackend, Reply, RequestBody, SqlReply, SqlStatement,
    SqlValue,
};
use futures::future::{BoxFuture, FutureExt};
use tokio_postgres::types::{ToSql, Type};

use super::Adapter;
use crate::{Error, Holder};

pub(crate) struct PgAdapter {
    url: Arc<str>,
    tls: PgTls,
    client: Arc<Mutex<Arc<tokio_postgres::Client>>>,
    backend: PostgresBackend,
    listener: Arc<Listener>,
    dedicated: Arc<Mutex<HashMap<LockId, Dedicated>>>,
}

/// Session mode: the connection of one lock, opened for its acquire and closed (which
/// ends its session, and any advisory lock the session holds) once the lock's final
/// event has come and none of its statements is in flight.
#[derive(Default)]
struct Dedicated {
    /// The connection (`None` until the first statement opens it).
    conn: Arc<tokio::sync::Mutex<Option<tokio_postgres::Client>>>,
    in_flight: usize,
    finished: bool,
}

/// Counts a statement of a lock in flight on its dedicated connection until dropped
/// (it ran, or the driver cancelled it at its deadline).
struct InFlight {
    map: Arc<Mutex<HashMap<LockId, Dedicated>>>,
    lock: LockId,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = map.get_mut(&self.lock) {
            entry.in_flight = entry.in_flight.saturating_sub(1);
            if entry.finished && entry.in_flight == 0 {
                map.remove(&self.lock); // drops the client: the connection closes
            }
        }
    }
}

/// How the adapter's connections are opened: without TLS, or with rustls when the URL
/// asks for it (`sslmode=require`).
#[derive(Clone, Default)]
enum PgTls {
    #[default]
    Plain,
    #[cfg(feature = "tls")]
    Rustls(tokio_postgres_rustls::MakeRustlsConnect),
}

impl PgTls {
    /// The connector `url` asks for; `ca` is the CA file to trust for TLS.
    ///
    /// Errors: [`Error::Config`] for a URL tokio-postgres cannot read or a CA file
    /// that cannot be used.
    fn for_url(url: &str, ca: Option<&std::path::Path>) -> Result<PgTls, Error> {
        let config = pg_config(url).map_err(|e| {
            Error::Config(format!(
                "bad PostgreSQL URL {}: {e}",
                crate::url::redact(url)
            ))
        })?;
        match config.get_ssl_mode() {
            #[cfg(feature = "tls")]
            tokio_postgres::config::SslMode::Require => {
                Ok(PgTls::Rustls(crate::tls::pg_connector(ca)?))
            }
            _ => {
                let _ = ca; // the URL parser gives a CA only with TLS
                Ok(PgTls::Plain)
            }
        }
    }

    /// Opens one connection with `config`: the client and its connection task, for the
    /// caller to spawn or to read for notifications.
    async fn connect(
        &self,
        config: &tokio_postgres::Config,
    ) -> Result<(tokio_postgres::Client, Connection), tokio_postgres::Error> {
        match self {
            PgTls::Plain => {
                let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
                Ok((client, Connection::Plain(connection)))
            }
            #[cfg(feature = "tls")]
            PgTls::Rustls(tls) => {
                let (client, connection) = config.connect(tls.clone()).await?;
                Ok((client, Connection::Rustls(Box::new(connection))))
            }
        }
    }
}

/// A connection's task, plain or over TLS.
enum Connection {
    Plain(tokio_postgres::Connection<tokio_postgres::Socket, tokio_postgres::tls::NoTlsStream>),
    /// Boxed: a TLS session's state is some kilobytes.
    #[cfg(feature = "tls")]
    Rustls(
        Box<
            tokio_postgres::Connection<
                tokio_postgres::Socket,
                <tokio_postgres_rustls::MakeRustlsConnect as tokio_postgres::tls::MakeTlsConnect<
                    tokio_postgres::Socket,
                >>::Stream,
            >,
        >,
    ),
}

impl Connection {
    /// The connection's next message (a notification, a notice), or `None` once it
    /// ended.
    fn poll_message(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<tokio_postgres::AsyncMessage, tokio_postgres::Error>>> {
        match self {
            Connection::Plain(c) => c.poll_message(cx),
            #[cfg(feature = "tls")]
            Connection::Rustls(c) => c.poll_message(cx),
        }
    }

    /// Runs the connection until the client is dropped or the server goes away.
    fn spawn(self) {
        match self {
            Connection::Plain(c) => drop(tokio::spawn(c)),
            #[cfg(feature = "tls")]
            Connection::Rustls(c) => drop(tokio::spawn(*c)),
        }
    }
}

/// The waiters' `LISTEN` connection and what it heard. A wait answers at once when its
/// release may have been missed: its channel was not listened to when the name's last
/// acquire was sent, or a notification on it came after that. Sequence numbers order
/// these events against that send's mark. The mark is per channel (the name's latest
/// acquire in this client), so with several contenders of one name in one client a
/// wait may miss a notification and end at its timeout.
#[derive(Default)]
struct Listener {
    tls: PgTls,
    state: Mutex<Heard>,
    client: tokio::sync::Mutex<Option<tokio_postgres::Client>>,
}

/// How many names' acquire marks the listener keeps.
const MAX_MARKS: usize = 4096;

/// The transaction-level advisory lock that serializes the table creation of clients
/// connecting at once: the bytes of "fencepst" as a bigint (fencepost's session locks'
/// keys are hashes of names: a collision is as unlikely as between two names).
const MIGRATION_LOCK_KEY: i64 = 7_378_424_937_699_111_796;

#[derive(Default)]
struct Heard {
    seq: u64,
    /// channel → seq of its `LISTEN` on the current connection
    listened: HashMap<String, u64>,
    /// channel → seq of its last notification
    notified: HashMap<String, u64>,
    /// channel → seq when the name's last acquire was sent
    marks: HashMap<String, u64>,
    waiters: HashMap<String, Vec<tokio::sync::oneshot::Sender<()>>>,
}

impl Heard {
    fn wake(&mut self, channel: &str) {
        self.seq += 1;
        self.notified.insert(channel.to_owned(), self.seq);
        for waiter in self.waiters.remove(channel).unwrap_or_default() {
            let _ = waiter.send(());
        }
    }
}

impl Listener {
    fn heard(&self) -> std::sync::MutexGuard<'_, Heard> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Before an acquire of the name on `channel` is sent.
    fn mark(&self, channel: String) {
        let mut heard = self.heard();
        if heard.marks.len() >= MAX_MARKS {
            // one per name ever acquired: forget them (a wait without a mark answers
            // at once, the cautious side) rather than grow without bound
            heard.marks.clear();
        }
        let seq = heard.seq;
        heard.marks.insert(channel, seq);
    }

    /// Ends once a release on `channel` may have come after the mark, or after
    /// `timeout`; a connection that cannot be had leaves only the timeout.
    async fn wait(
        self: Arc<Self>,
        url: Arc<str>,
        listen_sql: String,
        channel: String,
        timeout: std::time::Duration,
    ) {
        let heard_now = {
            let heard = self.heard();
            let mark = heard.marks.get(&channel).copied();
            match (heard.listened.get(&channel), mark) {
                (Some(&at), Some(mark)) => {
                    at > mark || heard.notified.get(&channel).is_some_and(|&n| n > mark)
                }
                (Some(_), None) => true,
                (None, _) => false,
            }
        };
        if heard_now {
            return;
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let listening = self.heard().listened.contains_key(&channel);
        if listening {
            self.heard()
                .waiters
                .entry(channel.clone())
                .or_default()
                .push(tx);
        } else {
            // once its LISTEN is in place, which is after the mark: try again
            if self.listen(&url, &listen_sql, &channel).await.is_ok() {
                return;
            }
            drop(tx);
            tokio::time::sleep(timeout).await;
            return;
        }
        let _ = tokio::time::timeout(timeout, rx).await;
    }

    async fn listen(self: &Arc<Self>, url: &str, sql: &str, channel: &str) -> Result<(), String> {
        let mut slot = self.client.lock().await;
        if slot.as_ref().is_none_or(|c| c.is_closed()) {
            *slot = Some(self.connect(url).await?);
        }
        let client = slot.as_ref().expect("connected above");
        client.batch_execute(sql).await.map_err(|e| e.to_string())?;
        let mut heard = self.heard();
        heard.seq += 1;
        let seq = heard.seq;
        heard.listened.insert(channel.to_owned(), seq);
        Ok(())
    }

    async fn connect(self: &Arc<Self>, url: &str) -> Result<tokio_postgres::Client, String> {
        let mut config = pg_config(url).map_err(|e| e.to_string())?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(std::time::Duration::from_secs(2));
        }
        let (client, mut connection) =
            self.tls.connect(&config).await.map_err(|e| e.to_string())?;
        let this = Arc::downgrade(self);
        tokio::spawn(async move {
            use futures::StreamExt;
            let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(Ok(message)) = messages.next().await {
                if let (tokio_postgres::AsyncMessage::Notification(n), Some(this)) =
                    (message, this.upgrade())
                {
                    this.heard().wake(n.channel());
                }
            }
            // the connection ended: nothing is listened to any more
            if let Some(this) = this.upgrade() {
                this.heard().listened.clear();
            }
        });
        Ok(client)
    }
}

/// `url` as tokio-postgres reads it. It knows `sslmode` disable, prefer and require
/// only: libpq's `verify-ca` and `verify-full` are `require` here (rustls checks the
/// chain and host name whenever it runs), `allow` is `prefer` (which without TLS
/// configured connects in plain text).
fn pg_config(url: &str) -> Result<tokio_postgres::Config, tokio_postgres::Error> {
    let Some((base, query)) = url.split_once('?') else {
        return url.parse();
    };
    let query: Vec<&str> = query
        .split('&')
        .map(|pair| match pair {
            "sslmode=verify-ca" | "sslmode=verify-full" => "sslmode=require",
            "sslmode=allow" => "sslmode=prefer",
            other => other,
        })
        .collect();
    format!("{base}?{}", query.join("&")).parse()
}

async fn open(url: &str, tls: &PgTls) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let mut config = pg_config(url)?;
    if config.get_connect_timeout().is_none() {
        // a host that drops packets must not hang the first connect (later calls are
        // cancelled at their request's deadline anyway)
        config.connect_timeout(std::time::Duration::from_secs(2));
    }
    let (client, connection) = tls.connect(&config).await?;
    // the connection task ends when the client is dropped or the server goes away
    connection.spawn();
    Ok(client)
}

impl PgAdapter {
    /// Connects to `url` and creates the tables if missing; over TLS when the URL asks
    /// for it, trusting the CA file `ca` when given.
    ///
    /// Errors: [`Error::Config`] for a bad URL, CA file or backend setting;
    /// [`Error::Backend`] when the server cannot be reached, refuses the connection or
    /// its certificate is refused, or the tables cannot be created.
    pub(crate) async fn connect(
        url: &str,
        ca: Option<&std::path::Path>,
        backend: PostgresBackend,
    ) -> Result<Self, Error> {
        backend.check().map_err(Error::Config)?;
        let tls = PgTls::for_url(url, ca)?;
        let client = open(url, &tls).await.map_err(|e| {
            Error::Backend(crate::error::tls_hint(
                format!(
                    "cannot connect to PostgreSQL at {}: {}",
                    crate::url::redact(url),
                    crate::error::chain(&e)
                ),
                "?sslrootcert=/path/ca.pem",
            ))
        })?;
        // One simple-query message is one implicit transaction: the advisory lock
        // serializes clients that connect at once to a database without the tables
        // (concurrent CREATE … IF NOT EXISTS and ALTER … ADD COLUMN IF NOT EXISTS can
        // fail on the catalog's unique index or with "tuple concurrently updated").
        let migration = format!(
            "SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY});\n{}",
            backend.migration()
        );
        if let Err(e) = client.batch_execute(&migration).await {
            // a server that took the tables' names some other way: they exist
            let racing = e
                .code()
                .is_some_and(|c| c.code() == "23505" || c.code() == "42P07");
            if !racing {
                return Err(Error::Backend(format!(
                    "cannot create fencepost's tables: {}",
                    crate::error::chain(&e)
                )));
            }
        }
        Ok(PgAdapter {
            url: url.into(),
            tls: tls.clone(),
            client: Arc::new(Mutex::new(Arc::new(client))),
            backend,
            listener: Arc::new(Listener {
                tls,
                ..Listener::default()
            }),
            dedicated: Arc::default(),
        })
    }

    fn shared(&self) -> Shared {
        Shared {
            url: self.url.clone(),
            tls: self.tls.clone(),
            client: self.client.clone(),
        }
    }
}

#[derive(Clone)]
struct Shared {
    url: Arc<str>,
    tls: PgTls,
    client: Arc<Mutex<Arc<tokio_postgres::Client>>>,
}

impl Shared {
    /// The shared client, reconnected first if its connection closed.
    async fn client(&self) -> Result<Arc<tokio_postgres::Client>, String> {
        let current = self
            .client
            .lock()
            .map_err(|_| "the PostgreSQL client's lock is poisoned".to_owned())?
            .clone();
        if !current.is_closed() {
            return Ok(current);
        }
        let fresh = Arc::new(
            open(&self.url, &self.tls)
                .await
                .map_err(|e| crate::error::chain(&e))?,
        );
        if let Ok(mut slot) = self.client.lock() {
            *slot = fresh.clone();
        }
        Ok(fresh)
    }

    /// Runs one statement on the shared client (see [`run_on`]).
    async fn run(&self, stmt: SqlStatement) -> Result<SqlReply, String> {
        let client = self.client().await?;
        run_on(&client, stmt).await
    }
}

/// Runs one statement on `client`: its rows, a server error as a `SqlReply::Error`, or
/// a transport failure (`Err`).
async fn run_on(client: &tokio_postgres::Client, stmt: SqlStatement) -> Result<SqlReply, String> {
    let params: Vec<(Box<dyn ToSql + Sync + Send>, Type)> = stmt
        .params
        .iter()
        .map(|p| -> (Box<dyn ToSql + Sync + Send>, Type) {
            match p {
                SqlValue::Null => (Box::new(Option::<String>::None), Type::TEXT),
                SqlValue::Bool(b) => (Box::new(*b), Type::BOOL),
                SqlValue::Int(n) => (Box::new(*n), Type::INT8),
                SqlValue::Text(s) => (Box::new(s.clone()), Type::TEXT),
            }
        })
        .collect();
    let refs: Vec<(&(dyn ToSql + Sync), Type)> = params
        .iter()
        .map(|(v, t)| (v.as_ref() as &(dyn ToSql + Sync), t.clone()))
        .collect();
    match client.query_typed(&stmt.sql, &refs).await {
        Ok(rows) => Ok(SqlReply::Rows {
            rows: rows.iter().map(row).collect(),
        }),
        Err(e) => match e.as_db_error() {
            Some(db) => Ok(SqlReply::Error {
                sqlstate: db.code().code().to_owned(),
                message: db.message().to_owned(),
            }),
            None => Err(e.to_string()),
        },
    }
}

/// One row as the core's values, by each column's type.
fn row(r: &tokio_postgres::Row) -> Vec<SqlValue> {
    (0..r.len())
        .map(|i| {
            let ty = r.columns()[i].type_().clone();
            let v = if ty == Type::INT8 {
                r.try_get::<_, Option<i64>>(i)
                    .ok()
                    .flatten()
                    .map(SqlValue::Int)
            } else if ty == Type::INT4 {
                r.try_get::<_, Option<i32>>(i)
                    .ok()
                    .flatten()
                    .map(|n| SqlValue::Int(n.into()))
            } else if ty == Type::INT2 {
                r.try_get::<_, Option<i16>>(i)
                    .ok()
                    .flatten()
                    .map(|n| SqlValue::Int(n.into()))
            } else if ty == Type::BOOL {
                r.try_get::<_, Option<bool>>(i)
                    .ok()
                    .flatten()
                    .map(SqlValue::Bool)
            } else {
                r.try_get::<_, Option<String>>(i)
                    .ok()
                    .flatten()
                    .map(SqlValue::Text)
            };
            v.unwrap_or(SqlValue::Null)
        })
        .collect()
}

impl PgAdapter {
    /// Runs a session-mode statement on its lock's dedicated connection: registered
    /// (synchronously, in send order) by the lock's acquire, opened by its first
    /// statement, reopened when it broke (a new session, which holds nothing: the
    /// heartbeat then reads the lock as lost).
    fn dedicated(
        &self,
        request: &fencepost_core::Request,
        stmt: SqlStatement,
    ) -> BoxFuture<'static, Result<Reply, String>> {
        let lock = request.lock;
        let conn = {
            let mut map = self.dedicated.lock().unwrap_or_else(|p| p.into_inner());
            if request.operation == fencepost_core::Operation::Acquire {
                map.entry(lock).or_default();
            }
            match map.get_mut(&lock) {
                Some(entry) => {
                    entry.in_flight += 1;
                    entry.conn.clone()
                }
                // only a lock's cleanup comes after its connection closed, and closing
                // it ended the session and whatever advisory lock it held
                None => {
                    let message = format!(
                        "the dedicated connection of lock {} is closed (its session and any \
                         advisory lock it held ended with it)",
                        lock.0
                    );
                    return futures::future::ready(Err(message)).boxed();
                }
            }
        };
        let guard = InFlight {
            map: self.dedicated.clone(),
            lock,
        };
        let (url, tls) = (self.url.clone(), self.tls.clone());
        async move {
            let _guard = guard;
            let mut slot = conn.lock().await;
            if slot.as_ref().is_none_or(|c| c.is_closed()) {
                *slot = Some(
                    open(&url, &tls)
                        .await
                        .map_err(|e| crate::error::chain(&e))?,
                );
            }
            let Some(client) = slot.as_ref() else {
                return Err("the dedicated connection could not be opened".to_owned());
            };
            run_on(client, stmt).await.map(Reply::Sql)
        }
        .boxed()
    }

    /// Runs an operator statement of the core's (`inspect_statement`, `list_statement`)
    /// and reads its rows as holders, metadata included. Advisory locks keep no row:
    /// the advisory modes have nothing to inspect.
    fn holders(&self, stmt: SqlStatement) -> BoxFuture<'static, Result<Vec<Holder>, Error>> {
        let shared = self.shared();
        async move {
            let reply = shared.run(stmt).await.map_err(Error::Backend)?;
            Ok(fencepost_core::backends::postgres::read_pg_holders(&reply)?)
        }
        .boxed()
    }
}

impl Adapter for PgAdapter {
    fn execute(&self, body: RequestBody) -> BoxFuture<'static, Result<Reply, String>> {
        match body {
            // A wait for a release's notification: no rows once it came, or at the
            // wait's timeout (the backoff it stands in for).
            RequestBody::Sql(stmt) if stmt.connection == fencepost_core::PgConnection::Listen => {
                let (channel, ms) = match stmt.params.as_slice() {
                    [SqlValue::Text(c), SqlValue::Int(ms), ..] => {
                        (c.clone(), u64::try_from(*ms).unwrap_or(0))
                    }
                    other => {
                        let message =
                            format!("a listen request names (channel, timeout ms), got {other:?}");
                        return futures::future::ready(Err(message)).boxed();
                    }
                };
                let (listener, url) = (self.listener.clone(), self.url.clone());
                async move {
                    let timeout = std::time::Duration::from_millis(ms);
                    listener.wait(url, stmt.sql, channel, timeout).await;
                    Ok(Reply::Sql(SqlReply::Rows { rows: Vec::new() }))
                }
                .boxed()
            }
            RequestBody::Sql(stmt) => {
                let shared = self.shared();
                async move { shared.run(stmt).await.map(Reply::Sql) }.boxed()
            }
            other => futures::future::ready(Err(format!(
                "the PostgreSQL adapter cannot run a {} request",
                other.kind()
            )))
            .boxed(),
        }
    }

    fn tracks_locks(&self) -> bool {
        self.backend.mode == PgMode::Session
    }

    fn lock_finished(&self, lock: LockId) {
        let mut map = self.dedicated.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = map.get_mut(&lock) {
            entry.finished = true;
            if entry.in_flight == 0 {
                map.remove(&lock);
            }
        }
    }

    fn execute_request(
        &self,
        request: &fencepost_core::Request,
    ) -> BoxFuture<'static, Result<Reply, String>> {
        if let (true, fencepost_core::Operation::Acquire, RequestBody::Sql(stmt)) =
            (self.backend.notify, request.operation, &request.body)
        {
            // before the send: a release after it is heard by the wait that follows
            // (the name is the lease acquire's first parameter, the session acquire's
            // second, after the advisory key)
            let name = match self.backend.mode {
                PgMode::Lease => stmt.params.first(),
                PgMode::Session => stmt.params.get(1),
            };
            if let Some(SqlValue::Text(name)) = name {
                let channel = fencepost_core::backends::postgres::notify_channel(
                    &self.backend.namespace,
                    name,
                );
                self.listener.mark(channel);
            }
        }
        if let RequestBody::Sql(stmt) = &request.body {
            if stmt.connection == fencepost_core::PgConnection::Dedicated {
                return self.dedicated(request, stmt.clone());
            }
        }
        self.execute(request.body.clone())
    }

    fn holder(&self, name: String) -> BoxFuture<'static, Result<Option<Holder>, Error>> {
        // lease rows: one statement of the core's, metadata included (in session mode the
        // rows of lease-mode clients of the same tables)
        let lease_backend = PostgresBackend {
            mode: PgMode::Lease,
            ..self.backend.clone()
        };
        let stmt = fencepost_core::backends::postgres::inspect_statement(&lease_backend, &name);
        let lease = self.holders(stmt).map(|r| r.map(|v| v.into_iter().next()));
        if self.backend.mode == PgMode::Lease {
            return lease.boxed();
        }
        // session mode: a session holding the name's advisory lock (pg_locks; the token
        // the name's latest, no owner id, no time left), else a lease row
        let sql = format!(
            "SELECT (SELECT token FROM {} WHERE name = $1::text) \
             WHERE EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
             AND objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = $2::bigint)",
            self.backend.lease_table
        );
        let key = fencepost_core::backends::postgres::advisory_key(&self.backend.namespace, &name);
        let shared = self.shared();
        async move {
            let reply = shared
                .run(SqlStatement {
                    sql,
                    params: vec![SqlValue::Text(name.clone()), SqlValue::Int(key)],
                    connection: fencepost_core::PgConnection::Any,
                })
                .await
                .map_err(Error::Backend)?;
            let row = match reply {
                SqlReply::Rows { rows } => rows.into_iter().next(),
                SqlReply::Error { sqlstate, message } => {
                    return Err(Error::Backend(format!(
                        "status({name:?}): SQLSTATE {sqlstate}: {message}"
                    )))
                }
            };
            match row {
                Some(row) => {
                    let mut holder = Holder::new(name);
                    if let Some(SqlValue::Int(token)) = row.first() {
                        holder.token = u64::try_from(*token).ok().map(FencingToken);
                    }
                    Ok(Some(holder))
                }
                None => lease.await,
            }
        }
        .boxed()
    }

    fn list(&self, prefix: String, limit: usize) -> BoxFuture<'static, Result<Vec<Holder>, Error>> {
        let limit = u64::try_from(limit).unwrap_or(u64::MAX);
        let stmt =
            fencepost_core::backends::postgres::list_statement(&self.backend, &prefix, limit);
        self.holders(stmt)
    }
}
