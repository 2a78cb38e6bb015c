//! The process the crash test kills: submits continuously against a rail
//! that records every send durably before answering, and records every
//! outcome acknowledged to it. Runs until it is killed.
//!
//! Usage: `crash_child DIR SEED`. Writes `DIR/ledger/` (the ledger),
//! `DIR/rail.log` (one line per send: `send WITHDRAWAL KEY REFERENCE`) and
//! `DIR/acks.log` (one line per acknowledged outcome: `ack KEY REFERENCE`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

use payonce::{Ledger, NewWithdrawal, SendFailure, SubmitError};
use payonce_model::{Reference, WithdrawalRequest};
use payonce_tests::rng::Rng;

/// Appends a line and syncs it: once this returns, the line survives a crash.
fn append_durably(file: &mut File, line: &str) {
    file.write_all(line.as_bytes()).unwrap();
    file.sync_data().unwrap();
}

fn open_append(path: &Path) -> File {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().expect("DIR"));
    let seed: u64 = args
        .next()
        .expect("SEED")
        .parse()
        .expect("SEED is a number");
    let mut rng = Rng::new(seed);
    let mut rail = open_append(&dir.join("rail.log"));
    let mut acks = open_append(&dir.join("acks.log"));
    // The first round creates the ledger; a creation a kill cut short is
    // made again.
    let ledger = match Ledger::open(dir.join("ledger")) {
        Err(payonce::LedgerError::NoLog { .. }) => Ledger::init(dir.join("ledger")),
        opened => opened,
    }
    .unwrap();
    let mut submitted: Vec<(String, WithdrawalRequest)> = Vec::new();

    for attempt in 0u64.. {
        let (key, request) = match rng.below(10) {
            // A client retry of an earlier submission.
            0 if !submitted.is_empty() => {
                submitted[rng.below(submitted.len() as u64) as usize].clone()
            }
            // A second device with a fresh key for an earlier withdrawal.
            1 if !submitted.is_empty() => {
                let (_, request) = submitted[rng.below(submitted.len() as u64) as usize].clone();
                (format!("s{seed}-{attempt}-second"), request)
            }
            _ => {
                let request = ledger
                    .create(NewWithdrawal {
                        amount: "25".parse().unwrap(),
                        currency: "USDC".parse().unwrap(),
                        destination: "0xabc".parse().unwrap(),
                        requested_by: "crash-child".parse().unwrap(),
                    })
                    .unwrap();
                (format!("s{seed}-{attempt}"), request)
            }
        };
        let times_out = rng.percent(10);
        let result = ledger.submit(&key, request.clone(), |request| {
            let reference = format!("0x{}", request.id());
            append_durably(
                &mut rail,
                &format!("send {} {key} {reference}\n", request.id()),
            );
            if times_out {
                return Err(SendFailure::failed("rail timed out after the send"));
            }
            let sent = request.approve().and_then(|w| w.start_sending());
            Ok(sent
                .and_then(|w| w.mark_sent(Reference::new(reference).unwrap()))
                .unwrap())
        });
        match result {
            Ok(outcome) => {
                let reference = outcome.reference().expect("a sent outcome has a reference");
                append_durably(&mut acks, &format!("ack {key} {reference}\n"));
            }
            Err(SubmitError::Send(_) | SubmitError::Ledger(payonce::LedgerError::Refused(_))) => {}
            Err(other) => panic!("unexpected: {other}"),
        }
        submitted.push((key, request));
    }
}
