//! The CLI's one replay of a ledger's log: every event from the first,
//! read and verified by [`LogDir::walk_with_heads`], its recorded decision
//! re-derived from the state before it, then applied as written (the log
//! is what happened). `verify`, the operator exits' check before they
//! write and the incident report each replay it with a hook of their own.

use std::ops::ControlFlow;

use payonce::{Divergence, Event, Head, State, apply, rederive};

use crate::error::CliError;
use crate::logdir::{LogDir, Walked};

/// What a replay tells its caller of each event.
pub(crate) trait ReplayHook {
    /// Before `event` is applied to `state`; `divergence` is what the code
    /// decides instead, if it would not make the event's decision.
    /// Breaking ends the replay before the event is applied.
    fn before(
        &mut self,
        state: &State,
        event: &Event,
        divergence: Option<Divergence>,
    ) -> Result<ControlFlow<()>, CliError>;

    /// After `event` is applied; `head` is the head of the last whole batch
    /// read through it.
    fn after(&mut self, state: &State, event: &Event, head: Option<Head>) {
        let _ = (state, event, head);
    }
}

/// A hook that only looks before each event.
impl<F> ReplayHook for F
where
    F: FnMut(&State, &Event, Option<Divergence>) -> Result<ControlFlow<()>, CliError>,
{
    fn before(
        &mut self,
        state: &State,
        event: &Event,
        divergence: Option<Divergence>,
    ) -> Result<ControlFlow<()>, CliError> {
        self(state, event, divergence)
    }
}

/// Replays `log` from its first event into `state`, which starts empty,
/// telling `hook` of each event. On an error (damage included) `state`
/// holds every event applied before it.
pub(crate) fn replay(
    log: &LogDir,
    state: &mut State,
    hook: &mut dyn ReplayHook,
) -> Result<Walked, CliError> {
    assert_eq!(state.last_seq(), 0, "a replay starts from the empty state");
    log.walk_with_heads(1, &mut |event, _, head| {
        let divergence = rederive(state, event);
        if hook.before(state, event, divergence)?.is_break() {
            return Ok(ControlFlow::Break(()));
        }
        apply(state, event);
        hook.after(state, event, head);
        Ok(ControlFlow::Continue(()))
    })
}

#[cfg(test)]
mod tests {
    use payonce::{Ledger, NewWithdrawal};

    use super::*;
    use crate::logdir::open_log;

    /// What a hook saw: the state's last seq before and after each event.
    #[derive(Default)]
    struct Seen {
        before: Vec<(u64, u64)>,
        after: Vec<(u64, u64)>,
        stop_at: Option<u64>,
    }

    impl ReplayHook for Seen {
        fn before(
            &mut self,
            state: &State,
            event: &Event,
            divergence: Option<Divergence>,
        ) -> Result<ControlFlow<()>, CliError> {
            assert!(divergence.is_none(), "a ledger's own log diverges nowhere");
            self.before.push((event.seq, state.last_seq()));
            Ok(match self.stop_at == Some(event.seq) {
                true => ControlFlow::Break(()),
                false => ControlFlow::Continue(()),
            })
        }

        fn after(&mut self, state: &State, event: &Event, _: Option<Head>) {
            self.after.push((event.seq, state.last_seq()));
        }
    }

    // Guards against a hook shown the state after its event, or an event
    // applied once the hook has broken off.
    #[test]
    fn a_hook_sees_the_state_before_and_after_each_event_and_a_break_applies_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::init(dir.path()).unwrap();
        for _ in 0..3 {
            ledger
                .create(NewWithdrawal {
                    amount: "5".parse().unwrap(),
                    currency: "USDC".parse().unwrap(),
                    destination: "0xabc".parse().unwrap(),
                    requested_by: "alice".parse().unwrap(),
                })
                .unwrap();
        }
        drop(ledger);
        let log = open_log(dir.path(), false).unwrap();
        let mut state = State::new();
        let mut seen = Seen::default();
        let walked = replay(&log, &mut state, &mut seen).unwrap();
        let events = walked.last_seq;
        assert!(events >= 3, "{events}");
        let before: Vec<(u64, u64)> = (1..=events).map(|seq| (seq, seq - 1)).collect();
        let after: Vec<(u64, u64)> = (1..=events).map(|seq| (seq, seq)).collect();
        assert_eq!((seen.before, seen.after), (before, after));
        assert_eq!(state.last_seq(), events);

        let mut state = State::new();
        let mut stopped = Seen {
            stop_at: Some(2),
            ..Seen::default()
        };
        replay(&log, &mut state, &mut stopped).unwrap();
        assert_eq!(stopped.before, [(1, 0), (2, 1)]);
        assert_eq!(stopped.after, [(1, 1)]);
        assert_eq!(
            state.last_seq(),
            1,
            "the event the hook broke at is not applied"
        );
    }
}
