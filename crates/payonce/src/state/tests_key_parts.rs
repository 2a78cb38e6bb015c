//! A snapshot body whose keys are in several parts, each read as a job of
//! its own: the same state as one part, and the same refusals, in body
//! order, whichever part is read first.

use std::sync::atomic::AtomicU32;

use payonce_model::Reason;
use proptest::prelude::*;

use super::layout::NO_HOLDER;
use super::snapshot_keys::{Body, KEYS_JOB_MIN, KeysHead, PartRead, read_job};
use super::tests::{
    claimed, claimed_by, created, key, read_body, read_in_pieces, refusal, refused_field, run,
    sent, text_at, with_u64, withdrawal,
};
use super::*;
use crate::command::FailureCause;
use crate::snapshot_format::SNAPSHOT_HEADER_LEN;
use crate::snapshot_format::error::SnapshotError;
use crate::snapshot_format::reader::BodyBytes;

/// What becomes of a key's claim.
#[derive(Debug, Clone, Copy)]
pub(super) enum Fate {
    InFlight,
    Sent,
    SendFailed,
    RunningFor,
    Unclaimed,
}

/// Withdrawals w-1 on, each created, and claimed by its key (k-1 on) as
/// `fates` say, in order.
pub(super) fn claimed_as(fates: &[Fate]) -> State {
    let mut state = State::new();
    for (n, &fate) in fates.iter().enumerate() {
        let request = withdrawal(&format!("w-{}", n + 1));
        let key_text = format!("k-{}", n + 1);
        run(&mut state, [created(&request)]);
        let claim = match fate {
            Fate::Unclaimed => continue,
            Fate::RunningFor => claimed_by(&key_text, &request, "api-1"),
            _ => claimed(&key_text, &request),
        };
        run(&mut state, [claim]);
        let ending = match fate {
            Fate::Sent => EventKind::Completed {
                key: key(&key_text),
                outcome: sent(&request, &format!("0xfeed{n}")),
            },
            Fate::SendFailed => EventKind::SendFailed {
                key: key(&key_text),
                withdrawal: None,
                error: Reason::new("rail timed out").unwrap_or_else(|e| panic!("{e}")),
                cause: FailureCause::Error,
            },
            _ => continue,
        };
        run(&mut state, [ending]);
    }
    state
}

/// Six withdrawals, w-1 to w-6, each claimed by its key, k-1 to k-6: k-1
/// sent, k-2 in flight, k-3's send failed, k-4's send running for worker
/// `api-1`, k-5 and k-6 in flight.
fn six_claimed() -> State {
    use Fate::*;
    claimed_as(&[Sent, InFlight, SendFailed, RunningFor, InFlight, InFlight])
}

fn in_parts(state: &State, part_len: u32) -> Vec<u8> {
    let part_len = std::num::NonZeroU32::new(part_len).unwrap_or_else(|| panic!("no part of 0"));
    state
        .snapshot_body_in_parts(part_len)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Where the field of key `key_text`'s withdrawal is in `body`.
fn withdrawal_field(body: &[u8], key_text: &str) -> usize {
    text_at(body, key_text) + 2 + key_text.len()
}

#[test]
fn a_body_in_parts_of_any_length_is_the_state_it_was_taken_of() {
    // Guards against a part's keys, text, send errors or running sends
    // going astray when the parts are joined, against a part read from
    // the wrong place, and against a checksum that misses or repeats the
    // bytes where the parts meet.
    let state = six_claimed();
    assert!(state.is_sending("k-4"));
    for part_len in 1..=7 {
        let body = in_parts(&state, part_len);
        let read = read_body(state.last_seq(), &body)
            .unwrap_or_else(|e| panic!("parts of {part_len}: {e}"));
        assert_eq!(state.difference(&read), None, "parts of {part_len}");
        assert!(read.is_sending("k-4"), "parts of {part_len}");
        for piece in [1, 5, 64] {
            let (read, crc) = read_in_pieces(state.last_seq(), &body, piece)
                .unwrap_or_else(|e| panic!("parts of {part_len}, pieces of {piece}: {e}"));
            assert_eq!(state.difference(&read), None);
            assert_eq!(crc, crc32fast::hash(&body), "parts of {part_len}");
        }
    }
}

#[test]
fn a_part_that_does_not_start_where_the_one_before_ends_is_refused_for_that() {
    // Guards against a part read from wherever the body says, and against
    // its first key's refusal, found at that wrong place, standing for the
    // body's first wrong field.
    let state = six_claimed();
    let body = in_parts(&state, 2);
    // The starts of parts 1 and 2 come just before k-1's record.
    let starts = text_at(&body, "k-1") - 16;
    let third = starts + 8;
    let at = u64::from_le_bytes(body[third..third + 8].try_into().unwrap_or_default());
    assert_eq!(at as usize, text_at(&body, "k-5"));
    let header = SNAPSHOT_HEADER_LEN as u64;
    for wrong in [at - 1, at + 1] {
        assert_eq!(
            refusal(&state, &with_u64(&body, third, wrong)),
            (
                "key part",
                header + third as u64,
                format!("{at}, where part 1 ends"),
                wrong.to_string()
            ),
            "part 2 at {wrong}"
        );
    }
    // A start leaving no room for the part before it, or past the body.
    for wrong in [text_at(&body, "k-1") as u64, u64::MAX] {
        let moved = with_u64(&body, third, wrong);
        assert_eq!(
            refused_field(&state, &moved),
            ("key part", wrong.to_string())
        );
    }
    let mut no_parts = body.clone();
    no_parts[starts - 4..starts].copy_from_slice(&0u32.to_le_bytes());
    assert_eq!(
        refused_field(&state, &no_parts),
        ("key part_len", "0".to_owned())
    );
}

/// `body` with key `later`'s withdrawal number made key `earlier`'s.
fn named_twice(body: &[u8], earlier: &str, later: &str) -> Vec<u8> {
    let mut body = body.to_vec();
    let (from, to) = (
        withdrawal_field(&body, earlier),
        withdrawal_field(&body, later),
    );
    let number = body[from..from + 4].to_vec();
    body[to..to + 4].copy_from_slice(&number);
    body
}

/// The first refusal among the keys of `body`, its parts read in
/// `order`, one after another on this thread.
fn keys_refused_reading(state: &State, body: &[u8], order: &[usize]) -> Option<SnapshotError> {
    let hasher = state.hasher.clone();
    let body = Body {
        bytes: BodyBytes::Slice(body),
        seq: state.last_seq(),
        hasher: &hasher,
    };
    let keys_at = text_at(body_bytes(&body), "k-1") - 12 - 8 * (order.len() - 1);
    let head = KeysHead::read(body, keys_at, false).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(head.parts(), order.len());
    let holders: Vec<AtomicU32> = (0..6).map(|_| AtomicU32::new(NO_HOLDER)).collect();
    let mut parts: Vec<Option<PartRead>> = (0..order.len()).map(|_| None).collect();
    for &part in order {
        parts[part] = Some(read_job(body, &head, part..part + 1, &holders, false));
    }
    let mut parts: Vec<PartRead> = parts.into_iter().flatten().collect();
    head.first_refusal(body, &mut parts)
        .err()
        .map(|refused| refused.named(&state.texts, &state.withdrawals.entries))
}

fn body_bytes<'a>(body: &Body<'a>) -> &'a [u8] {
    match body.bytes {
        BodyBytes::Slice(bytes) => bytes,
        BodyBytes::File { .. } => unreachable!("these bodies are in memory"),
    }
}

#[test]
fn a_withdrawal_two_parts_name_is_refused_at_the_later_key_whichever_part_is_read_first() {
    // Guards against the key found second in time, rather than the later
    // in the body, being refused, and against a refusal with no offset
    // when the part holding the later key was read first.
    let state = six_claimed();
    let body = named_twice(&in_parts(&state, 1), "k-2", "k-5");
    let expected = SnapshotError::Invalid {
        field: "key withdrawal",
        offset: (SNAPSHOT_HEADER_LEN + withdrawal_field(&body, "k-5")) as u64,
        expected: "a withdrawal no other key holds".to_owned(),
        found: "w-2".to_owned(),
    };
    let forward: Vec<usize> = (0..6).collect();
    let backward: Vec<usize> = (0..6).rev().collect();
    for order in [forward, backward, vec![4, 0, 1, 2, 3, 5]] {
        let refused = keys_refused_reading(&state, &body, &order);
        assert_eq!(
            format!("{refused:?}"),
            format!("{:?}", Some(&expected)),
            "{order:?}"
        );
    }
    let refused = read_body(state.last_seq(), &body).err();
    assert_eq!(format!("{refused:?}"), format!("{:?}", Some(&expected)));
}

#[test]
fn of_refusals_in_several_parts_the_first_in_the_body_is_named() {
    // Guards against a refusal met first in time, on another thread, or in
    // a part read first, hiding one earlier in the body.
    let state = six_claimed();
    let body = in_parts(&state, 1);
    // `key_text` names w-1, as k-1 does, and `zeroed`'s claimed_seq is 0.
    let both = |key_text: &str, zeroed: &str| {
        let named = named_twice(&body, "k-1", key_text);
        with_u64(&named, withdrawal_field(&named, zeroed) + 4, 0)
    };
    // The field refusing `body`, read at once and with its parts backward.
    let backward: Vec<usize> = (0..6).rev().collect();
    let refused = |body: &[u8]| {
        [
            read_body(state.last_seq(), body).err(),
            keys_refused_reading(&state, body, &backward),
        ]
        .map(|refused| match refused {
            Some(SnapshotError::Invalid { field, .. }) => field,
            other => panic!("{other:?}"),
        })
    };
    // k-3 names w-1, then k-5's claimed_seq is 0: k-3 is refused.
    assert_eq!(refused(&both("k-3", "k-5")), ["key withdrawal"; 2]);
    // k-2's claimed_seq is 0, then k-6 names w-1: k-2 is refused.
    assert_eq!(refused(&both("k-6", "k-2")), ["key claimed_seq"; 2]);
}

fn fate() -> impl Strategy<Value = Fate> {
    prop_oneof![
        Just(Fate::InFlight),
        Just(Fate::Sent),
        Just(Fate::SendFailed),
        Just(Fate::RunningFor),
        Just(Fate::Unclaimed),
    ]
}

proptest! {
    #[test]
    fn any_state_read_back_from_parts_of_any_length_is_the_state_it_was_taken_of(
        fates in prop::collection::vec(fate(), 0..40),
        part_len in 1u32..12,
        piece in 1usize..300,
    ) {
        let state = claimed_as(&fates);
        let body = in_parts(&state, part_len);
        let read = read_body(state.last_seq(), &body);
        prop_assert!(read.is_ok(), "{read:?}");
        prop_assert_eq!(read.ok().and_then(|read| state.difference(&read)), None);
        let (read, crc) = read_in_pieces(state.last_seq(), &body, piece)
            .unwrap_or_else(|e| panic!("{e}"));
        prop_assert_eq!(state.difference(&read), None);
        prop_assert_eq!(crc, crc32fast::hash(&body));
    }
}

#[test]
fn parts_are_read_in_runs_of_at_least_keys_job_min_keys() {
    // Guards against a body of one-key parts costing a reading, a window
    // and a chunk of text per key, and against a run skipping a part or
    // reading one twice.
    let state = six_claimed();
    let head = |part_len: u32| {
        let body = in_parts(&state, part_len);
        let starts = 8 * (6usize.div_ceil(part_len as usize) - 1);
        let hasher = state.hasher.clone();
        let bytes = Body {
            bytes: BodyBytes::Slice(&body),
            seq: state.last_seq(),
            hasher: &hasher,
        };
        let keys_at = text_at(&body, "k-1") - 12 - starts;
        KeysHead::read(bytes, keys_at, false).unwrap_or_else(|e| panic!("{e}"))
    };
    let whole = |jobs: Vec<std::ops::Range<usize>>| {
        jobs.into_iter()
            .map(|job| (job.start, job.end))
            .collect::<Vec<_>>()
    };
    assert_eq!(whole(head(1).jobs(KEYS_JOB_MIN)), [(0, 6)]);
    assert_eq!(head(1).jobs(4), [0..4, 4..6]);
    assert_eq!(head(1).jobs(1), [0..1, 1..2, 2..3, 3..4, 4..5, 5..6]);
    assert_eq!(head(4).jobs(2), [0..1, 1..2]);
    assert_eq!(whole(head(4).jobs(KEYS_JOB_MIN)), [(0, 2)]);
}

#[test]
fn a_part_misplaced_inside_a_run_or_at_its_start_is_refused_for_that() {
    // Guards against a part after the first of a run being read from
    // where the part before it ended rather than where the body says.
    let state = six_claimed();
    let body = in_parts(&state, 1);
    let starts = text_at(&body, "k-1") - 8 * 5;
    // Runs of two parts in this crate's tests: part 3 (k-4) is second in
    // its run, part 4 (k-5) first in its own.
    for (part, key_text) in [(3, "k-4"), (4, "k-5")] {
        let field = starts + 8 * (part - 1);
        let at = text_at(&body, key_text) as u64;
        assert_eq!(
            refusal(&state, &with_u64(&body, field, at + 1)),
            (
                "key part",
                (SNAPSHOT_HEADER_LEN + field) as u64,
                format!("{at}, where part {} ends", part - 1),
                (at + 1).to_string()
            ),
            "part {part} moved"
        );
    }
}
