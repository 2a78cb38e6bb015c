//! A vector in chunks shared copy-on-write, so that copying the state for
//! a snapshot copies pointers, not the state: the copy and the live state
//! share every chunk, and the first write to a shared chunk copies that
//! chunk alone. Reads cost one more indirection than a plain vector; a
//! write, one reference count check.

use std::sync::Arc;

/// Entries per chunk: 4,096, so copying a chunk written after a snapshot
/// costs a few hundred KiB at most, and the pointers of a state of 10M
/// entries are about 2,500.
const CHUNK_BITS: u32 = 12;
const CHUNK_LEN: usize = 1 << CHUNK_BITS;
const CHUNK_MASK: usize = CHUNK_LEN - 1;

/// A vector of `T` in chunks of [`CHUNK_LEN`], each shared until written.
#[derive(Debug, Clone)]
pub(super) struct Chunks<T> {
    chunks: Vec<Arc<Vec<T>>>,
    len: usize,
}

impl<T> Default for Chunks<T> {
    fn default() -> Self {
        Chunks {
            chunks: Vec::new(),
            len: 0,
        }
    }
}

impl<T: Clone> Chunks<T> {
    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn push(&mut self, value: T) {
        if self.len & CHUNK_MASK == 0 {
            self.chunks.push(Arc::new(Vec::with_capacity(CHUNK_LEN)));
        }
        let Some(last) = self.chunks.last_mut() else {
            unreachable!("a chunk was pushed for the first entry of each");
        };
        Arc::make_mut(last).push(value);
        self.len += 1;
    }

    /// Puts `other`'s entries after these: its chunks as they are when
    /// these fill their last chunk, else entry by entry.
    pub(super) fn append(&mut self, other: Chunks<T>) {
        if self.len & CHUNK_MASK == 0 {
            self.chunks.extend(other.chunks);
            self.len += other.len;
        } else {
            for value in other.iter() {
                self.push(value.clone());
            }
        }
    }

    /// Bytes its chunks take, each at its full length.
    pub(super) fn bytes(&self) -> usize {
        self.chunks.len() * CHUNK_LEN * size_of::<T>()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flat_map(|chunk| chunk.iter())
    }

    /// Every entry, each chunk made this vector's own first.
    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.chunks
            .iter_mut()
            .flat_map(|chunk| Arc::make_mut(chunk).iter_mut())
    }
}

impl<T> std::ops::Index<usize> for Chunks<T> {
    type Output = T;
    #[inline]
    fn index(&self, at: usize) -> &T {
        &self.chunks[at >> CHUNK_BITS][at & CHUNK_MASK]
    }
}

impl<T: Clone> std::ops::IndexMut<usize> for Chunks<T> {
    #[inline]
    fn index_mut(&mut self, at: usize) -> &mut T {
        &mut Arc::make_mut(&mut self.chunks[at >> CHUNK_BITS])[at & CHUNK_MASK]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_keeps_what_it_saw_while_the_original_changes() {
        let mut original = Chunks::default();
        for n in 0..(CHUNK_LEN * 2 + 5) {
            original.push(n);
        }
        let copy = original.clone();
        original[3] = 1_000_000;
        original[CHUNK_LEN * 2 + 1] = 7;
        original.push(42);
        assert_eq!(copy[3], 3);
        assert_eq!(copy[CHUNK_LEN * 2 + 1], CHUNK_LEN * 2 + 1);
        assert_eq!(copy.len(), CHUNK_LEN * 2 + 5);
        assert_eq!(original[3], 1_000_000);
        assert_eq!(original.len(), CHUNK_LEN * 2 + 6);
        assert!(copy.iter().copied().eq(0..CHUNK_LEN * 2 + 5));
        // The chunk nobody wrote is still shared.
        assert!(Arc::ptr_eq(&copy.chunks[1], &original.chunks[1]));
        assert!(!Arc::ptr_eq(&copy.chunks[0], &original.chunks[0]));
    }
}
