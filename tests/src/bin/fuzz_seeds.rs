//! Writes the seed corpora of the `event_decode`, `ledger_ops` and
//! `log_open` fuzz targets: a few meaningful inputs each, named `seed-*`,
//! so the fuzzers start from inputs that reach deep into the code.
//!
//! Usage: `cargo run -p payonce-tests --bin fuzz_seeds -- fuzz/corpus`.
//! Rerun it when an input format changes (the event schema, the log format,
//! or the byte layout a target reads); the files it writes are committed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use payonce::{Config, Ledger, ManualClock, NewWithdrawal, SendFailure};
use payonce_log::{LogReader, MemStorage};
use payonce_model::Reason;
use payonce_tests::fuzz::event_decode;
use payonce_tests::fuzz::ledger_ops::{self, Op};
use payonce_tests::harness::{START, WorldConfig, reference, sent};

fn write(dir: &Path, target: &str, name: &str, bytes: &[u8]) {
    let folder = dir.join(target);
    std::fs::create_dir_all(&folder).unwrap();
    let path = folder.join(format!("seed-{name}"));
    std::fs::write(&path, bytes).unwrap();
    println!("{} ({} bytes)", path.display(), bytes.len());
}

/// The payloads of a ledger's log holding every kind of event.
fn every_event() -> Vec<Vec<u8>> {
    let mem = MemStorage::new();
    let config = Config {
        log: WorldConfig::log(),
        clock: Arc::new(ManualClock::new(START)),
        ..Config::default()
    };
    let ledger = Ledger::init_on(Arc::new(mem.clone()), config).unwrap();
    play_every_kind(&ledger);
    drop(ledger);
    let reader = LogReader::open(Arc::new(mem), WorldConfig::log()).unwrap();
    reader
        .records_from(1)
        .unwrap()
        .map(|record| record.unwrap().payload)
        .collect()
}

/// Decides every kind of event on `ledger`.
fn play_every_kind(ledger: &Ledger) {
    let new = || NewWithdrawal {
        amount: "25.5".parse().unwrap(),
        currency: "USDC".parse().unwrap(),
        destination: "0xabc".parse().unwrap(),
        requested_by: "alice".parse().unwrap(),
    };
    let (w1, w2, w3, w4) = (
        ledger.create(new()).unwrap(),
        ledger.create(new()).unwrap(),
        ledger.create(new()).unwrap(),
        ledger.create(new()).unwrap(),
    );
    let ok = |r: &payonce_model::WithdrawalRequest| {
        Ok::<_, SendFailure>(sent(r, &reference(r, "phone")))
    };
    ledger.submit("phone", w1.clone(), ok).unwrap();
    let _ = ledger.submit("laptop", w1.clone(), ok);
    let _ = ledger.submit("phone", w2.clone(), ok);
    let _ = ledger.submit("k-timeout", w2.clone(), |_| {
        Err::<payonce_model::WithdrawalRequest, _>(SendFailure::failed("timed out".to_owned()))
    });
    let _ = ledger.submit("k-timeout", w2.clone(), ok);
    ledger
        .resolve(
            "k-timeout",
            sent(&w2, "0xfound"),
            "found on the rail",
            "ops",
        )
        .unwrap();
    let _ = ledger.submit("k-refused", w3.clone(), |_| {
        Err::<payonce_model::WithdrawalRequest, SendFailure>(SendFailure::Rejected(
            Reason::new("insufficient hot wallet balance").unwrap(),
        ))
    });
    let _ = ledger.release("phone", "nothing on the rail", "ops");
    ledger
        .release("k-refused", "nothing on the rail", "ops")
        .unwrap();
    ledger.record("k-record", w3.clone()).unwrap();
    let phone_sent = sent(&w1, &reference(&w1, "phone"));
    ledger
        .advance("phone", &phone_sent.confirm().unwrap())
        .unwrap();
    let _ = ledger.advance("phone", &phone_sent);
    ledger
        .correct(
            "k-timeout",
            &sent(&w2, "0xright"),
            "recorded in error",
            "ops",
        )
        .unwrap();
    let _ = ledger.resolve("webhook", sent(&w3, "0xhook"), "replayed", "webhook");
    let ticket = ledger.claim("k-abandoned", w4.clone()).unwrap();
    drop(ticket);
}

fn event_decode_seeds(dir: &Path) {
    let events = every_event();
    write(
        dir,
        "event_decode",
        "every-kind",
        &event_decode::encode(&events),
    );
    for (index, payload) in events.iter().enumerate().step_by(5) {
        let name = format!("event-{}", index + 1);
        write(
            dir,
            "event_decode",
            &name,
            &event_decode::encode(std::slice::from_ref(payload)),
        );
    }
}

fn ledger_ops_seeds(dir: &Path) {
    use Op::*;
    let create = Create {
        amount: 0,
        currency: 0,
    };
    // Send kinds, in the order of SendKind::ALL.
    let (succeed, timeout, fail, refuse, panic, wrong, unsettled) = (0, 1, 2, 3, 4, 5, 6);
    // Reports, as the target's `report` picks them: told, or lost.
    let (confirmed, failed, again, lost_bump) = (16, 17, 19, 2);
    // Keys, in the order of the target's KEYS.
    let (k0, k1, phone, laptop, redrive, hook) = (0, 1, 3, 4, 5, 6);
    let seeds: Vec<(&str, Vec<Op>)> = vec![
        (
            "retry-replays",
            vec![
                create,
                Submit {
                    key: k0,
                    withdrawal: 0,
                    send: succeed,
                },
                Submit {
                    key: k0,
                    withdrawal: 0,
                    send: succeed,
                },
                Reopen,
                Submit {
                    key: k0,
                    withdrawal: 0,
                    send: succeed,
                },
            ],
        ),
        (
            "phone-and-laptop",
            vec![
                create,
                Claim {
                    key: phone,
                    withdrawal: 0,
                },
                Claim {
                    key: laptop,
                    withdrawal: 0,
                },
                Finish {
                    slot: 0,
                    send: succeed,
                },
                Submit {
                    key: laptop,
                    withdrawal: 0,
                    send: succeed,
                },
                Webhook {
                    key: hook,
                    withdrawal: 0,
                    confirmed: 1,
                },
            ],
        ),
        (
            "timeout-then-operator",
            vec![
                create,
                Submit {
                    key: k0,
                    withdrawal: 0,
                    send: timeout,
                },
                Submit {
                    key: k0,
                    withdrawal: 0,
                    send: succeed,
                },
                Submit {
                    key: redrive,
                    withdrawal: 0,
                    send: succeed,
                },
                Operator { key: k0 },
                Submit {
                    key: k0,
                    withdrawal: 0,
                    send: succeed,
                },
            ],
        ),
        (
            "refusal-release-resend",
            vec![
                create,
                create,
                Submit {
                    key: k0,
                    withdrawal: 0,
                    send: refuse,
                },
                Submit {
                    key: k1,
                    withdrawal: 1,
                    send: fail,
                },
                Submit {
                    key: k1,
                    withdrawal: 1,
                    send: panic,
                },
                Operator { key: k0 },
                Operator { key: k1 },
                Submit {
                    key: k1,
                    withdrawal: 0,
                    send: succeed,
                },
                Submit {
                    key: k0,
                    withdrawal: 1,
                    send: wrong,
                },
                Operator { key: k0 },
            ],
        ),
        (
            "power-loss-mid-send",
            vec![
                create,
                PlanCrash {
                    after: 2,
                    mode: 1,
                    seed: 7,
                },
                Submit {
                    key: k0,
                    withdrawal: 0,
                    send: succeed,
                },
                Submit {
                    key: k0,
                    withdrawal: 0,
                    send: succeed,
                },
                Operator { key: k0 },
                Crash { mode: 2, seed: 3 },
                Submit {
                    key: k0,
                    withdrawal: 0,
                    send: succeed,
                },
            ],
        ),
        (
            "fsync-fails",
            vec![
                create,
                create,
                Fault { kind: 2, nth: 0 },
                Submit {
                    key: k0,
                    withdrawal: 0,
                    send: succeed,
                },
                Submit {
                    key: k1,
                    withdrawal: 1,
                    send: succeed,
                },
                Create {
                    amount: 1,
                    currency: 1,
                },
                Reopen,
                Submit {
                    key: k0,
                    withdrawal: 0,
                    send: succeed,
                },
                Operator { key: k0 },
            ],
        ),
        (
            "disk-full",
            vec![
                create,
                Claim {
                    key: k0,
                    withdrawal: 0,
                },
                Fault { kind: 6, nth: 3 },
                Finish {
                    slot: 0,
                    send: succeed,
                },
                Submit {
                    key: k1,
                    withdrawal: 0,
                    send: succeed,
                },
                Crash { mode: 0, seed: 1 },
                Operator { key: k0 },
            ],
        ),
        (
            "stranger-and-sync",
            vec![
                create,
                Stranger {
                    key: k0,
                    withdrawal: 0,
                    foreign: 1,
                },
                Stranger {
                    key: k1,
                    withdrawal: 0,
                    foreign: 0,
                },
                Record {
                    key: k1,
                    withdrawal: 0,
                },
                Sync,
                Abandon { slot: 0, send: 0 },
                Crash { mode: 1, seed: 9 },
            ],
        ),
        (
            "reports-and-corrections",
            vec![
                create,
                create,
                Submit {
                    key: k0,
                    withdrawal: 0,
                    send: succeed,
                },
                Submit {
                    key: k1,
                    withdrawal: 1,
                    send: unsettled,
                },
                Report {
                    key: k0,
                    withdrawal: 0,
                    report: lost_bump,
                },
                Correct {
                    key: k0,
                    withdrawal: 0,
                },
                Report {
                    key: k0,
                    withdrawal: 0,
                    report: confirmed,
                },
                Report {
                    key: k1,
                    withdrawal: 1,
                    report: failed,
                },
                Report {
                    key: phone,
                    withdrawal: 1,
                    report: again,
                },
                Reopen,
                Correct {
                    key: k1,
                    withdrawal: 0,
                },
                Crash { mode: 0, seed: 5 },
                Report {
                    key: k0,
                    withdrawal: 0,
                    report: confirmed,
                },
            ],
        ),
    ];
    for (name, ops) in seeds {
        // Each world three times: reopenings replayed on one thread, on
        // two, and with settled pairs set apart at every opening.
        for (suffix, replay_on_two_threads, set_apart_settled) in [
            ("", false, false),
            ("-two-threads", true, false),
            ("-set-apart", false, true),
        ] {
            let config = WorldConfig {
                accept_foreign_ids: false,
                log_refusals: true,
                replay_on_two_threads,
                set_apart_settled,
            };
            write(
                dir,
                "ledger_ops",
                &format!("{name}{suffix}"),
                &ledger_ops::encode(&config, &ops),
            );
        }
    }
}

fn log_open_seeds(dir: &Path) {
    // choice: record_max 64 (1), no slack (0): one or two records per segment.
    let records = |count: u8| {
        let mut bytes = vec![1, 0x42, count];
        for index in 0..count {
            let len = 20 + index;
            bytes.push(len);
            bytes.extend((0..len).map(|byte| byte ^ index));
        }
        bytes
    };
    let with = |count: u8, mutations: &[&[u8]]| {
        let mut bytes = records(count);
        bytes.push(u8::try_from(mutations.len()).unwrap());
        for mutation in mutations {
            bytes.extend_from_slice(mutation);
        }
        bytes
    };
    write(dir, "log_open", "several-segments", &with(8, &[]));
    // Cut the newest segment (file index 5 of 6) in the middle of a frame.
    write(dir, "log_open", "torn-tail", &with(8, &[&[1, 5, 70, 0]]));
    // One bit flipped in the middle segment.
    write(
        dir,
        "log_open",
        "flipped-bit",
        &with(8, &[&[0, 1, 100, 0, 3]]),
    );
    // The middle segment removed.
    write(dir, "log_open", "missing-segment", &with(8, &[&[2, 1]]));
    // A raw segment behind a valid header after the newest.
    write(
        dir,
        "log_open",
        "raw-segment",
        &with(8, &[&[7, 0, 9, 0, 0, 1, 2, 3, 4, 32, 0, 7, 7, 7, 7]]),
    );
    // Grown past the segment limit.
    write(dir, "log_open", "segment-too-long", &with(4, &[&[5, 0]]));
    log_open_v2_seeds(dir);
}

/// Seeds of format 2: bit 7 of the log id byte, then after the records the
/// batch sizes (one byte each, 1 + byte % 5 records) and the checkpoint
/// (flags, which heads its slots hold, the older slot's generation).
fn log_open_v2_seeds(dir: &Path) {
    let with = |count: u8, checkpoint: &[u8], mutations: &[&[u8]]| {
        let mut bytes = vec![1, 0x80 | 0x42, count];
        for index in 0..count {
            let len = 20 + index;
            bytes.push(len);
            bytes.extend((0..len).map(|byte| byte ^ index));
        }
        // Batches of 2, 3, 1 and 2 records.
        bytes.extend_from_slice(&[1, 2, 0, 1]);
        bytes.extend_from_slice(checkpoint);
        bytes.push(u8::try_from(mutations.len()).unwrap());
        for mutation in mutations {
            bytes.extend_from_slice(mutation);
        }
        bytes
    };
    // The checkpoint at the newest head, in slot 1; slot 0 one head behind.
    let at_newest: &[u8] = &[1, 0, 1, 7];
    // The checkpoint two heads behind the newest, so a cut may pass it.
    let behind: &[u8] = &[0, 2, 0, 7];
    write(dir, "log_open", "v2-batches", &with(8, at_newest, &[]));
    write(dir, "log_open", "v2-no-checkpoint", &with(8, &[0xff], &[]));
    // Cut the newest segment, before and after the checkpoint's head.
    let cut: &[u8] = &[1, 5, 90, 0];
    write(
        dir,
        "log_open",
        "v2-cut-before-head",
        &with(8, at_newest, &[cut]),
    );
    write(
        dir,
        "log_open",
        "v2-cut-after-head",
        &with(8, behind, &[cut]),
    );
    // One bit flipped in the newest slot of the checkpoint (the last file).
    let flip: &[u8] = &[0, 255, 0x10, 0x10, 2];
    write(
        dir,
        "log_open",
        "v2-checkpoint-flip",
        &with(8, at_newest, &[flip]),
    );
    // A checkpoint slot rewritten whole with a head past the log's.
    let past: &[u8] = &[8, 0, 0, 4, 1, 200];
    write(
        dir,
        "log_open",
        "v2-checkpoint-past",
        &with(8, behind, &[past]),
    );
}

/// Snapshots of ledgers holding every kind of state: keys in flight with
/// errors, running sends, sent, rejected, released, foreign withdrawals.
fn snapshot_decode_seeds(dir: &Path) {
    for (name, foreign) in [("every-kind", false), ("foreign-ids", true)] {
        let log = MemStorage::new();
        let snapshots = MemStorage::new();
        let config = Config {
            log: WorldConfig::log(),
            clock: Arc::new(ManualClock::new(START)),
            accept_foreign_ids: foreign,
            snapshot_store: Some(Arc::new(payonce::DirSnapshots::on(Arc::new(
                snapshots.clone(),
            )))),
            snapshots: payonce::SnapshotPolicy::never(),
            ..Config::default()
        };
        let ledger = Ledger::init_on(Arc::new(log), config).unwrap();
        play_every_kind(&ledger);
        if foreign {
            let elsewhere = payonce_model::WithdrawalRequest::new(
                "ext-1".parse().unwrap(),
                "3".parse().unwrap(),
                "EURC".parse().unwrap(),
                "iban-1".parse().unwrap(),
                "bob".parse().unwrap(),
            );
            let _ = ledger.submit("k-foreign", elsewhere, |_| {
                Err::<payonce_model::WithdrawalRequest, _>(SendFailure::failed("reset".to_owned()))
            });
        }
        // A send still running when the snapshot is taken.
        let running = ledger
            .create(NewWithdrawal {
                amount: "0.001".parse().unwrap(),
                currency: "BTC".parse().unwrap(),
                destination: "bc1q".parse().unwrap(),
                requested_by: "carol".parse().unwrap(),
            })
            .unwrap();
        let ticket = ledger.claim("k-running", running).unwrap();
        let taken = ledger.snapshot().unwrap().unwrap();
        std::mem::forget(ticket);
        let bytes = payonce_log::Storage::read(&snapshots, &taken.stored.name, u64::MAX).unwrap();
        // The input is the snapshot and, after it, the one run it names.
        let run_name = format!("{:020}.run", 1);
        let run = payonce_log::Storage::read(&snapshots, &run_name, u64::MAX).unwrap();
        write(dir, "snapshot_decode", name, &[&bytes[..], &run].concat());
        // The same state with a part per key: a load of several parts.
        let runs = payonce::MemRuns::default();
        runs.insert(1, run.clone());
        let (info, state) = payonce::snapshots::decode(&bytes, &runs).unwrap();
        let one = std::num::NonZeroU32::MIN;
        let parts = payonce::snapshots::encode_in_parts(&state, info.log_id, info.head, one, &runs);
        write(
            dir,
            "snapshot_decode",
            &format!("{name}-in-parts"),
            &[&parts.unwrap()[..], &run].concat(),
        );
    }
}

fn main() {
    let dir: PathBuf = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "fuzz/corpus".to_owned())
        .into();
    event_decode_seeds(&dir);
    ledger_ops_seeds(&dir);
    log_open_seeds(&dir);
    snapshot_decode_seeds(&dir);
}
