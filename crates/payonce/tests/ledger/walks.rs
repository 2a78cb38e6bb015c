//! An auditor's replay with a hook (`EventLog::replay`,
//! `replay_scan_with`): what the hook is shown of each event, where it can
//! end the replay, and the heads it is handed.

use std::ops::ControlFlow;
use std::sync::Arc;

use payonce::{
    Divergence, EventKind, EventLog, Head, LedgerError, ReplayHook, Replaying, State, StoreError,
    Walked, replay_scan_with,
};
use payonce_log::{LogConfig, LogReader, MemStorage, Position};

use crate::durability::forge;
use crate::{Fixture, Rail};

/// What a hook saw: per event, its seq and the state's last seq before
/// and after it, its head, and whether it diverged.
#[derive(Default)]
struct Seen {
    before: Vec<(u64, u64)>,
    after: Vec<(u64, u64)>,
    heads: Vec<Option<Head>>,
    diverged: Vec<u64>,
    stop_at: Option<u64>,
    apply_only: bool,
}

impl ReplayHook for Seen {
    fn before(
        &mut self,
        state: &State,
        event: &Replaying<'_>,
        divergence: Option<Divergence>,
    ) -> Result<ControlFlow<()>, LedgerError> {
        self.before.push((event.seq(), state.last_seq()));
        if divergence.is_some() {
            self.diverged.push(event.seq());
        }
        Ok(match self.stop_at == Some(event.seq()) {
            true => ControlFlow::Break(()),
            false => ControlFlow::Continue(()),
        })
    }

    fn after(&mut self, state: &State, event: &Replaying<'_>) {
        self.after.push((event.seq(), state.last_seq()));
        self.heads.push(event.head());
    }

    fn rederives(&self) -> bool {
        !self.apply_only
    }
}

/// A ledger's log of `submits` submissions, more than one batch of
/// replay (2,048 events) long when there are enough of them.
fn log_of(submits: usize) -> MemStorage {
    let f = Fixture::new();
    for n in 0..submits {
        let w = f.withdrawal();
        f.ledger()
            .submit(&format!("req-{n}"), w, Rail::default().ok())
            .unwrap();
    }
    f.storage.clone()
}

/// Replays `storage`'s log with `hook`; answers the state, what the
/// replay found, and the positions of the records read, in order.
fn replay_read(
    storage: &MemStorage,
    hook: &mut (dyn ReplayHook + Send),
) -> (State, Walked, Vec<Position>) {
    let log = EventLog::open_on(Arc::new(storage.clone()), LogConfig::default()).unwrap();
    let mut state = State::new();
    let mut read = Vec::new();
    let walked = log
        .replay(&mut state, hook, &mut |position| read.push(position))
        .unwrap();
    (state, walked, read)
}

fn replay(storage: &MemStorage, hook: &mut (dyn ReplayHook + Send)) -> (State, Walked) {
    let (state, walked, _) = replay_read(storage, hook);
    (state, walked)
}

#[test]
fn a_hook_sees_the_state_before_and_after_each_event_and_a_break_applies_nothing() {
    // Guards against a hook shown the state after its event, or an event
    // applied once the hook has ended the replay, within a batch or past
    // its end.
    let storage = log_of(800);
    let mut seen = Seen::default();
    let (state, walked, read) = replay_read(&storage, &mut seen);
    let events = walked.last_seq;
    assert_eq!(read.len() as u64, events, "every record's place is told");
    let places = read
        .iter()
        .map(|position| (position.segment, position.offset));
    assert!(places.is_sorted(), "in the order the records lie");
    assert!(events > 2048, "{events} events span batches");
    assert_eq!((walked.events, state.last_seq()), (events, events));
    let before: Vec<(u64, u64)> = (1..=events).map(|seq| (seq, seq - 1)).collect();
    let after: Vec<(u64, u64)> = (1..=events).map(|seq| (seq, seq)).collect();
    assert_eq!((seen.before, seen.after), (before, after));
    assert!(walked.torn_tail.is_none());

    for stop_at in [2, 2049, events] {
        let mut stopped = Seen {
            stop_at: Some(stop_at),
            ..Seen::default()
        };
        let (state, walked) = replay(&storage, &mut stopped);
        assert_eq!(
            state.last_seq(),
            stop_at - 1,
            "the event ended at is not applied"
        );
        assert_eq!((walked.events, walked.last_seq), (stop_at, stop_at));
        let applied_last = stopped.after.last().map(|&(seq, _)| seq);
        assert_eq!(applied_last, Some(stop_at - 1));
    }
}

#[test]
fn each_event_comes_with_the_head_a_plain_read_reports_through_it() {
    let storage = log_of(800);
    let log = EventLog::open_on(Arc::new(storage.clone()), LogConfig::default()).unwrap();
    let mut events = log.events_from(1).unwrap();
    let mut read = Vec::new();
    while events.next_event().unwrap().is_some() {
        read.push(events.last_head());
    }
    let mut seen = Seen::default();
    let (_, walked) = replay(&storage, &mut seen);

    assert_eq!(seen.heads, read);
    assert!(read.iter().any(Option::is_some), "the log's batches end");
    assert_eq!(walked.head, events.head());
}

#[test]
fn a_hook_that_only_applies_is_told_of_no_divergence() {
    let storage = log_of(2);
    // A second claim of withdrawal "w" under another key: a decision the
    // code would not make.
    let f = Fixture::new();
    let claim = EventKind::Claimed {
        key: "req-x".parse().unwrap(),
        request: f.withdrawal(),
        worker: None,
    };
    let divergent = forge(&storage, vec![claim.clone(), claim]);

    let mut checked = Seen::default();
    replay(&storage, &mut checked);
    assert_eq!(checked.diverged, [divergent, divergent + 1]);

    let mut applied = Seen {
        apply_only: true,
        ..Seen::default()
    };
    let (state, _) = replay(&storage, &mut applied);
    assert!(applied.diverged.is_empty());
    assert_eq!(state.last_seq(), divergent + 1);
}

/// `storage`'s records as a shared log's scan hands them over, with the
/// heads a read reports, in the order `order` puts them.
fn scan_of(
    storage: &MemStorage,
    order: impl FnOnce(&mut Vec<(u64, Vec<u8>, Option<Head>)>),
) -> impl FnOnce(payonce::HeadVisit<'_>) -> Result<Head, StoreError> {
    let reader = LogReader::open(Arc::new(storage.clone()), LogConfig::default()).unwrap();
    let mut records = reader.records_from(1).unwrap();
    let mut all = Vec::new();
    while let Some(record) = records.next_record().unwrap() {
        let (seq, payload) = (record.seq, record.payload.to_vec());
        all.push((seq, payload, records.last_head()));
    }
    let head = records.head();
    order(&mut all);
    move |visit| {
        for (seq, payload, head) in &all {
            if visit(*seq, payload, *head).is_break() {
                break;
            }
        }
        Ok(head)
    }
}

#[test]
fn a_scan_replays_as_the_file_log_does_and_refuses_an_event_out_of_place() {
    let storage = log_of(800);
    let mut from_file = Seen::default();
    let (file_state, file_walked) = replay(&storage, &mut from_file);

    let mut from_scan = Seen::default();
    let mut state = State::new();
    let walked = replay_scan_with(&mut state, &mut from_scan, scan_of(&storage, |_| {})).unwrap();
    assert_eq!(
        (walked.events, walked.head),
        (file_walked.events, file_walked.head)
    );
    assert_eq!(
        (from_scan.before, from_scan.heads),
        (from_file.before, from_file.heads)
    );
    assert_eq!(state.difference(&file_state), None);

    let swapped = scan_of(&storage, |all| all.swap(2100, 2101));
    let mut state = State::new();
    let error = replay_scan_with(&mut state, &mut Seen::default(), swapped).unwrap_err();
    assert!(
        matches!(
            &error,
            LedgerError::Store(StoreError::Damaged { seq: 2101, .. })
        ),
        "{error}"
    );
    assert_eq!(
        state.last_seq(),
        2100,
        "every event before the one out of place"
    );
}

#[test]
fn damage_past_the_end_a_hook_asks_for_is_not_the_replays_error() {
    // Guards against the reading side, ahead of the applying one, making
    // damage it met after the hook's end the outcome of the replay.
    let storage = log_of(800);
    let segment = "00000000000000000001.log";
    let mut bytes = storage.file(segment).unwrap();
    let at = crate::records_end(Arc::new(storage.clone())) * 3 / 4;
    bytes[at] ^= 0xff;
    storage.put_file(segment, &bytes);
    let log = EventLog::open_on(Arc::new(storage.clone()), LogConfig::default()).unwrap();

    let mut whole = State::new();
    let damaged = log.replay(&mut whole, &mut Seen::default(), &mut |_| {});
    assert!(damaged.is_err(), "the damage is met reading to the end");
    assert!(whole.last_seq() > 2, "the events before it are applied");

    let mut stopped = Seen {
        stop_at: Some(2),
        ..Seen::default()
    };
    let (state, walked) = replay(&storage, &mut stopped);
    assert_eq!((state.last_seq(), walked.last_seq), (1, 2));
}
