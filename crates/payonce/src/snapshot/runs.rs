//! How a manifest's runs are opened for a state: each found by its
//! number in a [`RunStore`], bound to the manifest's entry (its length,
//! records and trailer checksum, its hash key), and checked (every block's
//! checksum) before it is believed, unless its store leaves that to a pass
//! in the background; and how a snapshot's new run is written.

use std::sync::Arc;

use payonce_runs::{BlockCache, HashKey, Run, RunSet};

use crate::run_store::{OutSink, RunStore, run_error};
use crate::snapshot_format::{Manifest, RunEntry, SnapshotError};
use crate::state::{AsideHooks, Settled, State};

#[cfg(test)]
thread_local! {
    /// The hash key runs written on this thread are under, if set.
    static HASH_KEY: std::cell::Cell<Option<HashKey>> = const { std::cell::Cell::new(None) };
}

/// Runs `write` with every new set of runs it writes under hash key
/// `key` rather than one drawn: what a worked example's bytes need.
#[cfg(test)]
pub(crate) fn with_hash_key<T>(key: HashKey, write: impl FnOnce() -> T) -> T {
    HASH_KEY.with(|drawn| drawn.set(Some(key)));
    let written = write();
    HASH_KEY.with(|drawn| drawn.set(None));
    written
}

/// The hash key of a new set of runs: drawn from the process's random
/// source, so nobody choosing keys or ids can pile them into one block.
pub(crate) fn drawn_hash_key() -> Result<HashKey, SnapshotError> {
    #[cfg(test)]
    if let Some(key) = HASH_KEY.with(std::cell::Cell::get) {
        return Ok(key);
    }
    HashKey::random().map_err(|source| SnapshotError::Io {
        op: "getrandom",
        file: "a new set of runs' hash key".to_owned(),
        source,
    })
}

/// The runs `manifest` names, opened from `store`, bound to their entries,
/// and checked whole unless the store leaves that to the background; with
/// `pairs`, the distinct pairs they hold out of memory.
pub(crate) fn open_manifest(
    store: &dyn RunStore,
    manifest: &Manifest,
    cache: Arc<BlockCache>,
    pairs: u64,
) -> Result<Settled, SnapshotError> {
    let mut runs = Vec::with_capacity(manifest.runs.len());
    for entry in &manifest.runs {
        let run = open_entry(store, manifest, entry)?;
        if !store.checked_in_background() {
            run.check_blocks()
                .map_err(|error| run_error(entry.number, error))?;
        }
        runs.push(Arc::new(run));
    }
    let aside_hooks = AsideHooks::default();
    for run in &runs {
        aside_hooks.add(store, run.number());
    }
    let check = store
        .checked_in_background()
        .then(|| check_in_background(runs.clone(), aside_hooks.clone()));
    let runs = RunSet::new(runs).map_err(|error| run_error(0, error))?;
    Ok(Settled {
        runs: Arc::new(runs),
        cache,
        pairs,
        check,
        aside_hooks,
    })
}

/// Checks every block of `runs` on a thread of its own: what an opening
/// leaves to the background where the store says so. Damage it finds is
/// told (a block is checked whenever it is read, so nothing is judged from
/// it meanwhile); a failure to read is retried by the reads that need it.
fn check_in_background(
    runs: Vec<Arc<Run>>,
    aside_hooks: AsideHooks,
) -> Arc<crate::state::RunsCheck> {
    let check = Arc::new(crate::state::RunsCheck::default());
    let told = Arc::clone(&check);
    let spawned = std::thread::Builder::new()
        .name("payonce-runs-check".to_owned())
        .spawn(move || {
            for run in &runs {
                if let Err(error) = run.check_blocks() {
                    let error = run_error(run.number(), error);
                    tracing::error!(run = run.number(), %error, "a run failed its check");
                    aside_hooks.set_aside(&error);
                    if let Ok(mut damage) = told.damage.lock() {
                        *damage = Some(format!("run {}: {error}", run.number()));
                    }
                    return;
                }
            }
            told.done.store(true, std::sync::atomic::Ordering::SeqCst);
        });
    if let Err(error) = spawned {
        tracing::warn!(%error, "no thread to check the runs in the background; each block is checked when read");
    }
    check
}

/// Run `entry` of `manifest`, opened and bound to the entry.
fn open_entry(
    store: &dyn RunStore,
    manifest: &Manifest,
    entry: &RunEntry,
) -> Result<Run, SnapshotError> {
    let source = store.open_run(entry.number)?;
    let run = Run::open(source, entry.number).map_err(|error| run_error(entry.number, error))?;
    for refusal in run.filter_refusals() {
        tracing::warn!(
            run = entry.number,
            %refusal,
            "a run's filter failed its checksum and is ignored: its blocks are read for every name"
        );
    }
    let said = (
        run.byte_len(),
        run.records_len(),
        run.trailer_crc(),
        run.hash_key(),
    );
    let named = (
        entry.len,
        entry.records,
        entry.trailer_crc,
        manifest.hash_key,
    );
    if said != named {
        return Err(SnapshotError::Store {
            detail: format!(
                "run {} is not the one the manifest names: {} bytes, {} records, trailer \
                 checksum {:#010x}, where the manifest says {} bytes, {} records, {:#010x} (or \
                 another hash key)",
                entry.number, said.0, said.1, said.2, named.0, named.1, named.2
            ),
        });
    }
    Ok(run)
}

/// The manifest entry of `run`.
pub(crate) fn entry_of(run: &Run) -> RunEntry {
    RunEntry {
        number: run.number(),
        len: run.byte_len(),
        records: run.records_len(),
        trailer_crc: run.trailer_crc(),
    }
}

/// A run just written, and the key slots of the pairs it took from the
/// state it was written from.
pub(crate) type WrittenRun = (Arc<Run>, Vec<u32>);

/// Writes `state`'s new run into `runs` under `hash_key`, opens it, and
/// returns it with the key slots of its pairs; `None` with no pair to
/// write.
pub(crate) fn write_new_run(
    state: &State,
    hash_key: HashKey,
    runs: &dyn RunStore,
) -> Result<Option<WrittenRun>, SnapshotError> {
    let new_run = state.new_run(hash_key);
    if new_run.is_empty() {
        return Ok(None);
    }
    let run = write_run(runs, |sink| new_run.write(state, hash_key, sink).map(drop))?;
    Ok(Some((run, new_run.slots)))
}

/// Merges `inputs` (runs of one set, newest first) into a new run of
/// `runs`, reading them through `cache`, and opens it.
pub(crate) fn write_merged_run(
    inputs: &[&Run],
    cache: &BlockCache,
    runs: &dyn RunStore,
) -> Result<Arc<Run>, SnapshotError> {
    write_run(runs, |sink| {
        payonce_runs::merge(inputs, cache, sink)
            .map(drop)
            .map_err(|error| SnapshotError::Run {
                run: error_run(&error),
                error,
            })
    })
}

/// The run a failed merge names, if its bytes are at fault.
fn error_run(error: &payonce_runs::RunError) -> u64 {
    match error {
        payonce_runs::RunError::Corrupt { run, .. } => *run,
        _ => 0,
    }
}

/// A new run of `runs`, its bytes given by `write`, made durable and
/// opened.
fn write_run(
    runs: &dyn RunStore,
    write: impl FnOnce(&mut OutSink<'_>) -> Result<(), SnapshotError>,
) -> Result<Arc<Run>, SnapshotError> {
    let mut out = runs.create_run()?;
    let mut sink = OutSink {
        out: &mut *out,
        failed: None,
    };
    let written = write(&mut sink);
    if let Some(failed) = sink.failed.take() {
        return Err(failed);
    }
    written?;
    let number = out.finish()?;
    let source = runs.open_run(number)?;
    let run = Run::open(source, number).map_err(|error| run_error(number, error))?;
    Ok(Arc::new(run))
}
