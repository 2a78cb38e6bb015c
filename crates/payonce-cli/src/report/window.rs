//! What a report is asked for: the window's bounds and the keys and
//! withdrawals it follows, read from the command line before anything is
//! read, and checked against the log once it has been.

use payonce::{Event, Timestamp};
use payonce_model::{RequestKey, WithdrawalId};

use crate::audit::{Point, parse_point};
use crate::cli::ReportArgs;
use crate::error::CliError;
use payonce::Subject;

/// One end of the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Bound {
    /// The log's own end (its first event, or its last).
    Open,
    /// A sequence number, included.
    Seq(u64),
    /// An RFC 3339 time, included.
    Time(Timestamp),
}

/// The window and the subjects a report is asked for.
#[derive(Debug, Clone)]
pub(super) struct Ask {
    pub(super) from: Bound,
    pub(super) to: Bound,
    /// Empty: every event.
    pub(super) subjects: Vec<Subject>,
}

fn bound(argument: &'static str, text: Option<&str>) -> Result<Bound, CliError> {
    Ok(match parse_point(argument, text)? {
        Point::End => Bound::Open,
        Point::Seq(seq) => Bound::Seq(seq),
        Point::Time(time) => Bound::Time(time),
    })
}

impl Ask {
    /// Reads the command line: bounds as `state --at` reads a point, keys
    /// and withdrawals through the model's rules. A start after the end is
    /// refused before the log is read.
    pub(super) fn parse(args: &ReportArgs) -> Result<Ask, CliError> {
        let from = bound("--from", args.from.as_deref())?;
        let to = bound("--to", args.to.as_deref())?;
        let reversed = match (from, to) {
            (Bound::Seq(from), Bound::Seq(to)) => from > to,
            (Bound::Time(from), Bound::Time(to)) => from > to,
            _ => false,
        };
        if reversed {
            return Err(CliError::Usage {
                message: "--from is after --to: the window holds nothing".to_owned(),
            });
        }
        let mut subjects = Vec::new();
        for key in &args.keys {
            let key = RequestKey::new(key.as_str()).map_err(|error| CliError::InvalidArgument {
                argument: "--key",
                value: key.clone(),
                error,
            })?;
            subjects.push(Subject::Key(key));
        }
        for id in &args.withdrawals {
            let id = WithdrawalId::new(id.as_str()).map_err(|error| CliError::InvalidArgument {
                argument: "--withdrawal",
                value: id.clone(),
                error,
            })?;
            subjects.push(Subject::Withdrawal(id));
        }
        Ok(Ask { from, to, subjects })
    }

    /// Whether `event` is at or after the window's start.
    pub(super) fn opened_by(&self, event: &Event) -> bool {
        match self.from {
            Bound::Open => true,
            Bound::Seq(seq) => event.seq >= seq,
            Bound::Time(time) => event.at >= time,
        }
    }

    /// Whether `event` is past the window's end: the window closes at the
    /// first such event, as `state --at` stops.
    pub(super) fn closed_by(&self, event: &Event) -> bool {
        match self.to {
            Bound::Open => false,
            Bound::Seq(seq) => event.seq > seq,
            Bound::Time(time) => event.at > time,
        }
    }

    /// Whether an event attributed to `withdrawal` is one the report
    /// follows.
    pub(super) fn follows(&self, event: &Event, withdrawal: Option<&WithdrawalId>) -> bool {
        self.subjects.is_empty()
            || self
                .subjects
                .iter()
                .any(|subject| subject.touched_by(&event.kind, withdrawal))
    }

    /// Refuses a window outside the log, whose first and last events are
    /// `first` and `last`: a sequence number past its end, a start after
    /// its last event, an end before its first.
    pub(super) fn check_within(
        &self,
        first: (u64, Timestamp),
        last: (u64, Timestamp),
    ) -> Result<(), CliError> {
        for (argument, bound) in [("--from", self.from), ("--to", self.to)] {
            let outside = match bound {
                Bound::Seq(seq) if seq > last.0 => {
                    return Err(CliError::PointPastEnd {
                        argument,
                        seq,
                        last_seq: last.0,
                    });
                }
                Bound::Time(time) if argument == "--from" => time > last.1,
                Bound::Time(time) => time < first.1,
                _ => false,
            };
            if let (true, Bound::Time(time)) = (outside, bound) {
                return Err(CliError::OutsideLog {
                    argument,
                    asked: time.to_string(),
                    first: (first.0, first.1.to_string()),
                    last: (last.0, last.1.to_string()),
                });
            }
        }
        Ok(())
    }

    /// The window in words, as asked.
    pub(super) fn words(&self) -> String {
        let end = |bound: Bound, open: &str| match bound {
            Bound::Open => open.to_owned(),
            Bound::Seq(seq) => format!("seq {seq}"),
            Bound::Time(time) => time.to_string(),
        };
        format!(
            "from {} to {}",
            end(self.from, "the first event"),
            end(self.to, "the end of the log")
        )
    }
}
