//! Arbitrary bytes as a damaged log directory, opened for reading and writing; the
//! property lives in `payonce_tests::fuzz` so `cargo test` replays the corpus.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| payonce_tests::fuzz::log_open(data));
