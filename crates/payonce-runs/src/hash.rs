//! Names to 64-bit hashes: SipHash-1-3 under a key drawn for each set of
//! runs, so that nobody choosing names can pile them into one block or
//! aim them at a filter's set bits.

use std::hash::Hasher;
use std::io;

use siphasher::sip::SipHasher13;

/// The byte hashed before a primary name.
const PRIMARY_TAG: u8 = 0;
/// The byte hashed before a secondary name, so that a secondary name
/// equal to a primary one hashes apart from it.
const SECONDARY_TAG: u8 = 1;

/// The SipHash key every run of one set shares, stored in each run's
/// trailer and kept by the runs merged from them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HashKey {
    /// The first word of the key.
    pub k0: u64,
    /// The second word of the key.
    pub k1: u64,
}

impl HashKey {
    /// The key `(k0, k1)`.
    pub const fn new(k0: u64, k1: u64) -> HashKey {
        HashKey { k0, k1 }
    }

    /// A key drawn from the operating system's random source.
    ///
    /// # Errors
    ///
    /// When the operating system cannot give random bytes.
    pub fn random() -> io::Result<HashKey> {
        Ok(HashKey::new(getrandom::u64()?, getrandom::u64()?))
    }

    /// The hash of a primary name: SipHash-1-3 of the byte 0 then the name.
    pub fn primary_hash(&self, name: &[u8]) -> u64 {
        self.tagged(PRIMARY_TAG, name)
    }

    /// The hash of a secondary name: SipHash-1-3 of the byte 1 then the
    /// name.
    pub fn secondary_hash(&self, name: &[u8]) -> u64 {
        self.tagged(SECONDARY_TAG, name)
    }

    fn tagged(&self, tag: u8, name: &[u8]) -> u64 {
        let mut hasher = SipHasher13::new_with_keys(self.k0, self.k1);
        hasher.write(&[tag]);
        hasher.write(name);
        hasher.finish()
    }
}
