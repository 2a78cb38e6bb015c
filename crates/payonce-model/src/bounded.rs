//! Lists with a limit that holds while they are read: serde's own `Vec`
//! reader reserves room for up to 1 MiB on the word of a length prefix,
//! before a single element is there. These readers refuse a longer list
//! before reserving anything and never hold more than the limit.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserialize, Deserializer, SeqAccess, Visitor};

use crate::fingerprint::{DIFFERENCES_MAX, Difference};

/// Reads the fields two fingerprints differ on: at most [`DIFFERENCES_MAX`],
/// one per field. For `#[serde(deserialize_with)]`.
pub fn differences<'de, D>(deserializer: D) -> Result<Vec<Difference>, D::Error>
where
    D: Deserializer<'de>,
{
    vec_max::<D, Difference, DIFFERENCES_MAX>(deserializer)
}

/// Reads a list of at most `MAX` elements, for `#[serde(deserialize_with)]`.
pub fn vec_max<'de, D, T, const MAX: usize>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct Bounded<T, const MAX: usize>(PhantomData<T>);

    impl<'de, T: Deserialize<'de>, const MAX: usize> Visitor<'de> for Bounded<T, MAX> {
        type Value = Vec<T>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "a list of at most {MAX} entries")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let claimed = seq.size_hint().unwrap_or(0);
            if claimed > MAX {
                return Err(de::Error::invalid_length(claimed, &self));
            }
            let mut items = Vec::with_capacity(claimed);
            while let Some(item) = seq.next_element()? {
                if items.len() == MAX {
                    return Err(de::Error::invalid_length(MAX + 1, &self));
                }
                items.push(item);
            }
            Ok(items)
        }
    }

    deserializer.deserialize_seq(Bounded::<T, MAX>(PhantomData))
}
