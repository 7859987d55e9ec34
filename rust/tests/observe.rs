//! The core's observations as `tracing` spans and events (target "fencepost"), recorded
//! by a small subscriber of the test's own, on the in-memory backend.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fencepost::{Client, LockOptions};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// One recorded event: its level, its span's `lock` field, and its fields as text.
#[derive(Clone, Debug)]
struct Seen {
    level: Level,
    span_lock: Option<String>,
    fields: HashMap<String, String>,
}

/// A span's name and fields.
type SpanRecord = (String, HashMap<String, String>);

#[derive(Default)]
struct Recorder {
    events: Mutex<Vec<Seen>>,
    spans: Mutex<HashMap<u64, SpanRecord>>,
    current: Mutex<Vec<u64>>,
    next: AtomicU64,
}

struct Fields<'a>(&'a mut HashMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

#[derive(Clone)]
struct Shared(Arc<Recorder>);

impl Subscriber for Shared {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.target().starts_with("fencepost")
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let id = self.0.next.fetch_add(1, Ordering::Relaxed) + 1;
        let mut fields = HashMap::new();
        span.record(&mut Fields(&mut fields));
        self.0
            .spans
            .lock()
            .unwrap()
            .insert(id, (span.metadata().name().to_owned(), fields));
        Id::from_u64(id)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut fields = HashMap::new();
        event.record(&mut Fields(&mut fields));
        let span_lock = self.0.current.lock().unwrap().last().and_then(|id| {
            let spans = self.0.spans.lock().unwrap();
            let (name, fields) = spans.get(id)?;
            assert_eq!(name, "fencepost.lock");
            fields.get("lock").cloned()
        });
        self.0.events.lock().unwrap().push(Seen {
            level: *event.metadata().level(),
            span_lock,
            fields,
        });
    }
    fn enter(&self, span: &Id) {
        self.0.current.lock().unwrap().push(span.into_u64());
    }
    fn exit(&self, _: &Id) {
        self.0.current.lock().unwrap().pop();
    }
}

#[tokio::test(flavor = "current_thread")]
async fn observations_are_tracing_events_in_a_span_per_acquisition() {
    let recorder = Shared(Arc::new(Recorder::default()));
    // current-thread runtime: the driver task runs on this thread, under this default
    let _guard = tracing::subscriber::set_default(recorder.clone());
    let client = Client::memory();
    let lease = client
        .acquire("traced", LockOptions::ttl(Duration::from_millis(300)))
        .await
        .expect("acquired");
    let token = lease.token().get();
    tokio::time::sleep(Duration::from_millis(150)).await; // renewed at 100
    lease.release().await.expect("released");
    assert!(client.close(Duration::from_secs(2)).await);

    let events = recorder.0.events.lock().unwrap().clone();
    let names: Vec<&str> = events.iter().map(|e| e.fields["event"].as_str()).collect();
    assert_eq!(names.first(), Some(&"acquiring"), "{names:?}");
    assert!(
        names.contains(&"renewed") && names.last() == Some(&"released"),
        "{names:?}"
    );
    let acquired = events
        .iter()
        .find(|e| e.fields["event"] == "acquired")
        .expect("acquired");
    assert_eq!(acquired.level, Level::INFO);
    assert_eq!(acquired.fields["token"], token.to_string());
    assert_eq!(acquired.fields["attempts"], "1");
    let waited: f64 = acquired.fields["waited"].parse().expect("seconds");
    assert!((0.0..0.1).contains(&waited), "{waited}");
    assert!(acquired.fields["message"].starts_with("lock \"traced\": acquired with token"));
    let released = events.last().unwrap();
    let held_for: f64 = released.fields["held_for"].parse().unwrap();
    assert!((0.14..0.5).contains(&held_for), "{held_for}");
    assert!(events
        .iter()
        .all(|e| e.span_lock.as_deref() == Some("traced")));
    let renewed = events
        .iter()
        .find(|e| e.fields["event"] == "renewed")
        .unwrap();
    assert_eq!(renewed.level, Level::DEBUG);
}

#[tokio::test(flavor = "current_thread")]
async fn a_late_renewal_is_a_warn_event_naming_what_to_change() {
    let recorder = Shared(Arc::new(Recorder::default()));
    let _guard = tracing::subscriber::set_default(recorder.clone());
    let client = Client::memory();
    let mut options = LockOptions::ttl(Duration::from_millis(300));
    options.renew_every = Some(Duration::from_millis(250)); // 295 − 250 = 45 ms left
    let lease = client.acquire("late", options).await.expect("acquired");
    tokio::time::sleep(Duration::from_millis(320)).await;
    lease.release().await.expect("released");
    assert!(client.close(Duration::from_secs(2)).await);
    let events = recorder.0.events.lock().unwrap().clone();
    let late = events
        .iter()
        .find(|e| e.fields["event"] == "renewal_late")
        .expect("a renewal_late warning");
    assert_eq!(late.level, Level::WARN);
    assert_eq!(late.fields["warning"], "true");
    assert!(late.fields["message"].contains("raise ttl"));
    let left: f64 = late.fields["validity_left"].parse().unwrap();
    assert!(left < 0.295 / 3.0, "{left}");
}

#[tokio::test(flavor = "current_thread")]
async fn without_a_subscriber_nothing_is_observed() {
    let client = Client::memory();
    let lease = client
        .acquire("quiet", LockOptions::ttl(Duration::from_millis(300)))
        .await
        .expect("acquired");
    lease.release().await.expect("released");
    assert!(client.close(Duration::from_secs(2)).await);
}

#[tokio::test(flavor = "current_thread")]
async fn thresholds_of_ones_own_choice_and_a_bad_one_refused() {
    let recorder = Shared(Arc::new(Recorder::default()));
    let _guard = tracing::subscriber::set_default(recorder.clone());
    let url = fencepost::BackendUrl::parse("memory://").expect("a URL");
    // the same late renewal as above, with the warning turned off (0: never)
    let quiet = fencepost::ObserveOptions {
        late_renewal_fraction: 0.0,
        ..Default::default()
    };
    let client = Client::from_url_observed(&url, quiet)
        .await
        .expect("a client");
    let mut options = LockOptions::ttl(Duration::from_millis(300));
    options.renew_every = Some(Duration::from_millis(250));
    let lease = client.acquire("late", options).await.expect("acquired");
    tokio::time::sleep(Duration::from_millis(320)).await;
    lease.release().await.expect("released");
    assert!(client.close(Duration::from_secs(2)).await);
    let events = recorder.0.events.lock().unwrap().clone();
    let names: Vec<&str> = events.iter().map(|e| e.fields["event"].as_str()).collect();
    assert!(
        names.contains(&"renewed") && !names.contains(&"renewal_late"),
        "{names:?}"
    );

    let bad = fencepost::ObserveOptions {
        late_renewal_fraction: 2.0,
        ..Default::default()
    };
    match Client::from_url_observed(&url, bad).await {
        Err(fencepost::Error::Config(message)) => {
            assert!(message.contains("late_renewal_fraction"), "{message}")
        }
        Err(other) => panic!("a config error, got {other:?}"),
        Ok(_) => panic!("a fraction of 2 was accepted"),
    }
}
