//! A Bloom filter over 64-bit name hashes, blocked: every probe of a name
//! falls in one 64-byte block (a cache line), so asking costs one memory
//! miss, not one per probe.
//!
//! A name's block is chosen from the high 32 bits of its hash (multiplied
//! by the number of blocks, shifted down 32: an even spread without a
//! division); its [`PROBES`] bits within the block from the low 32 bits:
//! the top 9 bits of that word, then of the word multiplied by
//! `0x9E3779B9` (modulo 2^32), and so on, as RocksDB's FastLocalBloom
//! does. A filter may answer "maybe here" for a name never put in it,
//! never "not here" for one that was.

use crate::bytes::Le;
use crate::error::RunError;

/// Filter bits per name a run is written for. With [`PROBES`] probes in
/// 512-bit blocks, about 0.024% of absent names pass (measured), so a new
/// name asked of twelve runs' filters for its key and its withdrawal
/// costs a read about once in 175 names; at 16 bits a name it was 0.086%,
/// once in 48.
pub const BITS_PER_NAME: u64 = 20;
/// The fewest filter bits per name a run is read with: what runs were
/// written with before [`BITS_PER_NAME`] rose, which read as they did.
pub const BITS_PER_NAME_MIN: u64 = 16;
/// Bits set, and asked, per name.
pub const PROBES: u32 = 9;
/// The false-positive rate of a filter, in absent names per million that
/// pass it: what [`BITS_PER_NAME`] and [`PROBES`] give, measured over
/// random hashes. A set of n runs reads for about n times this many.
pub const FALSE_POSITIVE_PER_MILLION: u64 = 240;
/// Bytes of a filter block: a cache line.
pub(crate) const FILTER_BLOCK_LEN: usize = 64;
const WORDS_PER_BLOCK: usize = FILTER_BLOCK_LEN / 8;
/// The multiplier that moves a name's probe word from one probe to the
/// next.
const PROBE_STEP: u32 = 0x9E37_79B9;

/// The bits of one filter.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Filter {
    words: Box<[u64]>,
}

impl std::fmt::Debug for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Filter({} blocks)", self.blocks())
    }
}

impl Filter {
    /// An empty filter sized for `names` names (at least one block).
    pub(crate) fn sized_for(names: u64) -> Filter {
        let bits = names.saturating_mul(BITS_PER_NAME);
        let blocks = bits.div_ceil(FILTER_BLOCK_LEN as u64 * 8).max(1);
        assert!(blocks <= u64::from(u32::MAX), "{names} names are too many");
        let words = vec![0u64; blocks as usize * WORDS_PER_BLOCK];
        Filter {
            words: words.into(),
        }
    }

    /// A filter of these words, a whole number of blocks of them.
    fn from_words(words: Vec<u64>) -> Filter {
        assert!(!words.is_empty() && words.len().is_multiple_of(WORDS_PER_BLOCK));
        Filter {
            words: words.into(),
        }
    }

    pub(crate) fn blocks(&self) -> u64 {
        (self.words.len() / WORDS_PER_BLOCK) as u64
    }

    /// Bytes it takes in memory and in a run (its checksum aside).
    pub(crate) fn byte_len(&self) -> u64 {
        self.words.len() as u64 * 8
    }

    /// The first word of the block `hash` falls in.
    fn block_start(&self, hash: u64) -> usize {
        let block = ((hash >> 32) * self.blocks()) >> 32;
        block as usize * WORDS_PER_BLOCK
    }

    pub(crate) fn insert(&mut self, hash: u64) {
        let start = self.block_start(hash);
        let mut probe = hash as u32;
        for _ in 0..PROBES {
            let bit = (probe >> (32 - 9)) as usize;
            self.words[start + bit / 64] |= 1 << (bit % 64);
            probe = probe.wrapping_mul(PROBE_STEP);
        }
    }

    /// Whether a name hashing to `hash` may have been put in: `false`
    /// only if it was not.
    pub(crate) fn may_hold(&self, hash: u64) -> bool {
        let start = self.block_start(hash);
        let Some(block) = self.words.get(start..start + WORDS_PER_BLOCK) else {
            return true;
        };
        let mut probe = hash as u32;
        for _ in 0..PROBES {
            let bit = (probe >> (32 - 9)) as usize;
            if block[bit / 64] & (1 << (bit % 64)) == 0 {
                return false;
            }
            probe = probe.wrapping_mul(PROBE_STEP);
        }
        true
    }

    /// Hands its bytes (the words, little-endian) to `append` in pieces,
    /// then its CRC-32; returns how many bytes that was.
    pub(crate) fn encode(
        &self,
        mut append: impl FnMut(&[u8]) -> Result<(), RunError>,
    ) -> Result<u64, RunError> {
        let mut crc = crc32fast::Hasher::new();
        let mut piece = Vec::with_capacity(PIECE_WORDS * 8);
        for words in self.words.chunks(PIECE_WORDS) {
            piece.clear();
            for word in words {
                piece.extend_from_slice(&word.to_le_bytes());
            }
            crc.update(&piece);
            append(&piece)?;
        }
        append(&crc.finalize().to_le_bytes())?;
        Ok(self.byte_len() + 4)
    }

    /// The filter of the `len` bytes at `at` (whole blocks, then their
    /// CRC-32), read by `read` in pieces into the filter's own words, so a
    /// large filter is never held twice. The outer error is a failed read;
    /// the inner one a checksum that differs: the filter is then not to be
    /// believed.
    pub(crate) fn read(
        at: u64,
        len: u64,
        mut read: impl FnMut(u64, usize, &mut Vec<u8>) -> Result<(), RunError>,
    ) -> Result<Result<Filter, (u32, u32)>, RunError> {
        let bits_len = len.saturating_sub(4);
        let mut words = Vec::with_capacity((bits_len / 8) as usize);
        let mut crc = crc32fast::Hasher::new();
        let mut piece = Vec::new();
        let mut done = 0u64;
        while done < bits_len {
            let take = (bits_len - done).min((PIECE_WORDS * 8) as u64) as usize;
            read(at + done, take, &mut piece)?;
            crc.update(&piece);
            let mut input = Le::new(&piece);
            while let Some(word) = input.u64() {
                words.push(word);
            }
            done += take as u64;
        }
        read(at + bits_len, 4, &mut piece)?;
        let stored = Le::new(&piece).u32().unwrap_or_default();
        let computed = crc.finalize();
        if stored != computed || words.len() as u64 * 8 != bits_len || words.is_empty() {
            return Ok(Err((stored, computed)));
        }
        Ok(Ok(Filter::from_words(words)))
    }
}

/// Words handed on or read at a time: 4 MiB.
const PIECE_WORDS: usize = 1 << 19;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use proptest::prelude::*;

    use super::*;
    use crate::hash::HashKey;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn a_name_put_in_is_never_said_absent(
            hashes in proptest::collection::vec(any::<u64>(), 0..2000),
            slack in 0u64..3,
        ) {
            // Guards against a filter answering "not here" for a name it
            // holds, whatever the hashes and however over-full it is.
            let sized = (hashes.len() as u64 / (slack + 1)).max(1);
            let mut filter = Filter::sized_for(sized);
            for &hash in &hashes {
                filter.insert(hash);
            }
            for &hash in &hashes {
                prop_assert!(filter.may_hold(hash));
            }
        }
    }

    #[test]
    fn the_measured_false_positive_rate_is_the_designed_one() {
        // Guards against a probe scheme or a sizing that lets far more
        // absent names through than FALSE_POSITIVE_PER_MILLION says.
        let key = HashKey::new(7, 11);
        let names = 100_000u64;
        let mut filter = Filter::sized_for(names);
        for name in 0..names {
            filter.insert(key.primary_hash(&name.to_le_bytes()));
        }
        let asked = 1_000_000u64;
        let passed = (names..names + asked)
            .filter(|name| filter.may_hold(key.primary_hash(&name.to_le_bytes())))
            .count() as u64;
        let per_million = passed * 1_000_000 / asked;
        assert!(
            per_million <= FALSE_POSITIVE_PER_MILLION * 3 / 2,
            "{per_million} per million"
        );
    }

    #[test]
    fn a_filter_reads_back_as_written() {
        // Guards against the encoding and the streamed reading of a
        // filter disagreeing on the order of its bytes.
        let mut filter = Filter::sized_for(1000);
        for hash in (0..1000u64).map(|n| n.wrapping_mul(0x9E37_79B9_7F4A_7C15)) {
            filter.insert(hash);
        }
        let mut bytes = Vec::new();
        let len = filter
            .encode(|piece| {
                bytes.extend_from_slice(piece);
                Ok(())
            })
            .unwrap();
        assert_eq!(len, bytes.len() as u64);
        let read = Filter::read(0, len, |at, len, into| {
            into.clear();
            into.extend_from_slice(&bytes[at as usize..at as usize + len]);
            Ok(())
        });
        assert_eq!(read.unwrap().unwrap(), filter);
        bytes[3] ^= 1;
        let read = Filter::read(0, len, |at, len, into| {
            into.clear();
            into.extend_from_slice(&bytes[at as usize..at as usize + len]);
            Ok(())
        });
        assert!(read.unwrap().is_err());
    }
}
