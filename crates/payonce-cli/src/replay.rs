//! The hook of the CLI's walks to a point, on the library's replay
//! (`LogDir::replay`, which hands every event from the first to a
//! [`ReplayHook`]): `inflight` and the attribution of old events share
//! it. `verify`, the operator exits' check before they write, the
//! incident report and `state --at` bring hooks of their own.

use std::ops::ControlFlow;

use payonce::{Divergence, LedgerError, ReplayHook, Replaying, State};

/// Applies every event before `seq` as written, and ends the replay
/// there.
pub(crate) struct UpTo {
    pub(crate) seq: u64,
}

impl ReplayHook for UpTo {
    fn before(
        &mut self,
        _: &State,
        event: &Replaying<'_>,
        _: Option<Divergence>,
    ) -> Result<ControlFlow<()>, LedgerError> {
        Ok(match event.seq() >= self.seq {
            true => ControlFlow::Break(()),
            false => ControlFlow::Continue(()),
        })
    }

    fn rederives(&self) -> bool {
        false
    }
}
