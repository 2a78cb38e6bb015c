//! An archive's bytes: every pair found by its key and by its id, nothing
//! found that is not there, and every damaged byte refused, never
//! answered from.

use payonce_model::{Amount, Currency, Reference, WithdrawalState};
use proptest::prelude::*;

use super::archive_blocks::{
    ArchiveSource, Blocks, Fence, IDS_PER_BLOCK, PAIRS_PER_BLOCK, SettledPair, TRAILER_LEN,
    in_blocks_of, in_order,
};
use super::archive_writer::encode_under;
use super::layout::Funds;
use crate::snapshot_format::error::SnapshotError;
use crate::time::Timestamp;

const KEYS: (u64, u64) = (0x0706_0504_0302_0100, 0x0f0e_0d0c_0b0a_0908);

/// Pair `n`: its texts, state and funds varied with `n`.
fn pair(n: usize) -> SettledPair {
    let (state, reference, reason, funds) = match n % 4 {
        0 => (WithdrawalState::Sent, Some("0xfeed"), None, Funds::Captured),
        1 => (
            WithdrawalState::Confirmed,
            Some("0xbeef"),
            None,
            Funds::Captured,
        ),
        2 => (
            WithdrawalState::Failed,
            Some("0xdead"),
            Some("returned"),
            Funds::Free,
        ),
        _ => (
            WithdrawalState::Rejected,
            None,
            Some("refused by the rail"),
            Funds::Free,
        ),
    };
    let replaced: Box<[Reference]> = if n.is_multiple_of(7) && reference.is_some() {
        vec![Reference::new(format!("0xold{n}")).unwrap_or_else(|e| panic!("{e}"))].into()
    } else {
        Box::new([])
    };
    SettledPair {
        key: format!("key-{n}").into(),
        claimed_seq: n as u64 * 3 + 1,
        claimed_at: Timestamp::from_unix_nanos(n as u64 * 1_000_000),
        state,
        reference: reference.map(|text| format!("{text}{n}").into()),
        reason: reason.map(Into::into),
        requested_by: "alice".into(),
        replaced,
        id: format!("w-{n}").into(),
        destination: format!("dest-{}", n % 13).into(),
        amount: Amount::parse(&format!("{}.{}", n % 1000 + 1, n % 100))
            .unwrap_or_else(|e| panic!("{e}")),
        currency: Currency::new(["USDC", "BTC", "EUR"][n % 3]).unwrap_or_else(|e| panic!("{e}")),
        created: !n.is_multiple_of(5),
        funds,
    }
}

fn pairs(count: usize) -> Vec<SettledPair> {
    (0..count).map(pair).collect()
}

/// The bytes of an archive of `pairs` under hash key `keys`.
fn encoded(keys: (u64, u64), pairs: Vec<SettledPair>) -> Vec<u8> {
    encode_under(keys, pairs.iter().map(SettledPair::view).collect())
}

fn opened(bytes: Vec<u8>) -> Result<Blocks, SnapshotError> {
    Blocks::open(Box::new(bytes), 0, u64::MAX)
}

#[test]
fn every_pair_is_found_by_its_key_and_by_its_id_and_nothing_else_is() {
    let count = 3 * PAIRS_PER_BLOCK + IDS_PER_BLOCK + 5;
    let blocks = opened(encoded(KEYS, pairs(count))).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(blocks.len(), count);
    let mut numbers = std::collections::BTreeSet::new();
    for n in 0..count {
        let by_key = blocks
            .find_key(&format!("key-{n}"))
            .unwrap_or_else(|e| panic!("{e}"));
        let by_id = blocks
            .find_id(&format!("w-{n}"))
            .unwrap_or_else(|e| panic!("{e}"));
        let (number, found) = by_key.unwrap_or_else(|| panic!("key-{n} not found"));
        assert_eq!(found, pair(n));
        assert_eq!(by_id, Some((number, pair(n))));
        assert!(numbers.insert(number), "two pairs numbered {number}");
    }
    for absent in ["key-x", "w-1", "key-", &format!("key-{count}")] {
        assert_eq!(
            blocks.find_key(absent).unwrap_or_else(|e| panic!("{e}")),
            None
        );
    }
    for absent in ["key-1", "w-x", &format!("w-{count}")] {
        assert_eq!(
            blocks.find_id(absent).unwrap_or_else(|e| panic!("{e}")),
            None
        );
    }
    let mut all: Vec<SettledPair> = blocks
        .pairs()
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .map(|(_, pair)| pair)
        .collect();
    all.sort_by_key(|pair| pair.claimed_seq);
    assert_eq!(all, pairs(count));
}

#[test]
fn the_same_pairs_under_the_same_key_are_the_same_bytes_whatever_their_order() {
    let mut shuffled = pairs(200);
    shuffled.reverse();
    assert_eq!(encoded(KEYS, shuffled), encoded(KEYS, pairs(200)));
    assert_ne!(encoded((1, 2), pairs(200)), encoded(KEYS, pairs(200)));
}

/// The blocks `in_blocks_of` looks in for `wanted`, in order, when
/// nothing is found.
fn looked_in(firsts: &[u64], wanted: u64) -> Vec<usize> {
    let fences: Vec<Fence> = firsts
        .iter()
        .map(|&first| Fence {
            first,
            at: 0,
            len: 0,
        })
        .collect();
    let mut looked = Vec::new();
    in_blocks_of(&fences, wanted, |block, _| {
        looked.push(block);
        Ok(false)
    })
    .unwrap_or_else(|e| panic!("{e}"));
    looked
}

#[test]
fn a_hash_is_looked_for_in_its_block_and_the_blocks_equal_hashes_straddle() {
    assert_eq!(looked_in(&[10, 20, 30], 5), Vec::<usize>::new());
    assert_eq!(looked_in(&[10, 20, 30], 25), [1]);
    assert_eq!(looked_in(&[10, 20, 30], 99), [2]);
    // Block 1 starts with 20: block 0 may end with 20s too.
    assert_eq!(looked_in(&[10, 20, 30], 20), [1, 0]);
    // Three blocks of nothing but 20s, after one that may end with them.
    assert_eq!(looked_in(&[10, 20, 20, 20, 30], 20), [3, 2, 1, 0]);
    assert_eq!(looked_in(&[20, 20], 20), [1, 0]);
}

#[test]
fn a_block_whose_hashes_are_out_of_place_is_refused() {
    let fences: Vec<Fence> = [10, 20, 30]
        .into_iter()
        .map(|first| Fence {
            first,
            at: 0,
            len: 0,
        })
        .collect();
    let placed = |hashes: &[u64]| in_order(hashes.iter().copied(), &fences, 1, "block").is_ok();
    assert!(placed(&[20, 25, 25, 30]));
    // Not starting with its fence's hash, going down, passing the next.
    assert!(!placed(&[21, 25]));
    assert!(!placed(&[20, 25, 24]));
    assert!(!placed(&[20, 31]));
    // The last block takes any hash from its own on.
    assert!(in_order([30, u64::MAX].into_iter(), &fences, 2, "block").is_ok());
}

/// `bytes` (an archive of one pair block and one id block) with its id
/// block's last entry dropped, every checksum and offset made to agree.
fn without_last_id_entry(bytes: &[u8]) -> Vec<u8> {
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or([0; 8]));
    let trailer = bytes.len() - TRAILER_LEN;
    let fences_at = word(trailer + 40) as usize;
    // The id block's fence is the last: its first hash, offset, length.
    let fence = trailer - 20;
    let (id_at, id_len) = (word(fence + 8) as usize, bytes[fence + 16] as usize);
    let count = u16::from_le_bytes([bytes[id_at], bytes[id_at + 1]]);
    let mut block = bytes[id_at..id_at + id_len - 4 - 13].to_vec();
    block[..2].copy_from_slice(&(count - 1).to_le_bytes());
    block.extend_from_slice(&crc32fast::hash(&block).to_le_bytes());
    let mut out = bytes[..id_at].to_vec();
    out.extend_from_slice(&block);
    let new_fences_at = out.len();
    out.extend_from_slice(&bytes[fences_at..trailer]);
    let fence = out.len() - 20;
    out[fence + 16..fence + 20].copy_from_slice(&(block.len() as u32).to_le_bytes());
    out.extend_from_slice(&bytes[trailer..trailer + 40]);
    out.extend_from_slice(&(new_fences_at as u64).to_le_bytes());
    let crc = crc32fast::hash(&out[new_fences_at..]);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

#[test]
fn an_archive_missing_an_id_entry_is_refused_by_its_lookups_and_whole() {
    // Guards against an id block holding fewer entries than the trailer's
    // count gives it: a lookup in it must refuse it, not answer "none".
    let bytes = encoded(KEYS, pairs(2));
    let crafted = without_last_id_entry(&bytes);
    assert_eq!(crafted.len(), bytes.len() - 13);
    // Every checksum agrees, so it opens...
    let blocks = opened(crafted).unwrap_or_else(|e| panic!("{e}"));
    let count_refused = |result: &Result<_, SnapshotError>| {
        matches!(
            result,
            Err(SnapshotError::Invalid {
                field: "archive id count",
                ..
            })
        )
    };
    // ...but a lookup by id and a reading of it whole refuse the block.
    for id in ["w-0", "w-1"] {
        let found = blocks.find_id(id).map(|found| found.is_some());
        assert!(count_refused(&found), "{id}: {found:?}");
    }
    let whole = blocks.pairs().map(|pairs| !pairs.is_empty());
    assert!(count_refused(&whole), "{whole:?}");
}

#[test]
fn an_archive_holding_a_key_or_an_id_twice_is_refused_when_read_whole() {
    for twice in ["key", "id"] {
        let mut both = pairs(2);
        match twice {
            "key" => both[1].key = both[0].key.clone(),
            _ => both[1].id = both[0].id.clone(),
        }
        let blocks = opened(encoded(KEYS, both)).unwrap_or_else(|e| panic!("{e}"));
        let refused = blocks.pairs().map(|pairs| pairs.len());
        assert!(
            matches!(
                &refused,
                Err(SnapshotError::Invalid {
                    field: "archive pairs",
                    ..
                })
            ),
            "{twice}: {refused:?}"
        );
    }
}

/// Every answer `bytes` give: the pairs, and every name looked up.
fn answers(bytes: Vec<u8>, count: usize) -> Result<Vec<Option<(u64, SettledPair)>>, SnapshotError> {
    let blocks = opened(bytes)?;
    let mut answers: Vec<_> = blocks.pairs()?.into_iter().map(Some).collect();
    for n in 0..count {
        answers.push(blocks.find_key(&format!("key-{n}"))?);
        answers.push(blocks.find_id(&format!("w-{n}"))?);
    }
    Ok(answers)
}

#[test]
fn every_damaged_byte_is_refused_and_never_answered_from() {
    let count = PAIRS_PER_BLOCK + 3;
    let bytes = encoded(KEYS, pairs(count));
    let whole = answers(bytes.clone(), count).unwrap_or_else(|e| panic!("{e}"));
    for at in 0..bytes.len() {
        let mut damaged = bytes.clone();
        damaged[at] ^= 0x5a;
        if let Ok(given) = answers(damaged, count) {
            // Only bytes nothing reads may pass: there are none.
            panic!(
                "byte {at} damaged, and the archive answered {} times",
                given.len()
            );
        }
    }
    assert_eq!(whole.len(), 3 * count);
}

#[test]
fn a_cut_archive_is_refused_at_its_trailer() {
    let bytes = encoded(KEYS, pairs(10));
    for len in 0..bytes.len() {
        let refused = opened(bytes[..len].to_vec());
        assert!(refused.is_err(), "an archive cut to {len} bytes opened");
    }
    assert!(TRAILER_LEN < bytes.len());
}

#[test]
fn reading_past_an_archive_in_memory_is_refused() {
    let bytes = vec![1u8, 2, 3];
    let mut into = Vec::new();
    assert!(bytes.read_at(2, 2, &mut into).is_err());
    assert!(bytes.read_at(u64::MAX, 1, &mut into).is_err());
    assert!(bytes.read_at(1, 2, &mut into).is_ok());
    assert_eq!(into, [2, 3]);
}

proptest! {
    /// However many pairs fill however many blocks, under whatever key,
    /// each is found by its key and by its id.
    #[test]
    fn pairs_are_found_whatever_their_number_and_key(
        count in 1..(3 * PAIRS_PER_BLOCK),
        keys in any::<(u64, u64)>(),
    ) {
        let blocks = opened(encoded(keys, pairs(count))).unwrap_or_else(|e| panic!("{e}"));
        for n in 0..count {
            let by_key = blocks.find_key(&format!("key-{n}")).unwrap_or_else(|e| panic!("{e}"));
            let by_id = blocks.find_id(&format!("w-{n}")).unwrap_or_else(|e| panic!("{e}"));
            prop_assert_eq!(by_key.map(|(_, pair)| pair), Some(pair(n)));
            prop_assert_eq!(by_id.map(|(_, pair)| pair), Some(pair(n)));
        }
    }
}

#[test]
fn a_trailer_counting_more_pairs_than_its_blocks_hold_is_refused() {
    // Guards against believing the trailer's count of pairs: each block
    // must hold the pairs that count gives it (64 but the last), or a
    // lookup and a count of the pairs left would rest on a number no
    // block backs.
    let count = PAIRS_PER_BLOCK + 1;
    let mut crafted = encoded(KEYS, pairs(count));
    let trailer = crafted.len() - TRAILER_LEN;
    let claimed = (count as u64 + 1).to_le_bytes();
    crafted[trailer + 16..trailer + 24].copy_from_slice(&claimed);
    let mut word = [0u8; 8];
    word.copy_from_slice(&crafted[trailer + 40..trailer + 48]);
    let fences_at = u64::from_le_bytes(word) as usize;
    let end = crafted.len();
    let crc = crc32fast::hash(&crafted[fences_at..end - 4]);
    crafted[end - 4..].copy_from_slice(&crc.to_le_bytes());
    let blocks = opened(crafted).unwrap_or_else(|e| panic!("{e}"));
    let whole = blocks.pairs().map(|pairs| pairs.len());
    assert!(
        matches!(
            &whole,
            Err(SnapshotError::Invalid {
                field: "archive pair count",
                ..
            })
        ),
        "{whole:?}"
    );
}
