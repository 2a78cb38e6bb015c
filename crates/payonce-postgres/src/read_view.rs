//! Reading a ledger's log for audits: one read view, a read-only
//! transaction (`REPEATABLE READ READ ONLY`) that takes no lock a writer
//! waits for, so an audit never blocks the workers; every batch's digest
//! is checked as it is read.

use std::ops::ControlFlow;

use payonce::StoreError;
use postgres::Client;
use postgres::fallible_iterator::FallibleIterator;

use crate::error::failed;
use crate::follow::{EVENTS_AFTER, Follower, Row};
use crate::store::connect;
use payonce_log::chain::Head;

/// A read view of a ledger's log: one read-only transaction, which sees
/// one gapless prefix of it however long it stays open.
pub struct ReadView {
    client: Client,
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
    /// Connects to the ledger at `url` and opens a read view of it. A database without a payonce schema of this build's version is
    /// refused.
    pub fn open(url: &str) -> Result<ReadView, StoreError> {
        let mut client = connect(url)?;
        // Ended when the client goes: a read-only transaction writes
        // nothing to keep or undo.
        client
            .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .map_err(failed)?;
        Ok(ReadView { client })
    }

    /// Visits every event of the read view in order, each batch's chain
    /// checked once it is read whole, until the end or until `visit`
    /// breaks; returns the head of the last whole batch read.
    pub fn walk<E>(
        &mut self,
        mut visit: impl FnMut(u64, &[u8]) -> Result<ControlFlow<()>, E>,
    ) -> Result<Head, WalkError<E>> {
        self.follow(|row, _| visit(row.seq, &row.payload))
    }

    /// The head of the whole log, every batch's chain checked, and on the
    /// way the head of the batch that ends at event `seq`: `None` if no
    /// batch ends there (the log is shorter, or `seq` is inside a batch).
    /// What a head pinned earlier is compared with, in one read.
    pub fn head_through(&mut self, seq: u64) -> Result<(Head, Option<Head>), StoreError> {
        let mut through = None;
        let head = self
            .follow(|row, head| {
                if row.seq == seq && head.seq == seq {
                    through = Some(*head);
                }
                Ok::<_, StoreError>(ControlFlow::Continue(()))
            })
            .map_err(|error| match error {
                WalkError::Store(error) | WalkError::Visit(error) => error,
            })?;
        Ok((head, through))
    }

    /// [`ReadView::walk`], handing `visit` each row with the head of the
    /// last whole batch read, this row's included.
    fn follow<E>(
        &mut self,
        mut visit: impl FnMut(&Row, &Head) -> Result<ControlFlow<()>, E>,
    ) -> Result<Head, WalkError<E>> {
        let mut follower = Follower::default();
        let store = WalkError::Store;
        let mut rows = self
            .client
            .query_raw(EVENTS_AFTER, [0i64])
            .map_err(|error| store(failed(error)))?;
        while let Some(row) = rows.next().map_err(|error| store(failed(error)))? {
            let row = Row::from_row(&row).map_err(store)?;
            follower.follow(&row).map_err(store)?;
            if visit(&row, &follower.head)
                .map_err(WalkError::Visit)?
                .is_break()
            {
                return Ok(follower.head);
            }
        }
        follower.check_whole().map_err(store)?;
        Ok(follower.head)
    }
}
