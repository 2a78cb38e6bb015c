//! Replays every committed fuzz input (seed corpus and regression cases)
//! through the property each target checks, on the stable toolchain, so a
//! bug a fuzzer once found stays found without cargo-fuzz.

use std::path::Path;

use payonce_tests::fuzz::TARGETS;

#[test]
fn every_committed_fuzz_input_still_holds_its_property() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut replayed = 0;
    for (target, check) in TARGETS {
        for folder in ["corpus", "regressions"] {
            let dir = fuzz.join(folder).join(target);
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries {
                let path = entry.unwrap().path();
                // A fuzzer running beside the tests prunes its corpus: an
                // input gone since the listing is not a failure.
                let bytes = match std::fs::read(&path) {
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
                    read => read.unwrap(),
                };
                let outcome = std::panic::catch_unwind(|| check(&bytes));
                assert!(
                    outcome.is_ok(),
                    "{target}: {} breaks its property",
                    path.display()
                );
                replayed += 1;
            }
        }
        assert!(
            fuzz.join("corpus").join(target).is_dir(),
            "{target} has no committed seed corpus"
        );
    }
    assert!(replayed >= TARGETS.len(), "only {replayed} inputs replayed");
}

#[test]
fn the_reports_seed_advances_and_corrects_outcomes() {
    let seed = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus/ledger_ops/seed-reports-and-corrections");
    let stats = payonce_tests::fuzz::ledger_ops::played(&std::fs::read(seed).unwrap()).unwrap();
    assert!(stats.advances >= 2, "{stats:?}");
    assert!(stats.corrections >= 1, "{stats:?}");
}

/// The `log_open` property over random inputs of its layout, on the stable
/// toolchain: `PAYONCE_LOG_OPEN_INPUTS` of them (default 300) from the seed
/// `PAYONCE_LOG_OPEN_SEED` (default: the clock), printed to replay a failure.
#[test]
fn log_open_holds_over_random_inputs() {
    let seed = payonce_tests::rng::seed_from_env("PAYONCE_LOG_OPEN_SEED");
    let count: u64 = std::env::var("PAYONCE_LOG_OPEN_INPUTS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(300);
    println!("PAYONCE_LOG_OPEN_SEED={seed}");
    let mut rng = payonce_tests::rng::Rng::new(seed);
    for index in 0..count {
        let input = payonce_tests::fuzz::log_open::random_input(&mut rng);
        let outcome = std::panic::catch_unwind(|| payonce_tests::fuzz::log_open(&input));
        assert!(
            outcome.is_ok(),
            "PAYONCE_LOG_OPEN_SEED={seed}: input {index} breaks the property: {input:?}"
        );
    }
}

#[test]
fn a_wrapped_snapshot_body_decodes_as_the_whole_snapshot_it_came_from() {
    // Guards against the snapshot property's wrapping testing nothing: a seed's body and manifest behind a fresh header, with its run, must decode.
    let seed = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus/snapshot_decode/seed-every-kind");
    let bytes = std::fs::read(seed).unwrap();
    let field = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
    let (body_len, manifest_len) = (field(72), field(84));
    let ends = payonce::SNAPSHOT_HEADER_LEN + body_len + manifest_len;
    let (snapshot, run) = bytes.split_at(ends);
    let (body, manifest) = snapshot[payonce::SNAPSHOT_HEADER_LEN..].split_at(body_len);
    assert!(!run.is_empty(), "the seed's settled pairs are in a run");
    let runs = payonce::MemRuns::default();
    runs.insert(1, run.to_vec());
    let wrapped = payonce_tests::fuzz::snapshot_decode::wrapped(body, manifest);
    let (info, state) = payonce::snapshots::decode(&wrapped, &runs).unwrap();
    let (_, original) = payonce::snapshots::decode(snapshot, &runs).unwrap();
    assert_eq!(
        state.difference(&original),
        Some(payonce::StateDifference {
            what: "last seq".to_owned(),
            left: info.seq.to_string(),
            right: original.last_seq().to_string(),
        })
    );
}
