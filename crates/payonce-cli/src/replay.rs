//! The hook of the CLI's walks to a point, on the library's replay
//! (`LogDir::replay`, which hands every event from the first to a
//! [`ReplayHook`]): `state --at`, `inflight` and the attribution of old
//! events share it. `verify`, the operator exits' check before they
//! write and the incident report bring hooks of their own.

use std::ops::ControlFlow;

use payonce::{Divergence, LedgerError, ReplayHook, Replaying, State, Timestamp};

/// The last event a walk to a point applied.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Applied {
    pub(crate) seq: u64,
    pub(crate) at: Timestamp,
    pub(crate) event: &'static str,
}

/// Applies every event as written until the first that `past` says lies
/// past the point, and ends the replay there; notes the last it applied.
pub(crate) struct Until<F> {
    past: F,
    pub(crate) last: Option<Applied>,
}

impl<F: FnMut(&Replaying<'_>) -> bool> Until<F> {
    pub(crate) fn new(past: F) -> Self {
        Until { past, last: None }
    }
}

impl<F: FnMut(&Replaying<'_>) -> bool> ReplayHook for Until<F> {
    fn before(
        &mut self,
        _: &State,
        event: &Replaying<'_>,
        _: Option<Divergence>,
    ) -> Result<ControlFlow<()>, LedgerError> {
        Ok(match (self.past)(event) {
            true => ControlFlow::Break(()),
            false => ControlFlow::Continue(()),
        })
    }

    fn after(&mut self, _: &State, event: &Replaying<'_>) {
        self.last = Some(Applied {
            seq: event.seq(),
            at: event.at(),
            event: event.kind_name(),
        });
    }

    fn rederives(&self) -> bool {
        false
    }
}
