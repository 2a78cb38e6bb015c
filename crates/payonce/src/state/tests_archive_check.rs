//! An archive an opening believes before reading its blocks
//! ([`SnapshotFile::checked_in_background`]): the opening reads the body
//! and the fences alone, a pass on another thread checks every block, and
//! a damaged block is told to the store and answers nothing.

use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::Duration;

use payonce_log::{Digest, Head};

use super::tests_key_parts::{Fate, claimed_as};
use super::*;
use crate::snapshot::{SnapshotFile, checked_file, encode};
use crate::snapshot_format::error::SnapshotError;
use crate::snapshot_format::header::{Header, SNAPSHOT_HEADER_LEN};

/// A snapshot in memory that counts the bytes one thread (the opening's)
/// reads, may leave its archive to the background pass, and tells a
/// channel what it is asked to refuse.
#[derive(Clone)]
struct Remote {
    bytes: Arc<Vec<u8>>,
    opener: ThreadId,
    read_by_opener: Arc<Mutex<u64>>,
    later: bool,
    refused: Arc<Mutex<Sender<String>>>,
    /// How the next reads on other threads than the opener's fail, last
    /// first: a lost connection (`true`) or a missing chunk (`false`).
    failing: Arc<Mutex<Vec<bool>>>,
}

impl SnapshotFile for Remote {
    fn byte_len(&self) -> u64 {
        self.bytes.len() as u64
    }

    fn read_at(&self, offset: u64, len: usize, into: &mut Vec<u8>) -> Result<(), SnapshotError> {
        if std::thread::current().id() != self.opener {
            let failing = self.failing.lock().unwrap_or_else(|e| e.into_inner()).pop();
            match failing {
                Some(true) => {
                    return Err(SnapshotError::Io {
                        op: "reading",
                        file: "a test's snapshot".to_owned(),
                        source: std::io::Error::other("connection lost"),
                    });
                }
                Some(false) => {
                    return Err(SnapshotError::Store {
                        detail: format!("the chunk at {offset} is missing"),
                    });
                }
                None => {}
            }
        }
        let start = (offset as usize).min(self.bytes.len());
        let end = (start + len).min(self.bytes.len());
        into.extend_from_slice(&self.bytes[start..end]);
        if std::thread::current().id() == self.opener {
            *self
                .read_by_opener
                .lock()
                .unwrap_or_else(|e| e.into_inner()) += (end - start) as u64;
        }
        Ok(())
    }

    fn lasting(&self, _from: u64) -> Option<Arc<dyn SnapshotFile>> {
        Some(Arc::new(self.clone()))
    }

    fn checked_in_background(&self) -> bool {
        self.later
    }

    fn refuse(&self, error: &SnapshotError) {
        let sender = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        let _ = sender.send(error.to_string());
    }
}

/// A thousand settled pairs (sixteen pair blocks): the state and its
/// snapshot's bytes.
fn settled() -> (State, Vec<u8>) {
    let state = claimed_as(&[Fate::Sent; 1000]);
    let head = Head {
        seq: state.last_seq(),
        digest: Digest([7; 32]),
    };
    let bytes = encode(&state, 1, head).unwrap_or_else(|e| panic!("{e}"));
    (state, bytes)
}

/// `bytes` opened through a [`Remote`] that leaves its archive to the
/// background pass, or not (`later`): the state, the bytes the opening
/// thread read, and what the file is asked to refuse.
fn opened(bytes: Vec<u8>, later: bool) -> (Result<State, SnapshotError>, u64, Receiver<String>) {
    opened_failing(bytes, later, Vec::new())
}

/// [`opened`], the reads on other threads failing as `failing` says, last
/// first.
fn opened_failing(
    bytes: Vec<u8>,
    later: bool,
    failing: Vec<bool>,
) -> (Result<State, SnapshotError>, u64, Receiver<String>) {
    let (sender, refused) = channel();
    let file = Remote {
        bytes: Arc::new(bytes),
        opener: std::thread::current().id(),
        read_by_opener: Arc::new(Mutex::new(0)),
        later,
        refused: Arc::new(Mutex::new(sender)),
        failing: Arc::new(Mutex::new(failing)),
    };
    let loaded = checked_file::<std::convert::Infallible>(&file, 1, |seq| {
        Ok(Some(Head {
            seq,
            digest: Digest([7; 32]),
        }))
    })
    .unwrap_or_else(|never| match never {});
    let read = *file
        .read_by_opener
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    (loaded.map(|(_, state)| state), read, refused)
}

fn archive_len(bytes: &[u8]) -> u64 {
    Header::decode(bytes)
        .unwrap_or_else(|e| panic!("{e}"))
        .archive_len
}

#[test]
fn an_archive_checked_in_the_background_is_believed_before_its_blocks_are_read() {
    // Guards against a new PostgreSQL worker reading a whole archive
    // (2.1 GB at 10M withdrawals) before its first decision, and against
    // a file ledger leaving its blocks unchecked at opening.
    let (whole, bytes) = settled();
    let archive = archive_len(&bytes);
    let (state, read, _) = opened(bytes.clone(), true);
    let mut state = state.unwrap_or_else(|e| panic!("{e}"));
    assert!(
        read < SNAPSHOT_HEADER_LEN as u64 + archive / 4,
        "the opening read {read} bytes of an archive of {archive}"
    );
    for n in [1, 500, 1000] {
        let key = format!("k-{n}");
        state
            .fault_in(Some(&key), None)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(state.outcome(&key), whole.outcome(&key), "{key}");
    }

    let (state, read, _) = opened(bytes, false);
    assert!(state.is_ok());
    assert!(
        read > archive,
        "an opening that checks every block read {read} bytes of an archive of {archive}"
    );
}

#[test]
fn a_block_the_background_pass_finds_damaged_is_refused_to_the_store_and_answers_nothing() {
    // Guards against an archive believed before its blocks were read
    // answering from a damaged block, or leaving the store to open from
    // it again: the pass tells the store, and each name in the block
    // fails with the refusal.
    let (whole, mut bytes) = settled();
    let header = Header::decode(&bytes).unwrap_or_else(|e| panic!("{e}"));
    let first_block = SNAPSHOT_HEADER_LEN + header.body_len as usize;
    bytes[first_block + 20] ^= 0x40;
    let (state, _, refused) = opened(bytes, true);
    let mut state = state.unwrap_or_else(|e| panic!("{e}"));
    let told = refused
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("no refusal from the background pass: {e}"));
    assert!(told.contains("archive pair block"), "{told}");
    let (mut failed, mut answered) = (0, 0);
    for n in 1..=1000 {
        let key = format!("k-{n}");
        match state.fault_in(Some(&key), None) {
            Ok(()) => {
                assert_eq!(state.outcome(&key), whole.outcome(&key), "{key}");
                answered += 1;
            }
            Err(error) => {
                assert!(
                    matches!(
                        error,
                        SnapshotError::Invalid {
                            field: "archive pair block",
                            ..
                        }
                    ),
                    "{error:?}"
                );
                failed += 1;
            }
        }
    }
    assert!(failed > 0 && failed < 100, "{failed} names failed");
    assert_eq!(answered + failed, 1000);
    assert!(refused.try_recv().is_ok(), "each failed read is told too");

    // An opening that checks every block refuses the snapshot itself.
    let (_, damaged) = settled();
    let mut damaged = damaged;
    damaged[first_block + 20] ^= 0x40;
    let (refusal, _, _) = opened(damaged, false);
    assert!(
        matches!(
            refusal,
            Err(SnapshotError::Invalid {
                field: "archive pair block",
                ..
            })
        ),
        "{:?}",
        refusal.map(|_| ())
    );
}

#[test]
fn the_background_pass_starts_over_after_a_failed_read_and_refuses_a_missing_part() {
    // Guards against a lost connection ending the pass for good, or being
    // taken for damage that sets a good snapshot aside; and against a
    // part of the snapshot missing after the opening never being told.
    let (_, bytes) = settled();
    let (state, _, refused) = opened_failing(bytes.clone(), true, vec![false, true]);
    state.unwrap_or_else(|e| panic!("{e}"));
    let told = refused
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("no refusal after the pass started over: {e}"));
    assert!(told.contains("is missing"), "{told}");

    // A pass whose first read fails, then finds damage, tells the damage.
    let mut damaged = bytes;
    let header = Header::decode(&damaged).unwrap_or_else(|e| panic!("{e}"));
    let last_block = SNAPSHOT_HEADER_LEN + (header.body_len + header.archive_len) as usize - 600;
    damaged[last_block] ^= 0x01;
    let (state, _, refused) = opened_failing(damaged, true, vec![true]);
    state.unwrap_or_else(|e| panic!("{e}"));
    let told = refused
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("no refusal of the damage after the pass started over: {e}"));
    assert!(told.contains("checksum"), "{told}");
}
