//! `fencepost`: run a command under a distributed lock, and see who holds what.
//!
//! ```text
//! fencepost run --backend URL --name NAME [--ttl 30s] [--wait forever|10s|0]
//!               [--purpose efficiency|correctness] [--grace 5s] -- CMD ARGS…
//! fencepost status --backend URL NAME [--json]
//! fencepost list --backend URL [PREFIX] [--json] [--limit 100]
//! ```
//!
//! Exit codes of `run` (as `timeout(1)` documents 124): the command's own (128 + N
//! when a signal N ended it); 122 bad usage; 123 the lease was lost (the command was
//! stopped, or it finished and the release found the lease gone); 124 not acquired
//! within `--wait`; 125 backend error; 126 the command cannot be run; 127 it was not
//! found. Lock decisions are the core's (`fencepost-core`); this binary runs them.
//! The core's warnings (its server unreachable, a hot lock, a lease held long) are
//! printed on stderr as they happen, `fencepost: warning: …`.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use fencepost::{BackendUrl, Client, Error, Holder, Lease, LockOptions, ObserveOptions, Purpose};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::signal::unix::{signal, SignalKind};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

/// Bad arguments, URL or options.
const EXIT_USAGE: u8 = 122;
/// The lease was lost while the command ran.
const EXIT_LOST: u8 = 123;
/// The lock was not acquired within `--wait`.
const EXIT_NOT_ACQUIRED: u8 = 124;
/// The backend could not be reached, or answered in a way retrying cannot fix.
const EXIT_BACKEND: u8 = 125;
/// The command exists but cannot be run.
const EXIT_CANNOT_RUN: u8 = 126;
/// The command was not found.
const EXIT_NOT_FOUND: u8 = 127;

#[derive(Parser)]
#[command(name = "fencepost", version, about = "Run a command under a distributed lock with a fencing token", after_help = EXIT_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

const EXIT_HELP: &str = "\
Exit status of `run`: the command's own (128+N if signal N ended it, or arrived while
waiting for the lock); 122 bad usage; 123 lease lost (the command was stopped); 124 not
acquired in time; 125 backend error; 126 the command cannot be run; 127 the command was
not found. `status` and `list`: 0 whether or not the lock is held, 122, 125.";

#[derive(Subcommand)]
enum Command {
    /// Acquire NAME, run the command while the lease renews, release when it exits.
    ///
    /// The command runs in its own process group with FENCEPOST_TOKEN (the fencing
    /// token), FENCEPOST_LOCK (the name) and FENCEPOST_OWNER (the owner id) in its
    /// environment. If the lease is lost, the whole group gets SIGTERM, then SIGKILL
    /// after --grace. SIGINT, SIGTERM and SIGHUP sent to fencepost go to the group.
    #[command(after_help = EXIT_HELP)]
    Run {
        #[command(flatten)]
        backend: BackendArg,
        /// The lock name (1 to 1024 bytes).
        #[arg(long)]
        name: String,
        /// Lease length the server enforces; renewed every third of it. Default 30s; on
        /// ZooKeeper, the session timeout the server negotiated when that is shorter
        /// (a lease cannot outlive the session).
        #[arg(long, value_parser = duration)]
        ttl: Option<Duration>,
        /// How long to wait for the lock: a duration, 0 (one try) or `forever`.
        #[arg(long, default_value = "forever", value_parser = wait)]
        wait: Wait,
        /// `correctness` refuses backends whose tokens can go backwards (Redis) unless
        /// --accept-failover-risk is given.
        #[arg(long, value_enum, default_value_t = PurposeArg::Efficiency)]
        purpose: PurposeArg,
        /// Accept a correctness lock on a backend whose tokens can regress on failover.
        #[arg(long)]
        accept_failover_risk: bool,
        /// After the lease is lost: how long between SIGTERM and SIGKILL to the group.
        #[arg(long, default_value = "5s", value_parser = duration)]
        grace: Duration,
        /// Report acquisition, loss and release on stderr.
        #[arg(long, short)]
        verbose: bool,
        /// The command and its arguments (after `--`).
        #[arg(required = true, last = true, num_args = 1..)]
        command: Vec<String>,
    },
    /// Show who holds NAME: owner id, token, time left.
    Status {
        #[command(flatten)]
        backend: BackendArg,
        /// The lock name.
        name: String,
        /// One JSON object instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// List the held locks whose names start with PREFIX (bounded scan, never KEYS).
    List {
        #[command(flatten)]
        backend: BackendArg,
        /// Only names starting with this.
        #[arg(default_value = "")]
        prefix: String,
        /// At most this many locks.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// A JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
}

#[derive(clap::Args)]
struct BackendArg {
    /// memory://, redis://, rediss://, redlock://host1:6379,host2:6379,host3:6379,
    /// postgres://[…?mode=session], etcd+http(s)://host:port[,…][?shared_lease=true],
    /// zookeeper://host:2181[,…][/root][?session_timeout=10s], upstash+https://[:token@]host or
    /// kubernetes+https://host:port[?namespace=ns&token=…|token_file=path] (else $FENCEPOST_KUBE_TOKEN);
    /// `?key_prefix=` sets the key prefix.
    /// TLS (builds with the cargo feature `tls`): rediss://, https gateways and PostgreSQL's
    /// `sslmode=require`; the CA trusted is `?ca=/path/ca.pem` (PostgreSQL: `?sslrootcert=`),
    /// else $FENCEPOST_CA_FILE, else the webpki roots.
    #[arg(long, env = "FENCEPOST_BACKEND_URL")]
    backend: String,
}

#[derive(Clone, Copy, ValueEnum)]
enum PurposeArg {
    Efficiency,
    Correctness,
}

#[derive(Clone, Copy)]
enum Wait {
    Forever,
    For(Duration),
}

fn duration(s: &str) -> Result<Duration, String> {
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    humantime::parse_duration(s).map_err(|e| format!("{e} (write e.g. 30s, 500ms, 2m)"))
}

fn wait(s: &str) -> Result<Wait, String> {
    match s {
        "forever" => Ok(Wait::Forever),
        _ => duration(s).map(Wait::For),
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_USAGE } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    // before any client is made: a client observes only what a subscriber wants
    let _ = tracing::subscriber::set_global_default(tracing_subscriber::registry().with(Warnings));
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("fencepost: cannot start the runtime: {e}");
            return ExitCode::from(EXIT_BACKEND);
        }
    };
    ExitCode::from(runtime.block_on(dispatch(cli.command)))
}

/// Prints the core's warnings (the `tracing` events of target `fencepost` at WARN, see
/// the crate's `observe` docs) on stderr, one line each: a wait on a server that
/// cannot be reached says so instead of waiting in silence.
struct Warnings;

impl<S: tracing::Subscriber> Layer<S> for Warnings {
    fn enabled(&self, metadata: &tracing::Metadata<'_>, _: Context<'_, S>) -> bool {
        metadata.target() == "fencepost" && *metadata.level() <= tracing::Level::WARN
    }

    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        struct Message(String);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.0 = format!("{value:?}");
                }
            }
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        eprintln!("fencepost: warning: {}", message.0);
    }
}

/// [`Client::connect`], with `server_unreachable` every 5 s (the library's default is
/// 30 s): a command waiting on a server it cannot reach hears of it soon.
async fn connect(url: &str) -> Result<Client, Error> {
    let observe = ObserveOptions {
        unreachable_every: Duration::from_secs(5),
        ..ObserveOptions::default()
    };
    Client::from_url_observed(&BackendUrl::parse(url)?, observe).await
}

/// `run`'s TTL when `--ttl` is not given: 30 s, or on ZooKeeper the negotiated session
/// timeout when that is shorter (the core refuses a TTL above it).
#[cfg_attr(not(feature = "zookeeper"), allow(unused_variables))]
fn default_ttl(client: &Client) -> Duration {
    let default = Duration::from_secs(30);
    #[cfg(feature = "zookeeper")]
    if let fencepost::core::Backend::ZooKeeper(zk) = client.backend() {
        if let Some(ms) = zk.session_timeout_ms {
            return default.min(Duration::from_millis(ms));
        }
    }
    default
}

/// The exit code for an error of the library.
fn fail(e: &Error) -> u8 {
    eprintln!("fencepost: {e}");
    match e {
        Error::Usage(_) | Error::Config(_) => EXIT_USAGE,
        Error::AcquireTimeout { .. } => EXIT_NOT_ACQUIRED,
        Error::Lost { .. } => EXIT_LOST,
        _ => EXIT_BACKEND,
    }
}

async fn dispatch(command: Command) -> u8 {
    match command {
        Command::Run {
            backend,
            name,
            ttl,
            wait,
            purpose,
            accept_failover_risk,
            grace,
            verbose,
            command,
        } => {
            let client = match connect(&backend.backend).await {
                Ok(c) => c,
                Err(e) => return fail(&e),
            };
            let ttl = ttl.unwrap_or_else(|| default_ttl(&client));
            let options = LockOptions {
                purpose: match purpose {
                    PurposeArg::Efficiency => Purpose::Efficiency,
                    PurposeArg::Correctness => Purpose::Correctness,
                },
                accept_failover_risk,
                acquire_timeout: match wait {
                    Wait::Forever => None,
                    Wait::For(d) => Some(d),
                },
                ..LockOptions::ttl(ttl)
            };
            let code = run(&client, &name, options, grace, verbose, &command).await;
            client.close(Duration::from_secs(5)).await;
            code
        }
        Command::Status {
            backend,
            name,
            json,
        } => {
            let client = match connect(&backend.backend).await {
                Ok(c) => c,
                Err(e) => return fail(&e),
            };
            match client.status(&name).await {
                Ok(holder) => {
                    if json {
                        println!("{}", holder_json(&name, holder.as_ref()));
                    } else {
                        print_table(&name, holder.as_slice(), true);
                    }
                    0
                }
                Err(e) => fail(&e),
            }
        }
        Command::List {
            backend,
            prefix,
            limit,
            json,
        } => {
            let client = match connect(&backend.backend).await {
                Ok(c) => c,
                Err(e) => return fail(&e),
            };
            match client.list(&prefix, limit).await {
                Ok(holders) => {
                    if json {
                        let items: Vec<_> = holders
                            .iter()
                            .map(|h| holder_json(&h.name, Some(h)))
                            .collect();
                        println!("{}", serde_json::Value::Array(items));
                    } else {
                        print_table(&prefix, &holders, false);
                    }
                    0
                }
                Err(e) => fail(&e),
            }
        }
    }
}

fn holder_json(name: &str, holder: Option<&Holder>) -> serde_json::Value {
    serde_json::json!({
        "name": name,
        "held": holder.is_some(),
        "owner": holder.and_then(|h| h.owner.clone()),
        "token": holder.and_then(|h| h.token).map(|t| t.get()),
        "ttl_left_ms": holder.and_then(|h| h.ttl_left).map(|d| d.as_millis() as u64),
        "waiters": holder.and_then(|h| h.waiters),
        "metadata": holder.and_then(|h| h.metadata.clone()),
    })
}

fn print_table(name: &str, holders: &[Holder], single: bool) {
    if holders.is_empty() {
        if single {
            println!("{name}: not held");
        } else {
            println!(
                "no held locks{}",
                if name.is_empty() {
                    String::new()
                } else {
                    format!(" starting with {name:?}")
                }
            );
        }
        return;
    }
    let width = holders
        .iter()
        .map(|h| h.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    // etcd and ZooKeeper count the contenders queued behind the holder
    let queues = holders.iter().any(|h| h.waiters.is_some());
    let waiters = |w: Option<String>| match (queues, w) {
        (false, _) => String::new(),
        (true, w) => format!("  {:>7}", w.as_deref().unwrap_or("?")),
    };
    println!(
        "{:<width$}  {:<32}  {:>8}  {:>9}{}",
        "NAME",
        "HOLDER",
        "TOKEN",
        "TIME LEFT",
        waiters(Some("WAITERS".to_owned())),
    );
    for h in holders {
        println!(
            "{:<width$}  {:<32}  {:>8}  {:>9}{}",
            h.name,
            h.owner.as_deref().unwrap_or("?"),
            h.token.map_or("?".to_owned(), |t| t.to_string()),
            h.ttl_left
                .map_or("?".to_owned(), |d| format!("{:.1}s", d.as_secs_f64())),
            waiters(h.waiters.map(|n| n.to_string())),
        );
    }
}

/// Signals fencepost forwards to the command's group.
struct Forwarded {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Forwarded {
    fn new() -> std::io::Result<Self> {
        Ok(Forwarded {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    async fn next(&mut self) -> Signal {
        tokio::select! {
            _ = self.int.recv() => Signal::SIGINT,
            _ = self.term.recv() => Signal::SIGTERM,
            _ = self.hup.recv() => Signal::SIGHUP,
        }
    }
}

async fn run(
    client: &Client,
    name: &str,
    options: LockOptions,
    grace: Duration,
    verbose: bool,
    command: &[String],
) -> u8 {
    let mut signals = match Forwarded::new() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("fencepost: cannot watch signals: {e}");
            return EXIT_BACKEND;
        }
    };
    // A signal while waiting ends the wait: dropping the acquisition cancels it (the
    // driver releases whatever the server may have granted).
    let lease = tokio::select! {
        acquired = client.acquire(name, options) => match acquired {
            Ok(lease) => lease,
            Err(e) => return fail(&e),
        },
        sig = signals.next() => {
            eprintln!("fencepost: {sig} while waiting for lock {name:?}: not running the command");
            return 128 + sig as u8;
        }
    };
    if verbose {
        eprintln!(
            "fencepost: acquired {name:?} with token {} (owner {})",
            lease.token(),
            lease.owner_id()
        );
    }
    let code = supervise(&lease, grace, verbose, command, &mut signals).await;
    match (code, lease.release().await) {
        (Supervised::Exited(code), Ok(())) => {
            if verbose {
                eprintln!("fencepost: released {name:?}");
            }
            code
        }
        (Supervised::Exited(_), Err(e)) => fail(&e),
        (Supervised::Lost, _) => EXIT_LOST,
        (Supervised::NotStarted(code), _) => code,
    }
}

enum Supervised {
    /// The command exited with this code.
    Exited(u8),
    /// The lease was lost and the command's group stopped.
    Lost,
    /// The command could not be started.
    NotStarted(u8),
}

async fn supervise(
    lease: &Lease,
    grace: Duration,
    verbose: bool,
    command: &[String],
    signals: &mut Forwarded,
) -> Supervised {
    let mut child = match tokio::process::Command::new(&command[0])
        .args(&command[1..])
        .env("FENCEPOST_TOKEN", lease.token().to_string())
        .env("FENCEPOST_LOCK", lease.name())
        .env("FENCEPOST_OWNER", lease.owner_id().to_string())
        .process_group(0)
        .spawn()
    {
        Ok(child) => child,
        Err(e) => {
            eprintln!("fencepost: cannot run {:?}: {e}", command[0]);
            return Supervised::NotStarted(match e.kind() {
                std::io::ErrorKind::NotFound => EXIT_NOT_FOUND,
                _ => EXIT_CANNOT_RUN,
            });
        }
    };
    let Some(pgid) = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw)
    else {
        eprintln!("fencepost: the command exited before it could be watched");
        return Supervised::Exited(EXIT_CANNOT_RUN);
    };
    let lost = lease.lost();
    tokio::pin!(lost);
    loop {
        tokio::select! {
            status = child.wait() => {
                return Supervised::Exited(match status {
                    Ok(s) => exit_code(s),
                    Err(e) => {
                        eprintln!("fencepost: lost track of the command: {e}");
                        EXIT_BACKEND
                    }
                });
            }
            sig = signals.next() => {
                if verbose {
                    eprintln!("fencepost: forwarding {sig} to the command");
                }
                let _ = killpg(pgid, sig);
            }
            reason = &mut lost => {
                eprintln!(
                    "fencepost: lease of {:?} lost ({reason:?}): stopping the command (SIGTERM, SIGKILL after {:?})",
                    lease.name(), grace
                );
                stop_group(&mut child, pgid, grace).await;
                return Supervised::Lost;
            }
        }
    }
}

/// SIGTERM to the group, then SIGKILL to whatever of it is left after `grace`; returns
/// once the command is reaped and the group is gone (or after the SIGKILL).
async fn stop_group(child: &mut tokio::process::Child, pgid: Pid, grace: Duration) {
    let _ = killpg(pgid, Signal::SIGTERM);
    let deadline = tokio::time::Instant::now() + grace;
    let _ = tokio::time::timeout_at(deadline, child.wait()).await;
    // members the command left behind (or the command itself, ignoring SIGTERM)
    while tokio::time::Instant::now() < deadline && group_running(pgid) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = killpg(pgid, Signal::SIGKILL);
    let _ = child.wait().await;
}

/// Whether a process of group `pgid` still runs. Zombies do not count: a member whose
/// parent died is reaped by init, which in containers may take a second or two.
fn group_running(pgid: Pid) -> bool {
    if killpg(pgid, None).is_err() {
        return false;
    }
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true; // no procfs: the group has a member, zombie or not
    };
    entries.flatten().any(|e| {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            return false;
        };
        // "pid (comm) state ppid pgrp …": comm may hold spaces, so split after its ')'
        let Some((_, rest)) = stat.rsplit_once(')') else {
            return false;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        matches!(fields.as_slice(), [state, _ppid, pgrp, ..] if *state != "Z" && pgrp.parse::<i32>() == Ok(pgid.as_raw()))
    })
}

/// The exit code of a finished command: its own, or 128 + N for signal N.
fn exit_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
        (None, Some(sig)) => u8::try_from(128 + sig).unwrap_or(255),
        _ => 1,
    }
}
