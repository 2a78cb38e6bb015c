//! Why a value was refused: typed, so a caller can branch on the field and the
//! rule without parsing text.

use std::fmt;

/// A field of a withdrawal request, a request key, or an operator's input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Field {
    /// [`crate::WithdrawalId`].
    WithdrawalId,
    /// [`crate::RequestKey`].
    RequestKey,
    /// [`crate::Amount`].
    Amount,
    /// [`crate::Currency`].
    Currency,
    /// [`crate::Destination`].
    Destination,
    /// [`crate::Reference`]: the rail's transaction reference.
    Reference,
    /// [`crate::Reason`]: why a withdrawal was rejected or failed.
    Reason,
    /// [`crate::Actor`] as the person or service that asked for a withdrawal.
    RequestedBy,
    /// [`crate::Actor`] as the operator who closed a key by hand.
    Operator,
    /// [`crate::Note`]: an operator's note.
    Note,
    /// The replaced references of a bumped withdrawal.
    Replaced,
    /// [`crate::WorkerName`]: a worker of a ledger several processes share.
    Worker,
}

impl Field {
    /// The field's name as it appears in JSON and in messages.
    pub fn name(self) -> &'static str {
        match self {
            Field::WithdrawalId => "withdrawal id",
            Field::RequestKey => "request key",
            Field::Amount => "amount",
            Field::Currency => "currency",
            Field::Destination => "destination",
            Field::Reference => "reference",
            Field::Reason => "reason",
            Field::RequestedBy => "requested_by",
            Field::Operator => "operator",
            Field::Note => "note",
            Field::Replaced => "replaced",
            Field::Worker => "worker",
        }
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The rule a refused value broke.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rule {
    /// The value is the empty string.
    Empty,
    /// The value holds only whitespace.
    Blank,
    /// The value is longer than the field allows, in bytes of UTF-8.
    TooLong {
        /// The value's length in bytes.
        len: usize,
        /// The most the field allows.
        max: usize,
    },
    /// The value is shorter than the field allows, in bytes.
    TooShort {
        /// The value's length in bytes.
        len: usize,
        /// The least the field allows.
        min: usize,
    },
    /// The value holds a control character (Unicode category Cc).
    ControlCharacter {
        /// Byte offset of the first control character.
        offset: usize,
    },
    /// The value holds a character outside ASCII letters and digits.
    NotAlphanumeric {
        /// Byte offset of the first such character.
        offset: usize,
    },
    /// The value is not a plain decimal number (digits, optionally one `.`
    /// followed by digits; no sign, exponent or spaces).
    NotADecimal,
    /// The amount is zero or negative.
    NotPositive,
    /// The amount has more significant digits than an exact decimal can hold.
    TooManyDigits {
        /// Significant digits in the value.
        digits: usize,
        /// The most allowed.
        max: usize,
    },
    /// The amount has more digits after the decimal point than allowed.
    TooManyDecimals {
        /// Digits after the point, trailing zeros excluded.
        decimals: usize,
        /// The most allowed.
        max: usize,
    },
    /// The field must be present in the withdrawal's state.
    RequiredInState(crate::WithdrawalState),
    /// The field must be absent in the withdrawal's state.
    NotAllowedInState(crate::WithdrawalState),
    /// The list holds the same value twice, or holds the current value.
    Repeated,
    /// The list holds more entries than allowed.
    TooMany {
        /// Entries in the list.
        count: usize,
        /// The most allowed.
        max: usize,
    },
    /// The value is valid but not in the form the type keeps (a currency
    /// code in lower case): a borrowed view ([`crate::TextView`],
    /// [`crate::WithdrawalView`]) cannot change it, so refuses it. The owned
    /// type accepts it and normalises it.
    NotCanonical,
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::Empty => f.write_str("is empty"),
            Rule::Blank => f.write_str("is blank"),
            Rule::TooLong { len, max } => write!(f, "is {len} bytes; at most {max}"),
            Rule::TooShort { len, min } => write!(f, "is {len} bytes; at least {min}"),
            Rule::ControlCharacter { offset } => {
                write!(f, "has a control character at byte {offset}")
            }
            Rule::NotAlphanumeric { offset } => {
                write!(
                    f,
                    "has a character other than an ASCII letter or digit at byte {offset}"
                )
            }
            Rule::NotADecimal => {
                f.write_str("is not a plain decimal number (digits, optionally '.' and digits)")
            }
            Rule::NotPositive => f.write_str("is not greater than zero"),
            Rule::TooManyDigits { digits, max } => {
                write!(f, "has {digits} significant digits; at most {max}")
            }
            Rule::TooManyDecimals { decimals, max } => {
                write!(f, "has {decimals} digits after the point; at most {max}")
            }
            Rule::RequiredInState(state) => write!(f, "is required when the state is {state}"),
            Rule::NotAllowedInState(state) => {
                write!(f, "is not allowed when the state is {state}")
            }
            Rule::Repeated => f.write_str("repeats a reference"),
            Rule::TooMany { count, max } => write!(f, "has {count} entries; at most {max}"),
            Rule::NotCanonical => f.write_str("is not in its canonical form"),
        }
    }
}

/// A value refused by a constructor or a deserialiser: the field and the rule.
///
/// Displays as the field then the rule: "destination is 300 bytes; at most 256".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The field whose value was refused.
    pub field: Field,
    /// The rule it broke.
    pub rule: Rule,
}

impl FieldError {
    pub(crate) fn new(field: Field, rule: Rule) -> Self {
        FieldError { field, rule }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.field, self.rule)
    }
}

impl std::error::Error for FieldError {}
