//! Reading a ledger's log for audits: one read view, a read-only
//! transaction (`REPEATABLE READ READ ONLY`) that takes no lock a writer
//! waits for, so an audit never blocks the workers; every batch's digest
//! is checked as it is read.

use std::ops::ControlFlow;

use payonce::{StoreError, Visit};

use crate::error::failed;
use crate::follow::{Follower, scan};
use crate::index::events_about;
use crate::pipeline::Pipeline;
use crate::reach::Target;
use payonce_log::chain::Head;

/// A read view of a ledger's log: one read-only transaction, which sees
/// one gapless prefix of it however long it stays open.
pub struct ReadView {
    conn: Pipeline,
}

/// Why a walk stopped: the store, or the visitor.
#[derive(Debug)]
pub enum WalkError<E> {
    /// Reading the log failed, or found it damaged.
    Store(StoreError),
    /// The visitor's error.
    Visit(E),
}

impl ReadView {
    /// Connects to the ledger at `url` and opens a read view of it. A
    /// database without a payonce schema of this build's version is
    /// refused.
    pub fn open(url: &str) -> Result<ReadView, StoreError> {
        let mut conn = crate::schema::connect(url, Target::AsGiven)?;
        // Ended when the connection goes: a read-only transaction writes
        // nothing to keep or undo.
        conn.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .map_err(failed)?;
        Ok(ReadView { conn })
    }

    /// Hands `visit` every event of the read view in order, from the
    /// first, as one stream, until the last or until `visit` breaks;
    /// returns the head of the last whole batch read. Each batch's chain
    /// digest is checked once its last event is read, after `visit` saw
    /// its events: what was visited counts only if this returns `Ok`.
    pub fn scan(&mut self, visit: Visit<'_>) -> Result<Head, StoreError> {
        let mut follower = Follower::default();
        scan(&mut self.conn, &mut follower, &mut |seq, payload, _| {
            visit(seq, payload)
        })?;
        Ok(follower.head)
    }

    /// The first `limit` events about `subject`, in order, with their
    /// bytes, found through the database's index of the events about each
    /// key and withdrawal rather than by reading the whole log: each
    /// event's whole batch is read with it, and its chain digest checked
    /// from the digest of the batch before it. An event the index lists
    /// in no batch, or a batch that does not chain, is damage.
    pub fn events_about(
        &mut self,
        subject: &payonce::Subject,
        limit: usize,
    ) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        events_about(&mut self.conn, subject, limit)
    }

    /// Visits every event of the read view in order, each batch's chain
    /// checked once it is read whole, until the end or until `visit`
    /// breaks; returns the head of the last whole batch read.
    pub fn walk<E>(
        &mut self,
        mut visit: impl FnMut(u64, &[u8]) -> Result<ControlFlow<()>, E>,
    ) -> Result<Head, WalkError<E>> {
        self.follow(|seq, payload, _| visit(seq, payload))
    }

    /// The head of the whole log, every batch's chain checked, and on the
    /// way the head of the batch that ends at event `seq`: `None` if no
    /// batch ends there (the log is shorter, or `seq` is inside a batch).
    /// What a head kept earlier is compared with, in one read.
    pub fn head_through(&mut self, seq: u64) -> Result<(Head, Option<Head>), StoreError> {
        let mut through = None;
        let head = self
            .follow(|read, _, head| {
                if read == seq && head.seq == seq {
                    through = Some(*head);
                }
                Ok::<_, StoreError>(ControlFlow::Continue(()))
            })
            .map_err(|error| match error {
                WalkError::Store(error) | WalkError::Visit(error) => error,
            })?;
        Ok((head, through))
    }

    /// [`ReadView::walk`], handing `visit` each event with the head of the
    /// last whole batch read, this event's included: what an audit of a
    /// stretch of the log names as the heads around it.
    pub fn walk_with_heads<E>(
        &mut self,
        visit: impl FnMut(u64, &[u8], &Head) -> Result<ControlFlow<()>, E>,
    ) -> Result<Head, WalkError<E>> {
        self.follow(visit)
    }

    /// [`ReadView::walk`], handing `visit` each event with the head of the
    /// last whole batch read, this event's included.
    fn follow<E>(
        &mut self,
        mut visit: impl FnMut(u64, &[u8], &Head) -> Result<ControlFlow<()>, E>,
    ) -> Result<Head, WalkError<E>> {
        let mut follower = Follower::default();
        let mut stopped = None;
        scan(
            &mut self.conn,
            &mut follower,
            &mut |seq, payload, head| match visit(seq, payload, head) {
                Ok(flow) => flow,
                Err(error) => {
                    stopped = Some(error);
                    ControlFlow::Break(())
                }
            },
        )
        .map_err(WalkError::Store)?;
        match stopped {
            Some(error) => Err(WalkError::Visit(error)),
            None => Ok(follower.head),
        }
    }
}
