//! The one writer of a log: appends under a mutex into a pending buffer, and
//! group-commits it to the active segment with one write and one fdatasync
//! per batch, rolling to a new segment when the active one is full.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, Thread};

use crate::chain::{BatchHasher, Digest, Head};
use crate::checkpoint::Checkpointer;
use crate::config::{Durability, LogConfig};
use crate::error::{LogError, io_error};
use crate::format::{
    BATCH_HEADER_LEN, BatchHeader, FORMAT_VERSION, FRAME_HEADER_LEN, Header, SEAL_LEN,
    SEGMENT_HEADER_LEN, frame_fields, frame_len, push_frame, seal_frame, segment_name,
    segment_tmp_name,
};
use crate::storage::{Storage, StorageFile, StorageLock};
use crate::ticker::{Checkpoints, Signal, Ticker};
use crate::witness::Witness;

/// Pending bytes beyond which [`Log::append`] flushes before returning, so a
/// caller that never waits cannot grow memory without bound.
pub const PENDING_LEN_MAX: usize = 16 << 20;

/// Most batches one caller of [`Log::wait_durable`] flushes in a row for
/// others once its own record is durable.
const LEADER_FLUSHES_MAX: u32 = 8;

/// Counters of a [`Log`], for monitoring and benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogStats {
    /// The last sequence number appended.
    pub last_seq: u64,
    /// The last sequence number on stable storage (see [`Durability`]).
    pub durable_seq: u64,
    /// Batches written, each with one `fdatasync` under
    /// [`Durability::Always`] (a batch that rolls a segment syncs more).
    pub flushes: u64,
    /// Callers parked in [`Log::wait_durable`] until a flush wakes them
    /// (woken callers not yet returned are not counted).
    pub waiting: u64,
    /// Checkpoints written since the log was opened.
    pub checkpoints: u64,
    /// The sequence number of the head the checkpoint holds. While a
    /// batch rolls to a new segment, the checkpoint takes the old
    /// segment's last record, synced before the roll, before the batch is
    /// published as durable: for that moment it may be above
    /// `durable_seq`.
    pub checkpoint_seq: u64,
    /// Heads a witness refused since the log was opened.
    pub witness_failures: u64,
}

#[derive(Debug)]
struct State {
    /// Framed records appended since the last batch was taken, behind room
    /// for their batch header ([`BATCH_HEADER_LEN`] bytes, filled in when
    /// the batch is written); empty when nothing is pending.
    pending: Vec<u8>,
    /// An empty buffer kept for the next batch, so batching does not allocate.
    spare: Vec<u8>,
    next_seq: u64,
    /// The checksum of the last appended record: the next one chains from it.
    chain: u32,
    durable_seq: u64,
    /// The head whose last record is `durable_seq`.
    durable_head: Head,
    flushing: bool,
    /// The number of flushes started; the one in progress if `flushing`.
    flush_gen: u64,
    /// The last seq of the batch being flushed.
    flush_target: u64,
    /// Callers parked until flush `generation` finishes, in
    /// `parked[generation % 2]`: those the flush in progress covers, and
    /// those that need the next one, are woken separately, so a finished
    /// flush wakes only the callers it satisfied.
    parked: [Vec<Arc<Parked>>; 2],
    flushes: u64,
    poisoned: Option<Arc<LogError>>,
}

impl State {
    /// Callers parked until a flush wakes them.
    fn waiting(&self) -> u64 {
        self.parked.iter().map(|parked| parked.len() as u64).sum()
    }
}

/// A caller of [`Log::wait_durable`] parked until a flush wakes it.
///
/// Each waiter has its own flag, and a woken waiter whose record is durable
/// returns without taking the state lock: waking a whole batch of waiters on
/// one condition variable made every one of them queue for the lock only to
/// learn what the flag now says.
#[derive(Debug)]
struct Parked {
    thread: Thread,
    wake: AtomicU8,
    /// Waiters this one wakes once woken: see [`Parked::wake_all`].
    next: Mutex<Vec<Arc<Parked>>>,
}

impl Parked {
    /// Not woken yet.
    const WAITING: u8 = 0;
    /// The flush it waited for made its record durable.
    const DURABLE: u8 = 1;
    /// Look again under the lock: it is to lead the next flush, or the log
    /// is poisoned.
    const RECHECK: u8 = 2;

    /// This thread's waiter, reset to waiting. A thread waits for one flush
    /// at a time, and a waker marks an entry once, after taking it out of
    /// its list and before the waiter can see the mark and return: so one
    /// waiter per thread can be reused, and a wait allocates nothing.
    fn this_thread() -> Arc<Parked> {
        thread_local! {
            static PARKED: Arc<Parked> = Arc::new(Parked {
                thread: thread::current(),
                wake: AtomicU8::new(Parked::WAITING),
                next: Mutex::new(Vec::new()),
            });
        }
        let parked = PARKED.with(Arc::clone);
        parked.wake.store(Parked::WAITING, Ordering::Relaxed);
        parked
    }

    /// Wakes every waiter in `woken` with `wake`, called without the state
    /// lock. Waking takes a system call per waiter, and the leader that
    /// made them durable is the one thread the disk waits for, so it wakes
    /// a few and hands each of them half of the rest to wake in turn: a
    /// tree, about log2 of the batch deep, whose work lands on the threads
    /// being woken anyway.
    fn wake_all(mut woken: Vec<Arc<Parked>>, wake: u8) {
        while let Some(parked) = woken.pop() {
            let half = woken.split_off(woken.len() / 2);
            *parked.next.lock().unwrap_or_else(PoisonError::into_inner) = half;
            // Released after `next` is set: a waiter that sees its flag,
            // even without being unparked, finds its share to wake.
            parked.wake.store(wake, Ordering::Release);
            parked.thread.unpark();
        }
    }

    /// Parks until woken, wakes its share of the others (with the same
    /// flag), and returns the flag. A stray unpark (a token left from an
    /// earlier wait) only parks again.
    fn wait(&self) -> u8 {
        loop {
            match self.wake.load(Ordering::Acquire) {
                Parked::WAITING => thread::park(),
                wake => {
                    let next = std::mem::take(
                        &mut *self.next.lock().unwrap_or_else(PoisonError::into_inner),
                    );
                    Parked::wake_all(next, wake);
                    return wake;
                }
            }
        }
    }
}

/// The segment being appended to. Only the thread leading a flush uses it.
#[derive(Debug)]
pub(crate) struct Active {
    pub(crate) file: Box<dyn StorageFile>,
    pub(crate) name: String,
    /// Where its records end.
    pub(crate) len: u64,
    /// The sequence number of the next record written to the file.
    pub(crate) next_seq: u64,
    /// The checksum of the last record in the file (the header's chain value
    /// if it has none).
    pub(crate) chain: u32,
    /// The chain digest of the last batch written: the next batch's `prev`.
    pub(crate) digest: Digest,
    pub(crate) unsynced: bool,
    /// The file's length: `len` plus the zeros written ahead of the records.
    pub(crate) allocated: u64,
    /// The segment's header says zeros may follow its records
    /// ([`Header::zeros_ahead`]); only then are more written ahead.
    pub(crate) zeros_ahead: bool,
    /// The segment's format version: only [`FORMAT_VERSION`] is written.
    pub(crate) version: u32,
}

/// The writer of a log directory: `Send + Sync`, used through `&self` from
/// many threads. Holds the directory's lock until dropped.
///
/// Dropping a `Log` that is not poisoned flushes what was appended (with the
/// configured durability), writes a checkpoint of the durable head (a clean
/// close), and logs a warning if either fails.
#[derive(Debug)]
pub struct Log {
    writer: Arc<Writer>,
    /// The thread that checkpoints every `checkpoint_interval`.
    ticker: Option<Ticker>,
}

/// What a [`Log`] and its checkpoint thread share.
#[derive(Debug)]
pub(crate) struct Writer {
    storage: Arc<dyn Storage>,
    config: LogConfig,
    log_id: u64,
    state: Mutex<State>,
    /// Set with `State::poisoned`, so [`Log::check`], which callers make
    /// before every decision, does not queue for the state lock.
    poisoned: AtomicBool,
    active: Mutex<Active>,
    checkpoint: Mutex<Checkpointer>,
    /// The head the checkpoint holds, readable without its lock.
    checkpoint_seq: AtomicU64,
    /// Where heads are published, and the last one published.
    witness: Option<(Arc<dyn Witness>, Mutex<Head>)>,
    witness_failures: AtomicU64,
    /// Wakes the checkpoint thread, if there is one.
    pub(crate) tick: Signal,
    _lock: Box<dyn StorageLock>,
}

/// Clears `flushing` and poisons the log if the leader unwinds, so waiters
/// are not left waiting for a flush that will never finish.
struct LeaderGuard<'a> {
    log: &'a Writer,
    finished: bool,
}

impl Drop for LeaderGuard<'_> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let mut state = self.log.lock_state();
        state.flushing = false;
        self.log.poison(
            &mut state,
            LogError::Io {
                op: "flush",
                file: self.log.storage.describe(""),
                source: io::Error::other("the thread writing a batch panicked"),
            },
        );
        let woken = Writer::take_everyone(&mut state);
        drop(state);
        Parked::wake_all(woken, Parked::RECHECK);
    }
}

/// A random identity for a new log, from the operating system's random
/// source.
pub(crate) fn new_log_id() -> io::Result<u64> {
    Ok(getrandom::u64()?)
}

/// What a writer starts from: the segment it appends to, the checkpoint
/// file, and the witness heads are published to.
pub(crate) struct Parts {
    pub(crate) storage: Arc<dyn Storage>,
    pub(crate) config: LogConfig,
    pub(crate) log_id: u64,
    pub(crate) active: Active,
    pub(crate) checkpoint: Checkpointer,
    pub(crate) witness: Option<Arc<dyn Witness>>,
    pub(crate) lock: Box<dyn StorageLock>,
}

impl Log {
    /// The writer of a log whose records end in `parts.active`, the segment
    /// it appends to. The records already there count as durable: opening
    /// synced them.
    pub(crate) fn new(parts: Parts) -> Log {
        let writer = Arc::new(Writer::new(parts));
        let ticker = writer
            .config
            .checkpoint_interval
            .and_then(|interval| Ticker::start(writer.clone(), interval));
        Log { writer, ticker }
    }

    /// Frames `payload` as the next record and returns its sequence number.
    /// The record is not yet durable: see [`Log::wait_durable`]. Does no I/O
    /// unless more than [`PENDING_LEN_MAX`] bytes are pending.
    pub fn append(&self, payload: &[u8]) -> Result<u64, LogError> {
        self.writer.append(payload)
    }

    /// Appends `payload` and waits until it is durable.
    pub fn append_durable(&self, payload: &[u8]) -> Result<u64, LogError> {
        let seq = self.append(payload)?;
        self.wait_durable(seq)?;
        Ok(seq)
    }

    /// Returns once record `seq` (and every record before it) is on stable
    /// storage, as [`Durability`] defines it. Concurrent callers share one
    /// write and one `fdatasync`: the first caller finding no flush running
    /// writes everything pending; the others wait for it.
    ///
    /// Once the log is poisoned, a call returns [`LogError::Poisoned`], even
    /// for a record that is durable. A caller already waiting when its
    /// flush lands returns `Ok`, even if a later flush fails before it has
    /// run again: its record is on stable storage either way.
    pub fn wait_durable(&self, seq: u64) -> Result<(), LogError> {
        self.writer.wait_durable(seq)
    }

    /// Waits until every record appended so far is durable and returns the
    /// last of them (0 if none).
    pub fn sync(&self) -> Result<u64, LogError> {
        self.writer.sync()
    }

    /// Writes a checkpoint of the durable head now (if it moved since the
    /// last one) and publishes it to the witness, if there is one; returns
    /// the head the checkpoint holds. For a caller that drives checkpoints
    /// on its own schedule; the log writes them itself too (see
    /// [`LogConfig::checkpoint_records`]).
    pub fn checkpoint(&self) -> Result<Head, LogError> {
        self.writer.check()?;
        self.writer.checkpoint_durable()
    }

    /// `Err(Poisoned)` once a write has failed: callers that decide on
    /// what the log holds check this first, since what they hold in memory
    /// may include records that never reached the disk.
    pub fn check(&self) -> Result<(), LogError> {
        self.writer.check()
    }

    /// The last sequence number appended (durable or not); 0 if none.
    pub fn last_seq(&self) -> u64 {
        self.writer.lock_state().next_seq - 1
    }

    /// The last sequence number known durable; 0 if none.
    pub fn durable_seq(&self) -> u64 {
        self.writer.lock_state().durable_seq
    }

    /// The durable head: the last durable record's sequence number and the
    /// chain digest of its batch ([`Head::GENESIS`] for a log without
    /// records).
    pub fn head(&self) -> Head {
        self.writer.lock_state().durable_head
    }

    /// The random identity written in every segment header of this log.
    pub fn log_id(&self) -> u64 {
        self.writer.log_id
    }

    /// The configuration the log was opened with.
    pub fn config(&self) -> &LogConfig {
        &self.writer.config
    }

    /// Counters for monitoring and benchmarks.
    pub fn stats(&self) -> LogStats {
        let checkpoints = self.writer.lock_checkpoint().written;
        let state = self.writer.lock_state();
        LogStats {
            last_seq: state.next_seq - 1,
            durable_seq: state.durable_seq,
            flushes: state.flushes,
            waiting: state.waiting(),
            checkpoints,
            checkpoint_seq: self.writer.checkpoint_seq.load(Ordering::Acquire),
            witness_failures: self.writer.witness_failures.load(Ordering::Relaxed),
        }
    }
}

impl Writer {
    fn new(parts: Parts) -> Writer {
        let Parts {
            storage,
            config,
            log_id,
            active,
            checkpoint,
            witness,
            lock,
        } = parts;
        let last_seq = active.next_seq - 1;
        let head = Head {
            seq: last_seq,
            digest: active.digest,
        };
        assert!(
            checkpoint.head().seq <= last_seq,
            "opening refuses a log behind its checkpoint"
        );
        let state = State {
            pending: Vec::new(),
            spare: Vec::new(),
            next_seq: active.next_seq,
            chain: active.chain,
            durable_seq: last_seq,
            durable_head: head,
            flushing: false,
            flush_gen: 0,
            flush_target: 0,
            parked: [Vec::new(), Vec::new()],
            flushes: 0,
            poisoned: None,
        };
        Writer {
            storage,
            config,
            log_id,
            state: Mutex::new(state),
            poisoned: AtomicBool::new(false),
            active: Mutex::new(active),
            checkpoint_seq: AtomicU64::new(checkpoint.head().seq),
            checkpoint: Mutex::new(checkpoint),
            witness: witness.map(|witness| (witness, Mutex::new(Head::GENESIS))),
            witness_failures: AtomicU64::new(0),
            tick: Signal::default(),
            _lock: lock,
        }
    }

    fn lock_checkpoint(&self) -> MutexGuard<'_, Checkpointer> {
        self.checkpoint
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the state is one of our assertions; the
        // leader's guard has poisoned the log, so the state stays readable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_active(&self) -> MutexGuard<'_, Active> {
        self.active.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn append(&self, payload: &[u8]) -> Result<u64, LogError> {
        if payload.len() > self.config.record_max as usize {
            return Err(LogError::RecordTooLarge {
                len: payload.len() as u64,
                max: u64::from(self.config.record_max),
            });
        }
        let mut state = self.lock_state();
        if let Some(cause) = &state.poisoned {
            return Err(LogError::Poisoned {
                cause: cause.clone(),
            });
        }
        let seq = state.next_seq;
        assert!(seq < u64::MAX);
        let chain = state.chain;
        if state.pending.is_empty() {
            // Room for the batch's header, written when the batch is.
            state.pending.resize(BATCH_HEADER_LEN, 0);
        }
        state.chain = push_frame(&mut state.pending, chain, seq, payload);
        state.next_seq = seq + 1;
        let overfull = state.pending.len() > PENDING_LEN_MAX;
        drop(state);
        if overfull {
            self.wait_durable(seq)?;
        }
        Ok(seq)
    }

    fn wait_durable(&self, seq: u64) -> Result<(), LogError> {
        let mut state = self.lock_state();
        let mut led = 0;
        loop {
            if let Some(cause) = &state.poisoned {
                return Err(LogError::Poisoned {
                    cause: cause.clone(),
                });
            }
            if seq <= state.durable_seq {
                // A leader that is already running goes on with what others
                // appended during its flush, so the disk never idles while the
                // woken waiters are still being scheduled; bounded so its own
                // caller is not kept forever.
                let more = !state.pending.is_empty() && state.waiting() > 0;
                if led > 0 && more && !state.flushing {
                    if led < LEADER_FLUSHES_MAX {
                        state = self.lead_flush(state);
                        led += 1;
                        continue;
                    }
                    // Hand over: one of those waiting for the next flush
                    // leads it (waking them all would only make them queue).
                    let next = Self::parity(state.flush_gen + 1);
                    if let Some(parked) = state.parked[next].pop() {
                        drop(state);
                        Parked::wake_all(vec![parked], Parked::RECHECK);
                    }
                }
                return Ok(());
            }
            if seq >= state.next_seq {
                return Err(LogError::NotAppended {
                    seq,
                    last_seq: state.next_seq - 1,
                });
            }
            if state.flushing {
                let generation = state.flush_gen + u64::from(seq > state.flush_target);
                assert_eq!(led, 0, "a leader's own record is in the batch it led");
                let parked = Parked::this_thread();
                state.parked[Self::parity(generation)].push(Arc::clone(&parked));
                drop(state);
                if parked.wait() == Parked::DURABLE {
                    return Ok(());
                }
                state = self.lock_state();
                continue;
            }
            state = self.lead_flush(state);
            led += 1;
        }
    }

    /// Takes everything pending, writes it without holding the state lock,
    /// then publishes the outcome and wakes the waiters it satisfied (every
    /// waiter, if it failed).
    fn lead_flush<'a>(&'a self, mut state: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        assert!(!state.flushing);
        let spare = std::mem::take(&mut state.spare);
        let mut batch = std::mem::replace(&mut state.pending, spare);
        let last_seq = state.next_seq - 1;
        let last_chain = state.chain;
        assert!(
            batch.len() > BATCH_HEADER_LEN,
            "records above the durable seq are pending"
        );
        state.flushing = true;
        state.flush_gen += 1;
        state.flush_target = last_seq;
        let generation = state.flush_gen;
        drop(state);

        let mut guard = LeaderGuard {
            log: self,
            finished: false,
        };
        let result = self.write_batch(&mut batch, last_seq, last_chain);
        let mut state = self.lock_state();
        guard.finished = true;
        state.flushing = false;
        state.flushes += 1;
        let (woken, wake) = match result {
            Ok(head) => {
                assert!(last_seq > state.durable_seq);
                assert_eq!(head.seq, last_seq);
                state.durable_seq = last_seq;
                state.durable_head = head;
                let woken = std::mem::take(&mut state.parked[Self::parity(generation)]);
                (woken, Parked::DURABLE)
            }
            Err(error) => {
                tracing::error!(error = %error, "log write failed; the log is poisoned until reopened");
                self.poison(&mut state, error);
                state.pending.clear();
                // Those waiting for the next flush must hear of it too.
                (Self::take_everyone(&mut state), Parked::RECHECK)
            }
        };
        batch.clear();
        if state.spare.capacity() < batch.capacity() {
            state.spare = batch;
        }
        let checkpoint_due = wake == Parked::DURABLE && self.checkpoint_due(state.durable_seq);
        if woken.is_empty() && !checkpoint_due {
            return state;
        }
        drop(state);
        Parked::wake_all(woken, wake);
        if checkpoint_due {
            self.count_checkpoint();
        }
        self.lock_state()
    }

    /// Whether `checkpoint_records` records have become durable since the
    /// checkpoint's head.
    fn checkpoint_due(&self, durable_seq: u64) -> bool {
        let every = self.config.checkpoint_records;
        every > 0 && durable_seq - self.checkpoint_seq.load(Ordering::Acquire) >= every
    }

    /// A checkpoint for the records counted: the checkpoint thread's to
    /// write if there is one, else this caller's, its batch already woken.
    fn count_checkpoint(&self) {
        if self.tick.nudge() {
            return;
        }
        if let Err(error) = self.checkpoint_durable() {
            tracing::error!(error = %error, "writing a checkpoint failed; the log is poisoned until reopened");
        }
    }

    /// Writes a checkpoint of the durable head if it moved, publishes it,
    /// and returns the head the checkpoint holds. A failed write poisons
    /// the log: it could no longer tell a cut log from a whole one.
    pub(crate) fn checkpoint_durable(&self) -> Result<Head, LogError> {
        let head = self.lock_state().durable_head;
        if let Err(error) = self.write_checkpoint(head) {
            let mut state = self.lock_state();
            self.poison(&mut state, error);
            let cause = state.poisoned.clone();
            let woken = Self::take_everyone(&mut state);
            drop(state);
            Parked::wake_all(woken, Parked::RECHECK);
            let Some(cause) = cause else {
                unreachable!("poisoned just now");
            };
            return Err(LogError::Poisoned { cause });
        }
        self.publish(head);
        Ok(self.lock_checkpoint().head())
    }

    /// Writes `head`, durable, into the checkpoint, unless it holds it.
    fn write_checkpoint(&self, head: Head) -> Result<(), LogError> {
        let mut checkpoint = self.lock_checkpoint();
        if checkpoint.write(&*self.storage, head)? {
            self.checkpoint_seq.store(head.seq, Ordering::Release);
            tracing::debug!(%head, "wrote a checkpoint");
        }
        Ok(())
    }

    /// Hands `head` to the witness if it is newer than the last published;
    /// a refusal is logged and counted: the witness falls behind, it does
    /// not stop the log.
    fn publish(&self, head: Head) {
        let Some((witness, published)) = &self.witness else {
            return;
        };
        let mut published = published.lock().unwrap_or_else(PoisonError::into_inner);
        if head.seq <= published.seq {
            return;
        }
        match witness.publish(head) {
            Ok(()) => *published = head,
            Err(error) => {
                self.witness_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%error, %head, "the witness did not take the head");
            }
        }
    }

    /// Poisons the log with `cause`, unless it already is: the state and its
    /// lock-free mirror together.
    fn poison(&self, state: &mut State, cause: LogError) {
        state.poisoned.get_or_insert_with(|| Arc::new(cause));
        self.poisoned.store(true, Ordering::Release);
    }

    fn parity(generation: u64) -> usize {
        (generation % 2) as usize
    }

    /// Takes every parked caller out, for waking once the lock is
    /// released.
    fn take_everyone(state: &mut State) -> Vec<Arc<Parked>> {
        let mut woken = Vec::new();
        for parked in &mut state.parked {
            woken.append(parked);
        }
        woken
    }

    /// Writes `batch` (room for a batch header, then whole frames, seqs
    /// continuing the active segment) and syncs it, rolling to new segments
    /// as they fill; each segment's part gets a batch header of its own.
    /// Returns the head the batch ends with.
    fn write_batch(
        &self,
        batch: &mut [u8],
        last_seq: u64,
        last_chain: u32,
    ) -> Result<Head, LogError> {
        let mut active = self.lock_active();
        assert_eq!(
            active.version, FORMAT_VERSION,
            "only the current format is written"
        );
        let room_max = self.config.segment_len_max - SEAL_LEN as u64;
        let mut start = BATCH_HEADER_LEN;
        loop {
            let room = room_max.saturating_sub(active.len + BATCH_HEADER_LEN as u64);
            let (cut, count, chain) =
                fitting_prefix(&batch[start..], room, active.next_seq, active.chain);
            if cut > 0 {
                // The header goes in front of this part, over bytes of the
                // part before it, which are written already.
                let header = batch_header(&active, &batch[start..start + cut], count);
                let piece = &mut batch[start - BATCH_HEADER_LEN..start + cut];
                piece[..BATCH_HEADER_LEN].copy_from_slice(&header.encode(self.log_id));
                assert!(active.len + piece.len() as u64 <= room_max);
                active.write(&*self.storage, piece, &self.config)?;
                active.len += piece.len() as u64;
                active.next_seq += count;
                active.chain = chain;
                active.digest = header.digest;
            }
            start += cut;
            if start == batch.len() {
                break;
            }
            assert!(
                active.len > SEGMENT_HEADER_LEN as u64,
                "a valid config fits the largest record in an empty segment"
            );
            self.roll(&mut active)?;
        }
        assert_eq!(active.next_seq, last_seq + 1);
        assert_eq!(active.chain, last_chain);
        if self.config.durability == Durability::Always && active.unsynced {
            active.sync(&*self.storage)?;
        }
        Ok(Head {
            seq: last_seq,
            digest: active.digest,
        })
    }

    /// Closes the active segment with a seal and makes a new one active, in
    /// the order docs/log-format.md explains.
    fn roll(&self, active: &mut Active) -> Result<(), LogError> {
        let always = self.config.durability == Durability::Always;
        let storage = &*self.storage;
        // 1. Everything in the old segment is durable before the new exists.
        if always && active.unsynced {
            active.sync(storage)?;
        }
        // 2-4. The new segment: temporary name, header, sync, rename, dir sync.
        let header = Header {
            version: FORMAT_VERSION,
            log_id: self.log_id,
            first_seq: active.next_seq,
            chain: active.chain,
            zeros_ahead: self.config.zeros_ahead(),
        };
        let file = create_segment(storage, self.config.durability, &header)?;
        // 5. Seal the old segment: it now names its successor, which exists.
        let seal = seal_frame(active.chain, active.next_seq);
        active.write_seal(storage, &seal)?;
        if always {
            active.sync(storage)?;
        }
        tracing::info!(
            from = %storage.describe(&active.name),
            to = %segment_name(header.first_seq),
            "rolled to a new segment"
        );
        // The checkpoint holds the old segment's last head, durable since
        // step 1.
        self.write_checkpoint(Head {
            seq: active.next_seq - 1,
            digest: active.digest,
        })?;
        // 6. Only now do records go to the new segment.
        *active = Active::fresh(file, &header, active.digest);
        Ok(())
    }

    fn sync(&self) -> Result<u64, LogError> {
        let last_seq = self.lock_state().next_seq - 1;
        self.wait_durable(last_seq)?;
        Ok(last_seq)
    }

    pub(crate) fn check(&self) -> Result<(), LogError> {
        if !self.poisoned.load(Ordering::Acquire) {
            return Ok(());
        }
        match &self.lock_state().poisoned {
            Some(cause) => Err(LogError::Poisoned {
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }
}

impl Checkpoints for Writer {
    fn signal(&self) -> &Signal {
        &self.tick
    }

    fn checkpoint_now(&self) -> Result<(), LogError> {
        // A poisoned log has said so to its callers; it writes nothing more.
        if self.check().is_err() {
            return Ok(());
        }
        self.checkpoint_durable().map(|_| ())
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        if let Some(ticker) = self.ticker.take() {
            ticker.stop();
        }
        // While unwinding, a second panic would abort: leave it to reopening.
        if std::thread::panicking() {
            return;
        }
        let writer = &self.writer;
        let (unflushed, poisoned) = {
            let state = writer.lock_state();
            (
                state.next_seq - 1 > state.durable_seq,
                state.poisoned.is_some(),
            )
        };
        if poisoned {
            return;
        }
        if unflushed && let Err(error) = writer.sync() {
            tracing::warn!(error = %error, "flushing the log on drop failed");
            return;
        }
        // A clean close: the checkpoint holds the last head, so any cut of
        // the log is refused.
        if let Err(error) = writer.checkpoint_durable() {
            tracing::warn!(error = %error, "writing the checkpoint on close failed");
        }
    }
}

impl Active {
    /// A segment just created from `header`, holding no record yet, after
    /// a log whose last batch's digest is `digest`.
    pub(crate) fn fresh(file: Box<dyn StorageFile>, header: &Header, digest: Digest) -> Active {
        Active {
            file,
            name: segment_name(header.first_seq),
            len: SEGMENT_HEADER_LEN as u64,
            next_seq: header.first_seq,
            chain: header.chain,
            digest,
            unsynced: false,
            allocated: SEGMENT_HEADER_LEN as u64,
            zeros_ahead: header.zeros_ahead,
            version: header.version,
        }
    }

    /// Writes `bytes` at the end of the records. When they reach past the
    /// file's end, the same write carries up to `preallocate_len` zeros
    /// after them (never past `segment_len_max`), so the next batches land
    /// inside the file.
    fn write(
        &mut self,
        storage: &dyn Storage,
        bytes: &[u8],
        config: &LogConfig,
    ) -> Result<(), LogError> {
        self.unsynced = true;
        let end = self.len + bytes.len() as u64;
        assert!(
            end <= config.segment_len_max,
            "writes stay inside a segment"
        );
        let written = if end <= self.allocated {
            self.file.write_at(self.len, bytes)
        } else {
            let ahead = if self.zeros_ahead {
                config.preallocate_len
            } else {
                0
            };
            let allocated = end.saturating_add(ahead).min(config.segment_len_max);
            let mut extended = Vec::with_capacity((allocated - self.len) as usize);
            extended.extend_from_slice(bytes);
            extended.resize((allocated - self.len) as usize, 0);
            self.file
                .write_at(self.len, &extended)
                .map(|()| self.allocated = allocated)
        };
        written.map_err(|error| io_error("write", &storage.describe(&self.name), error))
    }

    /// Writes the seal at the end of the records, and nothing else: a seal
    /// torn by a power loss is then the only kind of damage after it, which
    /// opening repairs (an interrupted roll), while zeros written with it
    /// could be torn into bytes that a seal may not be followed by.
    fn write_seal(&mut self, storage: &dyn Storage, seal: &[u8]) -> Result<(), LogError> {
        self.unsynced = true;
        self.file
            .write_at(self.len, seal)
            .map_err(|error| io_error("write", &storage.describe(&self.name), error))?;
        self.allocated = self.allocated.max(self.len + seal.len() as u64);
        Ok(())
    }

    fn sync(&mut self, storage: &dyn Storage) -> Result<(), LogError> {
        self.file
            .sync_data()
            .map_err(|error| io_error("fdatasync", &storage.describe(&self.name), error))?;
        self.unsynced = false;
        Ok(())
    }
}

/// The longest prefix of whole frames in `batch` that fits in `room` bytes:
/// (bytes, frames, checksum of the last frame). Asserts that the frames
/// continue `next_seq` and `chain` without a gap.
fn fitting_prefix(batch: &[u8], room: u64, next_seq: u64, chain: u32) -> (usize, u64, u32) {
    let mut offset = 0;
    let mut count = 0;
    let mut last_chain = chain;
    while offset < batch.len() {
        assert!(offset + FRAME_HEADER_LEN <= batch.len());
        let (crc, len, seq) = frame_fields(batch, offset);
        assert_eq!(seq, next_seq + count, "pending frames are contiguous");
        let size = frame_len(len) as usize;
        assert!(offset + size <= batch.len());
        if (offset + size) as u64 > room {
            break;
        }
        offset += size;
        count += 1;
        last_chain = crc;
    }
    (offset, count, last_chain)
}

/// The header of the batch of `count` frames, `frames`, written after the
/// records `active` ends with.
fn batch_header(active: &Active, frames: &[u8], count: u64) -> BatchHeader {
    let count = u32::try_from(count).unwrap_or(u32::MAX);
    let extent = u32::try_from(frames.len()).unwrap_or(u32::MAX);
    assert!(
        extent < u32::MAX && count < u32::MAX,
        "a batch fits a segment"
    );
    let mut hasher = BatchHasher::new(&active.digest, active.next_seq, count);
    let mut offset = 0;
    while offset < frames.len() {
        let (_, len, _) = frame_fields(frames, offset);
        let start = offset + FRAME_HEADER_LEN;
        hasher.record(&frames[start..start + len as usize]);
        offset += frame_len(len) as usize;
    }
    assert_eq!(offset, frames.len());
    BatchHeader {
        first_seq: active.next_seq,
        count,
        extent,
        chain: active.chain,
        digest: hasher.finish(),
    }
}

/// Creates the segment `header` describes: temporary name, header, sync,
/// rename into place (replacing a torn file of that name), directory sync.
pub(crate) fn create_segment(
    storage: &dyn Storage,
    durability: Durability,
    header: &Header,
) -> Result<Box<dyn StorageFile>, LogError> {
    let always = durability == Durability::Always;
    let tmp = segment_tmp_name(header.first_seq);
    let name = segment_name(header.first_seq);
    let mut file = storage
        .create_new(&tmp)
        .map_err(|error| io_error("create", &storage.describe(&tmp), error))?;
    file.append(&header.encode())
        .map_err(|error| io_error("write", &storage.describe(&tmp), error))?;
    if always {
        file.sync_data()
            .map_err(|error| io_error("fdatasync", &storage.describe(&tmp), error))?;
    }
    storage
        .rename(&tmp, &name)
        .map_err(|error| io_error("rename", &storage.describe(&tmp), error))?;
    if always {
        storage
            .sync_dir()
            .map_err(|error| io_error("sync directory", &storage.describe(""), error))?;
    }
    Ok(file)
}
