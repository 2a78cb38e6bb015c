//! Following the chain of a log's batches as its events are read: each
//! batch's digest is recomputed from the head before it and compared with
//! the one the database holds, so an event rewritten, added or taken away
//! is found, with its place. Each batch's digest is hashed as its events
//! stream by (`payonce_log::BatchHasher`). The follower also keeps the
//! furthest head this process read or committed (`Follower::reached`): a
//! log that ends before it was rewound under the process (a failover that
//! lost commits) and is refused, saying how far.

use std::ops::ControlFlow;

use crate::copy::{CopyRows, Fields, int8};
use crate::error::damaged;
use crate::pipeline::Pipeline;
use payonce::StoreError;
use payonce_log::chain::{BatchHasher, Digest, Head};

/// One event as read: the batch it says it belongs to (`batch`, that
/// batch's first event), and for the first event of a batch, the batch's
/// row (`starts`: its last event and its digest).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Row<'a> {
    pub(crate) seq: u64,
    pub(crate) batch: u64,
    pub(crate) payload: &'a [u8],
    pub(crate) starts: Option<(u64, &'a [u8])>,
}

/// The chain followed so far: the head of the last whole batch read, and
/// the events read of the batch after it.
#[derive(Debug, Default)]
pub(crate) struct Follower {
    pub(crate) head: Head,
    partial: Option<Partial>,
    /// The furthest head this process ever read or committed, kept when
    /// it reads the log again from elsewhere: a log that no longer passes
    /// through it was rewound under this process.
    reached: Head,
}

/// A batch read in part: its digest so far, not its events.
#[derive(Debug)]
struct Partial {
    first_seq: u64,
    last_seq: u64,
    digest: Digest,
    hasher: BatchHasher,
    /// The last event read of it.
    read_to: u64,
}

impl Follower {
    /// Follows on from `head` (the start of the log, or the end of a batch
    /// the log holds), keeping the furthest head read so far.
    pub(crate) fn restart(&mut self, head: Head) {
        self.head = head;
        self.partial = None;
    }

    /// Refuses a log that ends before the furthest head this process
    /// read: `self` has read the log to its end.
    pub(crate) fn check_reached(&self) -> Result<(), StoreError> {
        match self.head.seq < self.reached.seq {
            true => Err(rewound(&self.reached, self.head.seq)),
            false => Ok(()),
        }
    }

    /// The furthest head this process read or committed.
    pub(crate) fn reached(&self) -> &Head {
        &self.reached
    }

    /// `head`, a whole batch's, was just read or committed.
    fn passed(&mut self, first_seq: u64, head: Head) -> Result<(), StoreError> {
        let reached = self.reached;
        let other_batch = (first_seq..head.seq).contains(&reached.seq)
            || (head.seq == reached.seq && head.digest != reached.digest);
        if other_batch {
            return Err(damaged(
                reached.seq,
                format!(
                    "this process read the log to event {} (head {reached}), and the log now \
                     holds another batch there (events {first_seq} to {}): the log was \
                     rewritten or rewound under it (a failover that lost commits, or a \
                     restore), and it appends nothing more",
                    reached.seq, head.seq
                ),
            ));
        }
        self.head = head;
        if head.seq > reached.seq {
            self.reached = head;
        }
        Ok(())
    }
    /// The last event read, whole batch or not.
    pub(crate) fn position(&self) -> u64 {
        match &self.partial {
            Some(partial) => partial.read_to,
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
    pub(crate) fn follow(&mut self, row: &Row<'_>) -> Result<(), StoreError> {
        let expected = self.position() + 1;
        if row.seq != expected {
            return Err(damaged(
                expected,
                format!("event {} follows where event {expected} belongs", row.seq),
            ));
        }
        let prev = self.head.digest;
        let partial = match (&mut self.partial, row.starts) {
            (None, Some((last_seq, digest))) => self.start_batch(row, last_seq, digest)?,
            (Some(partial), None) if row.batch == partial.first_seq => partial,
            (None, None) => {
                return Err(damaged(
                    row.seq,
                    format!(
                        "event {} belongs to no batch: it says its batch begins at event {}, \
                         and no batch begins at it",
                        row.seq, row.batch
                    ),
                ));
            }
            (Some(partial), _) => {
                return Err(damaged(
                    row.seq,
                    format!(
                        "event {} is in the batch beginning at event {}, but the batch of {} to \
                         {} is not whole",
                        row.seq, row.batch, partial.first_seq, partial.last_seq
                    ),
                ));
            }
        };
        partial.hasher.record(row.payload);
        partial.read_to = row.seq;
        if row.seq < partial.last_seq {
            return Ok(());
        }
        let Some(whole) = self.partial.take() else {
            unreachable!("the batch just followed is partial")
        };
        let digest = whole.hasher.finish();
        if digest != whole.digest {
            return Err(damaged(
                whole.first_seq,
                format!(
                    "the batch of events {} to {} does not chain: its digest is {}, its events \
                     and the head before it ({prev}) give {digest}",
                    whole.first_seq, whole.last_seq, whole.digest
                ),
            ));
        }
        self.passed(
            whole.first_seq,
            Head {
                seq: whole.last_seq,
                digest,
            },
        )
    }

    fn start_batch(
        &mut self,
        row: &Row<'_>,
        last_seq: u64,
        digest: &[u8],
    ) -> Result<&mut Partial, StoreError> {
        let digest = <[u8; 32]>::try_from(digest).map_err(|_| {
            damaged(
                row.seq,
                format!(
                    "the digest of the batch of event {} is not 32 bytes",
                    row.seq
                ),
            )
        })?;
        let count = last_seq
            .checked_sub(row.seq)
            .and_then(|span| u32::try_from(span).ok())
            .and_then(|span| span.checked_add(1));
        let (Some(count), true) = (count, row.batch == row.seq) else {
            return Err(damaged(
                row.seq,
                format!(
                    "event {} begins the batch of {} to {last_seq}, and says its batch begins at \
                     event {}",
                    row.seq, row.seq, row.batch
                ),
            ));
        };
        Ok(self.partial.insert(Partial {
            first_seq: row.seq,
            last_seq,
            digest: Digest(digest),
            hasher: BatchHasher::new(&self.head.digest, row.seq, count),
            read_to: row.seq - 1,
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
        self.reached = head;
    }
}

/// The error of a log that ends at event `end`, before `reached`, the
/// furthest head a process read of it.
pub(crate) fn rewound(reached: &Head, end: u64) -> StoreError {
    damaged(
        reached.seq,
        format!(
            "the log was rewound under this process (a failover that lost commits, or a \
             restore): it read the log to event {} (head {reached}), and the log now ends at \
             event {end}, {} events short; it appends nothing more (docs/postgres.md, \
             \"Replication and failover\")",
            reached.seq,
            reached.seq.saturating_sub(end)
        ),
    )
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

/// The query every scan reads the log with, after event `after`: each
/// event with the batch it says it belongs to, and beside the first event
/// of each batch that batch's row, which the server joins to the events
/// in one pass over both in order. Run through `COPY ... TO STDOUT (FORMAT
/// binary)`: one statement, one read of the log, streamed.
pub(crate) fn events_after(after: u64) -> String {
    format!(
        "COPY (SELECT e.seq, e.batch, e.payload, b.last_seq, b.digest \
         FROM payonce.events e LEFT JOIN payonce.batches b ON b.first_seq = e.seq \
         WHERE e.seq > {after} ORDER BY e.seq) TO STDOUT (FORMAT binary)"
    )
}

impl<'a> Row<'a> {
    /// A row of [`events_after`]: `seq, batch, payload, last_seq, digest`.
    fn from_fields(
        [seq, batch, payload, last_seq, digest]: Fields<'a, 5>,
    ) -> Result<Row<'a>, StoreError> {
        let seq = unsigned(int8(seq, "an event's seq")?);
        let starts = match (last_seq, digest) {
            (Some(_), Some(digest)) => {
                Some((unsigned(int8(last_seq, "a batch's last_seq")?), digest))
            }
            _ => None,
        };
        Ok(Row {
            seq,
            batch: unsigned(int8(batch, "an event's batch")?),
            payload: payload.ok_or_else(|| damaged(seq, format!("event {seq} has no payload")))?,
            starts,
        })
    }
}

/// What a scan hands each event to: its sequence number, its bytes, and
/// the head of the last whole batch read.
pub(crate) type VisitHead<'a> = &'a mut dyn FnMut(u64, &[u8], &Head) -> ControlFlow<()>;

/// Reads every event after `follower`'s position on `conn`, in one
/// streamed statement, following the chain: hands `visit` each event with
/// the head of the last whole batch read (its own batch's, if it ends
/// one), until the last or until `visit` breaks, and then refuses a log
/// that ends inside a batch. An event is handed over before the digest of
/// its batch is checked, which happens once its batch's last event is
/// read: a reader acts on what it was handed only once the scan
/// succeeded.
pub(crate) fn scan(
    conn: &mut Pipeline,
    follower: &mut Follower,
    visit: VisitHead<'_>,
) -> Result<(), StoreError> {
    let query = events_after(follower.position());
    let mut rows = CopyRows::default();
    let flow = conn.copy_out_each(&query, |message| {
        rows.read(message, &mut |fields| {
            let row = Row::from_fields(fields)?;
            follower.follow(&row)?;
            Ok(visit(row.seq, row.payload, &follower.head))
        })
    })?;
    match flow {
        ControlFlow::Continue(()) => {
            rows.check_ended()?;
            follower.check_whole()?;
            follower.check_reached()
        }
        ControlFlow::Break(()) => Ok(()),
    }
}
