//! A set of runs under one hash key, newest first: a name is asked of
//! each run in turn, skipping those whose filter says "not here", and the
//! first run that holds it answers.

use std::sync::Arc;

use crate::cache::BlockCache;
use crate::checked::RecordRef;
use crate::error::RunError;
use crate::fetch::{Fetch, Prefetched, Recording};
use crate::hash::HashKey;
use crate::record::Name;
use crate::run::Run;

/// Runs sharing a hash key, newest first: a newer run's record of a name
/// hides an older one's.
#[derive(Debug, Clone, Default)]
pub struct RunSet {
    runs: Vec<Arc<Run>>,
}

impl RunSet {
    /// The set of `runs`, newest first; refused if their hash keys
    /// differ.
    pub fn new(runs: Vec<Arc<Run>>) -> Result<RunSet, RunError> {
        if let Some(first) = runs.first() {
            let expected = first.hash_key();
            if let Some(other) = runs.iter().find(|run| run.hash_key() != expected) {
                return Err(RunError::MixedKeys {
                    run: other.number(),
                    expected,
                    found: other.hash_key(),
                });
            }
        }
        Ok(RunSet { runs })
    }

    /// Its runs, newest first.
    pub fn runs(&self) -> &[Arc<Run>] {
        &self.runs
    }

    /// The hash key its runs share, if it has any.
    pub fn hash_key(&self) -> Option<HashKey> {
        self.runs.first().map(|run| run.hash_key())
    }

    /// Bytes its runs' filters take in memory.
    pub fn filter_bytes(&self) -> u64 {
        self.runs.iter().map(|run| run.filter_bytes()).sum()
    }

    /// Whether any of its runs ignores a filter ([`Run::filter_ignored`]).
    pub fn filter_ignored(&self) -> bool {
        self.runs.iter().any(|run| run.filter_ignored())
    }

    /// The newest record whose primary name is `primary`.
    pub fn get(&self, cache: &BlockCache, primary: &[u8]) -> Result<Option<RecordRef>, RunError> {
        self.find(cache, Name::Primary(primary))
    }

    /// The newest record whose secondary name is `secondary`.
    pub fn get_by_secondary(
        &self,
        cache: &BlockCache,
        secondary: &[u8],
    ) -> Result<Option<RecordRef>, RunError> {
        self.find(cache, Name::Secondary(secondary))
    }

    /// Reads (through `cache`) every block that looking up `names` needs,
    /// and keeps them: lookups through the result
    /// ([`RunSet::get_prefetched`]) then read nothing.
    pub fn prefetch<'n>(
        &self,
        cache: &BlockCache,
        names: impl IntoIterator<Item = Name<'n>>,
    ) -> Result<Prefetched, RunError> {
        let recording = Recording::new(cache, Prefetched::default());
        for name in names {
            self.find(&recording, name)?;
        }
        Ok(recording.into_prefetched())
    }

    /// What [`RunSet::get`] answers, from the blocks `prefetched` holds
    /// alone: a lookup needing any other block is refused
    /// ([`RunError::NotPrefetched`]), never read.
    pub fn get_prefetched(
        &self,
        prefetched: &Prefetched,
        primary: &[u8],
    ) -> Result<Option<RecordRef>, RunError> {
        self.find(prefetched, Name::Primary(primary))
    }

    /// What [`RunSet::get_by_secondary`] answers, from the blocks
    /// `prefetched` holds alone.
    pub fn get_by_secondary_prefetched(
        &self,
        prefetched: &Prefetched,
        secondary: &[u8],
    ) -> Result<Option<RecordRef>, RunError> {
        self.find(prefetched, Name::Secondary(secondary))
    }

    fn find(&self, fetch: &dyn Fetch, name: Name<'_>) -> Result<Option<RecordRef>, RunError> {
        let Some(key) = self.hash_key() else {
            return Ok(None);
        };
        let hash = match name {
            Name::Primary(name) => key.primary_hash(name),
            Name::Secondary(name) => key.secondary_hash(name),
        };
        for run in &self.runs {
            if let Some(found) = run.find(fetch, name, hash)? {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }
}
