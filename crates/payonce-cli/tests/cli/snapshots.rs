//! `payonce snapshot` and `payonce verify --snapshots`: taking a snapshot
//! on demand, listing the ones kept with whether each verifies, auditing
//! each against the replay, and every command that opens a ledger saying
//! which snapshot it refused.

use std::path::Path;

use crate::fixture::{arg, payonce, scenario};

/// The snapshot files kept beside the ledger in `dir`, newest first.
fn kept(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir.join("snapshots"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "snapshot"))
        .collect();
    files.sort();
    files.reverse();
    files
}

/// Rewrites the checksums of snapshot bytes after an edit.
fn reseal(bytes: &mut [u8]) {
    let body = crc32fast::hash(&bytes[payonce::SNAPSHOT_HEADER_LEN..body_end(bytes)]);
    bytes[80..84].copy_from_slice(&body.to_le_bytes());
    let header = crc32fast::hash(&bytes[0..92]);
    bytes[92..96].copy_from_slice(&header.to_le_bytes());
}

/// Where the body of snapshot bytes ends (docs/snapshot-format.md).
fn body_end(bytes: &[u8]) -> usize {
    let body_len = u64::from_le_bytes(bytes[72..80].try_into().unwrap());
    payonce::SNAPSHOT_HEADER_LEN + body_len as usize
}

#[test]
fn snapshot_takes_one_and_list_shows_it_verifies() {
    // Guards against a snapshot command that writes nothing, or a listing that vouches for what an opening would refuse.
    let dir = tempfile::tempdir().unwrap();
    let ledger_dir = dir.path().join("ledger");
    scenario(&ledger_dir);
    let before = kept(&ledger_dir).len();
    assert_eq!(before, 1, "a clean close takes one");
    let taken = payonce(&["snapshot", &arg(&ledger_dir), "--json"]);
    assert_eq!(taken.code, 0, "{}", taken.stderr);
    let json = taken.json();
    let seq = json["seq"].as_u64().unwrap();
    assert!(
        taken.stderr.contains("opened from snapshot"),
        "{}",
        taken.stderr
    );
    assert_eq!(kept(&ledger_dir).len(), 2);
    let listed = payonce(&["snapshot", &arg(&ledger_dir), "--list", "--json"]);
    assert_eq!(listed.code, 0, "{}", listed.stdout);
    let listed = listed.json();
    assert_eq!(listed[0]["seq"].as_u64(), Some(seq));
    assert_eq!(listed[0]["verdict"], "verifies");
    assert_eq!(listed[1]["verdict"], "verifies");
    let text = payonce(&["snapshot", &arg(&ledger_dir), "--list"]);
    assert!(
        text.stdout.contains(&format!("seq {seq}")),
        "{}",
        text.stdout
    );
}

#[test]
fn list_and_verify_report_a_damaged_snapshot_and_an_opening_sets_it_aside() {
    // Guards against a damaged snapshot passing unnoticed by the listing, the audit, or the next opening.
    let dir = tempfile::tempdir().unwrap();
    let ledger_dir = dir.path().join("ledger");
    scenario(&ledger_dir);
    let newest = kept(&ledger_dir)[0].clone();
    let mut bytes = std::fs::read(&newest).unwrap();
    let last = body_end(&bytes) - 1;
    bytes[last] ^= 0x20;
    std::fs::write(&newest, &bytes).unwrap();
    let listed = payonce(&["snapshot", &arg(&ledger_dir), "--list"]);
    assert_eq!(listed.code, 1);
    assert!(listed.stdout.contains("refused"), "{}", listed.stdout);
    assert!(
        listed.stdout.contains("body's checksum"),
        "{}",
        listed.stdout
    );
    let verified = payonce(&["verify", &arg(&ledger_dir), "--snapshots", "--json"]);
    assert_eq!(verified.code, 1);
    assert_eq!(verified.json()["snapshots"][0]["verdict"], "refused");
    // The next writer refuses it, says so, and sets it aside.
    let taken = payonce(&["snapshot", &arg(&ledger_dir)]);
    assert_eq!(taken.code, 0, "{}", taken.stderr);
    assert!(
        taken.stderr.contains("warning: refused snapshot"),
        "{}",
        taken.stderr
    );
    assert!(
        taken.stderr.contains(".snapshot.refused"),
        "{}",
        taken.stderr
    );
    assert!(!newest.exists());
    let aside = newest.with_extension("snapshot.refused");
    assert!(aside.exists(), "set aside, not deleted");
}

#[test]
fn verify_snapshots_names_the_first_answer_a_wrong_snapshot_gives() {
    // Guards against a snapshot with a wrong state that every opening check passes: only the audit can find it.
    let dir = tempfile::tempdir().unwrap();
    let ledger_dir = dir.path().join("ledger");
    scenario(&ledger_dir);
    let clean = payonce(&["verify", &arg(&ledger_dir), "--snapshots"]);
    assert_eq!(clean.code, 0, "{}{}", clean.stdout, clean.stderr);
    assert!(clean.stdout.contains("matches"), "{}", clean.stdout);
    let newest = kept(&ledger_dir)[0].clone();
    let mut bytes = std::fs::read(&newest).unwrap();
    // The refusals count, the last of the scalars.
    let at = payonce::SNAPSHOT_HEADER_LEN + 10;
    bytes[at] ^= 0x01;
    reseal(&mut bytes);
    std::fs::write(&newest, &bytes).unwrap();
    let listed = payonce(&["snapshot", &arg(&ledger_dir), "--list"]);
    assert_eq!(listed.code, 0, "an opening would use it: {}", listed.stdout);
    let audited = payonce(&["verify", &arg(&ledger_dir), "--snapshots"]);
    assert_eq!(audited.code, 1, "{}", audited.stdout);
    assert!(audited.stdout.contains("differs"), "{}", audited.stdout);
    assert!(
        audited.stdout.contains("first difference: refusals"),
        "{}",
        audited.stdout
    );
}
