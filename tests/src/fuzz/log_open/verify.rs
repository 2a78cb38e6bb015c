//! The `log_open` target's own reading of docs/log-format.md, against which
//! every record a scan returns is checked: the frame, its crc chain, the
//! batch it stands in (format 2) and the batch's chain digest, and, for a
//! scan that ended cleanly, the checkpoint's head among the heads reached.

use payonce_log::{
    BATCH_HEADER_LEN, CHECKPOINT_FILE, CHECKPOINT_SLOT_LEN, CHECKPOINT_SLOT_STRIDE, MemStorage,
    OwnedRecord, SEGMENT_HEADER_LEN,
};

use super::encode::{
    BatchFields, chained, decode_batch_header, digest, frame_len, log_chain, segment_name, u32_at,
    u64_at,
};

/// A head: a batch's last seq and its digest.
type Head = (u64, [u8; 32]);

/// The batch of format 2 whose records are being checked.
struct OpenBatch {
    segment: u64,
    fields: BatchFields,
    /// Where the next frame must start, and where the extent ends.
    next_at: usize,
    end: usize,
    payloads: Vec<Vec<u8>>,
}

/// Follows the digest chain over the records of a scan.
#[derive(Default)]
struct Chain {
    /// The heads reached: a whole batch, or a whole segment of format 1.
    heads: Vec<Head>,
    open: Option<OpenBatch>,
    /// The segment of format 1 being read: its first seq and payloads.
    v1: Option<(u64, Vec<Vec<u8>>)>,
}

impl Chain {
    fn prev(&self) -> [u8; 32] {
        self.heads.last().map_or([0; 32], |head| head.1)
    }

    fn close_v1(&mut self) {
        if let Some((first_seq, payloads)) = self.v1.take() {
            let slices: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
            let seq = first_seq + payloads.len() as u64 - 1;
            self.heads
                .push((seq, digest(&self.prev(), first_seq, &slices)));
        }
    }

    /// `record`, in a segment of `segment` bytes, continues the chain.
    fn record(&mut self, segment: &[u8], record: &OwnedRecord) {
        if u32_at(segment, 8) == 1 {
            assert!(self.open.is_none(), "a batch of format 2 left unfinished");
            match &mut self.v1 {
                Some((first, payloads)) if *first == record.position.segment => {
                    payloads.push(record.payload.clone());
                }
                _ => {
                    self.close_v1();
                    self.v1 = Some((record.position.segment, vec![record.payload.clone()]));
                }
            }
            return;
        }
        self.close_v1();
        if self.open.is_none() {
            self.open = Some(open_batch(segment, record));
        }
        let Some(batch) = self.open.as_mut() else {
            unreachable!("a batch was opened")
        };
        let prev = self.heads.last().map_or([0; 32], |head| head.1);
        let seq = record.seq;
        assert_eq!(
            batch.segment, record.position.segment,
            "record {seq} is in another segment than its batch"
        );
        assert_eq!(
            record.position.offset as usize, batch.next_at,
            "record {seq} is not where the frame before it in its batch ends"
        );
        batch.next_at += frame_len(record.payload.len());
        assert!(
            batch.next_at <= batch.end,
            "record {seq} runs past its batch"
        );
        batch.payloads.push(record.payload.clone());
        if batch.payloads.len() == batch.fields.count as usize {
            assert_eq!(batch.next_at, batch.end, "a batch's frames leave room");
            let slices: Vec<&[u8]> = batch.payloads.iter().map(Vec::as_slice).collect();
            let computed = digest(&prev, batch.fields.first_seq, &slices);
            assert_eq!(
                computed, batch.fields.digest,
                "the batch ending at {seq} does not hash to its digest"
            );
            self.heads.push((seq, computed));
            self.open = None;
        }
    }
}

/// The batch header in front of `record`, the first of its batch, checked.
fn open_batch(segment: &[u8], record: &OwnedRecord) -> OpenBatch {
    let seq = record.seq;
    let offset = usize::try_from(record.position.offset).unwrap_or(usize::MAX);
    assert!(
        offset >= SEGMENT_HEADER_LEN + BATCH_HEADER_LEN,
        "record {seq} has no room for its batch header"
    );
    let at = offset - BATCH_HEADER_LEN;
    let Some(fields) = decode_batch_header(&segment[at..], u64_at(segment, 16)) else {
        panic!("record {seq} is not behind a batch header that verifies");
    };
    assert_eq!(
        fields.first_seq, seq,
        "the batch header of {seq}: first seq"
    );
    assert_eq!(
        fields.chain, record.position.chain,
        "the batch header of {seq}: chain"
    );
    assert!(
        fields.count >= 1 && fields.extent.is_multiple_of(8),
        "the batch header of {seq}: count and extent"
    );
    let end = offset + fields.extent as usize;
    assert!(
        end <= segment.len(),
        "the batch of {seq} runs past its file"
    );
    OpenBatch {
        segment: record.position.segment,
        fields,
        next_at: offset,
        end,
        payloads: Vec::new(),
    }
}

/// The frame of `record` verifies chained from `chain`: returns its crc.
fn verify_frame(segment: &[u8], record: &OwnedRecord, chain: u32) -> u32 {
    let seq = record.seq;
    assert_eq!(
        u32_at(segment, 36),
        crc32fast::hash(&segment[..36]),
        "the segment of record {seq} has a header that does not verify"
    );
    assert_eq!(record.position.chain, chain, "record {seq} chain");
    let offset = usize::try_from(record.position.offset).unwrap_or(usize::MAX);
    assert!(
        offset >= SEGMENT_HEADER_LEN && offset.is_multiple_of(8),
        "record {seq} at a bad offset"
    );
    let size = frame_len(record.payload.len());
    assert!(offset + size <= segment.len(), "record {seq} runs past");
    let frame = &segment[offset..offset + size];
    let stored = u32_at(frame, 0);
    assert_eq!(chained(chain, &frame[4..]), stored, "record {seq} crc");
    assert_eq!(u32_at(frame, 4) as usize, record.payload.len(), "{seq} len");
    assert_eq!(u64_at(frame, 8), seq, "record {seq} seq field");
    let payload = &frame[16..16 + record.payload.len()];
    assert_eq!(payload, &record.payload[..], "record {seq} payload");
    assert!(
        frame[16 + record.payload.len()..].iter().all(|&b| b == 0),
        "record {seq} padding"
    );
    stored
}

/// The head in the checkpoint file's whole slot of the larger generation
/// (slot 1 if equal) and its log id; `Err` if neither slot is whole,
/// `Ok(None)` without a file.
fn checkpoint(mem: &MemStorage) -> Result<Option<(u64, Head)>, ()> {
    let Some(file) = mem.file(CHECKPOINT_FILE) else {
        return Ok(None);
    };
    let slot = |index: u32| {
        let at = index as usize * CHECKPOINT_SLOT_STRIDE;
        let bytes = file.get(at..at + CHECKPOINT_SLOT_LEN)?;
        let whole = &bytes[0..8] == b"PAYONCK\0"
            && u32_at(bytes, 8) == 2
            && u32_at(bytes, 12) == index
            && u32_at(bytes, 72) == crc32fast::hash(&bytes[..72])
            && u32_at(bytes, 76) == 0;
        let mut digest = [0; 32];
        digest.copy_from_slice(&bytes[40..72]);
        let head = (u64_at(bytes, 32), digest);
        whole.then(|| (u64_at(bytes, 24), u64_at(bytes, 16), head))
    };
    let newest = match (slot(0), slot(1)) {
        (Some(zero), Some(one)) if zero.0 > one.0 => zero,
        (_, Some(one)) => one,
        (Some(zero), None) => zero,
        (None, None) => return Err(()),
    };
    Ok(Some((newest.1, newest.2)))
}

/// Checks each record against the bytes of its file, with this module's
/// own reading of the format: the frame's crc verifies from the chain the
/// record names, the chain continues from the previous record's crc (the
/// first from the log id of the first segment), fields, payload and
/// padding match; in format 2, every record stands in a batch whose header
/// verifies and continues the log, whose frames fill its extent and which
/// hashes to its digest. A scan that ended cleanly (`complete`) returned
/// whole batches only, and reached the checkpoint's head, which is of the
/// log; without a checkpoint file, it returned no batch of format 2.
pub(super) fn assert_records_verify(mem: &MemStorage, records: &[OwnedRecord], complete: bool) {
    let mut chain = None;
    let mut digests = Chain::default();
    let mut log_id = None;
    for (index, record) in records.iter().enumerate() {
        assert_eq!(record.seq, index as u64 + 1, "records out of sequence");
        let name = segment_name(record.position.segment);
        let Some(bytes) = mem.file(&name) else {
            panic!("record {} names segment {name}, which is gone", record.seq);
        };
        assert!(bytes.len() >= SEGMENT_HEADER_LEN, "{name} has no header");
        let id = *log_id.get_or_insert(u64_at(&bytes, 16));
        assert_eq!(u64_at(&bytes, 16), id, "record {} log id", record.seq);
        let expected = chain.unwrap_or_else(|| log_chain(id));
        chain = Some(verify_frame(&bytes, record, expected));
        digests.record(&bytes, record);
    }
    if !complete {
        return;
    }
    assert!(
        digests.open.is_none(),
        "a clean scan returned part of a batch"
    );
    digests.close_v1();
    match checkpoint(mem) {
        Err(()) => panic!("a clean scan with a checkpoint file of no whole slot"),
        Ok(None) => assert!(
            records.iter().all(|record| is_v1(mem, record)),
            "a clean scan of batches of format 2 without a checkpoint file"
        ),
        Ok(Some((slot_log, head))) => {
            if let Some(id) = log_id {
                assert_eq!(slot_log, id, "a clean scan under another log's checkpoint");
            }
            assert!(
                head.0 == 0 && head.1 == [0; 32] || digests.heads.contains(&head),
                "a clean scan that does not reach the checkpoint's head {}",
                head.0
            );
        }
    }
}

fn is_v1(mem: &MemStorage, record: &OwnedRecord) -> bool {
    mem.file(&segment_name(record.position.segment))
        .is_some_and(|bytes| u32_at(&bytes, 8) == 1)
}
