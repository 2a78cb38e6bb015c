//! An auditor's replay of a whole log, from the first event, with a
//! [`ReplayHook`] told of each: the batched replay an opening does,
//! following the log's heads, and ending where the hook asks. A file
//! log's ([`crate::EventLog::replay`]) reads on the caller's thread and
//! applies on a second, as an opening does; a shared log's scan
//! ([`replay_scan_with`]) does both on the caller's.

use payonce_log::{Head, LogReader, Position, TornTail};

use super::scan::{HeadVisit, feed};
use super::{Batch, Full, ReplayHook, replay_on_this_thread, replay_on_two_threads_keeping};
use crate::error::{LedgerError, StoreError};
use crate::state::State;

/// What a replay of a whole log found.
#[derive(Debug, Default, Clone)]
#[non_exhaustive]
pub struct Walked {
    /// Events handed to the hook, the one it ended the replay at included.
    pub events: u64,
    /// The last of them; 0 if none.
    pub last_seq: u64,
    /// Segments read, for a file log.
    pub segments: u64,
    /// A torn tail met at the end; `None` if the hook ended the replay.
    pub torn_tail: Option<TornTail>,
    /// The log's head, for a replay to the end.
    pub head: Head,
}

/// Replays every event `reader` reads, from the first, into `state`,
/// which starts empty, telling `read` where each record lies as it is
/// read: reading and decoding on this thread, applying on another (or
/// on this one if it cannot start), as an opening does. On an error
/// (damage included) `state` holds every event before it.
pub(crate) fn replay_records(
    reader: &LogReader,
    state: &mut State,
    hook: &mut (dyn ReplayHook + Send),
    read: &mut dyn FnMut(Position),
) -> Result<Walked, LedgerError> {
    assert_eq!(state.last_seq(), 0, "a replay starts from the empty state");
    let mut records = reader.records_from(1)?;
    let mut last_read = 0;
    let feed = |batch: &mut Batch, full: Full<'_>| {
        while let Some(record) = records.next_record()? {
            read(record.position);
            last_read = record.seq;
            batch.push(record.seq, record.payload)?;
            if let Some(head) = records.last_head() {
                batch.push_head(head);
            }
            if batch.is_full() && full(batch)?.is_break() {
                break;
            }
        }
        Ok(())
    };
    let (replayed, _, outcome) = replay_on_two_threads_keeping(std::mem::take(state), hook, feed);
    *state = replayed;
    outcome?;
    // The hook ended the replay at an event it was handed and that was
    // not applied: the one after the state's last.
    if state.last_seq() < last_read {
        return Ok(ended_at(state));
    }
    let recovery = records.recovery();
    Ok(Walked {
        segments: recovery.segments,
        torn_tail: recovery.torn_tail,
        head: records.head(),
        ..to_the_end(state)
    })
}

/// What a replay from the first event found when the hook ended it at
/// the event after `state`'s last.
fn ended_at(state: &State) -> Walked {
    let seq = state.last_seq() + 1;
    Walked {
        events: seq,
        last_seq: seq,
        ..Walked::default()
    }
}

/// What a replay from the first event found once it applied every event
/// `state` holds.
fn to_the_end(state: &State) -> Walked {
    Walked {
        events: state.last_seq(),
        last_seq: state.last_seq(),
        ..Walked::default()
    }
}

/// Replays every event `scan` hands over, from the first, into `state`,
/// which starts empty, telling `hook` of each: an auditor's replay of a
/// shared log's read view, where `scan` answers the log's head. An event
/// that does not decode, or does not follow, stops the scan, and is the
/// error reported, before any error of the scan's after it. On an error
/// `state` holds every event before it.
pub fn replay_scan_with(
    state: &mut State,
    hook: &mut dyn ReplayHook,
    scan: impl FnOnce(HeadVisit<'_>) -> Result<Head, StoreError>,
) -> Result<Walked, LedgerError> {
    assert_eq!(state.last_seq(), 0, "a replay starts from the empty state");
    let (mut head, mut last_read) = (Head::default(), 0);
    let scan = |visit: HeadVisit<'_>| {
        head = scan(&mut |seq, payload, head| {
            last_read = seq;
            visit(seq, payload, head)
        })?;
        Ok(())
    };
    replay_on_this_thread(state, hook, feed(0, scan))?;
    // The hook ended the replay at an event it was handed and that was
    // not applied: the one after the state's last.
    if state.last_seq() < last_read {
        return Ok(ended_at(state));
    }
    Ok(Walked {
        head,
        ..to_the_end(state)
    })
}
