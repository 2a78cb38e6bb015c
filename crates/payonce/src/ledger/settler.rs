//! The threads that keep a ledger's runs, off the decisions' path. One
//! writes settled pairs into a new run ([`Ledger::flush_settled`]) when
//! those no run holds crowd the memory budget; the other merges the newest
//! runs while the set wants it ([`Ledger::merge_runs`]), woken when a run
//! was written. They are apart so that a long merge never keeps a flush
//! waiting: settled pairs would pile up in memory past the budget
//! meanwhile. Neither holds a handle of the ledger while it waits, and
//! both stop when the last handle goes.

use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::{self, JoinHandle, ThreadId};

use tracing::warn;

use super::{Inner, Ledger};

/// What a thread is asked to do.
#[derive(Default)]
struct Signal {
    woken: bool,
    closing: bool,
}

/// How a thread is woken: shared with it, so that it waits holding no
/// handle of the ledger, which could then never close.
#[derive(Default)]
struct Wakeup {
    signal: Mutex<Signal>,
    wake: Condvar,
}

/// One thread, and how it is woken.
#[derive(Default)]
struct Worker {
    wakeup: Arc<Wakeup>,
    thread: Mutex<Option<(JoinHandle<()>, ThreadId)>>,
}

/// A ledger's flushing and merging threads.
#[derive(Default)]
pub(crate) struct Settler {
    flusher: Worker,
    merger: Worker,
}

impl std::fmt::Debug for Settler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settler").finish_non_exhaustive()
    }
}

impl Settler {
    /// Starts both threads for `inner`'s ledger.
    pub(super) fn start(inner: &Arc<Inner>) {
        let settler = &inner.settle.settler;
        settler
            .flusher
            .start(inner, "payonce-settle", Ledger::flush_once);
        settler
            .merger
            .start(inner, "payonce-merge", Ledger::merge_while_wanted);
    }

    /// Whether the flushing thread runs.
    pub(super) fn is_running(&self) -> bool {
        self.flusher.is_running()
    }

    /// Asks for the settled pairs no run holds to be written into a run;
    /// done once, however many ask meanwhile.
    pub(super) fn wake_to_flush(&self) {
        self.flusher.wakeup.change(|signal| signal.woken = true);
    }

    /// Asks for the runs to be merged while the set wants it: a run was
    /// just taken.
    pub(super) fn wake_to_merge(&self) {
        self.merger.wakeup.change(|signal| signal.woken = true);
    }

    /// Stops both threads: what dropping the ledger's last handle does.
    /// Their work under way ends first.
    pub(super) fn stop(&self) {
        self.flusher.stop();
        self.merger.stop();
    }
}

impl Worker {
    /// Starts the thread, named `name`, doing `job` each time it is woken.
    fn start(&self, inner: &Arc<Inner>, name: &str, job: fn(&Ledger)) {
        let weak = Arc::downgrade(inner);
        let wakeup = Arc::clone(&self.wakeup);
        let spawned = thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || run(&wakeup, &weak, job));
        match (spawned, self.thread.lock()) {
            (Ok(handle), Ok(mut thread)) => {
                let id = handle.thread().id();
                *thread = Some((handle, id));
            }
            (Ok(_), Err(_)) => {}
            (Err(error), _) => warn!(
                %error,
                thread = name,
                "could not start a thread that keeps the runs; runs are written on the \
                 decisions' threads, and never merged, until reopened"
            ),
        }
    }

    fn is_running(&self) -> bool {
        self.thread.lock().is_ok_and(|thread| thread.is_some())
    }

    fn stop(&self) {
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

    /// Waits to be woken: `false` once closing (or the lock is poisoned).
    fn wait(&self) -> bool {
        let Ok(signal) = self.signal.lock() else {
            return false;
        };
        let Ok(mut signal) = self
            .wake
            .wait_while(signal, |signal| !signal.woken && !signal.closing)
        else {
            return false;
        };
        signal.woken = false;
        !signal.closing
    }
}

/// A thread: `job` each time it is woken, until the ledger closes.
fn run(wakeup: &Wakeup, weak: &Weak<Inner>, job: fn(&Ledger)) {
    while wakeup.wait() {
        let Some(inner) = weak.upgrade() else {
            return;
        };
        job(&Ledger::internal(inner));
    }
}

impl Ledger {
    /// The flushing thread's work: a run of the settled pairs no run
    /// holds; the merging thread is woken once it is taken.
    fn flush_once(&self) {
        match self.flush_settled() {
            Ok(Some(_)) => self.inner.settle.settler.wake_to_merge(),
            Ok(None) => {}
            Err(error) => {
                warn!(%error, "could not write a run of settled pairs; they stay in memory");
            }
        }
    }

    /// The merging thread's work: merges while the runs want them.
    fn merge_while_wanted(&self) {
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

    fn woken(worker: &Worker) -> bool {
        worker.wakeup.signal.lock().is_ok_and(|signal| signal.woken)
    }

    #[test]
    fn a_run_taken_asks_for_merges_alone_and_a_flush_never_waits_for_a_merge() {
        // Guards against a settling thread that, woken because a snapshot
        // took a run, writes the pairs settled meanwhile into a run the
        // budget never asked for; and against flushes and merges sharing
        // one thread, where a long merge lets settled pairs pile up.
        let settler = Settler::default();
        settler.wake_to_merge();
        assert!(woken(&settler.merger) && !woken(&settler.flusher));
        assert!(settler.merger.wakeup.wait());
        settler.wake_to_flush();
        assert!(woken(&settler.flusher) && !woken(&settler.merger));
        assert!(!Arc::ptr_eq(
            &settler.flusher.wakeup,
            &settler.merger.wakeup
        ));
        settler.stop();
        assert!(!settler.flusher.wakeup.wait());
        assert!(!settler.merger.wakeup.wait());
    }
}
