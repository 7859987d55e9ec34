//! Backends by URL.

use std::sync::Arc;

use fencepost_core::Backend;

use crate::adapters::Adapter;
use crate::client::TokioClock;
use crate::Error;

/// A backend named by a URL, as `Client::connect` and `fencepost --backend` take it:
///
/// | URL | backend | cargo feature |
/// |---|---|---|
/// | `memory://` | an in-memory Redis in this process | (always) |
/// | `redis://[:password@]host[:port][/db]` | Redis, redis-rs connection manager | `redis` |
/// | `rediss://…` | Redis over TLS | `redis` + `tls` |
/// | `redlock://[:password@]host1:6379,host2:6379,host3:6379[/db]` | Redlock on N independent masters (N odd, at least 3), one redis-rs connection manager each; the password and db apply to every master | `redis` |
/// | `postgres://user@host/db` (`postgresql://`) | PostgreSQL lease rows, tokio-postgres | `postgres` |
/// | `etcd+http://host:2379[,host2:2379…]` (`etcd+https://`) | etcd v3 JSON gateway, reqwest | `etcd` |
/// | `upstash+https://[:token@]host[/path]` (`upstash+http://`) | Redis over the Upstash REST protocol, reqwest; the token from the URL or `UPSTASH_REDIS_REST_TOKEN` | `upstash` |
///
/// A `?key_prefix=…` query parameter sets the key prefix (Redis, Upstash: default
/// `fencepost:`; etcd: default `fencepost/`); it is removed before the URL reaches
/// the client library.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendUrl {
    /// Which backend, with its location as the client library takes it.
    pub kind: BackendKind,
    /// The key prefix (`None`: the backend's default).
    pub key_prefix: Option<String>,
}

/// The backend a [`BackendUrl`] names.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendKind {
    /// `memory://`.
    Memory,
    /// `redis://` or `rediss://`: the URL as redis-rs takes it.
    Redis(String),
    /// `redlock://`: each master's `redis://` URL, in order.
    Redlock(Vec<String>),
    /// `postgres://`: the URL as tokio-postgres takes it.
    Postgres(String),
    /// `etcd+http(s)://`: the members' gateway URLs (`http(s)://host:port`).
    Etcd(Vec<String>),
    /// `upstash+http(s)://`: the REST endpoint and its bearer token.
    Upstash {
        /// The endpoint (`https://host/path`), without the token.
        url: String,
        /// The bearer token, if any.
        token: Option<String>,
    },
}

impl BackendUrl {
    /// Parses `url` (see the table above).
    ///
    /// Errors: [`Error::Config`] naming the URL (password hidden) and the schemes
    /// accepted.
    pub fn parse(url: &str) -> Result<BackendUrl, Error> {
        let (base, key_prefix) = split_prefix(url)?;
        let scheme = base.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
        let kind = match scheme.as_deref() {
            Some("memory") => BackendKind::Memory,
            Some("redis" | "rediss") => BackendKind::Redis(base),
            Some("redlock") => BackendKind::Redlock(redlock_masters(url, &base["redlock://".len()..])?),
            Some("postgres" | "postgresql") => BackendKind::Postgres(base),
            Some(s @ ("etcd+http" | "etcd+https")) => {
                let scheme = &s[5..];
                let rest = &base[s.len() + 3..];
                let members: Vec<String> = rest
                    .split(',')
                    .map(str::trim)
                    .filter(|m| !m.is_empty())
                    .map(|m| format!("{scheme}://{}", m.trim_end_matches('/')))
                    .collect();
                if members.is_empty() {
                    return Err(Error::Config(format!(
                        "backend URL {} names no etcd member: use etcd+http://host:2379[,host2:2379]",
                        redact(url)
                    )));
                }
                BackendKind::Etcd(members)
            }
            Some(s @ ("upstash+http" | "upstash+https")) => {
                let scheme = &s[8..];
                let rest = &base[s.len() + 3..];
                let (token, host) = match rest.split_once('@') {
                    Some((user, host)) => {
                        let token = user.split_once(':').map_or(user, |(_, t)| t);
                        (Some(token.to_owned()).filter(|t| !t.is_empty()), host)
                    }
                    None => (None, rest),
                };
                let token = token.or_else(|| std::env::var("UPSTASH_REDIS_REST_TOKEN").ok());
                BackendKind::Upstash {
                    url: format!("{scheme}://{host}"),
                    token,
                }
            }
            _ => {
                return Err(Error::Config(format!(
                    "backend URL must start with memory://, redis://, rediss://, redlock://, \
                     postgres://, etcd+http://, etcd+https://, upstash+http:// or upstash+https://, \
                     got {}",
                    redact(url)
                )))
            }
        };
        Ok(BackendUrl { kind, key_prefix })
    }
}

/// The masters of `redlock://[:password@]h1:p1,h2:p2,…[/db]` (`rest`: after the
/// scheme) as `redis://` URLs, each with the password and db.
fn redlock_masters(url: &str, rest: &str) -> Result<Vec<String>, Error> {
    let (auth, hosts) = match rest.rsplit_once('@') {
        Some((auth, hosts)) => (format!("{auth}@"), hosts),
        None => (String::new(), rest),
    };
    let (hosts, db) = match hosts.split_once('/') {
        Some((hosts, db)) => (hosts, format!("/{db}")),
        None => (hosts, String::new()),
    };
    let masters: Vec<String> = hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(|h| format!("redis://{auth}{h}{db}"))
        .collect();
    if masters.is_empty() {
        return Err(Error::Config(format!(
            "backend URL {} names no Redlock master: use redlock://host1:6379,host2:6379,host3:6379",
            redact(url)
        )));
    }
    Ok(masters)
}

/// Splits `?key_prefix=` off `url`; other query parameters stay.
fn split_prefix(url: &str) -> Result<(String, Option<String>), Error> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), None));
    };
    let mut prefix = None;
    let mut rest = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("key_prefix", v)) => {
                if v.is_empty() {
                    return Err(Error::Config(format!(
                        "key_prefix in {} is empty: leave it out for the default",
                        redact(url)
                    )));
                }
                prefix = Some(v.to_owned());
            }
            _ => rest.push(pair),
        }
    }
    let base = if rest.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", rest.join("&"))
    };
    Ok((base, prefix))
}

/// `url` with any password or token replaced by `…`, for messages.
pub(crate) fn redact(url: &str) -> String {
    match (url.find("://"), url.find('@')) {
        (Some(s), Some(at)) if at > s => format!("{}…{}", &url[..s + 3], &url[at..]),
        _ => url.to_owned(),
    }
}

/// Opens the adapter a URL names, with the core backend settings it locks with.
pub(crate) async fn open(
    url: &BackendUrl,
    clock: TokioClock,
) -> Result<(Arc<dyn Adapter>, Backend), Error> {
    let redis_backend = || {
        let mut b = fencepost_core::RedisBackend::default();
        if let Some(p) = &url.key_prefix {
            b.key_prefix = p.clone();
        }
        b
    };
    match &url.kind {
        BackendKind::Memory => {
            let adapter = crate::adapters::memory::Memory::new(clock);
            Ok((Arc::new(adapter), Backend::Redis(redis_backend())))
        }
        #[cfg(feature = "redis")]
        BackendKind::Redis(u) => {
            let b = redis_backend();
            let adapter = crate::adapters::redis::RedisAdapter::connect(u, b.clone()).await?;
            Ok((Arc::new(adapter), Backend::Redis(b)))
        }
        #[cfg(feature = "redis")]
        BackendKind::Redlock(urls) => {
            let redis = redis_backend();
            // the core checks the count (odd, at least 3) and duplicates by these names
            let b = fencepost_core::RedlockBackend {
                key_prefix: redis.key_prefix.clone(),
                masters: urls.iter().map(|u| redact(u)).collect(),
            };
            b.check().map_err(Error::Usage)?;
            let adapter = crate::adapters::redlock::RedlockAdapter::connect(urls, redis).await?;
            Ok((Arc::new(adapter), Backend::Redlock(b)))
        }
        #[cfg(feature = "postgres")]
        BackendKind::Postgres(u) => {
            if url.key_prefix.is_some() {
                return Err(Error::Config(
                    "key_prefix does not apply to PostgreSQL (its locks are rows of the lease table)".into(),
                ));
            }
            let b = fencepost_core::PostgresBackend::default();
            let adapter = crate::adapters::postgres::PgAdapter::connect(u, b.clone()).await?;
            Ok((Arc::new(adapter), Backend::Postgres(b)))
        }
        #[cfg(feature = "etcd")]
        BackendKind::Etcd(members) => {
            let mut b = fencepost_core::backends::EtcdBackend::default();
            if let Some(p) = &url.key_prefix {
                b.key_prefix = p.clone();
            }
            let adapter = crate::adapters::etcd::EtcdAdapter::new(members.clone(), b.clone())?;
            Ok((Arc::new(adapter), Backend::Etcd(b)))
        }
        #[cfg(feature = "upstash")]
        BackendKind::Upstash { url: u, token } => {
            let b = redis_backend();
            let adapter =
                crate::adapters::upstash::UpstashAdapter::new(u.clone(), token.clone(), b.clone())?;
            Ok((Arc::new(adapter), Backend::Redis(b)))
        }
        #[allow(unreachable_patterns)]
        other => Err(Error::Config(format!(
            "this build of fencepost has no {} backend: build it with the cargo feature {}",
            match other {
                BackendKind::Redis(_) => "Redis",
                BackendKind::Redlock(_) => "Redlock",
                BackendKind::Postgres(_) => "PostgreSQL",
                BackendKind::Etcd(_) => "etcd",
                _ => "Upstash",
            },
            match other {
                BackendKind::Redis(_) | BackendKind::Redlock(_) => "`redis`",
                BackendKind::Postgres(_) => "`postgres`",
                BackendKind::Etcd(_) => "`etcd`",
                _ => "`upstash`",
            }
        ))),
    }
}
