//! The state's layout under what only unusual logs do: slots reused,
//! text compacted, records whose withdrawal was forgotten.

use payonce_model::{Note, Reference};

use super::layout::GARBAGE_MIN;
use super::*;
use crate::event::{Event, EventKind, SCHEMA_VERSION};
use crate::snapshot_format::SnapshotFile;
use crate::snapshot_format::error::SnapshotError;
use crate::snapshot_format::reader::BodyBytes;

/// Applies events made by `kinds`, numbering them after the last.
pub(super) fn run(state: &mut State, kinds: impl IntoIterator<Item = EventKind>) {
    for kind in kinds {
        let seq = state.last_seq() + 1;
        let at = Timestamp::from_unix_nanos(seq * 1_000);
        apply(
            state,
            &Event {
                schema: SCHEMA_VERSION,
                seq,
                at,
                kind,
            },
        );
    }
}

pub(super) fn withdrawal(id: &str) -> WithdrawalRequest {
    WithdrawalRequest::new(
        WithdrawalId::new(id).unwrap_or_else(|e| panic!("{e}")),
        "12.50".parse().unwrap_or_else(|e| panic!("{e}")),
        Currency::new("USDC").unwrap_or_else(|e| panic!("{e}")),
        Destination::new(format!("dest-of-{id}")).unwrap_or_else(|e| panic!("{e}")),
        Actor::new("alice").unwrap_or_else(|e| panic!("{e}")),
    )
}

pub(super) fn key(text: &str) -> RequestKey {
    RequestKey::new(text).unwrap_or_else(|e| panic!("{e}"))
}

pub(super) fn sent(request: &WithdrawalRequest, reference: &str) -> WithdrawalRequest {
    let reference = Reference::new(reference).unwrap_or_else(|e| panic!("{e}"));
    request
        .approve()
        .and_then(|r| r.start_sending())
        .and_then(|r| r.mark_sent(reference))
        .unwrap_or_else(|e| panic!("{e}"))
}

pub(super) fn created(withdrawal: &WithdrawalRequest) -> EventKind {
    EventKind::Created {
        withdrawal: withdrawal.clone(),
    }
}

/// A state where withdrawals w-1 and w-2 were created.
fn two_created() -> (State, WithdrawalRequest, WithdrawalRequest) {
    let (w1, w2) = (withdrawal("w-1"), withdrawal("w-2"));
    let mut state = State::new();
    run(&mut state, [created(&w1), created(&w2)]);
    (state, w1, w2)
}

pub(super) fn claimed(key_text: &str, request: &WithdrawalRequest) -> EventKind {
    EventKind::Claimed {
        key: key(key_text),
        request: request.clone(),
        worker: None,
    }
}

fn released(key_text: &str) -> EventKind {
    EventKind::Released {
        key: key(key_text),
        withdrawal: None,
        note: Note::new("nothing was sent").unwrap_or_else(|e| panic!("{e}")),
        by: Actor::new("ops").unwrap_or_else(|e| panic!("{e}")),
    }
}

#[test]
fn a_released_key_slot_taken_by_another_key_is_not_the_old_withdrawals_holder() {
    let (mut state, w1, w2) = two_created();
    run(
        &mut state,
        [claimed("k-1", &w1), released("k-1"), claimed("k-2", &w2)],
    );
    assert_eq!(state.keys.entries.len(), 1, "k-2 reuses the slot k-1 left");
    assert_eq!(state.claimed_by("w-1"), None);
    assert_eq!(state.held("w-1"), None);
    assert_eq!(state.claimed_by("w-2"), Some(key("k-2")));
    assert!(state.record("k-1").is_none());
    assert!(state.is_sending("k-2"));
}

#[test]
fn a_foreign_withdrawal_released_leaves_no_slot_behind() {
    let foreign = withdrawal("elsewhere-1");
    let mut state = State::new();
    run(
        &mut state,
        [
            EventKind::Opened {
                accept_foreign_ids: true,
                epoch: None,
            },
            claimed("k-1", &foreign),
            released("k-1"),
        ],
    );
    assert!(state.withdrawal("elsewhere-1").is_none());
    assert_eq!(state.fingerprint("elsewhere-1"), None);
    assert_eq!(state.withdrawals.free, [0]);
    assert_eq!(state.texts.garbage, state.texts.used);
}

#[test]
fn released_text_is_compacted_away_and_every_answer_stays() {
    let mut state = State::new();
    run(
        &mut state,
        [EventKind::Opened {
            accept_foreign_ids: true,
            epoch: None,
        }],
    );
    // Keys that stay, with outcomes, errors and holds of every kind.
    let kept: Vec<WithdrawalRequest> = (0..50).map(|n| withdrawal(&format!("kept-{n}"))).collect();
    for (n, request) in kept.iter().enumerate() {
        let key_text = format!("kept-key-{n}");
        run(&mut state, [claimed(&key_text, request)]);
        let next = match n % 3 {
            0 => EventKind::Completed {
                key: key(&key_text),
                outcome: sent(request, &format!("ref-{n}")),
            },
            1 => EventKind::SendFailed {
                key: key(&key_text),
                withdrawal: None,
                error: Reason::new("timed out").unwrap_or_else(|e| panic!("{e}")),
                cause: crate::command::FailureCause::Error,
            },
            _ => EventKind::SendRejected {
                key: key(&key_text),
                withdrawal: None,
                reason: Reason::new("no funds").unwrap_or_else(|e| panic!("{e}")),
            },
        };
        run(&mut state, [next]);
    }
    // Each claim released frees about 240 bytes of text: 10,000 free
    // more than twice the compaction threshold.
    let mut largest = 0;
    for n in 0..10_000 {
        let request = withdrawal(&format!("gone-{n}-{}", "x".repeat(100)));
        let key_text = format!("gone-key-{n}");
        run(
            &mut state,
            [claimed(&key_text, &request), released(&key_text)],
        );
        largest = largest.max(state.texts.used);
    }
    assert!(
        largest < GARBAGE_MIN * 3 / 2,
        "the buffer grew to {largest} bytes while holding about {} bytes of live text",
        state.texts.used - state.texts.garbage
    );
    let uncompacted = state.clone();
    state.compact();
    assert_eq!(state.texts.garbage, 0);
    assert_eq!(state, uncompacted);
    for (n, request) in kept.iter().enumerate() {
        let record = state
            .record(&format!("kept-key-{n}"))
            .unwrap_or_else(|| panic!("kept-key-{n} lost"));
        assert!(record.matches(request));
        match n % 3 {
            0 => assert_eq!(record.outcome(), Some(sent(request, &format!("ref-{n}")))),
            1 => assert_eq!(record.last_error().as_deref(), Some("timed out")),
            _ => assert_eq!(
                record.last_error().as_deref(),
                Some("rejected by the rail: no funds")
            ),
        }
        assert_eq!(state.held(request.id()).is_some(), n % 3 == 1);
    }
}

#[test]
fn states_are_equal_by_their_answers_not_their_layout() {
    let (w1, w2) = (withdrawal("w-1"), withdrawal("w-2"));
    let events = [
        created(&w1),
        created(&w2),
        claimed("k-1", &w1),
        claimed("k-2", &w2),
    ];
    let (mut one, mut two) = (State::new(), State::new());
    run(&mut one, events.clone());
    run(&mut two, events);
    // Different hash keys, same beliefs.
    assert_eq!(one, two);
    run(
        &mut one,
        [EventKind::Completed {
            key: key("k-1"),
            outcome: sent(&w1, "ref-1"),
        }],
    );
    run(
        &mut two,
        [EventKind::Completed {
            key: key("k-1"),
            outcome: sent(&w1, "ref-other"),
        }],
    );
    assert_ne!(one, two, "the outcomes' references differ");
}

fn opened(accept_foreign_ids: bool) -> EventKind {
    EventKind::Opened {
        accept_foreign_ids,
        epoch: None,
    }
}

/// A state accepting foreign ids, and two foreign withdrawals.
fn two_foreign() -> (State, WithdrawalRequest, WithdrawalRequest) {
    let mut state = State::new();
    run(&mut state, [opened(true)]);
    (state, withdrawal("f-0"), withdrawal("f-1"))
}

#[test]
fn a_record_whose_foreign_withdrawal_was_forgotten_is_hidden_until_the_id_returns() {
    // Two keys on one foreign withdrawal (a divergence `verify` applies):
    // the holder's release forgets the withdrawal while k-0 names it.
    let (mut state, f0, f1) = two_foreign();
    run(
        &mut state,
        [
            claimed("k-0", &f0),
            claimed("k-1", &f0),
            released("k-1"),
            claimed("k-2", &f1),
        ],
    );
    assert!(state.record("k-0").is_none(), "its withdrawal is forgotten");
    assert_eq!(state.key_count(), 2, "k-0 keeps its place");
    assert_eq!(state.claimed_by("f-1"), Some(key("k-2")));
    assert!(
        state
            .in_flight()
            .iter()
            .all(|entry| entry.key.as_str() == "k-2")
    );
    // The forgotten slot is not reused while k-0 names it, and its text
    // survives compaction.
    state.compact();
    assert!(state.record("k-0").is_none());
    assert_eq!(state.in_flight().len(), 1);
    // The id comes back: k-0's record names it again, by id.
    run(&mut state, [claimed("k-3", &f0)]);
    let record = state.record("k-0").unwrap_or_else(|| panic!("k-0 hidden"));
    assert_eq!(record.withdrawal().as_str(), "f-0");
    assert_eq!(state.claimed_by("f-0"), Some(key("k-3")));
    // Once nothing names the old slot, it is freed.
    run(&mut state, [released("k-0")]);
    assert_eq!(state.withdrawals.free.len(), 1);
}

#[test]
fn a_key_claimed_twice_keeps_its_running_send_and_frees_its_first_withdrawal() {
    let (mut state, w1, w2) = two_created();
    run(
        &mut state,
        [
            claimed("k-1", &w1),
            EventKind::Recorded {
                key: key("k-1"),
                request: w2.clone(),
            },
        ],
    );
    assert!(state.is_sending("k-1"), "a recorded request ends no send");
    assert_eq!(state.claimed_by("w-2"), Some(key("k-1")));
    // Its first withdrawal is no longer claimed by a key whose record
    // names another.
    assert_eq!(state.claimed_by("w-1"), None);
    run(&mut state, [released("k-1"), claimed("k-2", &w2)]);
    assert_eq!(state.claimed_by("w-1"), None);
    assert_eq!(state.claimed_by("w-2"), Some(key("k-2")));
}

#[test]
fn an_outcome_for_another_withdrawal_ends_that_withdrawals_hold() {
    let (mut state, f0, f1) = two_foreign();
    run(
        &mut state,
        [
            claimed("k-0", &f0),
            claimed("k-1", &f1),
            EventKind::Completed {
                key: key("k-0"),
                outcome: sent(&f1, "ref-1"),
            },
        ],
    );
    assert!(state.held("f-1").is_none(), "the outcome's withdrawal");
    assert!(state.held("f-0").is_some());
}

#[test]
fn an_open_ends_every_running_send_however_many_came_and_went() {
    let requests: Vec<WithdrawalRequest> =
        (0..300).map(|n| withdrawal(&format!("w-{n}"))).collect();
    let mut state = State::new();
    run(&mut state, [opened(true)]);
    for (n, request) in requests.iter().enumerate() {
        run(&mut state, [claimed(&format!("k-{n}"), request)]);
        if n % 4 != 0 {
            run(
                &mut state,
                [EventKind::Completed {
                    key: key(&format!("k-{n}")),
                    outcome: sent(request, &format!("ref-{n}")),
                }],
            );
        }
    }
    assert_eq!(state.sending, 75);
    assert!(state.running.len() <= 2 * 75 + 64, "pruned as it grew");
    assert!(state.is_sending("k-0") && !state.is_sending("k-1"));
    run(&mut state, [opened(true)]);
    assert_eq!(state.sending, 0);
    assert!(state.running.is_empty());
    assert!((0..300).all(|n| !state.is_sending(&format!("k-{n}"))));
    assert!(state.in_flight().iter().all(|entry| !entry.send_running));
}

#[test]
fn a_bumped_outcome_comes_back_whole_after_compaction() {
    let request = withdrawal("w-1");
    let bumped = sent(&request, "ref-a")
        .bump(Reference::new("ref-b").unwrap_or_else(|e| panic!("{e}")))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut state = State::new();
    run(
        &mut state,
        [
            created(&request),
            claimed("k-1", &request),
            EventKind::Completed {
                key: key("k-1"),
                outcome: bumped.clone(),
            },
        ],
    );
    let before = state.clone();
    state.compact();
    assert_eq!(state, before);
    let record = state.record("k-1").unwrap_or_else(|| panic!("k-1 lost"));
    assert_eq!(record.outcome(), Some(bumped.clone()));
    assert!(record.has_outcome(&bumped));
    assert!(!record.has_outcome(&sent(&request, "ref-b")));
}

fn worker(name: &str) -> payonce_model::WorkerName {
    payonce_model::WorkerName::new(name).unwrap_or_else(|e| panic!("{e}"))
}

pub(super) fn claimed_by(key_text: &str, request: &WithdrawalRequest, by: &str) -> EventKind {
    EventKind::Claimed {
        key: key(key_text),
        request: request.clone(),
        worker: Some(worker(by)),
    }
}

fn started(name: &str, epoch: u64) -> EventKind {
    EventKind::Started {
        worker: worker(name),
        epoch,
    }
}

#[test]
fn a_workers_start_ends_its_own_earlier_sends_and_no_other_workers() {
    // Guards against a restarted worker ending the sends another live worker is running.
    let (mut state, w1, w2) = two_created();
    run(
        &mut state,
        [
            started("api-1", 1),
            started("api-2", 2),
            claimed_by("k-1", &w1, "api-1"),
            claimed_by("k-2", &w2, "api-2"),
        ],
    );
    assert!(state.is_sending("k-1") && state.is_sending("k-2"));
    assert_eq!(
        state.record("k-2").and_then(|r| r.send_worker()),
        Some(worker("api-2"))
    );

    run(&mut state, [started("api-1", 3)]);

    assert!(!state.is_sending("k-1"), "api-1's earlier send is over");
    assert!(state.is_sending("k-2"), "api-2 is still running its send");
    assert_eq!(state.session("api-1"), Some(3));
    assert_eq!(state.epoch(), Some(3), "ids minted now carry the new epoch");
    let sessions: Vec<_> = state.sessions().map(|(w, e)| (w.to_string(), e)).collect();
    assert_eq!(sessions, [("api-1".to_owned(), 3), ("api-2".to_owned(), 2)]);
}

#[test]
fn an_ended_session_ends_its_sends_and_an_opening_ends_every_session() {
    // Guards against a dead worker's send blocking its key's release forever, and against a ledger reopened by one process keeping stale sessions.
    let (mut state, w1, w2) = two_created();
    run(
        &mut state,
        [
            started("api-1", 1),
            started("api-2", 2),
            claimed_by("k-1", &w1, "api-1"),
            claimed_by("k-2", &w2, "api-2"),
            EventKind::SessionEnded {
                worker: worker("api-2"),
                note: Note::new("host gone").unwrap_or_else(|e| panic!("{e}")),
                by: Actor::new("ops").unwrap_or_else(|e| panic!("{e}")),
            },
        ],
    );
    assert!(state.is_sending("k-1") && !state.is_sending("k-2"));
    assert_eq!(state.session("api-2"), None);
    let in_flight = state.in_flight();
    assert_eq!(in_flight[0].send_worker, Some(worker("api-1")));
    assert_eq!(in_flight[1].send_worker, None);

    run(&mut state, [opened(false)]);
    assert!(!state.is_sending("k-1"));
    assert_eq!(state.sessions().count(), 0);
}

/// w-1 claimed by k-1 and sent, w-2 claimed by k-2 and in flight, and the
/// body of its snapshot.
fn two_claimed_body() -> (State, Vec<u8>) {
    let (mut state, w1, w2) = two_created();
    run(
        &mut state,
        [
            claimed("k-1", &w1),
            claimed("k-2", &w2),
            EventKind::Completed {
                key: key("k-1"),
                outcome: sent(&w1, "0xfeed"),
            },
        ],
    );
    let body = (state.snapshot_body_in_parts(crate::snapshot_format::KEYS_PART_LEN))
        .unwrap_or_else(|e| panic!("{e}"));
    (state, body)
}

/// Where `text`'s length is in `body`.
pub(super) fn text_at(body: &[u8], text: &str) -> usize {
    let field = [&(text.len() as u16).to_le_bytes()[..], text.as_bytes()].concat();
    body.windows(field.len())
        .position(|window| window == field)
        .unwrap_or_else(|| panic!("{text:?} is in the body"))
}

/// The state `body` holds, read from memory.
pub(super) fn read_body(seq: u64, body: &[u8]) -> Result<State, SnapshotError> {
    State::from_snapshot_body(seq, BodyBytes::Slice(body), false).map(|(state, _, _)| state)
}

/// A body in a file, read a piece at a time.
struct InFile(Vec<u8>);

impl SnapshotFile for InFile {
    fn byte_len(&self) -> u64 {
        self.0.len() as u64
    }

    fn read_at(&self, offset: u64, len: usize, into: &mut Vec<u8>) -> Result<(), SnapshotError> {
        let start = (offset as usize).min(self.0.len());
        into.extend_from_slice(&self.0[start..(start + len).min(self.0.len())]);
        Ok(())
    }
}

/// The state `body` holds, read from a file `piece` bytes at a time, and
/// the checksum taken as it was read.
pub(super) fn read_in_pieces(
    seq: u64,
    body: &[u8],
    piece: usize,
) -> Result<(State, u32), SnapshotError> {
    let file = InFile(body.to_vec());
    let bytes = BodyBytes::File {
        file: &file,
        at: 0,
        len: body.len(),
        piece,
    };
    let (state, crc, _) = State::from_snapshot_body(seq, bytes, true)?;
    Ok((
        state,
        crc.unwrap_or_else(|| panic!("a hashing read returns a checksum")),
    ))
}

/// The field refusing `body`, its offset, what was expected and what
/// was found there.
pub(super) fn refusal(state: &State, body: &[u8]) -> (&'static str, u64, String, String) {
    match read_body(state.last_seq(), body) {
        Err(SnapshotError::Invalid {
            field,
            offset,
            expected,
            found,
        }) => (field, offset, expected, found),
        Err(other) => panic!("refused for another reason: {other}"),
        Ok(_) => panic!("a damaged body was read"),
    }
}

pub(super) fn refused_field(state: &State, body: &[u8]) -> (&'static str, String) {
    let (field, _, _, found) = refusal(state, body);
    (field, found)
}

/// `body` with the `u64` at byte `at` made `value`.
pub(super) fn with_u64(body: &[u8], at: usize, value: u64) -> Vec<u8> {
    let mut changed = body.to_vec();
    changed[at..at + 8].copy_from_slice(&value.to_le_bytes());
    changed
}

#[test]
fn a_body_whose_keys_are_read_beside_its_withdrawals_is_the_state_it_was_taken_of() {
    // Guards against the keys' text, records or holders going astray when
    // the keys section read on its own thread joins the withdrawals.
    let (state, body) = two_claimed_body();
    let read = read_body(state.last_seq(), &body).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(state.difference(&read), None);
    assert_eq!(read.claimed_by("w-2").as_deref(), Some("k-2"));
    assert_eq!(
        read.record("k-1").and_then(|record| record.outcome()),
        Some(sent(&withdrawal("w-1"), "0xfeed"))
    );
}

#[test]
fn a_key_naming_a_withdrawal_another_key_holds_is_refused_naming_its_id() {
    // Guards against the keys' reading, which has no withdrawal text, naming
    // the withdrawal by its number or not at all.
    let (state, mut body) = two_claimed_body();
    let number = |body: &[u8], key: &str| text_at(body, key) + 2 + key.len();
    let (k1, k2) = (number(&body, "k-1"), number(&body, "k-2"));
    let held = body[k1..k1 + 4].to_vec();
    body[k2..k2 + 4].copy_from_slice(&held);
    assert_eq!(
        refused_field(&state, &body),
        ("key withdrawal", "w-1".to_owned())
    );
}

#[test]
fn a_refused_withdrawal_is_named_before_a_refused_key_as_the_body_orders_them() {
    // Guards against the keys' refusal, read at the same time,
    // hiding the first field the body gets wrong.
    let (state, mut body) = two_claimed_body();
    let claimed_seq = text_at(&body, "k-2") + 2 + 3 + 4;
    body[claimed_seq..claimed_seq + 8].copy_from_slice(&0u64.to_le_bytes());
    assert_eq!(refused_field(&state, &body).0, "key claimed_seq");
    let currency = text_at(&body, "dest-of-w-2") + 2 + "dest-of-w-2".len() + 17;
    body[currency..currency + 4].copy_from_slice(&99u32.to_le_bytes());
    assert_eq!(refused_field(&state, &body).0, "withdrawal currency");
}

#[test]
fn a_body_cut_inside_its_withdrawals_is_refused_there() {
    // Guards against a panic when the withdrawals' lengths run past the
    // end of the body, and against the keys being looked for past it.
    let (state, body) = two_claimed_body();
    // Five bytes into w-2's amount, past its texts.
    let cut = text_at(&body, "dest-of-w-2") + 2 + "dest-of-w-2".len() + 5;
    assert_eq!(refused_field(&state, &body[..cut]).0, "keys_at");
    let mut long = body.clone();
    let destination = text_at(&long, "dest-of-w-2");
    long[destination..destination + 2].copy_from_slice(&u16::MAX.to_le_bytes());
    assert_eq!(refused_field(&state, &long).0, "withdrawal destination");
}

/// Where the body says its keys start, and where that field is.
fn keys_at(body: &[u8]) -> (u64, usize) {
    // The field follows the withdrawals' count; the first withdrawal, w-1,
    // follows the field.
    let field = text_at(body, "w-1") - 8;
    let at = u64::from_le_bytes(body[field..field + 8].try_into().unwrap_or_default());
    (at, field)
}

#[test]
fn a_body_whose_keys_are_not_where_it_says_is_refused_for_that() {
    // Guards against the keys being read from a place the withdrawals do
    // not end at, and the refusal of what was found there standing for
    // the body's first wrong field.
    let (state, body) = two_claimed_body();
    let (at, field) = keys_at(&body);
    assert_eq!(at as usize, text_at(&body, "k-1") - 12, "the keys' count");
    let header = crate::snapshot_format::SNAPSHOT_HEADER_LEN as u64;
    for wrong in [at - 1, at + 1, at + 8, body.len() as u64 - 8] {
        let (refused, offset, _, found) = refusal(&state, &with_u64(&body, field, wrong));
        assert_eq!(
            (refused, offset, found),
            ("keys_at", header + field as u64, wrong.to_string()),
            "keys at {wrong}"
        );
    }
    for past in [body.len() as u64 - 7, u64::MAX] {
        let moved = with_u64(&body, field, past);
        assert_eq!(refused_field(&state, &moved), ("keys_at", past.to_string()));
    }
}

#[test]
fn a_body_read_from_a_file_in_pieces_of_any_length_is_the_state_it_was_taken_of() {
    // Guards against a field that straddles two pieces being read wrong,
    // skipped or read twice, against a record half read before a piece
    // ended changing the state, and against a checksum that misses or
    // repeats bytes where the pieces meet or where the keys' reading takes
    // over.
    let (state, body) = two_claimed_body();
    for piece in (1..=64).chain([body.len() - 1, body.len(), 1 << 20]) {
        let (read, crc) = read_in_pieces(state.last_seq(), &body, piece)
            .unwrap_or_else(|e| panic!("pieces of {piece}: {e}"));
        assert_eq!(state.difference(&read), None, "pieces of {piece}");
        assert_eq!(crc, crc32fast::hash(&body), "pieces of {piece}");
    }
}

#[test]
fn a_body_read_from_a_file_in_pieces_is_refused_where_it_is_in_memory() {
    // Guards against an error found in a window being reported at the
    // window's place rather than the body's, or a short window taken for
    // the end of the body.
    let (state, mut body) = two_claimed_body();
    let claimed_seq = text_at(&body, "k-2") + 2 + 3 + 4;
    body[claimed_seq..claimed_seq + 8].copy_from_slice(&0u64.to_le_bytes());
    let cut = text_at(&body, "dest-of-w-2") + 2 + "dest-of-w-2".len() + 5;
    for damaged in [&body[..], &body[..cut]] {
        let in_memory = read_body(state.last_seq(), damaged).map(|_| ());
        for piece in [1, 3, 7, 16] {
            let in_pieces = read_in_pieces(state.last_seq(), damaged, piece).map(|_| ());
            assert_eq!(
                format!("{in_pieces:?}"),
                format!("{in_memory:?}"),
                "pieces of {piece}"
            );
        }
    }
}

#[test]
fn skipping_through_a_body_in_a_file_holds_a_piece_at_a_time_and_hashes_every_byte() {
    // Guards against the checksum of a refused body, taken by skipping
    // to its end, reading all of it into memory at once, or missing
    // bytes where the pieces meet.
    let body: Vec<u8> = (0..10_000u32).map(|n| (n % 251) as u8).collect();
    let file = InFile(body.clone());
    let bytes = BodyBytes::File {
        file: &file,
        at: 0,
        len: body.len(),
        piece: 64,
    };
    let mut reader = crate::snapshot_format::reader::Reader::new(bytes);
    reader.hash_from_here();
    reader.skip_to(body.len()).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        reader.window_capacity() <= 4 * 64,
        "{}",
        reader.window_capacity()
    );
    assert_eq!(reader.hashed().finalize(), crc32fast::hash(&body));
    let whole =
        crate::snapshot_format::reader::Reader::checksum(bytes).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(whole, crc32fast::hash(&body));
}

/// The field and offset (from the snapshot's first byte) a damaged body
/// is refused at.
fn refused_at(state: &State, body: &[u8]) -> (&'static str, u64) {
    let (field, offset, _, _) = refusal(state, body);
    (field, offset)
}

#[test]
fn a_refusal_names_the_offset_where_its_field_starts() {
    // Guards against a refusal checked after its field was read naming the
    // next field's place, or the end of its record.
    let header = crate::snapshot_format::SNAPSHOT_HEADER_LEN as u64;
    let (state, body) = two_claimed_body();
    let mut damaged = body.clone();
    damaged[0] = 2;
    assert_eq!(refused_at(&state, &damaged), ("accept_foreign_ids", header));

    let currency = text_at(&body, "dest-of-w-2") + 2 + "dest-of-w-2".len() + 17;
    let mut damaged = body.clone();
    damaged[currency..currency + 4].copy_from_slice(&99u32.to_le_bytes());
    assert_eq!(
        refused_at(&state, &damaged),
        ("withdrawal currency", header + currency as u64)
    );

    let amount = currency - 17;
    let mut damaged = body.clone();
    damaged[amount + 16] = 200;
    assert_eq!(
        refused_at(&state, &damaged),
        ("withdrawal amount", header + amount as u64)
    );

    let number = |key: &str| text_at(&body, key) + 2 + key.len();
    let mut damaged = body.clone();
    let held = damaged[number("k-1")..number("k-1") + 4].to_vec();
    damaged[number("k-2")..number("k-2") + 4].copy_from_slice(&held);
    assert_eq!(
        refused_at(&state, &damaged),
        ("key withdrawal", header + number("k-2") as u64)
    );
}
