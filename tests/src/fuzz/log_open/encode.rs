//! The `log_open` target's own encoder of docs/log-format.md, written from
//! the document rather than by calling the log's writer: format version 1
//! (frames straight after the segment header) and version 2 (a batch header
//! in front of the frames of every batch, the SHA-256 chain digest, the
//! checkpoint file's two slots).

use std::collections::BTreeMap;

use payonce_log::{
    BATCH_HEADER_LEN, CHECKPOINT_FILE, CHECKPOINT_LEN, CHECKPOINT_SLOT_LEN, CHECKPOINT_SLOT_STRIDE,
    FRAME_HEADER_LEN, LogConfig, SEAL_LEN, SEGMENT_HEADER_LEN,
};
use sha2::{Digest as _, Sha256};

/// The length field of a batch header (docs/log-format.md, "Batch header").
pub(super) const BATCH_MARKER: u32 = 0xFFFF_FFFE;
/// The length field of a seal.
const SEAL_MARKER: u32 = 0xFFFF_FFFF;

pub(super) fn frame_len(len: usize) -> usize {
    FRAME_HEADER_LEN + len.div_ceil(8) * 8
}

pub(super) fn segment_name(first_seq: u64) -> String {
    format!("{first_seq:020}.log")
}

pub(super) fn chained(chain: u32, bytes: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new_with_initial(chain);
    hasher.update(bytes);
    hasher.finalize()
}

/// The chain value of the first segment, and the seed of every batch
/// header's crc: `crc32(log_id.to_le_bytes())`.
pub(super) fn log_chain(log_id: u64) -> u32 {
    crc32fast::hash(&log_id.to_le_bytes())
}

pub(super) fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut field = [0; 4];
    field.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(field)
}

pub(super) fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut field = [0; 8];
    field.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(field)
}

/// The chain digest of a batch ("The chain digest"), with `sha2` directly
/// rather than the log's own function.
pub(super) fn digest(prev: &[u8; 32], first_seq: u64, payloads: &[&[u8]]) -> [u8; 32] {
    let mut sha = Sha256::new();
    sha.update(prev);
    sha.update(first_seq.to_le_bytes());
    sha.update(
        u32::try_from(payloads.len())
            .unwrap_or(u32::MAX)
            .to_le_bytes(),
    );
    for payload in payloads {
        sha.update(
            u32::try_from(payload.len())
                .unwrap_or(u32::MAX)
                .to_le_bytes(),
        );
        sha.update(payload);
    }
    sha.finalize().into()
}

/// A segment header of `version`; `zeros_ahead` sets flag bit 0.
pub(super) fn header(
    version: u32,
    log_id: u64,
    first_seq: u64,
    chain: u32,
    zeros_ahead: bool,
) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(SEGMENT_HEADER_LEN);
    bytes.extend_from_slice(b"PAYONCE\0");
    bytes.extend_from_slice(&version.to_le_bytes());
    bytes.extend_from_slice(&u32::from(zeros_ahead).to_le_bytes());
    bytes.extend_from_slice(&log_id.to_le_bytes());
    bytes.extend_from_slice(&first_seq.to_le_bytes());
    bytes.extend_from_slice(&chain.to_le_bytes());
    let crc = crc32fast::hash(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    bytes
}

/// Appends a record frame chained from `chain`; returns its crc.
fn push_frame(bytes: &mut Vec<u8>, chain: u32, seq: u64, payload: &[u8]) -> u32 {
    let start = bytes.len();
    bytes.extend_from_slice(&[0; 4]);
    bytes.extend_from_slice(
        &u32::try_from(payload.len())
            .unwrap_or(u32::MAX)
            .to_le_bytes(),
    );
    bytes.extend_from_slice(&seq.to_le_bytes());
    bytes.extend_from_slice(payload);
    bytes.resize(start + frame_len(payload.len()), 0);
    let crc = chained(chain, &bytes[start + 4..]);
    bytes[start..start + 4].copy_from_slice(&crc.to_le_bytes());
    crc
}

fn push_seal(bytes: &mut Vec<u8>, chain: u32, next_seq: u64) {
    let mut seal = Vec::with_capacity(SEAL_LEN);
    seal.extend_from_slice(&[0; 4]);
    seal.extend_from_slice(&SEAL_MARKER.to_le_bytes());
    seal.extend_from_slice(&next_seq.to_le_bytes());
    let crc = chained(chain, &seal[4..]);
    seal[0..4].copy_from_slice(&crc.to_le_bytes());
    bytes.extend_from_slice(&seal);
}

/// The fields of a batch header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct BatchFields {
    pub(super) first_seq: u64,
    pub(super) count: u32,
    pub(super) extent: u32,
    pub(super) chain: u32,
    pub(super) digest: [u8; 32],
}

/// A batch header's 64 bytes, its crc chained from the log's chain seed
/// over bytes 4..64, reserved bytes zero.
fn batch_header(log_id: u64, fields: &BatchFields) -> [u8; BATCH_HEADER_LEN] {
    let mut bytes = [0; BATCH_HEADER_LEN];
    bytes[4..8].copy_from_slice(&BATCH_MARKER.to_le_bytes());
    bytes[8..16].copy_from_slice(&fields.first_seq.to_le_bytes());
    bytes[16..20].copy_from_slice(&fields.count.to_le_bytes());
    bytes[20..24].copy_from_slice(&fields.extent.to_le_bytes());
    bytes[24..28].copy_from_slice(&fields.chain.to_le_bytes());
    bytes[32..64].copy_from_slice(&fields.digest);
    let crc = chained(log_chain(log_id), &bytes[4..]);
    bytes[0..4].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// The batch header at the start of `bytes` if it is one of log `log_id`:
/// marker, crc and reserved field as the document says.
pub(super) fn decode_batch_header(bytes: &[u8], log_id: u64) -> Option<BatchFields> {
    let bytes = bytes.get(..BATCH_HEADER_LEN)?;
    let verifies = u32_at(bytes, 0) == chained(log_chain(log_id), &bytes[4..]);
    if !verifies || u32_at(bytes, 4) != BATCH_MARKER || u32_at(bytes, 28) != 0 {
        return None;
    }
    let mut digest = [0; 32];
    digest.copy_from_slice(&bytes[32..64]);
    Some(BatchFields {
        first_seq: u64_at(bytes, 8),
        count: u32_at(bytes, 16),
        extent: u32_at(bytes, 20),
        chain: u32_at(bytes, 24),
        digest,
    })
}

/// One checkpoint slot: magic, version 2, its index, the log id, the
/// generation, the head, the crc of bytes 0..72, reserved zero.
pub(super) fn checkpoint_slot(
    log_id: u64,
    index: u32,
    generation: u64,
    head: (u64, [u8; 32]),
) -> [u8; CHECKPOINT_SLOT_LEN] {
    let mut bytes = [0; CHECKPOINT_SLOT_LEN];
    bytes[0..8].copy_from_slice(b"PAYONCK\0");
    bytes[8..12].copy_from_slice(&2u32.to_le_bytes());
    bytes[12..16].copy_from_slice(&index.to_le_bytes());
    bytes[16..24].copy_from_slice(&log_id.to_le_bytes());
    bytes[24..32].copy_from_slice(&generation.to_le_bytes());
    bytes[32..40].copy_from_slice(&head.0.to_le_bytes());
    bytes[40..72].copy_from_slice(&head.1);
    let crc = crc32fast::hash(&bytes[0..72]);
    bytes[72..76].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// Writes slot `index` into a checkpoint file's bytes.
pub(super) fn put_slot(file: &mut Vec<u8>, index: u32, slot: &[u8; CHECKPOINT_SLOT_LEN]) {
    file.resize(file.len().max(CHECKPOINT_LEN), 0);
    let at = index as usize * CHECKPOINT_SLOT_STRIDE;
    file[at..at + CHECKPOINT_SLOT_LEN].copy_from_slice(slot);
}

/// A stretch of a segment that is cut whole: a record frame in format 1,
/// a batch (header and frames) in format 2.
#[derive(Debug, Clone)]
pub(super) struct Unit {
    pub(super) segment: String,
    pub(super) start: usize,
    pub(super) end: usize,
    /// How many records it holds.
    pub(super) count: usize,
    /// Format 2: the batch header's bytes end here.
    pub(super) header_end: usize,
}

/// A valid log: file name to bytes, plus where each record and batch is.
pub(super) struct Built {
    pub(super) version: u32,
    pub(super) log_id: u64,
    pub(super) files: BTreeMap<String, Vec<u8>>,
    pub(super) payloads: Vec<Vec<u8>>,
    pub(super) units: Vec<Unit>,
    /// Format 2: the head after every batch, `(0, zeros)` first.
    pub(super) heads: Vec<(u64, [u8; 32])>,
    /// Format 2: the seq of the head the checkpoint file holds (its slot of
    /// the larger generation), `None` without a checkpoint file.
    pub(super) checkpoint: Option<u64>,
    pub(super) last_segment: String,
}

impl Built {
    /// The records before the first unit of the newest segment that ends
    /// after `cut`.
    pub(super) fn kept_before(&self, cut: usize) -> usize {
        self.units
            .iter()
            .take_while(|unit| unit.segment != self.last_segment || unit.end <= cut)
            .map(|unit| unit.count)
            .sum()
    }

    /// What a log ending after `kept` records is owed by its checkpoint:
    /// `true` if it must be refused (it ends before the checkpoint's head,
    /// or, in format 2 without a checkpoint file, holds a batch).
    pub(super) fn must_refuse(&self, kept: usize) -> bool {
        match (self.version, self.checkpoint) {
            (1, _) => false,
            (_, None) => kept > 0,
            (_, Some(head)) => head > kept as u64,
        }
    }
}

/// Writes the segments being built: the current one's name and bytes.
struct Segments {
    version: u32,
    log_id: u64,
    zeros_ahead: bool,
    /// Most bytes of records a segment holds: its limit less a seal.
    room: usize,
    files: BTreeMap<String, Vec<u8>>,
    name: String,
    bytes: Vec<u8>,
    chain: u32,
}

impl Segments {
    fn new(version: u32, log_id: u64, config: &LogConfig, zeros_ahead: bool) -> Segments {
        let chain = log_chain(log_id);
        Segments {
            version,
            log_id,
            zeros_ahead,
            room: usize::try_from(config.segment_len_max).unwrap_or(usize::MAX) - SEAL_LEN,
            files: BTreeMap::new(),
            name: segment_name(1),
            bytes: header(version, log_id, 1, chain, zeros_ahead),
            chain,
        }
    }

    /// Seals the current segment and starts the next, at `seq`.
    fn roll(&mut self, seq: u64) {
        push_seal(&mut self.bytes, self.chain, seq);
        let header = header(self.version, self.log_id, seq, self.chain, self.zeros_ahead);
        let bytes = std::mem::replace(&mut self.bytes, header);
        let name = std::mem::replace(&mut self.name, segment_name(seq));
        self.files.insert(name, bytes);
    }

    /// The segments, each followed by up to `zero_tail` zeros.
    fn finish(mut self, zero_tail: u64, len_max: u64) -> (BTreeMap<String, Vec<u8>>, String) {
        self.files.insert(self.name.clone(), self.bytes);
        for bytes in self.files.values_mut() {
            let len = (bytes.len() as u64 + zero_tail).min(len_max);
            bytes.resize(usize::try_from(len).unwrap_or(usize::MAX), 0);
        }
        (self.files, self.name)
    }
}

/// The format-1 log `payloads` make, each segment followed by up to
/// `zero_tail` zeros (flagged in its header when there are any).
pub(super) fn build_v1(
    log_id: u64,
    config: &LogConfig,
    payloads: Vec<Vec<u8>>,
    zero_tail: u64,
) -> Built {
    let mut segments = Segments::new(1, log_id, config, zero_tail > 0);
    let mut units = Vec::new();
    for (index, payload) in payloads.iter().enumerate() {
        let seq = index as u64 + 1;
        if segments.bytes.len() + frame_len(payload.len()) > segments.room {
            segments.roll(seq);
        }
        let start = segments.bytes.len();
        segments.chain = push_frame(&mut segments.bytes, segments.chain, seq, payload);
        units.push(Unit {
            segment: segments.name.clone(),
            start,
            end: segments.bytes.len(),
            count: 1,
            header_end: start,
        });
    }
    let (files, last_segment) = segments.finish(zero_tail, config.segment_len_max);
    Built {
        version: 1,
        log_id,
        files,
        payloads,
        units,
        heads: Vec::new(),
        checkpoint: None,
        last_segment,
    }
}

/// The records `next..next + left` that fit into the current segment
/// behind a batch header.
fn fitting(segments: &Segments, payloads: &[Vec<u8>], next: usize, left: usize) -> usize {
    let mut len = segments.bytes.len() + BATCH_HEADER_LEN;
    let mut count = 0;
    while count < left && len + frame_len(payloads[next + count].len()) <= segments.room {
        len += frame_len(payloads[next + count].len());
        count += 1;
    }
    count
}

/// Appends the batch of `payloads[first..first + count]` to the current
/// segment: its header, then its frames.
fn push_batch(
    segments: &mut Segments,
    payloads: &[Vec<u8>],
    first: usize,
    count: usize,
    prev: &[u8; 32],
) -> (Unit, [u8; 32]) {
    let first_seq = first as u64 + 1;
    let records = &payloads[first..first + count];
    let slices: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
    let start_chain = segments.chain;
    let mut frames = Vec::new();
    for (index, payload) in records.iter().enumerate() {
        segments.chain = push_frame(
            &mut frames,
            segments.chain,
            first_seq + index as u64,
            payload,
        );
    }
    let fields = BatchFields {
        first_seq,
        count: u32::try_from(count).unwrap_or(u32::MAX),
        extent: u32::try_from(frames.len()).unwrap_or(u32::MAX),
        chain: start_chain,
        digest: digest(prev, first_seq, &slices),
    };
    let start = segments.bytes.len();
    segments
        .bytes
        .extend_from_slice(&batch_header(segments.log_id, &fields));
    segments.bytes.extend_from_slice(&frames);
    let unit = Unit {
        segment: segments.name.clone(),
        start,
        end: segments.bytes.len(),
        count,
        header_end: start + BATCH_HEADER_LEN,
    };
    (unit, fields.digest)
}

/// The format-2 log `payloads` make, in batches of `sizes` records (a batch
/// that does not fit the segment is split at the roll, one batch in each
/// segment, as a flush does), each segment followed by up to `zero_tail`
/// zeros (flagged in its header when there are any).
pub(super) fn build_v2(
    log_id: u64,
    config: &LogConfig,
    payloads: Vec<Vec<u8>>,
    sizes: &[usize],
    zero_tail: u64,
) -> Built {
    let mut segments = Segments::new(2, log_id, config, zero_tail > 0);
    let mut units = Vec::new();
    let mut heads = vec![(0, [0; 32])];
    let mut next = 0;
    for &size in sizes {
        let mut left = size;
        while left > 0 {
            let count = fitting(&segments, &payloads, next, left);
            if count == 0 {
                segments.roll(next as u64 + 1);
                continue;
            }
            let prev = heads.last().map_or([0; 32], |head| head.1);
            let (unit, digest) = push_batch(&mut segments, &payloads, next, count, &prev);
            heads.push(((next + count) as u64, digest));
            units.push(unit);
            next += count;
            left -= count;
        }
    }
    let (files, last_segment) = segments.finish(zero_tail, config.segment_len_max);
    Built {
        version: 2,
        log_id,
        files,
        payloads,
        units,
        heads,
        checkpoint: None,
        last_segment,
    }
}

/// Adds the checkpoint file: slot 0 holding `heads[0]`, slot 1 `heads[1]`
/// (indexes into the built heads), the newer of the two one generation
/// ahead of the other, from `generation`.
pub(super) fn add_checkpoint(built: &mut Built, heads: [usize; 2], newer: u32, generation: u64) {
    let mut file = Vec::new();
    for index in 0..2u32 {
        let head = built.heads[heads[index as usize]];
        let ahead = u64::from(index == newer);
        let slot = checkpoint_slot(built.log_id, index, generation + ahead, head);
        put_slot(&mut file, index, &slot);
    }
    built.checkpoint = Some(built.heads[heads[newer as usize]].0);
    built.files.insert(CHECKPOINT_FILE.to_owned(), file);
}
