//! Where an opening draws its epoch: the number every id it mints carries,
//! so two ledgers, or a ledger and a copy restored from an old backup,
//! never mint the same id. Behind a trait, as the clock is, so tests and
//! simulations can mint ids they can predict.

use std::fmt;
use std::hash::{BuildHasher, Hasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Draws the epoch of each opening.
pub trait Epochs: Send + Sync + fmt::Debug {
    /// The epoch of the opening about to be recorded.
    fn draw(&self) -> u64;
}

/// Epochs drawn at random: from the process's random hash keys, the time
/// and the process id, so two openings, here or on another machine, draw
/// the same one with a chance of about one in 2^64. The default.
#[derive(Debug, Clone, Copy, Default)]
pub struct RandomEpochs;

impl Epochs for RandomEpochs {
    fn draw(&self) -> u64 {
        let mut hasher = RandomState::new().build_hasher();
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos());
        hasher.write_u128(nanos);
        hasher.write_u32(std::process::id());
        hasher.finish()
    }
}

/// Epochs counted from a start, one per opening: ids a test can predict.
/// Two ledgers given the same start mint the same ids; never use it for a
/// ledger that holds real money.
#[derive(Debug)]
pub struct CountingEpochs {
    next: AtomicU64,
}

impl CountingEpochs {
    /// Epochs `start`, `start + 1`, and so on.
    pub fn new(start: u64) -> Self {
        CountingEpochs {
            next: AtomicU64::new(start),
        }
    }
}

impl Epochs for CountingEpochs {
    fn draw(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }
}
