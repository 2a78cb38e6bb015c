//! Arbitrary operation sequences on a ledger in a simulated world of crashes and faults; the
//! property lives in `payonce_tests::fuzz` so `cargo test` replays the corpus.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| payonce_tests::fuzz::ledger_ops(data));
