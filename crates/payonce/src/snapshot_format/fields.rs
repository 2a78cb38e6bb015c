//! The reader and writer of a body's fields: fixed-width little-endian
//! integers, amounts, texts as a `u16` length and their bytes, counts
//! checked against the bytes left before anything is allocated for them.

use payonce_model::{Amount, TextView, ValidText};

use super::error::SnapshotError;
use super::header::SNAPSHOT_HEADER_LEN;

/// Writes a body's fields.
#[derive(Debug, Default)]
pub(crate) struct Out {
    pub(crate) bytes: Vec<u8>,
}

impl Out {
    pub(crate) fn u8(&mut self, value: u8) {
        self.bytes.push(value);
    }
    pub(crate) fn u16(&mut self, value: u16) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }
    pub(crate) fn u32(&mut self, value: u32) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }
    pub(crate) fn u64(&mut self, value: u64) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }
    pub(crate) fn u128(&mut self, value: u128) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }
    /// An amount: its mantissa and its scale, as [`In::amount`] reads it.
    pub(crate) fn amount(&mut self, amount: Amount) {
        let (mantissa, scale) = amount.parts();
        self.u128(mantissa);
        self.u8(scale);
    }
    /// A count of what follows.
    pub(crate) fn count(&mut self, count: usize) {
        self.u64(count as u64);
    }
    /// A text: its length, then its bytes. Validated text is never empty,
    /// so a length of 0 stands for no text ([`Out::optional`]).
    pub(crate) fn text(&mut self, text: &str) {
        let len = u16::try_from(text.len())
            .unwrap_or_else(|_| panic!("a text of {} bytes in the state", text.len()));
        assert!(len > 0, "validated text is never empty");
        self.u16(len);
        self.bytes.extend_from_slice(text.as_bytes());
    }
    /// An optional text: a zero length when there is none.
    pub(crate) fn optional(&mut self, text: Option<&str>) {
        match text {
            Some(text) => self.text(text),
            None => self.u16(0),
        }
    }
}

/// Reads a body's fields in order, each checked, every failure naming the
/// field and its offset in the snapshot. It reads from bytes in memory:
/// the whole body, or a window of it ([`In::window`], which
/// [`super::reader::Reader`] moves along a body read in pieces).
#[derive(Debug)]
pub(crate) struct In<'a> {
    bytes: &'a [u8],
    /// The next field's index in `bytes`.
    at: usize,
    /// Where `bytes` starts in the body.
    base: usize,
    /// The body's length: `bytes` may end before the body does.
    body_len: usize,
    /// Whether a field ran past the end of `bytes` but not of the body.
    short: bool,
    /// Where the field read last, or being read, starts in `bytes`: the
    /// offset a refusal of it names.
    field_at: usize,
}

impl<'a> In<'a> {
    /// Reads `bytes`, which start at byte `base` of a body of `body_len`
    /// bytes.
    pub(crate) fn window(bytes: &'a [u8], base: usize, body_len: usize) -> Self {
        assert!(
            base + bytes.len() <= body_len,
            "a window ends inside its body"
        );
        In {
            bytes,
            at: 0,
            base,
            body_len,
            short: false,
            field_at: 0,
        }
    }

    /// The place of the next field in the body.
    pub(crate) fn at(&self) -> usize {
        self.base + self.at
    }

    /// The offset of the next field from the snapshot's first byte.
    pub(crate) fn offset(&self) -> u64 {
        (SNAPSHOT_HEADER_LEN + self.at()) as u64
    }

    /// Whether a field was refused only because the window ended: more of
    /// the body would have held it.
    pub(crate) fn ran_short(&self) -> bool {
        self.short
    }

    /// The body's length.
    pub(crate) fn body_len(&self) -> usize {
        self.body_len
    }

    /// Bytes of the body after the next field's place.
    fn body_left(&self) -> usize {
        self.body_len - self.at()
    }

    /// The offset from the snapshot's first byte of the field read last:
    /// what a check made on it names.
    pub(crate) fn field_offset(&self) -> u64 {
        (SNAPSHOT_HEADER_LEN + self.base + self.field_at) as u64
    }

    /// A refusal of `field`, the one read last.
    pub(crate) fn invalid(
        &self,
        field: &'static str,
        expected: String,
        found: String,
    ) -> SnapshotError {
        self.invalid_at(self.field_offset(), field, expected, found)
    }

    /// A refusal of `field`, which starts at `offset`: a field of several
    /// parts, checked once all are read.
    pub(crate) fn invalid_at(
        &self,
        offset: u64,
        field: &'static str,
        expected: String,
        found: String,
    ) -> SnapshotError {
        SnapshotError::Invalid {
            field,
            offset,
            expected,
            found,
        }
    }

    fn take(&mut self, field: &'static str, len: usize) -> Result<&'a [u8], SnapshotError> {
        self.field_at = self.at;
        if len > self.bytes.len() - self.at {
            let left = self.body_left();
            self.short = len <= left;
            return Err(self.invalid(
                field,
                format!("{len} more bytes"),
                format!("the end of the body {left} bytes on"),
            ));
        }
        let taken = &self.bytes[self.at..self.at + len];
        self.at += len;
        Ok(taken)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], SnapshotError> {
        let mut array = [0u8; N];
        array.copy_from_slice(self.take(field, N)?);
        Ok(array)
    }

    pub(crate) fn u8(&mut self, field: &'static str) -> Result<u8, SnapshotError> {
        Ok(self.array::<1>(field)?[0])
    }
    pub(crate) fn u16(&mut self, field: &'static str) -> Result<u16, SnapshotError> {
        Ok(u16::from_le_bytes(self.array(field)?))
    }
    pub(crate) fn u32(&mut self, field: &'static str) -> Result<u32, SnapshotError> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }
    pub(crate) fn u64(&mut self, field: &'static str) -> Result<u64, SnapshotError> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }
    pub(crate) fn u128(&mut self, field: &'static str) -> Result<u128, SnapshotError> {
        Ok(u128::from_le_bytes(self.array(field)?))
    }

    /// An amount: its mantissa (`field`) and its scale (`scale_field`),
    /// checked as the model checks it.
    pub(crate) fn amount(
        &mut self,
        field: &'static str,
        scale_field: &'static str,
    ) -> Result<Amount, SnapshotError> {
        let at = self.offset();
        let mantissa = self.u128(field)?;
        let scale = self.u8(scale_field)?;
        Amount::from_parts(mantissa, scale).map_err(|error| {
            let found = format!("{mantissa}e-{scale}");
            self.invalid_at(at, field, error.to_string(), found)
        })
    }

    /// A byte that is 0 or 1.
    pub(crate) fn bool(&mut self, field: &'static str) -> Result<bool, SnapshotError> {
        match self.u8(field)? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(self.invalid(field, "0 or 1".to_owned(), other.to_string())),
        }
    }

    /// A count of entries that each take at least `entry_len_min` bytes,
    /// checked against the bytes left before anything is allocated for
    /// them, and against `max`.
    pub(crate) fn count(
        &mut self,
        field: &'static str,
        entry_len_min: usize,
        max: usize,
    ) -> Result<usize, SnapshotError> {
        let count = self.u64(field)?;
        let left = self.body_left() as u64;
        let fits = count
            .checked_mul(entry_len_min as u64)
            .is_some_and(|len| len <= left);
        if !fits || count > max as u64 {
            return Err(self.invalid(
                field,
                format!(
                    "at most {max} entries of at least {entry_len_min} bytes in the {left} bytes left"
                ),
                count.to_string(),
            ));
        }
        Ok(count as usize)
    }

    /// A text under `T`'s rules, exactly as `T` keeps it.
    pub(crate) fn text<T: ValidText>(
        &mut self,
        field: &'static str,
    ) -> Result<&'a str, SnapshotError> {
        self.optional::<T>(field)?
            .ok_or_else(|| self.invalid(field, "a text".to_owned(), "none (length 0)".to_owned()))
    }

    /// An optional text under `T`'s rules: a zero length is none.
    pub(crate) fn optional<T: ValidText>(
        &mut self,
        field: &'static str,
    ) -> Result<Option<&'a str>, SnapshotError> {
        let at = self.offset();
        let len = self.u16(field)?;
        if len == 0 {
            return Ok(None);
        }
        let bytes = self.take(field, usize::from(len))?;
        let refuse = |found: String, expected: String| SnapshotError::Invalid {
            field,
            offset: at,
            expected,
            found,
        };
        let text = std::str::from_utf8(bytes)
            .map_err(|error| refuse(error.to_string(), "UTF-8 text".to_owned()))?;
        match TextView::<T>::new(text) {
            Ok(view) if view.as_str() == text => Ok(Some(text)),
            Ok(view) => Err(refuse(
                format!("{text:?}"),
                format!("its canonical form {:?}", view.as_str()),
            )),
            Err(error) => Err(refuse(format!("{text:?}"), error.to_string())),
        }
    }

    /// Skips `len` bytes.
    pub(crate) fn skip(&mut self, field: &'static str, len: usize) -> Result<(), SnapshotError> {
        self.take(field, len).map(|_| ())
    }
}

/// Refuses bytes after the body's last field, which ends at body byte
/// `ends`.
pub(crate) fn ended(ends: usize, body_len: usize) -> Result<(), SnapshotError> {
    if ends == body_len {
        return Ok(());
    }
    Err(SnapshotError::Invalid {
        field: "end of body",
        offset: (SNAPSHOT_HEADER_LEN + ends) as u64,
        expected: "no more bytes".to_owned(),
        found: format!("{} bytes more", body_len.saturating_sub(ends)),
    })
}
