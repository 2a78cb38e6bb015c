//! Arbitrary bytes as log records decoded and replayed as events; the
//! property lives in `payonce_tests::fuzz` so `cargo test` replays the corpus.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| payonce_tests::fuzz::event_decode(data));
