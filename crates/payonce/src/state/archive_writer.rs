//! Writing an archive of settled pairs (docs/snapshot-format.md,
//! "Archive"): the pairs are encoded in the order they are met, each
//! beside its key's hash, then sorted by hash and copied into blocks. A
//! state's pairs are read in slot order that way, where reading them in
//! the order of their hashes missed the cache on every text of every pair.
//! An archive merged with the one a state holds reads that one block by
//! block, so at most a block of its pairs is held decoded.

use std::collections::HashSet;

use super::archive_blocks::{
    BLOCK_LEN_MAX, Blocks, CAPTURED, Fence, IDS_PER_BLOCK, PAIRS_PER_BLOCK, PairView, hash, number,
    state_number,
};
use super::layout::Funds;
use crate::snapshot_format::error::SnapshotError;
use crate::snapshot_format::fields::Out;

/// Pairs encoded in the order they were pushed, and where each lies.
pub(super) struct Encoded {
    keys: (u64, u64),
    out: Out,
    /// Each pair's key hash, id hash, and place in `out` (start, length);
    /// in the order an archive holds them once sorted.
    placed: Vec<Placed>,
}

#[derive(Clone, Copy)]
struct Placed {
    key_hash: u64,
    id_hash: u64,
    at: usize,
    len: u32,
}

impl Encoded {
    /// None yet, to be hashed under `keys`.
    pub(super) fn new(keys: (u64, u64)) -> Encoded {
        Encoded {
            keys,
            out: Out::default(),
            placed: Vec::new(),
        }
    }

    /// Encodes `pair`.
    pub(super) fn push(&mut self, pair: &PairView<'_>) {
        let at = self.out.bytes.len();
        write_pair(&mut self.out, pair);
        self.placed.push(Placed {
            key_hash: hash(self.keys, pair.key),
            id_hash: hash(self.keys, pair.id),
            at,
            len: (self.out.bytes.len() - at) as u32,
        });
    }

    pub(super) fn is_empty(&self) -> bool {
        self.placed.is_empty()
    }

    /// Puts the pairs in the order an archive holds them: by key hash,
    /// then by key.
    pub(super) fn sort(&mut self) {
        let out = &self.out.bytes;
        self.placed.sort_unstable_by(|a, b| {
            let key = |placed: &Placed| key_of(&out[placed.at..]);
            (a.key_hash.cmp(&b.key_hash)).then_with(|| key(a).cmp(key(b)))
        });
    }

    /// The sorted pairs' key hashes, keys and bytes.
    fn in_order(&self) -> impl Iterator<Item = (Placed, &[u8], &[u8])> {
        self.placed.iter().map(|&placed| {
            let bytes = &self.out.bytes[placed.at..placed.at + placed.len as usize];
            (placed, key_of(bytes), bytes)
        })
    }

    /// The bytes of an archive of the sorted pairs.
    pub(super) fn into_archive(self) -> Vec<u8> {
        let mut encoder = Encoder::new(self.keys);
        for (placed, _, bytes) in self.in_order() {
            encoder.push_encoded(placed.key_hash, placed.id_hash, bytes);
        }
        encoder.finish()
    }
}

/// The key of an encoded pair, `bytes` starting with it: its length, then
/// its bytes.
fn key_of(bytes: &[u8]) -> &[u8] {
    let len = usize::from(u16::from_le_bytes([bytes[0], bytes[1]]));
    &bytes[2..2 + len]
}

/// The bytes of an archive of `blocks`' pairs but those numbered in
/// `shadowed`, and of `added` (sorted, under `blocks`' hash key), read
/// block by block and written in one pass. `each` is shown every pair of
/// `blocks` written, and may refuse it. A key met twice, or out of order,
/// is refused.
pub(super) fn merged(
    blocks: &Blocks,
    shadowed: &HashSet<u64>,
    added: &Encoded,
    mut each: impl FnMut(&PairView<'_>) -> Result<(), SnapshotError>,
) -> Result<Vec<u8>, SnapshotError> {
    assert_eq!(added.keys, blocks.hash_key(), "merged under one hash key");
    let keys = added.keys;
    let mut encoder = Encoder::new(keys);
    let mut added = added.in_order().peekable();
    let mut last: Option<(u64, Box<str>)> = None;
    for block in 0..blocks.pair_blocks() {
        let pairs = blocks.pairs_of_block(block)?;
        for (index, pair) in pairs.iter().enumerate() {
            if shadowed.contains(&number(block, index)) {
                continue;
            }
            let placed = (hash(keys, &pair.key), pair.key.as_bytes());
            while let Some((new, _, bytes)) =
                added.next_if(|(new, key, _)| (new.key_hash, *key) < placed)
            {
                encoder.push_encoded(new.key_hash, new.id_hash, bytes);
            }
            let follows = last
                .as_ref()
                .is_none_or(|(hash, key)| (*hash, key.as_bytes()) < placed);
            if !follows || added.peek().is_some_and(|(_, key, _)| *key == placed.1) {
                let found = format!("key {} again", pair.key);
                return Err(blocks.refused_block(block, "each key once", found));
            }
            let view = pair.view();
            each(&view)?;
            encoder.push(placed.0, &view);
            last = Some((placed.0, pair.key.clone()));
        }
    }
    for (new, _, bytes) in added {
        encoder.push_encoded(new.key_hash, new.id_hash, bytes);
    }
    Ok(encoder.finish())
}

/// The bytes of an archive of `pairs` under hash key `keys`.
#[cfg(test)]
pub(super) fn encode_under(keys: (u64, u64), pairs: Vec<PairView<'_>>) -> Vec<u8> {
    let mut encoded = Encoded::new(keys);
    for pair in &pairs {
        encoded.push(pair);
    }
    encoded.sort();
    encoded.into_archive()
}

/// Writes an archive pair by pair, in the order of their keys' hashes:
/// only the pairs' bytes and a small entry per id are held.
struct Encoder {
    keys: (u64, u64),
    out: Out,
    pair_fences: Vec<Fence>,
    ids: Vec<(u64, u32, u8)>,
    /// The block being written: where it starts, its first hash, its
    /// pairs so far.
    block: (usize, u64, usize),
    pairs: usize,
    /// The last pair's hash, which the next one's must not be below.
    last: u64,
}

impl Encoder {
    fn new(keys: (u64, u64)) -> Encoder {
        Encoder {
            keys,
            out: Out::default(),
            pair_fences: Vec::new(),
            ids: Vec::new(),
            block: (0, 0, 0),
            pairs: 0,
            last: 0,
        }
    }

    /// Writes `pair`, whose key hashes to `key_hash`, after those written.
    fn push(&mut self, key_hash: u64, pair: &PairView<'_>) {
        self.start(key_hash);
        write_pair(&mut self.out, pair);
        self.pushed(key_hash, hash(self.keys, pair.id));
    }

    /// Writes a pair encoded already, `bytes`, whose key and id hash to
    /// `key_hash` and `id_hash`, after those written.
    fn push_encoded(&mut self, key_hash: u64, id_hash: u64, bytes: &[u8]) {
        self.start(key_hash);
        self.out.bytes.extend_from_slice(bytes);
        self.pushed(key_hash, id_hash);
    }

    /// Starts a block for a pair whose key hashes to `key_hash`, unless
    /// one is open.
    fn start(&mut self, key_hash: u64) {
        assert!(
            self.last <= key_hash,
            "archived pairs are written in the order of their keys' hashes"
        );
        if self.block.2 == 0 {
            self.block = (self.out.bytes.len(), key_hash, 0);
            self.out.u8(0);
        }
    }

    /// Counts the pair just written, and seals its block once full.
    fn pushed(&mut self, key_hash: u64, id_hash: u64) {
        let block = self.pair_fences.len() as u32;
        self.ids.push((id_hash, block, self.block.2 as u8));
        self.block.2 += 1;
        self.pairs += 1;
        self.last = key_hash;
        if self.block.2 == PAIRS_PER_BLOCK {
            self.seal_block();
        }
    }

    fn seal_block(&mut self) {
        let (start, first, count) = self.block;
        self.out.bytes[start] = count as u8;
        self.pair_fences.push(seal(&mut self.out, start, first));
        self.block = (0, 0, 0);
    }

    /// The archive's bytes: its pair blocks, id blocks, fences and
    /// trailer.
    fn finish(mut self) -> Vec<u8> {
        if self.block.2 > 0 {
            self.seal_block();
        }
        let Encoder {
            keys,
            mut out,
            pair_fences,
            mut ids,
            pairs,
            ..
        } = self;
        ids.sort_unstable();
        let mut id_fences = Vec::new();
        for chunk in ids.chunks(IDS_PER_BLOCK) {
            let start = out.bytes.len();
            out.u16(chunk.len() as u16);
            for &(hash, block, index) in chunk {
                out.u64(hash);
                out.u32(block);
                out.u8(index);
            }
            id_fences.push(seal(&mut out, start, chunk[0].0));
        }
        let fences_at = out.bytes.len();
        for fence in pair_fences.iter().chain(&id_fences) {
            out.u64(fence.first);
            out.u64(fence.at);
            out.u32(fence.len);
        }
        out.u64(keys.0);
        out.u64(keys.1);
        out.count(pairs);
        out.count(pair_fences.len());
        out.count(id_fences.len());
        out.u64(fences_at as u64);
        let crc = crc32fast::hash(&out.bytes[fences_at..]);
        out.u32(crc);
        out.bytes
    }
}

/// Ends the block that started at `start` with its checksum; its fence.
fn seal(out: &mut Out, start: usize, first: u64) -> Fence {
    let crc = crc32fast::hash(&out.bytes[start..]);
    out.u32(crc);
    let len = out.bytes.len() - start;
    assert!(len <= BLOCK_LEN_MAX, "an archive block of {len} bytes");
    Fence {
        first,
        at: start as u64,
        len: len as u32,
    }
}

fn write_pair(out: &mut Out, pair: &PairView<'_>) {
    out.text(pair.key);
    out.u64(pair.claimed_seq);
    out.u64(pair.claimed_at.unix_nanos());
    out.u8(state_number(pair.state));
    out.optional(pair.reference);
    out.optional(pair.reason);
    out.text(pair.requested_by);
    out.u8(pair.replaced.len() as u8);
    for reference in pair.replaced {
        out.text(reference.as_str());
    }
    out.text(pair.id);
    out.text(pair.destination);
    out.amount(pair.amount);
    out.text(pair.currency);
    let captured = match pair.funds {
        Funds::Free => 0,
        Funds::Captured => CAPTURED,
        Funds::Held => unreachable!("a pair holding funds is never set apart"),
    };
    out.u8(u8::from(pair.created) | captured);
}
