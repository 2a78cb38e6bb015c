//! The recovery decision table: what opening for writing does with each way
//! a log can end on disk. It reads a description of the end the scan found
//! and returns the repairs, in the order they are made, or a refusal; it
//! reads and writes no file, so every case is decided before anything is
//! changed and is tested without a disk.

use crate::chain::Head;
use crate::format::{FORMAT_VERSION_V1, SEAL_LEN, SEGMENT_HEADER_LEN, first_chain};
use crate::record::{Recovery, TornTail};
use crate::scan::Unsealed;

/// A change that opening a log for writing makes to its directory, listed
/// by [`crate::RecoveryPlan::repairs`] before any is made. A segment is
/// named by its first sequence number, as its file is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Repair {
    /// The directory holds no segment (or does not exist): create segment 1
    /// of a new log under a temporary name, write its header, sync it,
    /// rename it into place and sync the directory.
    CreateFirstSegment {
        /// The new log's random identity.
        log_id: u64,
    },
    /// The newest segment is shorter than a header, so it holds no record:
    /// copy its `len` bytes, from offset 0, to `<segment>.torn-0`, then
    /// rename a new segment of the same name over it, so a crash during the
    /// repair leaves either the torn file or the new one.
    ReplaceTornHeader {
        /// The segment.
        segment: u64,
        /// The bytes of the torn header.
        len: u64,
        /// The log id the new header carries: the log's, or a new one if no
        /// segment has a whole header.
        log_id: u64,
        /// The chain value the new header carries, from which the next
        /// record's checksum continues.
        chain: u32,
    },
    /// The `len` bytes at `offset`, after the segment's last record, are a
    /// write cut short: copy them to `<segment>.torn-<offset>` (synced,
    /// directory synced), then truncate the segment to `offset` and sync it.
    CutTornTail {
        /// The segment.
        segment: u64,
        /// Where its last record ends and the torn bytes start.
        offset: u64,
        /// The torn bytes, up to the last that is not zero.
        len: u64,
    },
    /// The newest segment is of format version 1 and holds records: roll to
    /// a new segment of the current format, `next_seq`, as a roll does
    /// (create it under a temporary name, sync, rename, sync the
    /// directory), then seal the old one at `offset`, the end of its
    /// records. Records are never written into a version 1 segment.
    UpgradeRoll {
        /// The newest segment, of format version 1.
        segment: u64,
        /// Where its last record ends.
        offset: u64,
        /// The first sequence number of the new segment.
        next_seq: u64,
        /// The checksum the seal and the new segment's first record chain
        /// from.
        chain: u32,
    },
    /// The newest segment is of format version 1 and holds no record:
    /// rename a segment of the current format, with the same log id, first
    /// seq and chain, over it.
    RewriteHeader {
        /// The segment.
        segment: u64,
        /// The log id the header carries.
        log_id: u64,
        /// The chain value the header carries.
        chain: u32,
    },
    /// The log has no checkpoint file (it is new, or of format version 1):
    /// create one holding `head` under a temporary name, sync it, rename it
    /// into place and sync the directory.
    CreateCheckpoint {
        /// The head it holds: where the log ends.
        head: Head,
    },
    /// A roll stopped before the seal of the segment before the newest was
    /// durable, while the newest holds no record: write the seal
    /// ([`crate::SEAL_LEN`] bytes) at `offset`, the end of its records,
    /// naming `next_seq`, and sync it.
    SealInterruptedRoll {
        /// The segment before the newest.
        segment: u64,
        /// Where its last record ends.
        offset: u64,
        /// The sequence number the seal names: the newest segment's first.
        next_seq: u64,
        /// The checksum the seal chains from: its last record's.
        chain: u32,
    },
}

impl Repair {
    /// The segment the repair changes or creates.
    pub fn segment(&self) -> u64 {
        match *self {
            Repair::CreateFirstSegment { .. } => 1,
            Repair::ReplaceTornHeader { segment, .. }
            | Repair::CutTornTail { segment, .. }
            | Repair::UpgradeRoll { segment, .. }
            | Repair::RewriteHeader { segment, .. }
            | Repair::SealInterruptedRoll { segment, .. } => segment,
            // A file beside the segments.
            Repair::CreateCheckpoint { .. } => 0,
        }
    }
}

/// How a log ends on disk, as its scan found it: the facts the decision
/// table reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LogEnd {
    pub(crate) newest: Newest,
    /// The segment before the newest, when a roll left it without its seal
    /// (or with part of one) and the newest holds no record.
    pub(crate) unsealed: Option<Unsealed>,
    /// The log id of the headers; `None` when no segment has a whole one.
    pub(crate) log_id: Option<u64>,
    /// The sequence number the next record takes.
    pub(crate) next_seq: u64,
    /// The checksum the next record chains from.
    pub(crate) chain: u32,
    /// The head the log ends with.
    pub(crate) head: Head,
    /// The head its checkpoint holds, `None` without a checkpoint file.
    pub(crate) checkpoint: Option<Head>,
}

/// The newest segment, as the scan left it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Newest {
    /// There is no segment: an empty or missing directory.
    Missing,
    /// The newest segment is `len` bytes, shorter than a header.
    TornHeader { segment: u64, len: u64 },
    /// The newest segment has a whole header; its records end at
    /// `records_end`, followed by `torn_len` torn bytes (zeros written ahead
    /// of the records are not counted).
    Whole {
        segment: u64,
        records_end: u64,
        torn_len: u64,
        /// The header's [`crate::format::Header::zeros_ahead`] flag.
        zeros_ahead: bool,
        /// The header's format version.
        version: u32,
    },
}

impl Newest {
    /// The segment the writer appends to once the repairs are made.
    pub(crate) fn segment(&self) -> u64 {
        match *self {
            Newest::Missing => 1,
            Newest::TornHeader { segment, .. } | Newest::Whole { segment, .. } => segment,
        }
    }
}

/// The refusal of the decision table: the newest segment's records end too
/// close to `segment_len_max` for the seal a roll would write after them,
/// so the log was written with a larger limit than it is opened with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SealDoesNotFit {
    pub(crate) segment: u64,
    pub(crate) records_end: u64,
}

/// The decision table: the repairs that open a log ending as `end`, in the
/// order they are made, or why it is refused before anything is changed.
/// `fresh_log_id` is the identity a new log takes if one is started.
///
/// | newest segment | segment before it | repairs |
/// | --- | --- | --- |
/// | none (empty directory) | none | create the first segment |
/// | whole header, no room for a seal after its records | any | refused |
/// | whole header, nothing torn | sealed, or none | none |
/// | whole header, torn bytes after the records | sealed, or none | cut the torn tail |
/// | shorter than a header | sealed, or none | replace it (under a new log id if it is the only segment) |
/// | header only, or shorter | unsealed | the newest's repair, then cut a torn seal, then seal |
/// | format version 1, records | sealed, or none | the newest's repair, then roll to a new segment |
/// | format version 1, no record | any | the newest's repair, then a new header over it, then the above |
///
/// A log without a checkpoint file (new, or of format version 1) gets one
/// last, holding its head.
///
/// The newest segment's repair always comes first: the writer takes that
/// segment, checked against what the scan saw, before the one before it
/// is changed.
pub(crate) fn decide(
    end: &LogEnd,
    segment_len_max: u64,
    fresh_log_id: u64,
) -> Result<Vec<Repair>, SealDoesNotFit> {
    let mut repairs = Vec::with_capacity(3);
    match end.newest {
        Newest::Missing => {
            assert!(end.unsealed.is_none() && end.log_id.is_none());
            repairs.push(Repair::CreateFirstSegment {
                log_id: fresh_log_id,
            });
        }
        // A log written with a larger segment limit cannot take its seal
        // under this one: refuse before changing anything.
        Newest::Whole {
            segment,
            records_end,
            ..
        } if records_end + SEAL_LEN as u64 > segment_len_max => {
            return Err(SealDoesNotFit {
                segment,
                records_end,
            });
        }
        Newest::Whole {
            segment,
            records_end,
            torn_len,
            version,
            ..
        } => {
            if torn_len > 0 {
                repairs.push(Repair::CutTornTail {
                    segment,
                    offset: records_end,
                    len: torn_len,
                });
            }
            if version == FORMAT_VERSION_V1 {
                repairs.push(upgrade(end, segment, records_end));
            }
        }
        Newest::TornHeader { segment, len } => {
            let (log_id, chain) = match end.log_id {
                Some(log_id) => (log_id, end.chain),
                None => (fresh_log_id, first_chain(fresh_log_id)),
            };
            repairs.push(Repair::ReplaceTornHeader {
                segment,
                len,
                log_id,
                chain,
            });
        }
    }
    if let Some(unsealed) = &end.unsealed {
        seal_interrupted_roll(end, unsealed, &mut repairs);
    }
    if end.checkpoint.is_none() {
        repairs.push(Repair::CreateCheckpoint { head: end.head });
    }
    Ok(repairs)
}

/// The repairs that finish a roll `unsealed` left unsealed.
fn seal_interrupted_roll(end: &LogEnd, unsealed: &Unsealed, repairs: &mut Vec<Repair>) {
    // The scan excuses a missing seal only before a newest segment that
    // holds no record: the seal names that segment's first record.
    assert_eq!(end.newest.segment(), end.next_seq);
    assert_eq!(unsealed.chain, end.chain);
    if unsealed.torn_len > 0 {
        repairs.push(Repair::CutTornTail {
            segment: unsealed.first_seq,
            offset: unsealed.valid_end,
            len: unsealed.torn_len,
        });
    }
    repairs.push(Repair::SealInterruptedRoll {
        segment: unsealed.first_seq,
        offset: unsealed.valid_end,
        next_seq: end.next_seq,
        chain: unsealed.chain,
    });
}

/// How the newest segment, of format version 1, whose records end at
/// `records_end`, becomes one the writer appends to.
fn upgrade(end: &LogEnd, segment: u64, records_end: u64) -> Repair {
    if records_end > SEGMENT_HEADER_LEN as u64 {
        return Repair::UpgradeRoll {
            segment,
            offset: records_end,
            next_seq: end.next_seq,
            chain: end.chain,
        };
    }
    Repair::RewriteHeader {
        segment,
        log_id: end.log_id.unwrap_or_default(),
        chain: end.chain,
    }
}

/// What opening reports once `repairs` are made to a log ending as `end`,
/// whose scan verified `records` records in `segments` segment files.
/// Where torn bytes are saved is chosen only when they are, so `saved_as`
/// is `None` here.
pub(crate) fn reported(end: &LogEnd, repairs: &[Repair], records: u64, segments: u64) -> Recovery {
    let created = repairs
        .iter()
        .filter(|repair| {
            matches!(
                repair,
                Repair::CreateFirstSegment { .. }
                    | Repair::ReplaceTornHeader { .. }
                    | Repair::UpgradeRoll { .. }
            )
        })
        .count() as u64;
    // The first torn bytes cut are the ones reported: a torn header or tail
    // in the newest segment before a torn seal in the one before it.
    let torn_tail = repairs.iter().find_map(|repair| match *repair {
        Repair::ReplaceTornHeader { segment, len, .. } => Some((segment, 0, len)),
        Repair::CutTornTail {
            segment,
            offset,
            len,
        } => Some((segment, offset, len)),
        _ => None,
    });
    Recovery {
        records,
        segments: segments + created,
        last_seq: end.next_seq - 1,
        torn_tail: torn_tail.map(|(segment, offset, len)| TornTail {
            segment,
            offset,
            len,
            saved_as: None,
        }),
        interrupted_roll: repairs
            .iter()
            .any(|repair| matches!(repair, Repair::SealInterruptedRoll { .. })),
        head: end.head,
        checkpoint: end.checkpoint,
    }
}

#[cfg(test)]
mod tests {
    //! The decision table, case by case: each test fails if its case's
    //! repairs change.

    use super::*;
    use crate::format::FORMAT_VERSION;

    const LOG_ID: u64 = 0x1234_5678_9abc_def0;
    const FRESH_LOG_ID: u64 = 0x0fed_cba9_8765_4321;
    const CHAIN: u32 = 0xdead_beef;
    const SEGMENT_LEN_MAX: u64 = 400;
    const HEADER: u64 = SEGMENT_HEADER_LEN as u64;
    const HEAD: Head = Head {
        seq: 20,
        digest: crate::chain::Digest([3; 32]),
    };

    /// A log of 20 records whose newest segment, starting at 15, ends as
    /// `newest`, after sealed segments.
    fn ending(newest: Newest) -> LogEnd {
        LogEnd {
            newest,
            unsealed: None,
            log_id: Some(LOG_ID),
            next_seq: 21,
            chain: CHAIN,
            head: HEAD,
            checkpoint: Some(HEAD),
        }
    }

    /// A log whose newest segment, starting at 21, holds no record and ends
    /// as `newest`, after segment 15, whose records end at 360 followed by
    /// `torn_seal` bytes of a seal.
    fn rolling(newest: Newest, torn_seal: u64) -> LogEnd {
        LogEnd {
            unsealed: Some(Unsealed {
                first_seq: 15,
                valid_end: 360,
                torn_len: torn_seal,
                chain: CHAIN,
            }),
            ..ending(newest)
        }
    }

    fn decided(end: &LogEnd) -> Result<Vec<Repair>, SealDoesNotFit> {
        decide(end, SEGMENT_LEN_MAX, FRESH_LOG_ID)
    }

    fn whole(records_end: u64, torn_len: u64) -> Newest {
        Newest::Whole {
            segment: 15,
            records_end,
            torn_len,
            zeros_ahead: false,
            version: FORMAT_VERSION,
        }
    }

    #[test]
    fn an_empty_directory_gets_its_first_segment_under_a_new_log_id() {
        // Guards against a fresh directory opening without a segment that marks it as a log.
        let end = LogEnd {
            newest: Newest::Missing,
            unsealed: None,
            log_id: None,
            next_seq: 1,
            chain: 0,
            head: Head::GENESIS,
            checkpoint: None,
        };
        assert_eq!(
            decided(&end),
            Ok(vec![
                Repair::CreateFirstSegment {
                    log_id: FRESH_LOG_ID
                },
                Repair::CreateCheckpoint {
                    head: Head::GENESIS
                },
            ])
        );
    }

    #[test]
    fn a_clean_end_needs_no_repair() {
        // Guards against an open changing a log that a clean close left whole.
        assert_eq!(decided(&ending(whole(200, 0))), Ok(vec![]));
    }

    #[test]
    fn zeros_ahead_of_the_records_alone_need_no_repair() {
        // Guards against the zeros a writer wrote ahead being cut as torn bytes.
        let newest = Newest::Whole {
            segment: 15,
            records_end: 200,
            torn_len: 0,
            zeros_ahead: true,
            version: FORMAT_VERSION,
        };
        assert_eq!(decided(&ending(newest)), Ok(vec![]));
    }

    #[test]
    fn a_torn_tail_is_cut_at_the_end_of_the_last_record() {
        // Guards against a write cut short being kept, or cut anywhere but after the last record.
        assert_eq!(
            decided(&ending(whole(200, 7))),
            Ok(vec![Repair::CutTornTail {
                segment: 15,
                offset: 200,
                len: 7
            }])
        );
    }

    #[test]
    fn records_without_room_for_a_seal_are_refused_before_any_cut() {
        // Guards against a log written under a larger segment limit being cut or sealed under a smaller one.
        let refused = Err(SealDoesNotFit {
            segment: 15,
            records_end: SEGMENT_LEN_MAX - 8,
        });
        assert_eq!(decided(&ending(whole(SEGMENT_LEN_MAX - 8, 0))), refused);
        assert_eq!(decided(&ending(whole(SEGMENT_LEN_MAX - 8, 8))), refused);
    }

    #[test]
    fn records_ending_a_seal_before_the_limit_are_not_refused() {
        // Guards against refusing a segment whose seal fits exactly.
        let end = ending(whole(SEGMENT_LEN_MAX - SEAL_LEN as u64, 0));
        assert_eq!(decided(&end), Ok(vec![]));
    }

    #[test]
    fn a_torn_header_on_the_only_segment_starts_a_new_log() {
        // Guards against a log that crashed while being created refusing to open forever.
        let end = LogEnd {
            newest: Newest::TornHeader {
                segment: 1,
                len: 10,
            },
            unsealed: None,
            log_id: None,
            next_seq: 1,
            chain: 0,
            head: Head::GENESIS,
            checkpoint: None,
        };
        assert_eq!(
            decided(&end),
            Ok(vec![
                Repair::ReplaceTornHeader {
                    segment: 1,
                    len: 10,
                    log_id: FRESH_LOG_ID,
                    chain: first_chain(FRESH_LOG_ID),
                },
                Repair::CreateCheckpoint {
                    head: Head::GENESIS
                },
            ])
        );
    }

    #[test]
    fn a_torn_header_after_sealed_segments_is_replaced_continuing_the_log() {
        // Guards against a replaced header breaking the log id or the chain of the segments before it.
        let newest = Newest::TornHeader {
            segment: 21,
            len: 0,
        };
        assert_eq!(
            decided(&ending(newest)),
            Ok(vec![Repair::ReplaceTornHeader {
                segment: 21,
                len: 0,
                log_id: LOG_ID,
                chain: CHAIN,
            }])
        );
    }

    #[test]
    fn an_unsealed_segment_before_an_empty_newest_one_is_sealed() {
        // Guards against a roll cut between rename and seal being refused or left unsealed.
        let newest = Newest::Whole {
            segment: 21,
            records_end: HEADER,
            torn_len: 0,
            zeros_ahead: false,
            version: FORMAT_VERSION,
        };
        assert_eq!(
            decided(&rolling(newest, 0)),
            Ok(vec![Repair::SealInterruptedRoll {
                segment: 15,
                offset: 360,
                next_seq: 21,
                chain: CHAIN,
            }])
        );
    }

    #[test]
    fn a_torn_seal_is_cut_before_the_seal_is_written() {
        // Guards against a seal written after, rather than over, the bytes of a torn one.
        let newest = Newest::Whole {
            segment: 21,
            records_end: HEADER,
            torn_len: 0,
            zeros_ahead: true,
            version: FORMAT_VERSION,
        };
        assert_eq!(
            decided(&rolling(newest, 5)),
            Ok(vec![
                Repair::CutTornTail {
                    segment: 15,
                    offset: 360,
                    len: 5,
                },
                Repair::SealInterruptedRoll {
                    segment: 15,
                    offset: 360,
                    next_seq: 21,
                    chain: CHAIN,
                },
            ])
        );
    }

    #[test]
    fn a_torn_header_after_an_unsealed_segment_is_replaced_before_the_seal() {
        // Guards against sealing a segment whose successor is not whole yet.
        let newest = Newest::TornHeader {
            segment: 21,
            len: 12,
        };
        assert_eq!(
            decided(&rolling(newest, 16)),
            Ok(vec![
                Repair::ReplaceTornHeader {
                    segment: 21,
                    len: 12,
                    log_id: LOG_ID,
                    chain: CHAIN,
                },
                Repair::CutTornTail {
                    segment: 15,
                    offset: 360,
                    len: 16,
                },
                Repair::SealInterruptedRoll {
                    segment: 15,
                    offset: 360,
                    next_seq: 21,
                    chain: CHAIN,
                },
            ])
        );
    }

    #[test]
    fn the_report_names_the_first_torn_bytes_and_counts_a_new_segment() {
        // Guards against the report naming a torn seal over a torn header, or missing a segment made anew.
        let end = rolling(
            Newest::TornHeader {
                segment: 21,
                len: 12,
            },
            16,
        );
        let repairs = decided(&end).unwrap_or_default();
        assert_eq!(
            reported(&end, &repairs, 20, 3),
            Recovery {
                records: 20,
                segments: 4,
                last_seq: 20,
                torn_tail: Some(TornTail {
                    segment: 21,
                    offset: 0,
                    len: 12,
                    saved_as: None,
                }),
                interrupted_roll: true,
                head: HEAD,
                checkpoint: Some(HEAD),
            }
        );
    }
}
