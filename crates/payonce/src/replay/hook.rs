//! What a replay tells its caller of each event: one hook for every
//! replay, the ledger's own (an opening refuses a divergence, a
//! verification notes each) and an auditor's (`payonce verify`, an
//! operator's check before writing, the incident report, `state --at`).

use std::ops::ControlFlow;

use payonce_log::Head;

use crate::error::{Divergence, LedgerError};
use crate::event::{Event, EventView};
use crate::state::State;
use crate::time::Timestamp;

/// What a replay tells its caller of each event, in log order, on the
/// thread that applies it.
pub trait ReplayHook {
    /// Before `event` is applied to `state`, the state just before it;
    /// `divergence` is what the code decides instead, if it would not
    /// make the event's decision (always `None` when
    /// [`ReplayHook::rederives`] is `false`). `Break` ends the replay
    /// before the event is applied; `Err` stops it with that error.
    fn before(
        &mut self,
        state: &State,
        event: &Replaying<'_>,
        divergence: Option<Divergence>,
    ) -> Result<ControlFlow<()>, LedgerError>;

    /// After `event` is applied: `state` holds it.
    fn after(&mut self, state: &State, event: &Replaying<'_>) {
        let _ = (state, event);
    }

    /// Whether each recorded decision is re-derived before it is applied
    /// (the default), or the events only applied as written: for a walk
    /// to a point, which trusts the log a verification vouched for.
    fn rederives(&self) -> bool {
        true
    }
}

/// A hook lent: the replay tells the lender.
impl<H: ReplayHook + ?Sized> ReplayHook for &mut H {
    fn before(
        &mut self,
        state: &State,
        event: &Replaying<'_>,
        divergence: Option<Divergence>,
    ) -> Result<ControlFlow<()>, LedgerError> {
        (**self).before(state, event, divergence)
    }

    fn after(&mut self, state: &State, event: &Replaying<'_>) {
        (**self).after(state, event);
    }

    fn rederives(&self) -> bool {
        (**self).rederives()
    }
}

/// An event as a replay hands it to a [`ReplayHook`]: read in place from
/// the replay's batch; [`Replaying::to_event`] makes it whole.
#[derive(Debug)]
pub struct Replaying<'a> {
    pub(super) view: &'a EventView<'a>,
    pub(super) head: Option<Head>,
}

impl Replaying<'_> {
    /// Its sequence number.
    pub fn seq(&self) -> u64 {
        self.view.seq
    }

    /// When it was decided.
    pub fn at(&self) -> Timestamp {
        self.view.at
    }

    /// A short name for its kind ([`crate::EventKind::name`]).
    pub fn kind_name(&self) -> &'static str {
        self.view.kind.name()
    }

    /// The event, whole.
    pub fn to_event(&self) -> Event {
        Event {
            schema: self.view.schema,
            seq: self.view.seq,
            at: self.view.at,
            kind: self.view.kind.to_value(),
        }
    }

    /// The head of the last whole batch of the log read through this
    /// event (it included, if it ends its batch): `None` before the first
    /// batch ends, and for a replay that does not follow the heads.
    pub fn head(&self) -> Option<Head> {
        self.head
    }
}

/// Stops at the first divergence, with it as the error
/// ([`LedgerError::Divergence`]): how an opening replays, and an
/// operator's check before writing.
#[derive(Debug, Clone, Copy, Default)]
pub struct StopAtDivergence;

impl ReplayHook for StopAtDivergence {
    fn before(
        &mut self,
        _: &State,
        _: &Replaying<'_>,
        divergence: Option<Divergence>,
    ) -> Result<ControlFlow<()>, LedgerError> {
        match divergence {
            Some(divergence) => Err(LedgerError::Divergence(Box::new(divergence))),
            None => Ok(ControlFlow::Continue(())),
        }
    }
}

/// Verifying: every divergence is noted, and the log replayed as written.
impl ReplayHook for Vec<Divergence> {
    fn before(
        &mut self,
        _: &State,
        _: &Replaying<'_>,
        divergence: Option<Divergence>,
    ) -> Result<ControlFlow<()>, LedgerError> {
        self.extend(divergence);
        Ok(ControlFlow::Continue(()))
    }
}
