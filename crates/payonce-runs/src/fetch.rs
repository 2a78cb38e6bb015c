//! Where a lookup's blocks come from: the cache (reading and keeping what
//! it does not hold), a prefetch being made (the same, and keeping each
//! block for the caller), or a prefetch made (reading nothing).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use crate::cache::{BlockCache, BlockKey};
use crate::checked::CheckedBlock;
use crate::error::{RunError, Section};
use crate::run::Run;

/// A source of checked blocks for lookups.
pub(crate) trait Fetch {
    /// Block `number` of `section` of `run`, checked.
    fn block(
        &self,
        run: &Run,
        section: Section,
        number: usize,
    ) -> Result<Arc<CheckedBlock>, RunError>;
}

impl Fetch for BlockCache {
    fn block(
        &self,
        run: &Run,
        section: Section,
        number: usize,
    ) -> Result<Arc<CheckedBlock>, RunError> {
        let key = run.block_key(section, number);
        if let Some(block) = self.get(&key) {
            return Ok(block);
        }
        let block = run.read_checked(section, number)?;
        self.count_miss(block.bytes().len() as u64);
        Ok(self.insert(key, block))
    }
}

/// The blocks some lookups need, read ahead of them
/// ([`crate::RunSet::prefetch`]) and kept alive here whatever the cache
/// evicts meanwhile, so the lookups themselves
/// ([`crate::RunSet::get_prefetched`]) read nothing: a caller reads
/// before taking its own lock and looks up under it. The bytes held here
/// are the caller's, beside the cache's budget; drop it when done.
#[derive(Debug, Default)]
pub struct Prefetched {
    blocks: HashMap<BlockKey, Arc<CheckedBlock>>,
}

impl Prefetched {
    /// How many blocks it holds.
    pub fn blocks(&self) -> usize {
        self.blocks.len()
    }

    /// How many bytes of blocks it holds.
    pub fn held_bytes(&self) -> u64 {
        self.blocks.values().map(|block| block.held_len()).sum()
    }
}

impl Fetch for Prefetched {
    fn block(
        &self,
        run: &Run,
        section: Section,
        number: usize,
    ) -> Result<Arc<CheckedBlock>, RunError> {
        let key = run.block_key(section, number);
        self.blocks
            .get(&key)
            .cloned()
            .ok_or(RunError::NotPrefetched {
                run: run.number(),
                section,
                block: number as u64,
            })
    }
}

/// A prefetch being made: blocks from the cache, each kept.
pub(crate) struct Recording<'c> {
    cache: &'c BlockCache,
    held: RefCell<Prefetched>,
}

impl<'c> Recording<'c> {
    pub(crate) fn new(cache: &'c BlockCache, into: Prefetched) -> Recording<'c> {
        Recording {
            cache,
            held: RefCell::new(into),
        }
    }

    pub(crate) fn into_prefetched(self) -> Prefetched {
        self.held.into_inner()
    }
}

impl Fetch for Recording<'_> {
    fn block(
        &self,
        run: &Run,
        section: Section,
        number: usize,
    ) -> Result<Arc<CheckedBlock>, RunError> {
        let block = self.cache.block(run, section, number)?;
        let key = run.block_key(section, number);
        self.held.borrow_mut().blocks.insert(key, block.clone());
        Ok(block)
    }
}
