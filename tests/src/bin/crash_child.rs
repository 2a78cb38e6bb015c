//! The process the crash test kills: opens the ledger, writes `ready` on
//! its standard output, then submits from several threads until it is
//! killed (see `payonce_tests::crash::child`).
//!
//! Usage: `crash_child BACKEND LEDGER TRAILS SEED THREADS`. Opens (or, the
//! first time, creates) the ledger at `LEDGER` on `BACKEND` (`file`), and
//! writes one trail per thread, `TRAILS/thread-N.log`, one line per step
//! (`payonce_tests::crash::trail`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use payonce_tests::crash::child;

fn main() {
    let args = match child::parse_args(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };
    // A thread that panics would leave the others submitting, and the kill
    // would hide the panic: the whole process ends, and the driver sees it
    // exit on its own.
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        std::process::exit(101);
    }));
    child::run(&args);
    panic!("a submitting thread returned");
}
