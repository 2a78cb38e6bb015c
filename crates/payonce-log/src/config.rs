//! How a log is opened: its limits and what "durable" means.

use std::time::Duration;

use crate::error::LogError;
use crate::format::{
    BATCH_HEADER_LEN, RECORD_MAX, RECORD_MAX_CEILING, SEAL_LEN, SEGMENT_HEADER_LEN,
    SEGMENT_LEN_MAX, SEGMENT_LEN_MAX_CEILING, frame_len,
};

/// A value for [`LogConfig::preallocate_len`] (the default is 0): 1 MiB, so
/// a file grows, and a sync commits its new size, about once per 7,000
/// records of 128 bytes.
pub const PREALLOCATE_LEN: u64 = 1 << 20;

/// Default [`LogConfig::checkpoint_records`]: a checkpoint at least every
/// 131,072 durable records (about 28 MB of the ledger's events). Below
/// about 130,000 records/s the one-second interval comes first; each
/// checkpoint costs an `fdatasync` of its own, so a smaller count costs
/// throughput at 64 threads (docs/performance.md).
pub const CHECKPOINT_RECORDS: u64 = 1 << 17;

/// Default [`LogConfig::checkpoint_interval`]: a checkpoint at least every
/// second while the head moves.
pub const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);

/// What survives when [`crate::Log::wait_durable`] has returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Durability {
    /// Every record reported durable has been written and `fdatasync`ed,
    /// and every new segment's header and directory entry synced before it
    /// was used: it survives a process crash, a kernel panic and a power
    /// loss (on a disk that honours flushes). The only setting for money.
    #[default]
    Always,
    /// Records reported durable have been handed to the operating system but
    /// never synced: they survive a process crash, not a power loss or a
    /// kernel panic. For tests and benchmarks only; unsafe for money.
    Never,
}

/// The settings of a log. A log must be reopened with limits at least as
/// large as those it was written with, or its records are refused as too
/// long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// Most bytes in one record's payload. A length field above it on disk is
    /// corruption. Default [`RECORD_MAX`]; at most [`RECORD_MAX_CEILING`].
    pub record_max: u32,
    /// Most bytes in one segment file, header and seal included; the log
    /// rolls to a new segment before exceeding it. Default
    /// [`SEGMENT_LEN_MAX`]; at most [`SEGMENT_LEN_MAX_CEILING`], and large
    /// enough for a header, one record of `record_max` bytes and a seal.
    pub segment_len_max: u64,
    /// What a durable record survives.
    pub durability: Durability,
    /// Zero bytes written ahead of the records whenever a segment's file
    /// must grow, so that most batches overwrite space whose length is
    /// already on stable storage and their `fdatasync` need not commit a new
    /// file size: more durable appends per second (about half as many
    /// again on the benchmark machine). Batch headers make a power loss
    /// during such a write recoverable like any torn write
    /// (docs/log-format.md, "Zeros ahead of the records"). Default [`PREALLOCATE_LEN`]; 0 appends every batch at the
    /// end of the file. Never takes a file past `segment_len_max`; at most
    /// [`SEGMENT_LEN_MAX_CEILING`].
    pub preallocate_len: u64,
    /// A checkpoint of the durable head is written once this many records
    /// have become durable since the last one (0: never for that reason).
    /// By a thread of the log's own when `checkpoint_interval` is set,
    /// otherwise by the caller whose flush made them durable, after it has
    /// woken the others. Default [`CHECKPOINT_RECORDS`]. A checkpoint is
    /// always written at a clean close and at every segment roll.
    pub checkpoint_records: u64,
    /// A thread of the log writes a checkpoint this often while the durable
    /// head moves. Default [`CHECKPOINT_INTERVAL`]; `None` starts no
    /// thread (the simulator, which must not depend on time; a caller may
    /// drive [`crate::Log::checkpoint`] itself).
    pub checkpoint_interval: Option<Duration>,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            record_max: RECORD_MAX,
            segment_len_max: SEGMENT_LEN_MAX,
            durability: Durability::Always,
            preallocate_len: PREALLOCATE_LEN,
            checkpoint_records: CHECKPOINT_RECORDS,
            checkpoint_interval: Some(CHECKPOINT_INTERVAL),
        }
    }
}

impl LogConfig {
    /// Checks the settings against each other and the ceilings.
    pub fn validate(&self) -> Result<(), LogError> {
        if self.record_max > RECORD_MAX_CEILING {
            return Err(LogError::InvalidConfig {
                setting: "record_max",
                value: u64::from(self.record_max),
                rule: format!("at most {RECORD_MAX_CEILING}"),
            });
        }
        if self.segment_len_max > SEGMENT_LEN_MAX_CEILING {
            return Err(LogError::InvalidConfig {
                setting: "segment_len_max",
                value: self.segment_len_max,
                rule: format!("at most {SEGMENT_LEN_MAX_CEILING}"),
            });
        }
        if self.preallocate_len > SEGMENT_LEN_MAX_CEILING {
            return Err(LogError::InvalidConfig {
                setting: "preallocate_len",
                value: self.preallocate_len,
                rule: format!("at most {SEGMENT_LEN_MAX_CEILING}"),
            });
        }
        if self.checkpoint_interval == Some(Duration::ZERO) {
            return Err(LogError::InvalidConfig {
                setting: "checkpoint_interval",
                value: 0,
                rule: "above zero, or None for no checkpoint thread".to_owned(),
            });
        }
        let needed = self.segment_len_needed();
        if self.segment_len_max < needed {
            return Err(LogError::InvalidConfig {
                setting: "segment_len_max",
                value: self.segment_len_max,
                rule: format!(
                    "at least {needed}: a {SEGMENT_HEADER_LEN}-byte header, a \
                     {BATCH_HEADER_LEN}-byte batch header, one record of record_max = {} \
                     bytes framed, and a {SEAL_LEN}-byte seal",
                    self.record_max
                ),
            });
        }
        Ok(())
    }

    /// Whether segments this config creates write zeros ahead of their
    /// records, which their headers then say.
    pub(crate) fn zeros_ahead(&self) -> bool {
        self.preallocate_len > 0
    }

    /// The smallest segment that holds a header, a batch of one largest
    /// record and a seal.
    fn segment_len_needed(&self) -> u64 {
        (SEGMENT_HEADER_LEN + BATCH_HEADER_LEN + SEAL_LEN) as u64 + frame_len(self.record_max)
    }
}
