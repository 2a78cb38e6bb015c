//! Following the chain of a log's batches as its events are read: each
//! batch's digest is recomputed from the head before it and compared with
//! the one the database holds, so an event rewritten, added or taken away
//! is found, with its place.

use payonce::StoreError;

use crate::chain::{Digest, Head, batch_digest};
use crate::error::damaged;

/// One event as read with its batch: `(seq, payload, first_seq, last_seq,
/// digest)` of the batch it belongs to.
pub(crate) struct Row {
    pub(crate) seq: u64,
    pub(crate) payload: Vec<u8>,
    pub(crate) first_seq: u64,
    pub(crate) last_seq: u64,
    pub(crate) digest: Vec<u8>,
}

/// The chain followed so far: the head of the last whole batch read, and
/// the events read of the batch after it.
#[derive(Debug, Default)]
pub(crate) struct Follower {
    pub(crate) head: Head,
    partial: Option<Partial>,
}

#[derive(Debug)]
struct Partial {
    first_seq: u64,
    last_seq: u64,
    digest: Digest,
    payloads: Vec<Vec<u8>>,
}

impl Follower {
    /// The last event read, whole batch or not.
    pub(crate) fn position(&self) -> u64 {
        match &self.partial {
            Some(partial) => partial.first_seq + partial.payloads.len() as u64 - 1,
            None => self.head.seq,
        }
    }

    /// Checks that the batch ending at this head is still the one this
    /// process read: `row` is what the database holds there now.
    pub(crate) fn check_head(&self, found: Option<(u64, Vec<u8>)>) -> Result<(), StoreError> {
        if self.head.seq == 0 {
            return Ok(());
        }
        match found {
            Some((last_seq, digest))
                if last_seq == self.head.seq && digest == self.head.digest.0 =>
            {
                Ok(())
            }
            _ => Err(damaged(
                self.head.seq,
                format!(
                    "the batch this process read up to {} (head {}) is gone or changed: the log \
                     was rewritten or rewound (a restore, or a failover that lost commits)",
                    self.head.seq, self.head
                ),
            )),
        }
    }

    /// Takes in the next event read; once it ends its batch, checks the
    /// batch's digest.
    pub(crate) fn follow(&mut self, row: &Row) -> Result<(), StoreError> {
        let (expected, prev) = (self.position() + 1, self.head.digest);
        if row.seq != expected {
            return Err(damaged(
                expected,
                format!("event {} follows where event {expected} belongs", row.seq),
            ));
        }
        let partial = match &mut self.partial {
            Some(partial)
                if partial.first_seq == row.first_seq && partial.last_seq == row.last_seq =>
            {
                partial
            }
            Some(partial) => {
                return Err(damaged(
                    row.seq,
                    format!(
                        "event {} is in the batch of {} to {}, but the batch of {} to {} is not whole",
                        row.seq, row.first_seq, row.last_seq, partial.first_seq, partial.last_seq
                    ),
                ));
            }
            None => self.start_batch(row)?,
        };
        partial.payloads.push(row.payload.clone());
        if row.seq == partial.last_seq {
            let digest = batch_digest(
                &prev,
                partial.first_seq,
                partial.payloads.iter().map(Vec::as_slice),
            );
            if digest != partial.digest {
                return Err(damaged(
                    partial.first_seq,
                    format!(
                        "the batch of events {} to {} does not chain: its digest is {}, its events \
                         and the head before it give {digest}",
                        partial.first_seq, partial.last_seq, partial.digest
                    ),
                ));
            }
            let seq = partial.last_seq;
            self.head = Head { seq, digest };
            self.partial = None;
        }
        Ok(())
    }

    fn start_batch(&mut self, row: &Row) -> Result<&mut Partial, StoreError> {
        let digest = <[u8; 32]>::try_from(row.digest.as_slice()).map_err(|_| {
            damaged(
                row.seq,
                format!(
                    "the digest of the batch of event {} is not 32 bytes",
                    row.seq
                ),
            )
        })?;
        if row.first_seq != row.seq || row.last_seq < row.first_seq {
            return Err(damaged(
                row.seq,
                format!(
                    "event {} is the first read of a batch that says it is {} to {}",
                    row.seq, row.first_seq, row.last_seq
                ),
            ));
        }
        Ok(self.partial.insert(Partial {
            first_seq: row.first_seq,
            last_seq: row.last_seq,
            digest: Digest(digest),
            payloads: Vec::new(),
        }))
    }

    /// Refuses a log that ended inside a batch: events of it are missing.
    pub(crate) fn check_whole(&self) -> Result<(), StoreError> {
        match &self.partial {
            None => Ok(()),
            Some(partial) => Err(damaged(
                self.position() + 1,
                format!(
                    "the batch of events {} to {} ends after event {}: the rest is missing",
                    partial.first_seq,
                    partial.last_seq,
                    self.position()
                ),
            )),
        }
    }

    /// The head after a batch this process committed.
    pub(crate) fn committed(&mut self, head: Head) {
        debug_assert!(
            self.partial.is_none(),
            "a batch commits after whole batches"
        );
        self.head = head;
    }
}

impl Row {
    /// A row of the query every reader uses: `seq, payload, first_seq,
    /// last_seq, digest`, the batch's columns null when it has none.
    pub(crate) fn from_row(row: &postgres::Row) -> Result<Row, StoreError> {
        let seq = unsigned(row.get::<_, i64>(0));
        let (Some(first_seq), Some(last_seq), Some(digest)) = (
            row.get::<_, Option<i64>>(2),
            row.get::<_, Option<i64>>(3),
            row.get::<_, Option<Vec<u8>>>(4),
        ) else {
            return Err(damaged(seq, format!("event {seq} belongs to no batch")));
        };
        Ok(Row {
            seq,
            payload: row.get(1),
            first_seq: unsigned(first_seq),
            last_seq: unsigned(last_seq),
            digest,
        })
    }
}

/// A sequence number as the database holds it (a `CHECK` keeps it
/// positive).
pub(crate) fn unsigned(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// A sequence number as the database takes it.
pub(crate) fn signed(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// The query every reader follows the chain with.
pub(crate) const EVENTS_AFTER: &str = "SELECT e.seq, e.payload, b.first_seq, b.last_seq, b.digest \
     FROM payonce.events e LEFT JOIN payonce.batches b ON b.first_seq = e.batch \
     WHERE e.seq > $1 ORDER BY e.seq";
