//! What the ledger says through `tracing`: every decision, with the key and
//! the withdrawal; a warning for every unknown outcome.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::thread::{self, ThreadId};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

use crate::{Fixture, Rail};

#[derive(Debug, Clone)]
struct Captured {
    thread: ThreadId,
    level: Level,
    fields: Vec<(String, String)>,
}

impl Captured {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(field, _)| field == name)
            .map(|(_, value)| value.as_str())
    }
}

/// The test binary's global subscriber: keeps every event with the thread
/// that emitted it. Global rather than scoped, because tracing caches each
/// callsite's interest process-wide and tests run in parallel: a scoped
/// subscriber can miss a callsite first met on another thread.
#[derive(Default)]
struct Capture {
    events: Mutex<Vec<Captured>>,
    spans: AtomicU64,
}

struct Fields(Vec<(String, String)>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.push((field.name().to_owned(), format!("{value:?}")));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push((field.name().to_owned(), value.to_owned()));
    }
}

impl Subscriber for &'static Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(self.spans.fetch_add(1, Ordering::Relaxed) + 1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut fields = Fields(Vec::new());
        event.record(&mut fields);
        let captured = Captured {
            thread: thread::current().id(),
            level: *event.metadata().level(),
            fields: fields.0,
        };
        self.events.lock().unwrap().push(captured);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

fn capture() -> &'static Capture {
    static CAPTURE: OnceLock<&'static Capture> = OnceLock::new();
    CAPTURE.get_or_init(|| {
        let capture: &'static Capture = Box::leak(Box::default());
        tracing::subscriber::set_global_default(capture)
            .expect("no other global subscriber in this binary");
        capture
    })
}

/// Events `run` emitted on this thread.
fn captured(run: impl FnOnce()) -> Vec<Captured> {
    let capture = capture();
    let before = capture.events.lock().unwrap().len();
    run();
    let me = thread::current().id();
    let events = capture.events.lock().unwrap();
    events[before..]
        .iter()
        .filter(|event| event.thread == me)
        .cloned()
        .collect()
}

#[test]
fn an_unknown_outcome_is_a_warning_naming_the_key_and_the_withdrawal() {
    let f = Fixture::new();
    let w = f.withdrawal();

    let events = captured(|| {
        f.ledger()
            .submit("req-1", w.clone(), Rail::default().timeout())
            .unwrap_err();
    });

    let warnings: Vec<_> = events.iter().filter(|e| e.level == Level::WARN).collect();
    assert_eq!(warnings.len(), 1, "{events:?}");
    assert_eq!(warnings[0].field("key"), Some("req-1"));
    assert_eq!(warnings[0].field("withdrawal"), Some(w.id().as_str()));
    assert!(
        warnings[0]
            .field("message")
            .unwrap()
            .contains("outcome is unknown")
    );
}

#[test]
fn rail_refusals_panics_and_dropped_tickets_are_warnings_too() {
    let f = Fixture::new();
    let (a, b, c) = (f.withdrawal(), f.withdrawal(), f.withdrawal());

    let events = captured(|| {
        f.ledger()
            .submit("req-a", a.clone(), Rail::default().refuse())
            .unwrap_err();
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = f
                .ledger()
                .submit("req-b", b.clone(), |_| -> Result<_, payonce::SendFailure> {
                    panic!("bug in the rail client")
                });
        }));
        drop(f.ledger().claim("req-c", c.clone()).unwrap());
    });

    let warned: Vec<_> = events
        .iter()
        .filter(|e| e.level == Level::WARN)
        .map(|e| {
            (
                e.field("key").unwrap().to_owned(),
                e.field("withdrawal").unwrap().to_owned(),
            )
        })
        .collect();
    let expected: Vec<_> = [("req-a", &a), ("req-b", &b), ("req-c", &c)]
        .iter()
        .map(|(k, w)| (k.to_string(), w.id().to_string()))
        .collect();
    assert_eq!(warned, expected);
}

#[test]
fn claims_replays_and_refusals_are_logged_at_info() {
    let f = Fixture::new();
    let w = f.withdrawal();
    let rail = Rail::default();

    let events = captured(|| {
        f.ledger().submit("req-1", w.clone(), rail.ok()).unwrap();
        f.ledger().submit("req-1", w.clone(), rail.ok()).unwrap();
        f.ledger()
            .submit("req-2", w.clone(), rail.ok())
            .unwrap_err();
    });

    let infos: Vec<_> = events
        .iter()
        .filter(|e| e.level == Level::INFO)
        .filter_map(|e| e.field("message"))
        .collect();
    for said in ["claimed", "outcome recorded", "replayed", "refused"] {
        assert!(infos.contains(&said), "no {said:?} in {infos:?}");
    }
}

#[test]
fn a_log_of_replay_thread_min_len_bytes_or_more_replays_on_two_threads() {
    // Guards against the threshold being ignored or off by one, which would leave long logs on one thread.
    // `threads` says how many threads applied the events, not what was asked for.
    let f = Fixture::new();
    f.withdrawal();
    let storage = f.storage.clone();
    let config = f.config.clone();
    assert_eq!(config.replay_thread_min_len, payonce::REPLAY_THREAD_MIN_LEN);
    drop(f);
    // Each open appends an event: the threshold is set from the log's
    // length just before it.
    let threads = |min_len: &dyn Fn(u64) -> u64| {
        let replay_thread_min_len = min_len(payonce_log::segments_len(&storage).unwrap());
        let config = payonce::Config {
            replay_thread_min_len,
            ..config.clone()
        };
        let events = captured(|| {
            drop(payonce::Ledger::open_on(std::sync::Arc::new(storage.clone()), config).unwrap());
        });
        let replayed: Vec<_> = events
            .iter()
            .filter(|event| event.field("message") == Some("replayed"))
            .collect();
        assert_eq!(replayed.len(), 1, "{events:?}");
        replayed[0].field("threads").unwrap().to_owned()
    };

    assert_eq!(threads(&|len| len), "2");
    assert_eq!(threads(&|len| len + 1), "1");
    assert_eq!(threads(&|_| 0), "2");
    assert_eq!(
        threads(&|_| payonce::REPLAY_THREAD_MIN_LEN),
        "1",
        "a small log replays on one"
    );
}
