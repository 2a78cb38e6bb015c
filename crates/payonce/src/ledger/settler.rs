//! The thread that keeps a ledger's runs, off the decisions' path: woken
//! when settled pairs no run holds crowd the memory budget, it writes them
//! into a new run ([`Ledger::flush_settled`]); woken then, or when a
//! snapshot wrote a run, it merges the newest runs while the set wants it
//! ([`Ledger::merge_runs`]). It holds no handle of the ledger while it
//! waits, and stops when the last handle goes.

use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::{self, JoinHandle, ThreadId};

use tracing::warn;

use super::{Inner, Ledger};

/// What the thread is asked to do.
#[derive(Default)]
struct Signal {
    /// Settled pairs no run holds crowd the budget: write them.
    flush: bool,
    /// The runs changed: merge while the set wants it.
    merge: bool,
    closing: bool,
}

/// What one round of the thread does.
#[derive(Debug, Clone, Copy)]
struct Round {
    flush: bool,
}

/// How the thread is woken: shared with it, so that it waits holding no
/// handle of the ledger, which could then never close.
#[derive(Default)]
struct Wakeup {
    signal: Mutex<Signal>,
    wake: Condvar,
}

/// A ledger's settling thread, and how it is woken.
#[derive(Default)]
pub(crate) struct Settler {
    wakeup: Arc<Wakeup>,
    thread: Mutex<Option<(JoinHandle<()>, ThreadId)>>,
}

impl std::fmt::Debug for Settler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settler").finish_non_exhaustive()
    }
}

impl Settler {
    /// Starts the thread for `inner`'s ledger.
    pub(super) fn start(inner: &Arc<Inner>) {
        let weak = Arc::downgrade(inner);
        let settler = &inner.settle.settler;
        let wakeup = Arc::clone(&settler.wakeup);
        let spawned = thread::Builder::new()
            .name("payonce-settle".to_owned())
            .spawn(move || run(&wakeup, &weak));
        match (spawned, settler.thread.lock()) {
            (Ok(handle), Ok(mut thread)) => {
                let id = handle.thread().id();
                *thread = Some((handle, id));
            }
            (Ok(_), Err(_)) => {}
            (Err(error), _) => warn!(
                %error,
                "could not start the thread that keeps the runs; runs are written on the \
                 decisions' threads, and never merged, until reopened"
            ),
        }
    }

    /// Whether the thread runs.
    pub(super) fn is_running(&self) -> bool {
        self.thread.lock().is_ok_and(|thread| thread.is_some())
    }

    /// Asks the thread to write the settled pairs no run holds, and to
    /// merge; it does once, however many ask meanwhile.
    pub(super) fn wake_to_flush(&self) {
        self.wakeup.change(|signal| signal.flush = true);
    }

    /// Asks the thread to merge the runs while the set wants it, and to
    /// write no run of its own: a run was just taken.
    pub(super) fn wake_to_merge(&self) {
        self.wakeup.change(|signal| signal.merge = true);
    }

    /// Stops the thread: what dropping the ledger's last handle does. Its
    /// work under way ends first.
    pub(super) fn stop(&self) {
        self.wakeup.change(|signal| signal.closing = true);
        let thread = self.thread.lock().ok().and_then(|mut thread| thread.take());
        if let Some((handle, id)) = thread
            && id != thread::current().id()
        {
            let _ = handle.join();
        }
    }
}

impl Wakeup {
    fn change(&self, change: impl FnOnce(&mut Signal)) {
        if let Ok(mut signal) = self.signal.lock() {
            change(&mut signal);
            self.wake.notify_one();
        }
    }

    /// Waits to be woken: what to do, `None` once closing (or the lock is
    /// poisoned).
    fn wait(&self) -> Option<Round> {
        let signal = self.signal.lock().ok()?;
        let mut signal = self
            .wake
            .wait_while(signal, |signal| {
                !signal.flush && !signal.merge && !signal.closing
            })
            .ok()?;
        let round = Round {
            flush: signal.flush,
        };
        (signal.flush, signal.merge) = (false, false);
        (!signal.closing).then_some(round)
    }
}

/// The thread: each time it is woken, a run of the settled pairs no run
/// holds if asked, then merges while the runs want them.
fn run(wakeup: &Wakeup, weak: &Weak<Inner>) {
    while let Some(round) = wakeup.wait() {
        let Some(inner) = weak.upgrade() else {
            return;
        };
        Ledger::internal(inner).settle_once(round);
    }
}

impl Ledger {
    /// One round of the settling thread's work: a run of the settled
    /// pairs no run holds when they crowd the budget, then merges.
    fn settle_once(&self, round: Round) {
        if round.flush
            && let Err(error) = self.flush_settled()
        {
            warn!(%error, "could not write a run of settled pairs; they stay in memory");
        }
        loop {
            match self.merge_runs() {
                Ok(Some(_)) => continue,
                Ok(None) => break,
                Err(error) => {
                    warn!(%error, "could not merge runs; they stay as they are");
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_taken_by_a_snapshot_asks_for_merges_and_never_for_a_run_of_its_own() {
        // Guards against a settling thread that, woken because a snapshot
        // took a run, writes the pairs settled meanwhile into a run the
        // budget never asked for.
        let settler = Settler::default();
        settler.wake_to_merge();
        assert!(matches!(
            settler.wakeup.wait(),
            Some(Round { flush: false })
        ));
        settler.wake_to_merge();
        settler.wake_to_flush();
        assert!(matches!(settler.wakeup.wait(), Some(Round { flush: true })));
        settler.wake_to_flush();
        settler.stop();
        assert!(settler.wakeup.wait().is_none());
    }
}
