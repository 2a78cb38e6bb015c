//! Jobs shared out among as many threads as the machine runs at once, each
//! thread taking the next job not yet taken: how a snapshot's sections and
//! parts are read, so that the cores stay busy whatever each job costs.

use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Runs `run` on every job number below `jobs`, on this thread and up to
/// one helper per further core, and answers the results in job order. A
/// helper that cannot be had leaves its jobs to the threads there are; a
/// job that panics panics here, once every thread has stopped.
pub(super) fn run_jobs<T: Send>(jobs: usize, run: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let cores = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
    let next = AtomicUsize::new(0);
    let work = || {
        let mut done = Vec::new();
        loop {
            let job = next.fetch_add(1, Ordering::Relaxed);
            if job >= jobs {
                return done;
            }
            done.push((job, run(job)));
        }
    };
    let mut done = std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..cores.min(jobs))
            .filter_map(|_| {
                std::thread::Builder::new()
                    .name("snapshot-reader".into())
                    .spawn_scoped(scope, work)
                    .ok()
            })
            .collect();
        let mut done = work();
        for helper in helpers {
            match helper.join() {
                Ok(more) => done.extend(more),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        done
    });
    assert_eq!(done.len(), jobs, "every job ran once");
    done.sort_unstable_by_key(|&(job, _)| job);
    done.into_iter().map(|(_, result)| result).collect()
}

/// Runs `first` here and `second` on a thread of its own, or here after
/// `first` if no thread can be had, and answers both.
pub(super) fn both<A, B: Send>(
    first: impl FnOnce() -> A,
    second: impl FnOnce() -> B + Send,
) -> (A, B) {
    let second = Mutex::new(Some(second));
    let run_second = || {
        let taken = second.lock().ok().and_then(|mut second| second.take());
        taken.map(|second| second())
    };
    std::thread::scope(|scope| {
        let helper = std::thread::Builder::new()
            .name("snapshot-index".into())
            .spawn_scoped(scope, run_second)
            .ok();
        let first = first();
        let second = match helper.map(|helper| helper.join()) {
            Some(Ok(second)) => second,
            Some(Err(panic)) => std::panic::resume_unwind(panic),
            None => None,
        };
        match second.or_else(run_second) {
            Some(second) => (first, second),
            None => unreachable!("the second job runs once, here or on its thread"),
        }
    })
}
