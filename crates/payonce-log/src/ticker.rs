//! The checkpoint thread: writes a checkpoint of the durable head every
//! `checkpoint_interval` while the head moves, and whenever the writer
//! counts `checkpoint_records` more durable records, so checkpoints stay
//! off the threads that append. A log without the interval has no thread.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::error::LogError;

/// What the checkpoint thread drives: the log's writer.
pub(crate) trait Checkpoints: Send + Sync + 'static {
    /// Where the writer signals the thread.
    fn signal(&self) -> &Signal;

    /// Writes a checkpoint of the durable head, unless the log is poisoned.
    fn checkpoint_now(&self) -> Result<(), LogError>;
}

/// What the writer tells its checkpoint thread.
#[derive(Debug, Default)]
pub(crate) struct Signal {
    state: Mutex<TickState>,
    wake: Condvar,
}

#[derive(Debug, Default)]
struct TickState {
    /// A thread is listening.
    running: bool,
    /// Enough records are durable for a checkpoint now.
    due: bool,
    /// The log is closing.
    stop: bool,
}

impl Signal {
    fn lock(&self) -> MutexGuard<'_, TickState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Asks the thread for a checkpoint now; `false` if there is none, and
    /// the caller writes it.
    pub(crate) fn nudge(&self) -> bool {
        let mut state = self.lock();
        if !state.running {
            return false;
        }
        state.due = true;
        self.wake.notify_one();
        true
    }
}

/// The running checkpoint thread of a log.
pub(crate) struct Ticker {
    writer: Arc<dyn Checkpoints>,
    handle: JoinHandle<()>,
}

impl std::fmt::Debug for Ticker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticker").finish_non_exhaustive()
    }
}

impl Ticker {
    /// Starts the thread; `None` (with a warning) if it cannot start, and
    /// then the writer checkpoints on its own count.
    pub(crate) fn start(writer: Arc<dyn Checkpoints>, interval: Duration) -> Option<Ticker> {
        writer.signal().lock().running = true;
        let thread_writer = Arc::clone(&writer);
        let spawned = thread::Builder::new()
            .name("payonce-log-checkpoint".to_owned())
            .spawn(move || run(&*thread_writer, interval));
        match spawned {
            Ok(handle) => Some(Ticker { writer, handle }),
            Err(error) => {
                writer.signal().lock().running = false;
                tracing::warn!(%error, "could not start the checkpoint thread; checkpoints follow the record count only");
                None
            }
        }
    }

    /// Stops the thread and waits for it.
    pub(crate) fn stop(self) {
        let signal = self.writer.signal();
        {
            let mut state = signal.lock();
            state.stop = true;
            state.running = false;
        }
        signal.wake.notify_all();
        if self.handle.join().is_err() {
            tracing::error!("the checkpoint thread panicked");
        }
    }
}

/// The thread's loop: wait for the interval or a nudge, then checkpoint.
fn run(writer: &dyn Checkpoints, interval: Duration) {
    let signal = writer.signal();
    loop {
        {
            let mut state = signal.lock();
            loop {
                if state.stop {
                    return;
                }
                if state.due {
                    state.due = false;
                    break;
                }
                let (woken, waited) = signal
                    .wake
                    .wait_timeout(state, interval)
                    .unwrap_or_else(PoisonError::into_inner);
                state = woken;
                if waited.timed_out() {
                    break;
                }
            }
        }
        if let Err(error) = writer.checkpoint_now() {
            tracing::error!(error = %error, "writing a checkpoint failed; the log is poisoned until reopened");
        }
    }
}
