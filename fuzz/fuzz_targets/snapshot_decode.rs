//! Arbitrary bytes as a snapshot of the projections, decoded as an opening
//! decodes one; the property lives in `payonce_tests::fuzz` so `cargo test`
//! replays the corpus.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| payonce_tests::fuzz::snapshot_decode(data));
