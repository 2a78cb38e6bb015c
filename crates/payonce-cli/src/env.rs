//! What a command sees of its surroundings (`Env`) and how a command that
//! did its job ended (`Status`): the two things every command shares, kept
//! apart from the dispatch so that commands never import the dispatcher.

use std::io::IsTerminal;

use payonce::{Clock, SystemClock, Timestamp};

use crate::error::{EXIT_OK, EXIT_OVERDUE, EXIT_PROBLEM};

/// What a command may learn from its surroundings, gathered in one place so
/// tests can set it.
#[derive(Debug, Clone)]
pub struct Env {
    /// `$USER`: the operator when `--by` is absent.
    pub user: Option<String>,
    /// Now, for ages of keys in flight.
    pub now: Timestamp,
    /// Whether to draw progress bars on stderr: only when stderr is a
    /// terminal. Never drawn with `--json`.
    pub progress: bool,
}

impl Env {
    /// The process's environment: `$USER`, the system clock, and whether
    /// stderr is a terminal.
    pub fn from_process() -> Env {
        Env {
            user: std::env::var("USER").ok().filter(|user| !user.is_empty()),
            now: SystemClock.now(),
            progress: std::io::stderr().is_terminal(),
        }
    }

    /// An environment for tests and embedding: no `$USER`, no progress bar.
    pub fn quiet(now: Timestamp) -> Env {
        Env {
            user: None,
            now,
            progress: false,
        }
    }

    /// Whether to draw a progress bar for a command printing `json` or not.
    pub(crate) fn progress_for(&self, json: bool) -> bool {
        self.progress && !json
    }
}

/// How a command that did its job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Nothing wrong found: exit code 0.
    Clean,
    /// The command worked and found a problem in the log (a torn tail, a
    /// divergence): exit code 1.
    ProblemFound,
    /// `inflight --older-than` found keys in flight for longer than that:
    /// exit code 3, whether or not the log has a problem too.
    KeysOverdue,
}

impl Status {
    /// The process exit code.
    pub fn code(self) -> i32 {
        match self {
            Status::Clean => EXIT_OK,
            Status::ProblemFound => EXIT_PROBLEM,
            Status::KeysOverdue => EXIT_OVERDUE,
        }
    }

    /// `ProblemFound` if `found`, else `Clean`.
    pub(crate) fn problem_if(found: bool) -> Status {
        if found {
            Status::ProblemFound
        } else {
            Status::Clean
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Guards against a progress bar in JSON output or in a pipe.
    #[test]
    fn progress_bars_only_on_a_terminal_and_never_with_json() {
        let mut env = Env::quiet(Timestamp::default());
        assert!(!env.progress_for(false));
        env.progress = true;
        assert!(env.progress_for(false));
        assert!(!env.progress_for(true));
    }

    // Guards against exit codes that say the wrong thing.
    #[test]
    fn statuses_map_to_exit_codes_0_1_and_3() {
        assert_eq!(Status::Clean.code(), 0);
        assert_eq!(Status::ProblemFound.code(), 1);
        assert_eq!(Status::KeysOverdue.code(), 3);
        assert_eq!(Status::problem_if(true), Status::ProblemFound);
    }
}
