//! A snapshot's manifest: the runs that hold its settled pairs, newest
//! first, each named by its number and bound by what the run says of
//! itself (its length, its record count, the checksum of its fences and
//! trailer), under one hash key. docs/snapshot-format.md, "Manifest".

use payonce_runs::HashKey;

use super::error::SnapshotError;
use super::fields::{In, Out};
use super::header::SNAPSHOT_HEADER_LEN;

/// Most runs one manifest names: merges keep a ledger's runs to a few
/// dozen, so more is damage.
pub const MANIFEST_RUNS_MAX: usize = 1024;

/// Bytes of one run's entry.
const RUN_ENTRY_LEN: usize = 8 + 8 + 8 + 4;

/// Bytes of a manifest with no run: the hash key, the pairs, the count,
/// the checksum.
const MANIFEST_LEN_MIN: usize = 16 + 8 + 4 + 4;

/// One run a manifest names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunEntry {
    /// The run's number in its store.
    pub number: u64,
    /// Its length in bytes.
    pub len: u64,
    /// How many records (settled pairs) it holds.
    pub records: u64,
    /// The checksum of its fences and trailer, which binds the entry to
    /// these bytes and no others.
    pub trailer_crc: u32,
}

/// The runs a snapshot's settled pairs are in, newest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// The hash key every run is written under.
    pub hash_key: HashKey,
    /// How many distinct settled pairs the runs hold: the keys the state
    /// has besides those its body lists.
    pub pairs: u64,
    /// The runs, newest first: the first that holds a name answers for it.
    pub runs: Vec<RunEntry>,
}

impl Manifest {
    /// Its bytes: the hash key, the count of runs, each run's entry, and
    /// the `crc32` of everything before it.
    pub fn encode(&self) -> Vec<u8> {
        assert!(
            self.runs.len() <= MANIFEST_RUNS_MAX,
            "a manifest names at most {MANIFEST_RUNS_MAX} runs"
        );
        let mut out = Out::default();
        out.u64(self.hash_key.k0);
        out.u64(self.hash_key.k1);
        out.u64(self.pairs);
        out.u32(self.runs.len() as u32);
        for run in &self.runs {
            out.u64(run.number);
            out.u64(run.len);
            out.u64(run.records);
            out.u32(run.trailer_crc);
        }
        let crc = crc32fast::hash(&out.bytes);
        out.u32(crc);
        out.bytes
    }

    /// The manifest in `bytes`, which follow a body of `body_len` bytes:
    /// its checksum first, then its count against the bytes it has.
    pub fn decode(bytes: &[u8], body_len: usize) -> Result<Manifest, SnapshotError> {
        let at = SNAPSHOT_HEADER_LEN + body_len;
        let invalid = |offset: usize, expected: String, found: String| SnapshotError::Invalid {
            field: "manifest",
            offset: (at + offset) as u64,
            expected,
            found,
        };
        if bytes.len() < MANIFEST_LEN_MIN {
            let found = format!("{} bytes", bytes.len());
            return Err(invalid(
                0,
                format!("at least {MANIFEST_LEN_MIN} bytes"),
                found,
            ));
        }
        let (fields, crc) = bytes.split_at(bytes.len() - 4);
        let stored = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
        let computed = crc32fast::hash(fields);
        if stored != computed {
            return Err(SnapshotError::Checksum {
                part: "manifest",
                stored,
                computed,
            });
        }
        let mut input = In::window(fields, body_len, body_len + fields.len());
        let hash_key = HashKey::new(input.u64("hash key")?, input.u64("hash key")?);
        let pairs = input.u64("manifest pairs")?;
        let count = input.u32("manifest run count")? as usize;
        let room = fields.len() - (input.at() - body_len);
        if count > MANIFEST_RUNS_MAX || count * RUN_ENTRY_LEN != room {
            let expected = format!("at most {MANIFEST_RUNS_MAX} runs filling the manifest");
            return Err(invalid(
                24,
                expected,
                format!("{count} runs in {room} bytes"),
            ));
        }
        let mut runs = Vec::with_capacity(count);
        for _ in 0..count {
            runs.push(RunEntry {
                number: input.u64("run number")?,
                len: input.u64("run length")?,
                records: input.u64("run records")?,
                trailer_crc: input.u32("run trailer checksum")?,
            });
        }
        if let Some(twice) = runs.iter().enumerate().find(|(index, run)| {
            runs[..*index]
                .iter()
                .any(|other| other.number == run.number)
        }) {
            let found = format!("run {} twice", twice.1.number);
            return Err(invalid(28, "each run once".to_owned(), found));
        }
        Ok(Manifest {
            hash_key,
            pairs,
            runs,
        })
    }
}
