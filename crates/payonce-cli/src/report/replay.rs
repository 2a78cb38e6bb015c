//! The one replay a report stands on: every event from the first, each
//! checksum and chain link verified as it is read and every recorded
//! decision re-derived from the state before it (what `verify` does), with
//! the window's events kept, the state at its two edges, the chain heads
//! around it and the funds held after each of its events.

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use payonce::{
    Divergence, Event, Head, InFlight, LedgerError, ReplayHook, Replaying, State, Timestamp,
    needs_state, withdrawal_of,
};
use payonce_model::{Currency, WithdrawalId};
use rust_decimal::Decimal;

use crate::audit::DIVERGENCES_LISTED_MAX;
use crate::error::CliError;
use crate::logdir::LogDir;

use super::REPORT_EVENTS_MAX;
use super::window::Ask;

/// What the ledger held at one edge of the window.
#[derive(Debug, Clone, Default)]
pub(super) struct Edge {
    /// The time of the last event applied.
    pub(super) at: Option<Timestamp>,
    pub(super) held: BTreeMap<Currency, Decimal>,
    pub(super) captured: BTreeMap<Currency, Decimal>,
    pub(super) in_flight: Vec<InFlight>,
    /// Request keys with a record.
    pub(super) keys: usize,
}

impl Edge {
    fn of(state: &State, at: Option<Timestamp>) -> Edge {
        Edge {
            at,
            held: state.held_totals(),
            captured: state.captured_totals(),
            in_flight: state.in_flight(),
            keys: state.key_count(),
        }
    }
}

/// An event of the window that the report shows.
#[derive(Debug, Clone)]
pub(super) struct Shown {
    pub(super) event: Event,
    /// The withdrawal it is about, as `history` attributes it.
    pub(super) withdrawal: Option<WithdrawalId>,
    /// What the code decides instead, if it would not make this decision.
    pub(super) divergence: Option<String>,
}

/// The funds held in one currency after an event of the window changed
/// them.
#[derive(Debug, Clone)]
pub(super) struct HoldStep {
    pub(super) seq: u64,
    pub(super) at: Timestamp,
    pub(super) currency: Currency,
    pub(super) held: Decimal,
}

/// Damage met by the replay: where, in words, and the error it is.
#[derive(Debug)]
pub(super) struct Damage {
    /// The error, which the command ends with once the page is written.
    pub(super) error: CliError,
    /// The first sequence number not shown.
    pub(super) seq: u64,
}

/// Where the replay is relative to the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Before,
    In,
    After,
}

/// What the replay found.
#[derive(Debug, Default)]
pub(super) struct Replayed {
    /// The window's events the report follows, at most
    /// [`REPORT_EVENTS_MAX`].
    pub(super) shown: Vec<Shown>,
    /// How many there were.
    pub(super) shown_count: usize,
    /// Every event of the window, followed or not: its first and last.
    pub(super) window_first: Option<(u64, Timestamp)>,
    pub(super) window_last: Option<(u64, Timestamp)>,
    /// The state before the window's first event, and after its last.
    pub(super) start: Edge,
    pub(super) end: Edge,
    /// The log's first and last events.
    pub(super) log_first: Option<(u64, Timestamp)>,
    pub(super) log_last: Option<(u64, Timestamp)>,
    /// The head of the last batch that ends before the window; `None` when
    /// the window starts with the log.
    pub(super) start_head: Option<Head>,
    /// The head of the first batch that ends at or after the window's last
    /// event: it vouches for every event of the window.
    pub(super) end_head: Option<Head>,
    /// The head of the whole log (before a torn tail or damage).
    pub(super) log_head: Head,
    /// Divergences in the whole log, the first
    /// [`DIVERGENCES_LISTED_MAX`] listed.
    pub(super) divergences: Vec<(u64, String)>,
    pub(super) divergence_count: usize,
    /// The torn tail, in words.
    pub(super) torn_tail: Option<String>,
    pub(super) damage: Option<Damage>,
    /// The held totals after each event of the window that changed them.
    pub(super) holds: Vec<HoldStep>,
    /// Per subject asked for: whether any event of the log is about it.
    pub(super) mentioned: Vec<bool>,
}

/// What the report keeps as the replay walks.
struct Walk<'a> {
    ask: &'a Ask,
    phase: Phase,
    /// The head of the last whole batch read before the current event.
    head: Option<Head>,
    /// The head before that batch's: what a database vouched for before
    /// the batch being read, whose check comes after its events.
    prior_head: Option<Head>,
    /// The last event read.
    last_seq: u64,
    last_at: Option<Timestamp>,
    /// What the event being applied left for after it: its withdrawal,
    /// its divergence in words, and, inside the window, the funds held
    /// before it.
    pending: Option<Pending>,
    found: Replayed,
}

/// What [`Walk::before`] leaves for [`Walk::after`].
struct Pending {
    event: Event,
    withdrawal: Option<WithdrawalId>,
    divergence: Option<String>,
    held_before: Option<BTreeMap<Currency, Decimal>>,
}

impl ReplayHook for Walk<'_> {
    fn before(
        &mut self,
        state: &State,
        replaying: &Replaying<'_>,
        divergence: Option<Divergence>,
    ) -> Result<ControlFlow<()>, LedgerError> {
        let owned = replaying.to_event();
        let event = &owned;
        let withdrawal = match needs_state(event) {
            true => withdrawal_of(state, &event.kind),
            false => event.kind.withdrawal().cloned(),
        };
        let divergence = divergence.map(|divergence| {
            self.found.divergence_count += 1;
            if self.found.divergences.len() < DIVERGENCES_LISTED_MAX {
                self.found
                    .divergences
                    .push((event.seq, divergence.to_string()));
            }
            divergence.to_string()
        });
        for (mentioned, subject) in self.found.mentioned.iter_mut().zip(&self.ask.subjects) {
            *mentioned |= subject.touched_by(&event.kind, withdrawal.as_ref());
        }
        self.found.log_first.get_or_insert((event.seq, event.at));
        self.found.log_last = Some((event.seq, event.at));
        self.last_seq = event.seq;
        self.move_phase(state, event);
        let held_before = (self.phase == Phase::In).then(|| state.held_totals());
        self.pending = Some(Pending {
            event: owned,
            withdrawal,
            divergence,
            held_before,
        });
        Ok(ControlFlow::Continue(()))
    }

    fn after(&mut self, state: &State, replaying: &Replaying<'_>) {
        self.last_at = Some(replaying.at());
        if let Some(Pending {
            event,
            withdrawal,
            divergence,
            held_before: Some(before),
        }) = self.pending.take()
        {
            self.in_window(state, event, withdrawal, divergence, &before);
        }
        self.observe(replaying.head());
    }
}

impl Walk<'_> {
    /// Opens or closes the window at `event`, taking `state`, the state at
    /// the edge crossed before `event` is applied.
    fn move_phase(&mut self, state: &State, event: &Event) {
        if self.phase == Phase::Before && self.ask.opened_by(event) {
            self.phase = Phase::In;
            self.found.start = Edge::of(state, self.last_at);
            self.found.start_head = self.head;
        }
        if self.phase == Phase::In && self.ask.closed_by(event) {
            self.close(state);
        }
    }

    fn close(&mut self, state: &State) {
        self.phase = Phase::After;
        self.found.end = Edge::of(state, self.last_at);
        if self.found.window_last.is_none() {
            // An empty window: the heads around it are one.
            self.found.end_head = self.found.start_head;
        }
    }

    /// Keeps `event`, an event of the window, and the holds it changed
    /// (`state` is the state after it).
    fn in_window(
        &mut self,
        state: &State,
        event: Event,
        withdrawal: Option<WithdrawalId>,
        divergence: Option<String>,
        before: &BTreeMap<Currency, Decimal>,
    ) {
        self.found.window_first.get_or_insert((event.seq, event.at));
        self.found.window_last = Some((event.seq, event.at));
        let after = state.held_totals();
        let currencies = before.keys().chain(after.keys());
        for currency in currencies.collect::<std::collections::BTreeSet<_>>() {
            let held = after.get(currency).copied().unwrap_or_default();
            if before.get(currency).copied().unwrap_or_default() != held {
                self.found.holds.push(HoldStep {
                    seq: event.seq,
                    at: event.at,
                    currency: currency.clone(),
                    held,
                });
            }
        }
        if !self.ask.follows(&event, withdrawal.as_ref()) {
            return;
        }
        self.found.shown_count += 1;
        if self.found.shown.len() < REPORT_EVENTS_MAX {
            self.found.shown.push(Shown {
                event,
                withdrawal,
                divergence,
            });
        }
    }

    /// A head read through the current event: the window's end head is
    /// the first at or after its last event. Inside the window, that is
    /// the head read with the last event so far if that event ends its
    /// batch; once it has closed, the first head read that reaches it.
    fn observe(&mut self, head: Option<Head>) {
        if head != self.head {
            self.prior_head = self.head;
        }
        self.head = head;
        let last = self.found.window_last.map(|(seq, _)| seq);
        let reaches = head.filter(|head| last.is_some_and(|last| head.seq >= last));
        match self.phase {
            Phase::In => self.found.end_head = reaches,
            Phase::After if self.found.end_head.is_none() => self.found.end_head = reaches,
            _ => {}
        }
    }
}

/// Replays the whole log for `ask`. Damage ends the replay: what was read
/// before it is kept (nothing from the damaged place on) and the damage
/// is in [`Replayed::damage`]; any other failure is an error.
pub(super) fn replay(log: &LogDir, ask: &Ask) -> Result<Replayed, CliError> {
    let mut walk = Walk {
        ask,
        phase: Phase::Before,
        head: None,
        prior_head: None,
        last_seq: 0,
        last_at: None,
        pending: None,
        found: Replayed {
            mentioned: vec![false; ask.subjects.len()],
            ..Replayed::default()
        },
    };
    let mut state = State::new();
    match log.replay(&mut state, &mut walk) {
        Ok(walked) => {
            walk.found.torn_tail = walked.torn_tail.as_ref().map(|t| log.describe_torn_tail(t));
            walk.found.log_head = walked.head;
            finish(&mut walk, &state, Some(walked.head));
        }
        Err(error @ CliError::Damaged { .. }) => {
            // A file's records are each verified before they are read, so
            // every event read precedes the damage; a database's batch is
            // checked after its events are read, so only the batches
            // before the last one read are vouched for.
            let first_dropped = match log.is_postgres() {
                false => walk.last_seq + 1,
                true => walk.prior_head.map_or(1, |head| head.seq + 1),
            };
            walk.found.log_head = walk.head.unwrap_or_default();
            cut_at_damage(&mut walk.found, first_dropped);
            walk.found.damage = Some(Damage {
                error,
                seq: first_dropped,
            });
            finish(&mut walk, &state, None);
        }
        Err(error) => return Err(error),
    }
    Ok(walk.found)
}

/// Ends a window still open at the end of the replay, whose state is
/// `state`; `head` is the log's final head, when it was read to its end.
fn finish(walk: &mut Walk<'_>, state: &State, head: Option<Head>) {
    if walk.phase == Phase::Before {
        // The window starts after the last event: the caller refuses it.
        walk.found.start = Edge::of(state, walk.last_at);
        walk.found.start_head = walk.head;
    }
    if walk.phase != Phase::After {
        walk.close(state);
    }
    if walk.found.end_head.is_none() {
        walk.observe(head);
    }
}

/// Drops what the replay read from `first_dropped` on.
fn cut_at_damage(found: &mut Replayed, first_dropped: u64) {
    found.shown.retain(|shown| shown.event.seq < first_dropped);
    found.shown_count = found.shown.len();
    found.holds.retain(|step| step.seq < first_dropped);
    if found
        .window_last
        .is_some_and(|(seq, _)| seq >= first_dropped)
    {
        found.window_last = found.shown.last().map(|s| (s.event.seq, s.event.at));
    }
}
