//! Records, runs and a source that counts its reads, shared by the tests.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use payonce_runs::{HashKey, Record, Run, RunError, RunSource, write_batch};

pub(crate) const KEY: HashKey = HashKey::new(0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210);

/// A record owning its bytes: names made from a number, so a primary
/// name's secondary name is the same wherever it is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Owned {
    pub(crate) primary: Vec<u8>,
    pub(crate) secondary: Vec<u8>,
    pub(crate) payload: Vec<u8>,
}

impl Owned {
    pub(crate) fn numbered(number: u64, payload: Vec<u8>) -> Owned {
        Owned {
            primary: format!("key-{number}").into_bytes(),
            secondary: format!("withdrawal-{number}").into_bytes(),
            payload,
        }
    }

    pub(crate) fn record(&self) -> Record<'_> {
        Record {
            primary: &self.primary,
            secondary: &self.secondary,
            payload: &self.payload,
        }
    }
}

/// Records numbered `numbers`, each with a payload of `payload_len` bytes
/// made from its number.
pub(crate) fn numbered(numbers: impl IntoIterator<Item = u64>, payload_len: usize) -> Vec<Owned> {
    (numbers.into_iter())
        .map(|n| {
            Owned::numbered(
                n,
                (0..payload_len).map(|i| (n as usize + i) as u8).collect(),
            )
        })
        .collect()
}

/// The bytes of a run of `records` under [`KEY`].
pub(crate) fn run_bytes(records: &[Owned]) -> Vec<u8> {
    let mut batch: Vec<Record<'_>> = records.iter().map(Owned::record).collect();
    let mut bytes = Vec::new();
    write_batch(&mut bytes, KEY, &mut batch).unwrap();
    bytes
}

/// A run in memory whose reads are counted.
#[derive(Debug)]
pub(crate) struct Counting {
    pub(crate) bytes: Vec<u8>,
    pub(crate) reads: AtomicU64,
}

impl Counting {
    pub(crate) fn new(bytes: Vec<u8>) -> Arc<Counting> {
        Arc::new(Counting {
            bytes,
            reads: AtomicU64::new(0),
        })
    }

    pub(crate) fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }
}

impl RunSource for Counting {
    fn read_at(&self, offset: u64, len: usize, into: &mut Vec<u8>) -> Result<(), RunError> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.bytes.read_at(offset, len, into)
    }

    fn byte_len(&self) -> u64 {
        self.bytes.len() as u64
    }
}

/// A run of `records` read through a counting source.
pub(crate) fn counted_run(records: &[Owned], number: u64) -> (Run, Arc<Counting>) {
    let source = Counting::new(run_bytes(records));
    let run = Run::open(source.clone(), number).unwrap();
    (run, source)
}

/// The trailer's offsets of a run's sections: where the secondary
/// blocks, the two filters and the fences start (docs/run-format.md).
pub(crate) fn sections(bytes: &[u8]) -> [u64; 4] {
    let trailer = bytes.len() - payonce_runs::TRAILER_LEN;
    let word =
        |at: usize| u64::from_le_bytes(bytes[trailer + at..trailer + at + 8].try_into().unwrap());
    [word(60), word(68), word(76), word(84)]
}

/// The offsets at which the blocks of a run start, from its fences.
pub(crate) fn block_starts(bytes: &[u8]) -> Vec<u64> {
    let [_, _, _, fences_at] = sections(bytes);
    let trailer = bytes.len() - payonce_runs::TRAILER_LEN;
    (fences_at as usize..trailer)
        .step_by(20)
        .map(|at| u64::from_le_bytes(bytes[at + 8..at + 16].try_into().unwrap()))
        .collect()
}

/// Rewrites the checksum that seals the fences and the trailer, after a
/// test changed either on purpose.
pub(crate) fn reseal_trailer(bytes: &mut [u8]) {
    let [_, _, _, fences_at] = sections(bytes);
    let end = bytes.len() - 4;
    let crc = crc32fast::hash(&bytes[fences_at as usize..end]);
    bytes[end..].copy_from_slice(&crc.to_le_bytes());
}
