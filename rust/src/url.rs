//! Backends by URL.

use std::path::PathBuf;
use std::sync::Arc;
#[cfg(feature = "zookeeper")]
use std::time::Duration;

#[cfg(feature = "zookeeper")]
use fencepost_core::backends::ZkNaming;
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
/// | `postgres://user@host/db[?sslmode=require]` (`postgresql://`) | PostgreSQL lease rows, tokio-postgres (TLS: tokio-postgres-rustls) | `postgres` (TLS: + `tls`) |
/// | `postgres://user@host/db?mode=session` | PostgreSQL session-level advisory locks, a dedicated connection per lock (never through a transaction-pooling PgBouncer) | `postgres` |
/// | `etcd+http://host:2379[,host2:2379…]` (`etcd+https://`) | etcd v3 JSON gateway, reqwest | `etcd` (https: + `tls`) |
/// | `upstash+https://[:token@]host[/path]` (`upstash+http://`) | Redis over the Upstash REST protocol, reqwest; the token from the URL or `UPSTASH_REDIS_REST_TOKEN` | `upstash` |
/// | `kubernetes+http://host:port[?namespace=ns&token=…]` (`kubernetes+https://`) | Kubernetes `coordination.k8s.io/v1` Leases, reqwest; namespace default `default`; the bearer token from `token=`, else the file `token_file=/path` names (read before every call, so a rotated service-account token is picked up), else `$FENCEPOST_KUBE_TOKEN`, else none | `kubernetes` (https: + `tls`) |
/// | `zookeeper://host1:2181[,host2:2181…][/root][?naming=curator&session_timeout=10s]` | ZooKeeper's lock recipe, zookeeper-client; root default `/locks` (lock `name` at `/locks/name`, as kazoo's `Lock("/locks/name")`), naming `kazoo` (default) or `curator`, the session timeout asked for (default 10 s; `500ms`, `10s` or seconds) | `zookeeper` |
///
/// A `?key_prefix=…` query parameter sets the key prefix (Redis, Upstash: default
/// `fencepost:`; etcd: default `fencepost/`); it is removed before the URL reaches
/// the client library. On etcd, `?shared_lease=true` gives the client's locks one lease
/// per TTL (whole seconds), renewed by one keep-alive for all of them
/// ([`EtcdBackend::shared_lease`](fencepost_core::backends::EtcdBackend::shared_lease):
/// they share its fate).
///
/// TLS (cargo feature `tls`, rustls): `rediss://`, `etcd+https://`, `upstash+https://`,
/// `kubernetes+https://`, and PostgreSQL's `sslmode=require`, `verify-ca` or `verify-full`, each of which
/// checks the server's certificate chain and host name (stricter than libpq's
/// `require`, which checks nothing); `disable`, `allow` and `prefer` connect without
/// TLS. The CA trusted is the file `?ca=/path/ca.pem` names (PostgreSQL:
/// `?sslrootcert=/path/ca.pem`, as libpq), else `$FENCEPOST_CA_FILE`, else the webpki
/// roots (Mozilla's). A TLS URL in a build without `tls`, or a CA on a URL without
/// TLS, is an [`Error::Config`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendUrl {
    /// Which backend, with its location as the client library takes it.
    pub kind: BackendKind,
    /// The key prefix (`None`: the backend's default).
    pub key_prefix: Option<String>,
    /// etcd only: one lease per TTL for the client's locks (`?shared_lease=true`).
    pub etcd_shared_lease: bool,
    /// The CA certificate file (PEM) a TLS connection trusts, from the URL or
    /// `$FENCEPOST_CA_FILE`; always `None` for a URL without TLS.
    pub ca_file: Option<PathBuf>,
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
    /// `postgres://`: the URL as given, less `sslrootcert` (in
    /// [`BackendUrl::ca_file`]); tokio-postgres reads libpq's `sslmode=verify-ca` and
    /// `verify-full` as `require`, `allow` as `prefer`.
    Postgres(String),
    /// `postgres://…?mode=session`: session-level advisory locks, one dedicated
    /// connection per lock (its URL as for [`BackendKind::Postgres`]).
    PostgresSession(String),
    /// `etcd+http(s)://`: the members' gateway URLs (`http(s)://host:port`).
    Etcd(Vec<String>),
    /// `upstash+http(s)://`: the REST endpoint and its bearer token.
    Upstash {
        /// The endpoint (`https://host/path`), without the token.
        url: String,
        /// The bearer token, if any.
        token: Option<String>,
    },
    /// `kubernetes+http(s)://`: the API server and the Leases' namespace.
    Kubernetes {
        /// The API server (`https://host:port`), without the query.
        server: String,
        /// The namespace of the Leases (`?namespace=`; `None`: `default`).
        namespace: Option<String>,
        /// The bearer token (`?token=`, else `$FENCEPOST_KUBE_TOKEN` when no
        /// `token_file` is given), if any.
        token: Option<String>,
        /// A file holding the bearer token (`?token_file=`), read before every call.
        token_file: Option<PathBuf>,
    },
    /// `zookeeper://`: the ensemble and where its locks live (cargo feature
    /// `zookeeper`).
    #[cfg(feature = "zookeeper")]
    ZooKeeper {
        /// The connect string, `host1:2181,host2:2181`.
        hosts: String,
        /// Parent of every lock path (absolute; default `/locks`).
        root: String,
        /// Whose node names to use (`?naming=kazoo|curator`).
        naming: ZkNaming,
        /// The session timeout to ask for (`?session_timeout=`; `None`: 10 s). The
        /// server may negotiate another: a lock's TTL must not exceed that one.
        session_timeout: Option<Duration>,
    },
}

impl BackendUrl {
    /// Parses `url` (see the table above).
    ///
    /// Errors: [`Error::Config`] naming the URL (password hidden) and the schemes
    /// accepted.
    pub fn parse(url: &str) -> Result<BackendUrl, Error> {
        let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
        let postgres = matches!(scheme.as_deref(), Some("postgres" | "postgresql"));
        let kube = matches!(
            scheme.as_deref(),
            Some("kubernetes+http" | "kubernetes+https")
        );
        let ca_param = if postgres { "sslrootcert" } else { "ca" };
        let names: &[&str] = if kube {
            &["key_prefix", "ca", "namespace", "token", "token_file"]
        } else {
            &["key_prefix", ca_param, "sslmode", "mode", "shared_lease"]
        };
        let (mut base, params) = take_params(url, names, postgres)?;
        let param = |name: &str| {
            params
                .iter()
                .rev()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        };
        let key_prefix = param("key_prefix");
        let etcd = matches!(scheme.as_deref(), Some("etcd+http" | "etcd+https"));
        let etcd_shared_lease = match param("shared_lease").as_deref() {
            None | Some("false") => false,
            Some("true") if etcd => true,
            Some("true") => {
                return Err(Error::Config(format!(
                    "shared_lease in {} applies to etcd only (etcd+http://, etcd+https://)",
                    redact(url)
                )))
            }
            Some(other) => {
                return Err(Error::Config(format!(
                    "shared_lease in {} must be true or false, got {other:?}",
                    redact(url)
                )))
            }
        };
        let mut tls = matches!(
            scheme.as_deref(),
            Some("rediss" | "etcd+https" | "upstash+https" | "kubernetes+https")
        );
        if let Some(mode) = param("sslmode") {
            // libpq's six modes; the PostgreSQL adapter maps them to tokio-postgres's
            tls = match mode.as_str() {
                "disable" | "allow" | "prefer" => false,
                "require" | "verify-ca" | "verify-full" => true,
                other => {
                    return Err(Error::Config(format!(
                        "sslmode in {} must be disable, allow, prefer, require, verify-ca or verify-full, got {other:?}",
                        redact(url)
                    )))
                }
            };
            base = format!(
                "{base}{}sslmode={mode}",
                if base.contains('?') { '&' } else { '?' }
            );
        }
        let ca_file = match param(ca_param) {
            Some(path) if !tls => {
                return Err(Error::Config(format!(
                    "{ca_param}={path} in {} names a CA for a connection without TLS: use {}",
                    redact(url),
                    if postgres {
                        "sslmode=verify-full with it"
                    } else {
                        "rediss://, etcd+https://, upstash+https:// or kubernetes+https://"
                    }
                )))
            }
            Some(path) => Some(PathBuf::from(path)),
            None if tls => std::env::var_os("FENCEPOST_CA_FILE")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            None => None,
        };
        if tls && cfg!(not(feature = "tls")) {
            return Err(Error::Config(format!(
                "backend URL {} asks for TLS, and this build of fencepost has none: build it \
                 with the cargo feature `tls`",
                redact(url)
            )));
        }
        let kind = match scheme.as_deref() {
            Some("memory") => BackendKind::Memory,
            Some("redis" | "rediss") => BackendKind::Redis(base),
            Some("redlock") => BackendKind::Redlock(redlock_masters(url, &base["redlock://".len()..])?),
            Some("postgres" | "postgresql") => match param("mode").as_deref() {
                None | Some("lease") => BackendKind::Postgres(base),
                Some("session") => BackendKind::PostgresSession(base),
                Some(other) => {
                    return Err(Error::Config(format!(
                        "mode in {} must be lease or session, got {other:?}",
                        redact(url)
                    )))
                }
            },
            Some(s @ ("etcd+http" | "etcd+https")) => {
                let scheme = &s[5..];
                let rest = &base[s.len() + 3..];
                if rest.contains('?') {
                    return Err(Error::Config(format!(
                        "unknown parameter in {}: etcd URLs take key_prefix, shared_lease \
                         and ca",
                        redact(url)
                    )));
                }
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
                if rest.contains('?') {
                    return Err(Error::Config(format!(
                        "unknown parameter in {}: Upstash URLs take key_prefix and ca",
                        redact(url)
                    )));
                }
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
            Some(s @ ("kubernetes+http" | "kubernetes+https")) => {
                let scheme = &s["kubernetes+".len()..];
                let rest = &base[s.len() + 3..];
                if rest.contains('?') {
                    return Err(Error::Config(format!(
                        "unknown parameter in {}: Kubernetes URLs take namespace, token, \
                         token_file and ca",
                        redact(url)
                    )));
                }
                let host = rest.trim_end_matches('/');
                if host.is_empty() || host.contains('/') || host.contains('@') {
                    return Err(Error::Config(format!(
                        "backend URL {} must name the API server as \
                         kubernetes+https://host:port[?namespace=ns&token=…]",
                        redact(url)
                    )));
                }
                let token = param("token");
                let token_file = param("token_file").map(PathBuf::from);
                if token.is_some() && token_file.is_some() {
                    return Err(Error::Config(format!(
                        "backend URL {} gives both token and token_file: give one",
                        redact(url)
                    )));
                }
                let token = match (&token, &token_file) {
                    (None, None) => std::env::var("FENCEPOST_KUBE_TOKEN")
                        .ok()
                        .filter(|t| !t.is_empty()),
                    _ => token,
                };
                let namespace = param("namespace");
                if let Some(ns) = &namespace {
                    let b = ns.as_bytes();
                    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
                    let label = b.len() <= 63
                        && b.iter().all(|c| alnum(c) || *c == b'-')
                        && b.first().is_some_and(alnum)
                        && b.last().is_some_and(alnum);
                    if !label {
                        return Err(Error::Config(format!(
                            "namespace in {} must be a DNS-1123 label (1 to 63 of a-z, 0-9 and \
                             '-', starting and ending with a letter or digit), got {ns:?}",
                            redact(url)
                        )));
                    }
                }
                BackendKind::Kubernetes {
                    server: format!("{scheme}://{host}"),
                    namespace,
                    token,
                    token_file,
                }
            }
            #[cfg(feature = "zookeeper")]
            Some("zookeeper") => zookeeper(url, &base["zookeeper://".len()..])?,
            #[cfg(not(feature = "zookeeper"))]
            Some("zookeeper") => {
                return Err(Error::Config(
                    "this build of fencepost has no ZooKeeper backend: build it with the cargo feature `zookeeper`".into(),
                ))
            }
            _ => {
                return Err(Error::Config(format!(
                    "backend URL must start with memory://, redis://, rediss://, redlock://, \
                     postgres://, etcd+http://, etcd+https://, upstash+http://, upstash+https://, \
                     kubernetes+http://, kubernetes+https:// or zookeeper://, got {}",
                    redact(url)
                )))
            }
        };
        Ok(BackendUrl {
            kind,
            key_prefix,
            etcd_shared_lease,
            ca_file,
        })
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

#[cfg(feature = "zookeeper")]
/// The ensemble and settings of `zookeeper://h1:2181,h2:2181[/root][?naming=…&session_timeout=…]`
/// (`rest`: after the scheme). An empty root or `/` is the default `/locks`.
fn zookeeper(url: &str, rest: &str) -> Result<BackendKind, Error> {
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (hosts, root) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
        None => (rest, ""),
    };
    let hosts: Vec<&str> = hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .collect();
    if hosts.is_empty() {
        return Err(Error::Config(format!(
            "backend URL {} names no ZooKeeper server: use zookeeper://host1:2181[,host2:2181][/root]",
            redact(url)
        )));
    }
    let root = if root.is_empty() { "/locks" } else { root };
    let mut naming = ZkNaming::Kazoo;
    let mut session_timeout = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("naming", "kazoo")) => naming = ZkNaming::Kazoo,
            Some(("naming", "curator")) => naming = ZkNaming::Curator,
            Some(("naming", v)) => {
                return Err(Error::Config(format!(
                    "naming in {} must be kazoo or curator, got {v:?}",
                    redact(url)
                )))
            }
            Some(("session_timeout", v)) => {
                session_timeout = Some(parse_timeout(v).ok_or_else(|| {
                    Error::Config(format!(
                        "session_timeout in {} must be a positive duration such as 10s or 500ms, got {v:?}",
                        redact(url)
                    ))
                })?)
            }
            _ => {
                return Err(Error::Config(format!(
                    "unknown parameter {pair:?} in {}: ZooKeeper URLs take naming and session_timeout",
                    redact(url)
                )))
            }
        }
    }
    Ok(BackendKind::ZooKeeper {
        hosts: hosts.join(","),
        root: root.to_owned(),
        naming,
        session_timeout,
    })
}

#[cfg(feature = "zookeeper")]
/// `500ms`, `10s` or a bare number of seconds (`10`, `1.5`); `None` for anything else
/// or zero.
fn parse_timeout(v: &str) -> Option<Duration> {
    let (number, scale) = if let Some(ms) = v.strip_suffix("ms") {
        (ms, 1e-3)
    } else {
        (v.strip_suffix('s').unwrap_or(v), 1.0)
    };
    let secs = number.parse::<f64>().ok()? * scale;
    (secs.is_finite() && secs > 0.0 && secs < 1e9).then(|| Duration::from_secs_f64(secs))
}

/// Splits the query parameters fencepost reads itself (`names`) off `url`, in order;
/// the others stay for the client library. `sslmode` is one of them only for
/// PostgreSQL (`postgres`).
fn take_params(
    url: &str,
    names: &[&str],
    postgres: bool,
) -> Result<(String, Vec<(String, String)>), Error> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), Vec::new()));
    };
    let mut taken = Vec::new();
    let mut rest = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some((k, v))
                if names.contains(&k) && (!matches!(k, "sslmode" | "mode") || postgres) =>
            {
                if v.is_empty() {
                    return Err(Error::Config(format!(
                        "{k} in {} is empty: leave it out for the default",
                        redact(url)
                    )));
                }
                taken.push((k.to_owned(), v.to_owned()));
            }
            _ => rest.push(pair),
        }
    }
    let base = if rest.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", rest.join("&"))
    };
    Ok((base, taken))
}

/// `url` with any password or token (the user part, a `token=` parameter) replaced
/// by `…`, for messages.
pub(crate) fn redact(url: &str) -> String {
    let url = match (url.find("://"), url.find('@')) {
        (Some(s), Some(at)) if at > s => format!("{}…{}", &url[..s + 3], &url[at..]),
        _ => url.to_owned(),
    };
    match url.split_once('?') {
        Some((base, query)) => {
            let pairs: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some(("token", _)) => "token=…".to_owned(),
                    _ => pair.to_owned(),
                })
                .collect();
            format!("{base}?{}", pairs.join("&"))
        }
        None => url,
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
            let adapter =
                crate::adapters::redis::RedisAdapter::connect(u, url.ca_file.as_deref(), b.clone())
                    .await?;
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
        BackendKind::Postgres(u) | BackendKind::PostgresSession(u) => {
            if url.key_prefix.is_some() {
                return Err(Error::Config(
                    "key_prefix does not apply to PostgreSQL (its locks are rows of the lease table)".into(),
                ));
            }
            let b = fencepost_core::PostgresBackend {
                mode: match url.kind {
                    BackendKind::PostgresSession(_) => fencepost_core::PgMode::Session,
                    _ => fencepost_core::PgMode::Lease,
                },
                ..fencepost_core::PostgresBackend::default()
            };
            let adapter =
                crate::adapters::postgres::PgAdapter::connect(u, url.ca_file.as_deref(), b.clone())
                    .await?;
            Ok((Arc::new(adapter), Backend::Postgres(b)))
        }
        #[cfg(feature = "etcd")]
        BackendKind::Etcd(members) => {
            let mut b = fencepost_core::backends::EtcdBackend {
                shared_lease: url.etcd_shared_lease,
                ..fencepost_core::backends::EtcdBackend::default()
            };
            if let Some(p) = &url.key_prefix {
                b.key_prefix = p.clone();
            }
            let adapter = crate::adapters::etcd::EtcdAdapter::new(
                members.clone(),
                url.ca_file.as_deref(),
                b.clone(),
            )?;
            Ok((Arc::new(adapter), Backend::Etcd(b)))
        }
        #[cfg(feature = "upstash")]
        BackendKind::Upstash { url: u, token } => {
            let b = redis_backend();
            let adapter = crate::adapters::upstash::UpstashAdapter::new(
                u.clone(),
                token.clone(),
                url.ca_file.as_deref(),
                b.clone(),
            )?;
            Ok((Arc::new(adapter), Backend::Redis(b)))
        }
        #[cfg(feature = "kubernetes")]
        BackendKind::Kubernetes {
            server,
            namespace,
            token,
            token_file,
        } => {
            if url.key_prefix.is_some() {
                return Err(Error::Config(
                    "key_prefix does not apply to Kubernetes: a lock's name is its Lease's name (choose the namespace with ?namespace=)".into(),
                ));
            }
            let mut b = fencepost_core::backends::KubernetesBackend::default();
            if let Some(ns) = namespace {
                b.namespace = ns.clone();
            }
            use crate::adapters::kubernetes::{KubeToken, KubernetesAdapter};
            let token = match (token, token_file) {
                (_, Some(path)) => KubeToken::File(path.clone()),
                (Some(t), None) => KubeToken::Fixed(t.clone()),
                (None, None) => KubeToken::None,
            };
            let adapter =
                KubernetesAdapter::new(server.clone(), token, url.ca_file.as_deref(), b.clone())?;
            Ok((Arc::new(adapter), Backend::Kubernetes(b)))
        }
        #[cfg(feature = "zookeeper")]
        BackendKind::ZooKeeper {
            hosts,
            root,
            naming,
            session_timeout,
        } => {
            if url.key_prefix.is_some() {
                return Err(Error::Config(
                    "key_prefix does not apply to ZooKeeper: its locks live under the URL's root path (zookeeper://host:2181/root)".into(),
                ));
            }
            let asked =
                session_timeout.unwrap_or(crate::adapters::zookeeper::DEFAULT_SESSION_TIMEOUT);
            let (adapter, b) =
                crate::adapters::zookeeper::ZkAdapter::connect(hosts, asked, root.clone(), *naming)
                    .await?;
            Ok((Arc::new(adapter), Backend::ZooKeeper(b)))
        }
        #[allow(unreachable_patterns)]
        other => Err(Error::Config(format!(
            "this build of fencepost has no {} backend: build it with the cargo feature {}",
            match other {
                BackendKind::Redis(_) => "Redis",
                BackendKind::Redlock(_) => "Redlock",
                BackendKind::Postgres(_) | BackendKind::PostgresSession(_) => "PostgreSQL",
                BackendKind::Etcd(_) => "etcd",
                BackendKind::Kubernetes { .. } => "Kubernetes",
                _ => "Upstash",
            },
            match other {
                BackendKind::Redis(_) | BackendKind::Redlock(_) => "`redis`",
                BackendKind::Postgres(_) | BackendKind::PostgresSession(_) => "`postgres`",
                BackendKind::Etcd(_) => "`etcd`",
                BackendKind::Kubernetes { .. } => "`kubernetes`",
                _ => "`upstash`",
            }
        ))),
    }
}
