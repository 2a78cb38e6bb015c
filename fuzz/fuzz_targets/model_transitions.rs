//! Arbitrary transition sequences on a withdrawal; the property lives in
//! `payonce_tests::fuzz` so `cargo test` replays the corpus on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| payonce_tests::fuzz::model_transitions(data));
