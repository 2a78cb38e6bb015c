//! The decision step, one for every store: a proposal is decided against
//! the state, and its event goes to a [`Sink`] and is applied; a refusal
//! goes to the sink as its audit event, and is returned. The file ledger's
//! sink is its log; a shared ledger's is the batch it has open. What the
//! proposal names is read back before the step, each store its own way.

use payonce_log::Log;
use tracing::{info, warn};

use super::snapshots::Snapshots;
use super::{Executed, Ledger};
use crate::decide::{self, Answer, Proposal};
use crate::error::LedgerError;
use crate::event::{Event, EventKind, SCHEMA_VERSION};
use crate::state::{State, apply_judged};

/// Where the step writes the events it decides.
pub(super) trait Sink {
    /// Writes `event`, the next one, which `state` judged and does not
    /// hold yet.
    fn write(&mut self, state: &State, event: &Event) -> Result<(), LedgerError>;
}

/// The file ledger's sink: its log, and the snapshots told of each event.
pub(super) struct LogSink<'a> {
    pub(super) log: &'a Log,
    pub(super) snapshots: Option<&'a Snapshots>,
}

impl Sink for LogSink<'_> {
    fn write(&mut self, _: &State, event: &Event) -> Result<(), LedgerError> {
        let seq = self.log.append(&event.encode()?)?;
        assert_eq!(
            seq, event.seq,
            "the log numbered an event differently from the ledger"
        );
        if let Some(snapshots) = self.snapshots {
            snapshots.appended(seq);
        }
        Ok(())
    }
}

impl Ledger {
    /// Decides `proposal` against `state` and writes what it comes to into
    /// `sink`: its event, applied; or, when it is refused, the refusal's
    /// audit event (if refusals are logged), and the refusal as the error.
    /// Called with the state locked, so each event's number is the next.
    pub(super) fn step<M, N>(
        &self,
        state: &mut State,
        sink: &mut impl Sink,
        proposal: &Proposal<M, N>,
    ) -> Result<Executed<M, N>, LedgerError> {
        match proposal.decide(state, self.worker()) {
            Ok(Answer::Append { event, meaning }) => Ok(Executed::Appended {
                seq: self.append(state, sink, event)?,
                meaning,
            }),
            Ok(Answer::Nothing(reason)) => Ok(Executed::Nothing(reason)),
            Err(refusal) => {
                info!(%refusal, "refused");
                if self.inner.config.log_refusals {
                    let kind = decide::refused(state, proposal.command(), &refusal);
                    // The refusal stands whether or not its audit record lands.
                    if let Err(error) = self.append(state, sink, kind) {
                        warn!(%error, %refusal, "could not record a refusal in the log");
                    }
                }
                Err(LedgerError::Refused(refusal))
            }
        }
    }

    /// Writes `kind` into `sink` as the next event, stamped by the clock,
    /// and applies it; returns its number.
    pub(super) fn append(
        &self,
        state: &mut State,
        sink: &mut impl Sink,
        kind: EventKind,
    ) -> Result<u64, LedgerError> {
        let event = Event {
            schema: SCHEMA_VERSION,
            seq: state.last_seq() + 1,
            at: self.inner.config.clock.now(),
            kind,
        };
        sink.write(state, &event)?;
        apply_judged(state, &event);
        Ok(event.seq)
    }
}
