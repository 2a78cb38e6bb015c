//! Comparing two states by what they answer, and naming the first answer
//! that differs: how a snapshot is audited against the state a replay
//! rebuilds at its seq (`payonce verify --snapshots`), and what makes two
//! states equal.

use std::fmt;

use super::{KeyRecord, State, Withdrawal};

/// The first answer two states give differently: what was asked, and each
/// state's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateDifference {
    /// What differs: `"refusals"`, `"key k-1: outcome"`, `"withdrawal w-1:
    /// holder"`, ...
    pub what: String,
    /// The first state's answer.
    pub left: String,
    /// The second state's answer.
    pub right: String,
}

impl fmt::Display for StateDifference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} against {}", self.what, self.left, self.right)
    }
}

/// Returns, from the enclosing function, the first of the answers given
/// (`what => this state's, the other's`) whose two sides differ; what
/// differs is named and printed only then, so comparing equal states
/// formats nothing.
macro_rules! first_difference {
    ($($what:expr => $left:expr, $right:expr;)*) => {
        $({
            let (left, right) = ($left, $right);
            if left != right {
                return Some(StateDifference {
                    what: $what,
                    left: format!("{left:?}"),
                    right: format!("{right:?}"),
                });
            }
        })*
    };
}

/// What reading a state whole gave, for a difference: readable, or why not.
fn read_whole(whole: Result<State, crate::snapshot_format::SnapshotError>) -> String {
    match whole {
        Ok(_) => "readable".to_owned(),
        Err(error) => format!("unreadable: {error}"),
    }
}

impl State {
    /// The first answer this state and `other` give differently, `None` if
    /// they answer everything alike: the counters and totals first, then
    /// every record of this state (its withdrawal, claim, outcome, error,
    /// running send), then every withdrawal (fingerprint, minted here,
    /// funds, holder).
    pub fn difference(&self, other: &State) -> Option<StateDifference> {
        if self.settled.is_some() || other.settled.is_some() {
            return match (self.whole(), other.whole()) {
                (Ok(left), Ok(right)) => left.difference(&right),
                (left, right) => Some(StateDifference {
                    what: "settled pairs set apart".to_owned(),
                    left: read_whole(left),
                    right: read_whole(right),
                }),
            };
        }
        first_difference! {
            "last seq".to_owned() => self.last_seq, other.last_seq;
            "accepts foreign ids".to_owned() => self.accept_foreign_ids, other.accept_foreign_ids;
            "epoch".to_owned() => self.epoch, other.epoch;
            "refusals".to_owned() => self.refusals, other.refusals;
            "live sessions".to_owned() => &self.sessions.live, &other.sessions.live;
            "held totals".to_owned() => self.held_totals(), other.held_totals();
            "captured totals".to_owned() => self.captured_totals(), other.captured_totals();
            "keys".to_owned() => self.keys.len(), other.keys.len();
            "withdrawals".to_owned() => self.withdrawals.len(), other.withdrawals.len();
            "records".to_owned() => self.records().count(), other.records().count();
        }
        let records = self.keys.in_use().filter_map(|slot| self.record_at(slot));
        for mine in records {
            if let Some(difference) = record_difference(mine, other.record(mine.key_str())) {
                return Some(difference);
            }
        }
        self.withdrawals.in_use().find_map(|slot| {
            let mine = self.withdrawal_at(slot);
            withdrawal_difference(mine, other.withdrawal(mine.id_str()))
        })
    }
}

fn record_difference(
    mine: KeyRecord<'_>,
    theirs: Option<KeyRecord<'_>>,
) -> Option<StateDifference> {
    let key = mine.key_str();
    let Some(theirs) = theirs else {
        return Some(StateDifference {
            what: format!("key {key}"),
            left: "a record".to_owned(),
            right: "none".to_owned(),
        });
    };
    let what = |field: &str| format!("key {key}: {field}");
    first_difference! {
        what("withdrawal") => mine.withdrawal.id_str(), theirs.withdrawal.id_str();
        what("claimed seq") => mine.entry.claimed_seq, theirs.entry.claimed_seq;
        what("claimed at") => mine.entry.claimed_at, theirs.entry.claimed_at;
        what("send running") => mine.entry.send_running, theirs.entry.send_running;
        what("send worker") => mine.send_worker(), theirs.send_worker();
        what("outcome") => mine.progress(), theirs.progress();
        what("last error") => mine.last_error(), theirs.last_error();
    }
    None
}

fn withdrawal_difference(
    mine: Withdrawal<'_>,
    theirs: Option<Withdrawal<'_>>,
) -> Option<StateDifference> {
    let id = mine.id_str();
    let Some(theirs) = theirs else {
        return Some(StateDifference {
            what: format!("withdrawal {id}"),
            left: "known".to_owned(),
            right: "unknown".to_owned(),
        });
    };
    let what = |field: &str| format!("withdrawal {id}: {field}");
    fn holder<'a>(withdrawal: Withdrawal<'a>) -> Option<&'a str> {
        withdrawal.holder().map(|record| record.key_str())
    }
    first_difference! {
        what("fingerprint") => mine.fingerprint(), theirs.fingerprint();
        what("minted here") => mine.entry.created, theirs.entry.created;
        what("funds") => mine.entry.funds, theirs.entry.funds;
        what("holder") => holder(mine), holder(theirs);
    }
    None
}
