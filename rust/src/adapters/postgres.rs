//! PostgreSQL lease rows with tokio-postgres. Every statement of lease mode runs on
//! any connection in autocommit, so one shared client serves them all (tokio-postgres
//! pipelines concurrent queries); a closed connection is replaced on the next call.
//! Statements go out with `query_typed` (parameter types given, an unnamed statement
//! in one round trip: no prepared statements, so a transaction-pooling PgBouncer works).
//! Session-level advisory mode (a connection per lock) is not offered here.

use std::sync::{Arc, Mutex};

use fencepost_core::{
    FencingToken, PostgresBackend, Reply, RequestBody, SqlReply, SqlStatement, SqlValue,
};
use futures::future::{BoxFuture, FutureExt};
use tokio_postgres::types::{ToSql, Type};

use super::Adapter;
use crate::{Error, Holder};

pub(crate) struct PgAdapter {
    url: Arc<str>,
    client: Arc<Mutex<Arc<tokio_postgres::Client>>>,
    backend: PostgresBackend,
}

async fn open(url: &str) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let mut config: tokio_postgres::Config = url.parse()?;
    if config.get_connect_timeout().is_none() {
        // a host that drops packets must not hang the first connect (later calls are
        // cancelled at their request's deadline anyway)
        config.connect_timeout(std::time::Duration::from_secs(2));
    }
    let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
    // the connection task ends when the client is dropped or the server goes away
    tokio::spawn(connection);
    Ok(client)
}

impl PgAdapter {
    pub(crate) async fn connect(url: &str, backend: PostgresBackend) -> Result<Self, Error> {
        backend.check().map_err(Error::Config)?;
        let client = open(url).await.map_err(|e| {
            Error::Backend(format!(
                "cannot connect to PostgreSQL at {}: {e}",
                crate::url::redact(url)
            ))
        })?;
        if let Err(e) = client.batch_execute(&backend.migration()).await {
            // two processes creating the tables at once: one wins, the other's
            // CREATE … IF NOT EXISTS can still fail on the catalog's unique index
            let racing = e
                .code()
                .is_some_and(|c| c.code() == "23505" || c.code() == "42P07");
            if !racing {
                return Err(Error::Backend(format!(
                    "cannot create fencepost's tables: {e}"
                )));
            }
        }
        Ok(PgAdapter {
            url: url.into(),
            client: Arc::new(Mutex::new(Arc::new(client))),
            backend,
        })
    }

    fn shared(&self) -> Shared {
        Shared {
            url: self.url.clone(),
            client: self.client.clone(),
        }
    }
}

#[derive(Clone)]
struct Shared {
    url: Arc<str>,
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
        let fresh = Arc::new(open(&self.url).await.map_err(|e| e.to_string())?);
        if let Ok(mut slot) = self.client.lock() {
            *slot = fresh.clone();
        }
        Ok(fresh)
    }

    /// Runs one statement: its rows, a server error as a `SqlReply::Error`, or a
    /// transport failure (`Err`).
    async fn run(&self, stmt: SqlStatement) -> Result<SqlReply, String> {
        let client = self.client().await?;
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

fn holders(rows: SqlReply) -> Result<Vec<Holder>, Error> {
    let rows = match rows {
        SqlReply::Rows { rows } => rows,
        SqlReply::Error { sqlstate, message } => {
            return Err(Error::Backend(format!(
                "PostgreSQL refused the query: {sqlstate} {message}"
            )))
        }
    };
    rows.into_iter()
        .map(|r| match r.as_slice() {
            [SqlValue::Text(name), owner, token, left] => Ok(Holder {
                name: name.clone(),
                owner: match owner {
                    SqlValue::Text(o) => Some(o.clone()),
                    _ => None,
                },
                token: match token {
                    SqlValue::Int(t) => u64::try_from(*t).ok().map(FencingToken),
                    _ => None,
                },
                ttl_left: match left {
                    SqlValue::Int(ms) => super::ms(*ms),
                    _ => None,
                },
                waiters: None,
            }),
            other => Err(Error::Backend(format!(
                "lease row of an unexpected shape: {other:?}"
            ))),
        })
        .collect()
}

impl PgAdapter {
    /// The live lease rows matching `condition` (on `$1`), in name order.
    fn live(
        &self,
        condition: &str,
        param: String,
        limit: usize,
    ) -> BoxFuture<'static, Result<Vec<Holder>, Error>> {
        let sql = format!(
            "SELECT name, owner, token, \
             ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint \
             FROM {} WHERE {condition} AND owner IS NOT NULL AND expires_at > clock_timestamp() \
             ORDER BY name LIMIT {limit}",
            self.backend.lease_table
        );
        let shared = self.shared();
        async move {
            let reply = shared
                .run(SqlStatement {
                    sql,
                    params: vec![SqlValue::Text(param)],
                    connection: fencepost_core::PgConnection::Any,
                })
                .await
                .map_err(Error::Backend)?;
            holders(reply)
        }
        .boxed()
    }
}

impl Adapter for PgAdapter {
    fn execute(&self, body: RequestBody) -> BoxFuture<'static, Result<Reply, String>> {
        match body {
            // A wait for a release's notification: this adapter keeps no listening
            // connection, so the wait is the polling fallback it stands in for (its
            // timeout), never an immediate answer that would spin.
            RequestBody::Sql(stmt) if stmt.connection == fencepost_core::PgConnection::Listen => {
                let ms = match stmt.params.get(1) {
                    Some(SqlValue::Int(ms)) => u64::try_from(*ms).unwrap_or(0),
                    _ => 0,
                };
                async move {
                    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
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

    fn holder(&self, name: String) -> BoxFuture<'static, Result<Option<Holder>, Error>> {
        self.live("name = $1", name, 1)
            .map(|r| r.map(|v| v.into_iter().next()))
            .boxed()
    }

    fn list(&self, prefix: String, limit: usize) -> BoxFuture<'static, Result<Vec<Holder>, Error>> {
        let escaped = prefix
            .replace('\\', "\\\\")
            .replace('%', "\\%")
            .replace('_', "\\_");
        self.live("name LIKE $1 ESCAPE '\\'", format!("{escaped}%"), limit)
    }
}
