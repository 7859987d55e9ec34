//! Redlock with redis-rs: one [`RedisAdapter`] per master, each request part sent to
//! the master it names (`RedlockPart::master`, the index in the URL's list). The core
//! decides the majority, the validity and the cleanups; this only routes.
//!
//! Operator queries ask every master and report the holder a majority agrees on (the
//! highest token and the shortest time left among them), as a grant needs a majority.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use fencepost_core::{RedisBackend, Reply, RequestBody};
use futures::future::{join_all, BoxFuture, FutureExt};
use tokio::sync::OnceCell;

use super::redis::RedisAdapter;
use super::Adapter;
use crate::{Error, Holder};

/// How long an operator query waits for one master: a master that does not answer (down,
/// stopped, partitioned) has no say, and must not hold up the others' answer.
const QUERY_TIMEOUT: Duration = Duration::from_secs(1);

/// One master: connected at start if it answered then, else on its first request (a
/// master down at start must not keep the others from granting).
struct Master {
    url: String,
    backend: RedisBackend,
    conn: OnceCell<RedisAdapter>,
}

impl Master {
    async fn get(&self) -> Result<&RedisAdapter, Error> {
        self.conn
            .get_or_try_init(|| RedisAdapter::connect(&self.url, None, self.backend.clone()))
            .await
    }
}

pub(crate) struct RedlockAdapter {
    masters: Vec<Arc<Master>>,
}

impl RedlockAdapter {
    /// Connects to the masters (`redis://` URLs, in the order request parts name them),
    /// all at once.
    ///
    /// Errors: [`Error::Backend`] when fewer than a majority answer (no grant could
    /// succeed); the others are connected on their first request.
    pub(crate) async fn connect(urls: &[String], backend: RedisBackend) -> Result<Self, Error> {
        let masters: Vec<Arc<Master>> = urls
            .iter()
            .map(|url| {
                Arc::new(Master {
                    url: url.clone(),
                    backend: backend.clone(),
                    conn: OnceCell::new(),
                })
            })
            .collect();
        let tries = join_all(masters.iter().map(|m| m.get())).await;
        let failed: Vec<String> = tries
            .into_iter()
            .filter_map(Result::err)
            .map(|e| e.to_string())
            .collect();
        if failed.len() > urls.len() - (urls.len() / 2 + 1) {
            return Err(Error::Backend(format!(
                "Redlock: {} of {} masters unreachable, fewer than a majority answer: {}",
                failed.len(),
                urls.len(),
                failed.join("; ")
            )));
        }
        Ok(RedlockAdapter { masters })
    }
}

impl Adapter for RedlockAdapter {
    fn execute(&self, body: RequestBody) -> BoxFuture<'static, Result<Reply, String>> {
        match body {
            RequestBody::RedlockPart(part) => match self.masters.get(usize::from(part.master)) {
                Some(master) => {
                    let master = Arc::clone(master);
                    async move {
                        let conn = master.get().await.map_err(|e| e.to_string())?;
                        conn.execute(RequestBody::Redis(part.command)).await
                    }
                    .boxed()
                }
                None => futures::future::ready(Err(format!(
                    "a request part for master {} of {}",
                    part.master,
                    self.masters.len()
                )))
                .boxed(),
            },
            other => futures::future::ready(Err(format!(
                "the Redlock adapter cannot run a {} request",
                other.kind()
            )))
            .boxed(),
        }
    }

    fn holder(&self, name: String) -> BoxFuture<'static, Result<Option<Holder>, Error>> {
        let masters = self.masters.clone();
        async move {
            let asks = masters.iter().map(|m| {
                let name = name.clone();
                async move {
                    let ask = async { m.get().await?.holder(name).await };
                    tokio::time::timeout(QUERY_TIMEOUT, ask)
                        .await
                        .map_err(|_| Error::Backend("no answer in time".into()))?
                }
            });
            // a master that cannot answer has no say; the others may still agree
            let views = join_all(asks)
                .await
                .into_iter()
                .filter_map(Result::ok)
                .collect();
            Ok(majority_of(masters.len(), &name, views))
        }
        .boxed()
    }

    fn list(&self, prefix: String, limit: usize) -> BoxFuture<'static, Result<Vec<Holder>, Error>> {
        let masters = self.masters.clone();
        async move {
            let lists = masters.iter().map(|m| {
                let prefix = prefix.clone();
                async move {
                    let ask = async { m.get().await?.list(prefix, limit).await };
                    tokio::time::timeout(QUERY_TIMEOUT, ask)
                        .await
                        .map_err(|_| Error::Backend("no answer in time".into()))?
                }
            });
            let mut per_name: HashMap<String, Vec<Option<Holder>>> = HashMap::new();
            let mut names = BTreeSet::new();
            for listing in join_all(lists).await.into_iter().filter_map(Result::ok) {
                for h in listing {
                    names.insert(h.name.clone());
                    per_name.entry(h.name.clone()).or_default().push(Some(h));
                }
            }
            Ok(names
                .into_iter()
                .filter_map(|n| {
                    let views = per_name.remove(&n).unwrap_or_default();
                    majority_of(masters.len(), &n, views)
                })
                .take(limit)
                .collect())
        }
        .boxed()
    }
}

/// The holder at least `masters / 2 + 1` of `views` agree on: the highest token and the
/// shortest time left among them (`None`: no majority names one owner).
fn majority_of(masters: usize, name: &str, views: Vec<Option<Holder>>) -> Option<Holder> {
    let mut by_owner: HashMap<String, Vec<Holder>> = HashMap::new();
    for h in views.into_iter().flatten() {
        if let Some(owner) = h.owner.clone() {
            by_owner.entry(owner).or_default().push(h);
        }
    }
    let quorum = masters / 2 + 1;
    let (owner, agree) = by_owner.into_iter().find(|(_, hs)| hs.len() >= quorum)?;
    Some(Holder {
        name: name.to_owned(),
        owner: Some(owner),
        token: agree.iter().filter_map(|h| h.token).max(),
        ttl_left: agree.iter().filter_map(|h| h.ttl_left).min(),
        waiters: None,
        metadata: None,
    })
}
