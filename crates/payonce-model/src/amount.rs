//! Exact amounts and currency codes.

use std::fmt;
use std::str::FromStr;

use std::sync::Arc;

use rust_decimal::Decimal;
use serde::de::{self, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{Field, FieldError, Rule};
use crate::text::sealed::{Sealed, Token};
use crate::text::{TextView, ValidText, deserialize_validated};

/// Most significant digits in an [`Amount`]: what a 96-bit decimal holds exactly.
pub const AMOUNT_DIGITS_MAX: usize = 28;
/// Most digits after the decimal point in an [`Amount`], trailing zeros excluded.
pub const AMOUNT_DECIMALS_MAX: usize = 28;
/// Longest amount text accepted before parsing, in bytes. Generous enough for
/// 28 digits with padding zeros, small enough to bound the work on bad input.
pub const AMOUNT_TEXT_LEN_MAX: usize = 64;
/// Shortest [`Currency`] code.
pub const CURRENCY_LEN_MIN: usize = 2;
/// Longest [`Currency`] code.
pub const CURRENCY_LEN_MAX: usize = 12;

/// A strictly positive exact decimal amount.
///
/// Parsed from text only (never from a float), so `0.1` is exactly one tenth.
/// Equal values are equal whatever their written scale: `25.00` and `25.0`
/// are the same amount, and both display in the canonical form `25`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Amount(Decimal);

impl Amount {
    /// Parses a plain decimal: ASCII digits, optionally a `.` and more digits.
    /// No sign, exponent, grouping or surrounding space.
    pub fn parse(text: &str) -> Result<Self, FieldError> {
        let refuse = |rule| Err(FieldError::new(Field::Amount, rule));
        if text.is_empty() {
            return refuse(Rule::Empty);
        }
        if text.len() > AMOUNT_TEXT_LEN_MAX {
            return refuse(Rule::TooLong {
                len: text.len(),
                max: AMOUNT_TEXT_LEN_MAX,
            });
        }
        if let Some(rest) = text.strip_prefix('-') {
            // A negative number is understood, and refused for what it is.
            if is_plain_decimal(rest) {
                return refuse(Rule::NotPositive);
            }
            return refuse(Rule::NotADecimal);
        }
        if !is_plain_decimal(text) {
            return refuse(Rule::NotADecimal);
        }
        let (integer, fraction) = text.split_once('.').unwrap_or((text, ""));
        let integer = integer.trim_start_matches('0');
        let fraction = fraction.trim_end_matches('0');
        if fraction.len() > AMOUNT_DECIMALS_MAX {
            return refuse(Rule::TooManyDecimals {
                decimals: fraction.len(),
                max: AMOUNT_DECIMALS_MAX,
            });
        }
        let digits = if integer.is_empty() {
            fraction.trim_start_matches('0').len()
        } else {
            integer.len() + fraction.len()
        };
        if digits > AMOUNT_DIGITS_MAX {
            return refuse(Rule::TooManyDigits {
                digits,
                max: AMOUNT_DIGITS_MAX,
            });
        }
        if digits == 0 {
            return refuse(Rule::NotPositive);
        }
        // Parse the trimmed digits: at most 28 of them always fit exactly.
        let trimmed = if fraction.is_empty() {
            integer.to_owned()
        } else {
            format!(
                "{}.{fraction}",
                if integer.is_empty() { "0" } else { integer }
            )
        };
        match Decimal::from_str_exact(&trimmed) {
            Ok(value) if value > Decimal::ZERO => Ok(Amount(value.normalize())),
            Ok(_) => refuse(Rule::NotPositive),
            Err(_) => refuse(Rule::TooManyDigits {
                digits,
                max: AMOUNT_DIGITS_MAX,
            }),
        }
    }

    /// The exact value.
    pub fn value(&self) -> Decimal {
        self.0
    }
}

/// Digits, then optionally one `.` followed by at least one digit.
fn is_plain_decimal(text: &str) -> bool {
    let (integer, fraction) = match text.split_once('.') {
        Some((integer, fraction)) => (integer, Some(fraction)),
        None => (text, None),
    };
    let all_digits = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
    all_digits(integer) && fraction.is_none_or(all_digits)
}

impl fmt::Display for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Normalised at construction, so this is the canonical form.
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Amount({})", self.0)
    }
}

impl FromStr for Amount {
    type Err = FieldError;
    fn from_str(text: &str) -> Result<Self, FieldError> {
        Amount::parse(text)
    }
}

impl TryFrom<String> for Amount {
    type Error = FieldError;
    fn try_from(text: String) -> Result<Self, FieldError> {
        Amount::parse(&text)
    }
}

/// Most a canonical mantissa can be: 28 nines.
const MANTISSA_MAX: u128 = 9_999_999_999_999_999_999_999_999_999;

impl Amount {
    /// The amount with `mantissa` × 10^-`scale`, if it is positive,
    /// canonical (no trailing zero after the point) and within the limits:
    /// how binary encodings (an event's, a snapshot's) read an amount.
    pub fn from_parts(mantissa: u128, scale: u8) -> Result<Self, FieldError> {
        let refuse = |rule| Err(FieldError::new(Field::Amount, rule));
        if mantissa == 0 {
            return refuse(Rule::NotPositive);
        }
        if mantissa > MANTISSA_MAX {
            return refuse(Rule::TooManyDigits {
                digits: mantissa.ilog10() as usize + 1,
                max: AMOUNT_DIGITS_MAX,
            });
        }
        if usize::from(scale) > AMOUNT_DECIMALS_MAX {
            return refuse(Rule::TooManyDecimals {
                decimals: usize::from(scale),
                max: AMOUNT_DECIMALS_MAX,
            });
        }
        if scale > 0 && mantissa.is_multiple_of(10) {
            // Equal amounts have one encoding; anything else was not written
            // by `serialize`.
            return refuse(Rule::NotADecimal);
        }
        match Decimal::try_from_i128_with_scale(mantissa as i128, u32::from(scale)) {
            Ok(value) => Ok(Amount(value)),
            Err(_) => refuse(Rule::NotADecimal),
        }
    }
}

impl Amount {
    /// The amount's exact parts, `(mantissa, scale)`: the value is
    /// `mantissa` × 10^-`scale`, canonical, so equal amounts have equal
    /// parts. [`Amount::from_parts`] reads them back.
    pub fn parts(&self) -> (u128, u8) {
        // Normalised and positive, so the mantissa fits and is canonical;
        // a scale is at most 28.
        (self.0.mantissa().unsigned_abs(), self.0.scale() as u8)
    }
}

impl Serialize for Amount {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            // Text, not a number: JSON numbers are floats to most readers.
            serializer.collect_str(&self.0)
        } else {
            // Binary formats get the exact parts: no parsing on the way back.
            self.parts().serialize(serializer)
        }
    }
}

impl<'de> Deserialize<'de> for Amount {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        if deserializer.is_human_readable() {
            return deserialize_validated(deserializer, Amount::parse);
        }
        struct Parts;
        impl<'de> Visitor<'de> for Parts {
            type Value = Amount;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an amount's mantissa and scale")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Amount, A::Error> {
                let mantissa: u128 = seq
                    .next_element()?
                    .ok_or_else(|| de::Error::invalid_length(0, &self))?;
                let scale: u8 = seq
                    .next_element()?
                    .ok_or_else(|| de::Error::invalid_length(1, &self))?;
                Amount::from_parts(mantissa, scale).map_err(de::Error::custom)
            }
        }
        deserializer.deserialize_tuple(2, Parts)
    }
}

/// A currency or asset code: 2 to 12 ASCII letters or digits, stored
/// upper-case, so `usdc` and `USDC` are the same currency.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Currency(Arc<str>);

impl Currency {
    /// Validates and upper-cases a currency code.
    pub fn new(code: &str) -> Result<Self, FieldError> {
        Currency::check(code)?;
        if code.bytes().any(|b| b.is_ascii_lowercase()) {
            Ok(Currency(Arc::from(code.to_ascii_uppercase())))
        } else {
            Ok(Currency(Arc::from(code)))
        }
    }

    /// Checks the code's length and characters, whatever their case.
    fn check(code: &str) -> Result<(), FieldError> {
        let refuse = |rule| Err(FieldError::new(Field::Currency, rule));
        if code.len() < CURRENCY_LEN_MIN {
            return refuse(Rule::TooShort {
                len: code.len(),
                min: CURRENCY_LEN_MIN,
            });
        }
        if code.len() > CURRENCY_LEN_MAX {
            return refuse(Rule::TooLong {
                len: code.len(),
                max: CURRENCY_LEN_MAX,
            });
        }
        if let Some(offset) = code.bytes().position(|b| !b.is_ascii_alphanumeric()) {
            return refuse(Rule::NotAlphanumeric { offset });
        }
        Ok(())
    }

    /// The upper-case code.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The code, borrowed as a [`TextView`].
    pub fn view(&self) -> TextView<'_, Currency> {
        TextView::of(&self.0)
    }
}

// Hashes and compares as its text (the derives read the `Arc<str>`), so a
// map keyed by currency can be searched with a `&str`.
impl std::borrow::Borrow<str> for Currency {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl Sealed for Currency {}

impl ValidText for Currency {
    fn check_borrowed(code: &str, _: Token) -> Result<&str, FieldError> {
        Currency::check(code)?;
        if code.bytes().any(|b| b.is_ascii_lowercase()) {
            return Err(FieldError::new(Field::Currency, Rule::NotCanonical));
        }
        Ok(code)
    }

    fn from_checked(code: &str, _: Token) -> Self {
        Currency(Arc::from(code))
    }
}

impl fmt::Display for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl FromStr for Currency {
    type Err = FieldError;
    fn from_str(code: &str) -> Result<Self, FieldError> {
        Currency::new(code)
    }
}

impl TryFrom<String> for Currency {
    type Error = FieldError;
    fn try_from(code: String) -> Result<Self, FieldError> {
        Currency::new(&code)
    }
}

impl<'de> Deserialize<'de> for Currency {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserialize_validated(deserializer, Currency::new)
    }
}

impl Serialize for Currency {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}
