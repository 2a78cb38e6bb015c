//! The decisions of a shared ledger's threads, queued for the batch that
//! takes them. One thread at a time runs a batch, and it makes every
//! decision queued for it itself, in the order they came: while the
//! store's lock is held, a batch's decisions follow each other without a
//! hand-over between threads, each of which would wait for the scheduler.
//! Each thread waits for its own answer, handed over once its batch's
//! commit is known, or for its turn to run the next batch.
//!
//! The queue's lock guards nothing that a panic could leave half-changed
//! (a panic while it is held is one inside `VecDeque`), so it is taken
//! even when poisoned: the thread running a batch must always be able to
//! let the next one run.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use crate::error::LedgerError;

/// Where a thread's answer is handed over.
pub(super) type Slot<T> = Arc<Mutex<Option<Result<T, LedgerError>>>>;

/// The decisions `D` waiting for a batch.
pub(super) struct Queue<D> {
    waiting: Mutex<Waiting<D>>,
    /// Signalled when a batch's answers have been handed over and no
    /// thread runs a batch any more.
    answered: Condvar,
}

struct Waiting<D> {
    decisions: VecDeque<(u64, D)>,
    /// The number the next decision queued takes.
    next: u64,
    /// Whether a thread runs a batch.
    running: bool,
}

/// What a thread waiting in the queue does next.
pub(super) enum Turn<'a, T, D> {
    /// Its decision's answer.
    Answered(Result<T, LedgerError>),
    /// Run the next batch: no other thread does until this is dropped.
    Run(Running<'a, D>),
}

/// Held by the thread that runs a batch; dropped, a panic's unwinding
/// included, it lets the next thread run one.
pub(super) struct Running<'a, D>(&'a Queue<D>);

impl<D> Default for Queue<D> {
    fn default() -> Self {
        Queue {
            waiting: Mutex::new(Waiting {
                decisions: VecDeque::new(),
                next: 0,
                running: false,
            }),
            answered: Condvar::new(),
        }
    }
}

impl<D> Queue<D> {
    fn lock(&self) -> MutexGuard<'_, Waiting<D>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `decide`; its number, to take it back with.
    pub(super) fn push(&self, decide: D) -> u64 {
        let mut waiting = self.lock();
        let id = waiting.next;
        waiting.next += 1;
        waiting.decisions.push_back((id, decide));
        id
    }

    /// Waits until `slot` holds this thread's answer, or no thread runs a
    /// batch: then this thread runs the next.
    pub(super) fn wait<T>(&self, slot: &Slot<T>) -> Result<Turn<'_, T, D>, LedgerError> {
        let mut waiting = self.lock();
        loop {
            if let Some(answer) = take(slot)? {
                return Ok(Turn::Answered(answer));
            }
            if !waiting.running {
                waiting.running = true;
                return Ok(Turn::Run(Running(self)));
            }
            waiting = self
                .answered
                .wait(waiting)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// The first decision queued, for the batch being run.
    pub(super) fn next(&self) -> Option<D> {
        self.lock().decisions.pop_front().map(|(_, decide)| decide)
    }

    /// Takes decision `id` back, unless a batch took it already.
    pub(super) fn withdraw(&self, id: u64) {
        self.lock().decisions.retain(|(queued, _)| *queued != id);
    }
}

impl<D> Drop for Running<'_, D> {
    fn drop(&mut self) {
        self.0.lock().running = false;
        self.0.answered.notify_all();
    }
}

/// The answer in `slot`, if it was handed over.
pub(super) fn take<T>(slot: &Slot<T>) -> Result<Option<Result<T, LedgerError>>, LedgerError> {
    Ok(slot.lock().map_err(|_| LedgerError::Poisoned)?.take())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::panic::{AssertUnwindSafe, catch_unwind};
    use std::sync::Arc;
    use std::thread;

    use super::{Queue, Slot, Turn, take};

    fn run<T, D>(turn: Turn<'_, T, D>) -> super::Running<'_, D> {
        match turn {
            Turn::Run(running) => running,
            Turn::Answered(_) => panic!("answered without a batch having run"),
        }
    }

    #[test]
    fn the_thread_running_a_batch_takes_the_decisions_of_those_waiting_and_they_only_wait() {
        let queue: Arc<Queue<u32>> = Arc::default();
        let first: Slot<u32> = Slot::default();
        queue.push(1);
        let running = run(queue.wait(&first).unwrap());
        let second: Slot<u32> = Slot::default();
        let waiter = thread::spawn({
            let (queue, second) = (Arc::clone(&queue), Arc::clone(&second));
            move || {
                queue.push(2);
                match queue.wait(&second).unwrap() {
                    Turn::Answered(answer) => answer.unwrap(),
                    Turn::Run(_) => panic!("ran a batch while another ran"),
                }
            }
        });
        // The batch being run takes the decisions in the order they came,
        // the waiting thread's as soon as it is queued.
        assert_eq!(queue.next(), Some(1));
        let taken = loop {
            if let Some(decision) = queue.next() {
                break decision;
            }
            thread::yield_now();
        };
        assert_eq!(taken, 2);
        *first.lock().unwrap() = Some(Ok(10));
        *second.lock().unwrap() = Some(Ok(20));
        drop(running);
        assert_eq!(waiter.join().unwrap(), 20);
        assert_eq!(take(&first).unwrap().map(Result::unwrap), Some(10));
    }

    #[test]
    fn a_thread_whose_decision_no_batch_took_runs_the_next() {
        let queue: Queue<u32> = Queue::default();
        let (first, second): (Slot<u32>, Slot<u32>) = Default::default();
        queue.push(1);
        let running = run(queue.wait(&first).unwrap());
        queue.push(2);
        assert_eq!(queue.next(), Some(1));
        *first.lock().unwrap() = Some(Ok(10));
        drop(running);
        // The batch took one decision only (it was full, say): the other
        // is still queued, and its thread runs a batch for it.
        let running = run(queue.wait(&second).unwrap());
        assert_eq!(queue.next(), Some(2));
        drop(running);
    }

    #[test]
    fn a_panic_while_a_batch_runs_lets_the_next_thread_run() {
        let queue: Queue<u32> = Queue::default();
        let slot: Slot<u32> = Slot::default();
        queue.push(1);
        let panicked = catch_unwind(AssertUnwindSafe(|| {
            let _running = run(queue.wait(&slot).unwrap());
            panic!("a decision panicked");
        }));
        assert!(panicked.is_err());
        let running = run(queue.wait(&slot).unwrap());
        assert_eq!(queue.next(), Some(1));
        drop(running);
    }

    #[test]
    fn a_withdrawn_decision_is_taken_by_no_batch() {
        let queue: Queue<u32> = Queue::default();
        let first = queue.push(1);
        queue.push(2);
        queue.withdraw(first);
        assert_eq!(queue.next(), Some(2));
        assert_eq!(queue.next(), None);
    }
}
