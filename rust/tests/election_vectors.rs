//! Replays the election vectors `tests/scenarios/election/*.json` through
//! `fencepost::Election` on a fresh `Client::memory()` each. The format, the actions and
//! what a candidate records are in `tests/scenarios/README.md` ("Election vectors"); the
//! Python runner is `tests/python/test_election_vectors.py`, the JavaScript one
//! `tests/js/election_vectors.test.js`.
//!
//! Rust's own spelling of the actions: `cancel` aborts the candidate's task, which drops
//! its `campaign()` or `run()` future (the drop is the cancellation).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fencepost::{Client, Election, Error, Leadership, LockOptions, LostReason, StopReason};
use fencepost_core::{RedisBackend, RedisValue, Reply, RequestBody};
use serde_json::Value;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// How long a step waits for what it expects, then how long it watches for more.
const STEP_BOUND: Duration = Duration::from_secs(5);
const SETTLE: Duration = Duration::from_millis(100);

type Log = Arc<Mutex<Vec<String>>>;

fn push(log: &Log, entry: String) {
    log.lock().unwrap().push(entry);
}

fn lost_name(reason: &LostReason) -> String {
    serde_json::to_value(reason).unwrap()["kind"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn stop_name(reason: &StopReason) -> String {
    match reason {
        StopReason::Resigned => "resigned".into(),
        StopReason::Cancelled => "cancelled".into(),
        StopReason::Lost(r) => lost_name(r),
        other => format!("{other:?}"),
    }
}

/// What a failed campaign or run records.
fn failure(e: &Error) -> String {
    match e {
        Error::AcquireTimeout { .. } => "failed timeout".into(),
        Error::Lost { reason, .. } => format!("failed lost {}", lost_name(reason)),
        other => format!("failed {other:?}"),
    }
}

fn ms(v: &Value) -> Option<Duration> {
    v.as_f64()
        .map(|ms| Duration::from_nanos((ms * 1e6).round() as u64))
}

/// The vector's options over the core's defaults.
fn options(layers: &[&Value]) -> LockOptions {
    let mut o = LockOptions::default();
    for layer in layers {
        let Some(map) = layer.as_object() else {
            continue;
        };
        for (key, v) in map {
            match key.as_str() {
                "ttl_ms" => o.ttl = ms(v).unwrap(),
                "renew_every_ms" => o.renew_every = ms(v),
                "retry_base_ms" => o.retry_base = ms(v).unwrap(),
                "retry_max_ms" => o.retry_max = ms(v).unwrap(),
                "acquire_timeout_ms" => o.acquire_timeout = ms(v),
                other => panic!("unknown option {other} in the vector"),
            }
        }
    }
    o
}

/// One candidate: its Election, what it recorded, and what a step may act on.
struct Candidate {
    election: Election,
    log: Log,
    leadership: Arc<Mutex<Option<Leadership>>>,
    task: Option<JoinHandle<()>>,
    finish: Arc<Notify>,
}

impl Candidate {
    fn new(client: &Client, name: &str, spec: &Value, vector_options: &Value) -> Candidate {
        let log: Log = Arc::default();
        let (started, stopped) = (log.clone(), log.clone());
        let mut election = client
            .election(
                name,
                spec["identity"].as_str().unwrap(),
                options(&[vector_options, &spec["options"]]),
            )
            .unwrap()
            .on_started_leading(move |t| push(&started, format!("started {}", t.token.get())))
            .on_stopped_leading(move |t, r| {
                push(
                    &stopped,
                    format!("stopped {} {}", t.token.get(), stop_name(&r)),
                )
            });
        if let Some(value) = spec["value"].as_str() {
            election = election.with_value(value);
        }
        Candidate {
            election,
            log,
            leadership: Arc::default(),
            task: None,
            finish: Arc::new(Notify::new()),
        }
    }

    fn campaign(&mut self) {
        let (election, log, slot) = (
            self.election.clone(),
            self.log.clone(),
            self.leadership.clone(),
        );
        self.task = Some(tokio::spawn(async move {
            match election.campaign().await {
                Ok(leadership) => {
                    push(&log, format!("leading {}", leadership.token().get()));
                    *slot.lock().unwrap() = Some(leadership);
                }
                Err(e) => push(&log, failure(&e)),
            }
        }));
    }

    fn run(&mut self) {
        let (election, log) = (self.election.clone(), self.log.clone());
        self.finish = Arc::new(Notify::new());
        let finish = self.finish.clone();
        self.task = Some(tokio::spawn(async move {
            let working = log.clone();
            let outcome = election
                .run(|term| async move {
                    push(&working, format!("working {}", term.token.get()));
                    finish.notified().await;
                })
                .await;
            match outcome {
                Ok(()) => push(&log, "returned".into()),
                Err(e) => push(&log, failure(&e)),
            }
        }));
    }

    async fn cancel(&mut self) {
        let task = self.task.take().expect("a campaign or run to cancel");
        task.abort();
        if task.await.is_err_and(|e| e.is_cancelled()) {
            push(&self.log, "failed cancelled".into());
        }
    }

    async fn resign(&self) {
        let leadership = self.leadership.lock().unwrap().take();
        leadership
            .expect("a term to resign")
            .resign()
            .await
            .unwrap();
    }
}

fn vectors() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/scenarios/election");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
}

async fn replay(path: &Path) {
    let file = path.file_name().unwrap().to_string_lossy().into_owned();
    let vector: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let name = vector["name"].as_str().unwrap();
    assert_eq!(format!("{name}.json"), file, "name is the file stem");
    let client = Client::memory();
    let mut candidates: BTreeMap<String, Candidate> = vector["candidates"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(id, spec)| {
            (
                id.clone(),
                Candidate::new(&client, name, spec, &vector["options"]),
            )
        })
        .collect();
    let follower = client
        .election(name, "follower", options(&[&vector["options"]]))
        .unwrap();
    for (i, step) in vector["steps"].as_array().unwrap().iter().enumerate() {
        let action = step["do"].as_str().unwrap();
        let who = step["candidate"].as_str().unwrap_or("");
        let at = format!("{file} step {i} ({action} {who})");
        let seen: BTreeMap<String, usize> = candidates
            .iter()
            .map(|(id, c)| (id.clone(), c.log.lock().unwrap().len()))
            .collect();
        if action == "leader" {
            let got = follower.leader().await.unwrap().map(|l| {
                serde_json::json!({"identity": l.identity, "value": l.value, "token": l.token.get()})
            });
            assert_eq!(got.unwrap_or(Value::Null), step["expect"]["leader"], "{at}");
            continue;
        }
        match action {
            "campaign" => candidates.get_mut(who).unwrap().campaign(),
            "run" => candidates.get_mut(who).unwrap().run(),
            "finish" => candidates[who].finish.notify_one(),
            "resign" => candidates[who].resign().await,
            "cancel" => candidates.get_mut(who).unwrap().cancel().await,
            "force_release" => {
                let reply = client
                    .execute(RequestBody::Redis(
                        RedisBackend::default().force_release(name),
                    ))
                    .await
                    .unwrap();
                assert_eq!(
                    reply,
                    Reply::Redis(RedisValue::Int(1)),
                    "{at}: the lock was held"
                );
            }
            other => panic!("{at}: unknown action {other}"),
        }
        let expect: BTreeMap<String, Vec<String>> =
            serde_json::from_value(step["expect"].clone()).unwrap();
        let recorded = || -> BTreeMap<String, Vec<String>> {
            candidates
                .iter()
                .map(|(id, c)| (id.clone(), c.log.lock().unwrap()[seen[id]..].to_vec()))
                .filter(|(_, entries)| !entries.is_empty())
                .collect()
        };
        let deadline = tokio::time::Instant::now() + STEP_BOUND;
        while tokio::time::Instant::now() < deadline
            && expect
                .iter()
                .any(|(id, want)| candidates[id].log.lock().unwrap().len() - seen[id] < want.len())
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(SETTLE).await;
        assert_eq!(recorded(), expect, "{at}");
    }
    for c in candidates.values_mut() {
        if let Some(task) = c.task.take() {
            task.abort();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn election_vectors_replay() {
    let files = vectors();
    assert!(files.len() >= 8, "only {} election vectors", files.len());
    for path in files {
        replay(&path).await;
    }
}
