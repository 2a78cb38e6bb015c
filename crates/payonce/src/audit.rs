//! Read-only access for auditors: verify a whole log, or read its events
//! from any point. Never writes and never takes the writer lock, so it is
//! safe beside a running service and on a copy of a production directory.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;

use payonce_log::{FsStorage, Head, LogConfig, LogReader, Position, Records, Storage, TornTail};
use payonce_model::{Currency, WithdrawalId};
use rust_decimal::Decimal;

use crate::error::{Divergence, LedgerError, StoreError};
use crate::event::{Event, EventKind};
use crate::replay::{
    ReplayHook, Replaying, Visit, Walked, decode_event, replay_records, replay_scan,
};
use crate::state::State;

/// What [`verify`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verification {
    /// Events replayed.
    pub events: u64,
    /// Segment files read.
    pub segments: u64,
    /// Request keys with a record at the end.
    pub keys: usize,
    /// Keys with an unknown outcome at the end.
    pub in_flight: usize,
    /// Funds held per currency at the end.
    pub held: BTreeMap<Currency, Decimal>,
    /// Refusals recorded.
    pub refusals: u64,
    /// Recorded decisions the code would not make again, in log order.
    pub divergences: Vec<Divergence>,
    /// Damage at the end of the log that looks like a cut-short write (or a
    /// write in progress). Reported, never repaired here.
    pub torn_tail: Option<TornTail>,
    /// The state the replay ended in.
    pub state: State,
}

impl Verification {
    /// Whether the log holds no problem: no divergence and no torn tail.
    pub fn is_clean(&self) -> bool {
        self.divergences.is_empty() && self.torn_tail.is_none()
    }
}

/// Verifies the ledger in `dir`: every checksum and chain link, and every
/// recorded decision re-derived from the state before it. Divergences are
/// collected, not fatal; damage that is not a torn tail, or a record that is
/// not an event, stops the verification with an error naming its place.
pub fn verify(dir: impl AsRef<Path>) -> Result<Verification, LedgerError> {
    verify_on(Arc::new(FsStorage::new(dir.as_ref())), LogConfig::default())
}

/// [`verify`] on any storage.
pub fn verify_on(
    storage: Arc<dyn Storage>,
    config: LogConfig,
) -> Result<Verification, LedgerError> {
    verify_at(storage, config, &[], |_| {})
}

/// [`verify_on`], handing `visit` the state just after each event of
/// `seqs` (ascending) as the replay passes it: how a snapshot taken at a
/// seq is compared with the state the log rebuilds there.
pub fn verify_at(
    storage: Arc<dyn Storage>,
    config: LogConfig,
    seqs: &[u64],
    visit: impl FnMut(&State) + Send,
) -> Result<Verification, LedgerError> {
    assert!(seqs.is_sorted(), "states are visited in log order");
    let reader = LogReader::open(storage, config)?;
    let mut state = State::new();
    let mut at = AtSeqs {
        divergences: Vec::new(),
        wanted: seqs.iter().copied().peekable(),
        visit,
    };
    let walked = replay_records(&reader, &mut state, &mut at, &mut |_| {})?;
    Ok(Verification {
        events: walked.events,
        segments: walked.segments,
        keys: state.key_count(),
        in_flight: state.in_flight().len(),
        held: state.held_totals(),
        refusals: state.refusal_count(),
        divergences: at.divergences,
        torn_tail: walked.torn_tail,
        state,
    })
}

/// [`verify_at`]'s hook: every divergence noted, the log replayed as
/// written, and `visit` handed the state just after each wanted seq.
struct AtSeqs<I: Iterator<Item = u64>, F> {
    divergences: Vec<Divergence>,
    wanted: std::iter::Peekable<I>,
    visit: F,
}

impl<I: Iterator<Item = u64>, F: FnMut(&State)> ReplayHook for AtSeqs<I, F> {
    fn before(
        &mut self,
        state: &State,
        event: &Replaying<'_>,
        divergence: Option<Divergence>,
    ) -> Result<ControlFlow<()>, LedgerError> {
        self.divergences.before(state, event, divergence)
    }

    fn after(&mut self, state: &State, event: &Replaying<'_>) {
        if self.wanted.next_if_eq(&event.seq()).is_some() {
            (self.visit)(state);
            while self.wanted.next_if_eq(&event.seq()).is_some() {}
        }
    }
}

/// [`verify`] for a log that hands its events over in one scan from the
/// first (a shared log's read view, as `payonce_postgres::verify` reads
/// it): every recorded decision re-derived from the state before it, the
/// scan decoding on this thread while another applies. Divergences are
/// collected; an event that does not decode or does not follow, and any
/// error of the scan, stop it.
pub fn verify_scan(
    scan: impl FnOnce(Visit<'_>) -> Result<(), StoreError>,
) -> Result<Verification, LedgerError> {
    let (state, divergences) = replay_scan(State::new(), Vec::new(), scan)?;
    Ok(Verification {
        events: state.last_seq(),
        segments: 0,
        keys: state.key_count(),
        in_flight: state.in_flight().len(),
        held: state.held_totals(),
        refusals: state.refusal_count(),
        divergences,
        torn_tail: None,
        state,
    })
}

/// The first event schema whose events about a key alone name the
/// withdrawal the key held. Events of older schemas are the only ones
/// attributed through the state before them ([`needs_state`]).
pub const SCHEMA_NAMING_HELD: u16 = 2;

/// Whether only the state just before `event` says which withdrawal it is
/// about: an event about a key alone, of a schema too old to name the
/// withdrawal the key held ([`withdrawal_of`] answers from that state).
/// Every other event names it, or is about none.
pub fn needs_state(event: &Event) -> bool {
    event.schema < SCHEMA_NAMING_HELD
        && event.kind.withdrawal().is_none()
        && event.kind.key().is_some()
}

/// The withdrawal `kind` is about, as `state`, the state just before the
/// event, knows it: the one the event names, or, for an event of schema 1
/// about a key alone (which did not name the withdrawal), the one its key
/// held.
pub fn withdrawal_of(state: &State, kind: &EventKind) -> Option<WithdrawalId> {
    if let Some(withdrawal) = kind.withdrawal() {
        return Some(withdrawal.clone());
    }
    let key_only = matches!(
        kind,
        EventKind::SendRejected { .. }
            | EventKind::SendFailed { .. }
            | EventKind::Released { .. }
            | EventKind::Refused { .. }
    );
    key_only
        .then(|| state.record(kind.key()?).map(|record| record.withdrawal()))
        .flatten()
}

/// The events of a ledger's log, read-only.
#[derive(Debug, Clone)]
pub struct EventLog {
    reader: LogReader,
}

/// Events in log order from some sequence number, each verified as read.
#[derive(Debug)]
pub struct Events {
    records: Records,
}

impl EventLog {
    /// Opens the log in `dir` read-only. A directory that is not a payonce
    /// log is an error naming it.
    pub fn open(dir: impl AsRef<Path>) -> Result<EventLog, LedgerError> {
        EventLog::open_on(Arc::new(FsStorage::new(dir.as_ref())), LogConfig::default())
    }

    /// [`EventLog::open`] on any storage.
    pub fn open_on(storage: Arc<dyn Storage>, config: LogConfig) -> Result<EventLog, LedgerError> {
        Ok(EventLog {
            reader: LogReader::open(storage, config)?,
        })
    }

    /// Requires every read from the first event to pass `head`, expected by
    /// an auditor: such a read refuses a log that ends before it or holds
    /// another batch there, which any edit, removal, insertion or
    /// reordering of an event up to it causes, checksums recomputed or not.
    pub fn require(&mut self, head: Head) {
        self.reader.require(head);
    }

    /// Events from `seq` on.
    pub fn events_from(&self, seq: u64) -> Result<Events, LedgerError> {
        Ok(Events {
            records: self.reader.records_from(seq)?,
        })
    }

    /// Replays every event from the first into `state`, which starts
    /// empty, telling `hook` of each: each recorded decision re-derived
    /// from the state before it (unless the hook only applies), in the
    /// batches an opening replays in (read on this thread, applied on a
    /// second, as an opening does), each event handed
    /// over with the head read through it, until the end or until the
    /// hook ends it. A head [`EventLog::require`]s is checked on the way.
    /// On an error (damage included) `state` holds every event before it.
    /// `read` is told where each record lies as it is read, ahead of its
    /// event's turn: for a progress bar.
    pub fn replay(
        &self,
        state: &mut State,
        hook: &mut (dyn ReplayHook + Send),
        read: &mut dyn FnMut(Position),
    ) -> Result<Walked, LedgerError> {
        replay_records(&self.reader, state, hook, read)
    }

    /// The one event `seq` at `position` (as an earlier read reported it),
    /// read and checksum-verified without scanning.
    pub fn event_at(&self, seq: u64, position: Position) -> Result<Event, LedgerError> {
        let payload = self.reader.read_at(seq, position)?;
        decode_event(seq, &payload)
    }
}

impl Events {
    /// The next event and where it is; `None` at the end of the log.
    pub fn next_event(&mut self) -> Result<Option<(Event, Position)>, LedgerError> {
        match self.records.next_record()? {
            Some(record) => Ok(Some((
                decode_event(record.seq, record.payload)?,
                record.position,
            ))),
            None => Ok(None),
        }
    }

    /// A torn tail met at the end of the log, once the events run out.
    pub fn torn_tail(&self) -> Option<TornTail> {
        self.records.torn_tail()
    }

    /// The log's head once the events run out, for a read from the first
    /// event: the seq and chain digest of its last whole batch.
    pub fn head(&self) -> Head {
        self.records.head()
    }

    /// The head of the last whole batch read so far, as the events are
    /// read: `None` before the first batch ends
    /// ([`payonce_log::Records::last_head`]).
    pub fn last_head(&self) -> Option<Head> {
        self.records.last_head()
    }
}
