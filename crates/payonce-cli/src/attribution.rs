//! Which withdrawal an event is about, as the ledger itself knows it.
//!
//! Since schema 2 every event names it: `send_rejected`, `send_failed` and
//! `released` name the withdrawal their key held, and a refusal the one
//! the refused command's key held, so [`EventKind::withdrawal`] answers.
//! Events of schema 1, found only in logs written by earlier builds, named
//! only the key; for those the library answers ([`payonce::withdrawal_of`])
//! from the state just before the event, which [`Attributor`] replays
//! beside the events with [`payonce::apply`]. The CLI never works out for
//! itself which withdrawal a key holds: `apply` is the only code that
//! knows, and a second copy of its rules could drift from it.
//!
//! [`EventKind::withdrawal`]: payonce::EventKind::withdrawal

use payonce::{Event, SCHEMA_NAMING_HELD, State, apply, needs_state, withdrawal_of};
use payonce_model::WithdrawalId;

use crate::error::CliError;
use crate::logdir::LogDir;

/// An event and the withdrawal it is about.
#[derive(Debug, Clone)]
pub(crate) struct Attributed {
    pub(crate) event: Event,
    pub(crate) withdrawal: Option<WithdrawalId>,
}

/// Attributes the events of a log to withdrawals, fed every event in log
/// order from some sequence number on.
#[derive(Debug)]
pub(crate) struct Attributor {
    /// The state just before the next event, while one is kept: from the
    /// first event when feeding starts there, else from the first event
    /// that [`needs_state`], replayed from the start of the log then.
    state: Option<State>,
}

impl Attributor {
    /// An attributor to be fed the events from `first_seq` on. From the
    /// start of the log it keeps the state from the first event, so a scan
    /// of an old log replays it once; from anywhere else, it builds one only
    /// if an event needs it.
    pub(crate) fn starting_at(first_seq: u64) -> Attributor {
        Attributor {
            state: (first_seq <= 1).then(State::new),
        }
    }

    /// The withdrawal `event`, the next event of `log`, is about.
    pub(crate) fn attribute(
        &mut self,
        log: &LogDir,
        event: &Event,
    ) -> Result<Option<WithdrawalId>, CliError> {
        if !needs_state(event) {
            if event.schema >= SCHEMA_NAMING_HELD {
                // The ledger appends only its own schema, so a log's events
                // of schema 1 all come before its first of schema 2: no
                // later event needs the state. Were one to, it is replayed
                // again.
                self.state = None;
            } else if let Some(state) = &mut self.state {
                apply(state, event);
            }
            return Ok(event.kind.withdrawal().cloned());
        }
        let state = match &mut self.state {
            Some(state) => state,
            None => self.state.insert(log.state_before(event.seq)?),
        };
        assert_eq!(
            state.last_seq() + 1,
            event.seq,
            "the attributor is fed every event, in log order"
        );
        let withdrawal = withdrawal_of(state, &event.kind);
        apply(state, event);
        Ok(withdrawal)
    }
}
