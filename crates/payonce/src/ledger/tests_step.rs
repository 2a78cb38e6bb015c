//! The one decision step, against a sink that keeps what it is given: the
//! event a proposal comes to, or the refusal of the proposal's own command.

use payonce_model::{Actor, Amount, Currency, Destination, Reason, RequestKey};

use super::Ledger;
use super::step::Sink;
use crate::command::FailureCause;
use crate::decide::proposal;
use crate::error::LedgerError;
use crate::event::{Event, EventKind};
use crate::state::State;

/// A sink that keeps every event, and what the state's last event was
/// when each was written (it is applied after).
#[derive(Default)]
struct Kept(Vec<(u64, Event)>);

impl Sink for Kept {
    fn write(&mut self, state: &State, event: &Event) -> Result<(), LedgerError> {
        self.0.push((state.last_seq(), event.clone()));
        Ok(())
    }
}

fn ledger() -> (tempfile::TempDir, Ledger) {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
    let ledger = Ledger::init(dir.path()).unwrap_or_else(|error| panic!("{error}"));
    (dir, ledger)
}

#[test]
fn an_accepted_proposal_is_written_to_the_sink_then_applied() {
    let (_dir, ledger) = ledger();
    let mut round = ledger
        .lock_state()
        .unwrap_or_else(|error| panic!("{error}"));
    let before = round.state.last_seq();
    let create = proposal::create(
        Amount::parse("10").unwrap_or_else(|error| panic!("{error}")),
        Currency::new("USD").unwrap_or_else(|error| panic!("{error}")),
        Destination::new("acct-1").unwrap_or_else(|error| panic!("{error}")),
        Actor::operator("ops").unwrap_or_else(|error| panic!("{error}")),
    );
    let mut kept = Kept::default();
    let executed = ledger.step(&mut round.state, &mut kept, &create);
    let Ok(super::Executed::Appended { seq, meaning }) = executed else {
        panic!("a creation is never refused");
    };
    assert_eq!(seq, before + 1);
    assert_eq!(round.state.last_seq(), seq, "the event is applied");
    assert!(round.state.was_created(meaning.id()));
    let [(written_after, event)] = kept.0.as_slice() else {
        panic!("one event is written: {:?}", kept.0);
    };
    assert_eq!((*written_after, event.seq), (before, seq));
    assert!(matches!(&event.kind, EventKind::Created { withdrawal } if *withdrawal == meaning));
}

#[test]
fn a_refused_proposal_writes_the_refusal_of_its_own_command() {
    let (_dir, ledger) = ledger();
    let mut round = ledger
        .lock_state()
        .unwrap_or_else(|error| panic!("{error}"));
    let before = round.state.last_seq();
    let key = RequestKey::new("never-claimed").unwrap_or_else(|error| panic!("{error}"));
    let error = Reason::lossy("the rail timed out");
    let complete = proposal::complete_failed(key, error, FailureCause::Error);
    let mut kept = Kept::default();
    let executed = ledger.step(&mut round.state, &mut kept, &complete);
    let Err(LedgerError::Refused(refusal)) = executed else {
        panic!("a completion of a key never claimed is refused");
    };
    let [(_, event)] = kept.0.as_slice() else {
        panic!("the refusal is written: {:?}", kept.0);
    };
    match &event.kind {
        EventKind::Refused {
            command,
            refusal: recorded,
            ..
        } => {
            assert_eq!(command, complete.command());
            assert_eq!(*recorded, refusal);
        }
        other => panic!("a refusal is recorded, not {other:?}"),
    }
    assert_eq!(round.state.last_seq(), before + 1);
}
