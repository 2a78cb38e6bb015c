//! The rows of a `COPY ... TO STDOUT (FORMAT binary)`, read in place from
//! the messages the server sends (PostgreSQL's documentation of `COPY`,
//! "Binary Format"): a header, then per row a field count (i16) and per
//! field its length (i32, -1 for NULL) and bytes, then a count of -1.
//! Integers are big-endian, as the format has them. Read here rather than
//! through tokio-postgres's row type, which allocates per row: a scan of
//! the log reads millions.

// The format is PostgreSQL's, big-endian on the wire; nothing here is
// written to a disk of ours, whose integers are little-endian.
#![allow(clippy::big_endian_bytes)]

use std::ops::ControlFlow;

use payonce::StoreError;

/// What begins a binary COPY: the signature, then the flags (i32) and the
/// length of the header extension (i32).
const SIGNATURE: &[u8; 11] = b"PGCOPY\n\xff\r\n\0";

/// A row of `N` fields, each `None` for NULL.
pub(crate) type Fields<'a, const N: usize> = [Option<&'a [u8]>; N];

/// Where a binary COPY's output is read to.
#[derive(Debug, Default)]
pub(crate) struct CopyRows {
    header_read: bool,
    ended: bool,
}

fn malformed(detail: &str) -> StoreError {
    StoreError::Failed {
        detail: format!("the server's binary COPY output is malformed: {detail}"),
    }
}

/// Takes `len` bytes from the front of `bytes`.
fn take<'a>(bytes: &mut &'a [u8], len: usize, what: &str) -> Result<&'a [u8], StoreError> {
    if bytes.len() < len {
        return Err(malformed(&format!("{what} is cut short")));
    }
    let (front, rest) = bytes.split_at(len);
    *bytes = rest;
    Ok(front)
}

fn int<const L: usize>(bytes: &mut &[u8], what: &str) -> Result<[u8; L], StoreError> {
    let front = take(bytes, L, what)?;
    <[u8; L]>::try_from(front).map_err(|_| malformed(what))
}

impl CopyRows {
    /// Hands `row` each row of `message`, one message of the output, in
    /// order, until `row` breaks. The server sends the header, each row and
    /// the end each in a message of its own; a row cut across messages is
    /// refused as malformed, never guessed at.
    pub(crate) fn read<'a, const N: usize>(
        &mut self,
        mut message: &'a [u8],
        row: &mut impl FnMut(Fields<'a, N>) -> Result<ControlFlow<()>, StoreError>,
    ) -> Result<ControlFlow<()>, StoreError> {
        if !self.header_read {
            if take(&mut message, SIGNATURE.len(), "the signature")? != SIGNATURE {
                return Err(malformed("no signature"));
            }
            let _flags = int::<4>(&mut message, "the flags")?;
            let extension = u32::from_be_bytes(int::<4>(&mut message, "the header")?);
            take(&mut message, extension as usize, "the header extension")?;
            self.header_read = true;
        }
        while !message.is_empty() {
            if self.ended {
                return Err(malformed("bytes after the end"));
            }
            let count = i16::from_be_bytes(int::<2>(&mut message, "a row's field count")?);
            if count == -1 {
                self.ended = true;
                continue;
            }
            if usize::try_from(count).ok() != Some(N) {
                return Err(malformed(&format!("a row of {count} fields, not {N}")));
            }
            let mut fields: Fields<'a, N> = [None; N];
            for field in &mut fields {
                let len = i32::from_be_bytes(int::<4>(&mut message, "a field's length")?);
                *field = match usize::try_from(len) {
                    Ok(len) => Some(take(&mut message, len, "a field")?),
                    Err(_) if len == -1 => None,
                    Err(_) => return Err(malformed(&format!("a field of length {len}"))),
                };
            }
            if row(fields)?.is_break() {
                return Ok(ControlFlow::Break(()));
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    /// Refuses output that stopped before its end.
    pub(crate) fn check_ended(&self) -> Result<(), StoreError> {
        match self.ended {
            true => Ok(()),
            false => Err(malformed("it stopped before its end")),
        }
    }
}

/// A non-null `int8` field.
pub(crate) fn int8(field: Option<&[u8]>, what: &str) -> Result<i64, StoreError> {
    let bytes = field.ok_or_else(|| malformed(&format!("{what} is NULL")))?;
    <[u8; 8]>::try_from(bytes)
        .map(i64::from_be_bytes)
        .map_err(|_| malformed(&format!("{what} is not 8 bytes")))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A message of the header, and one per row, as the server sends.
    fn output(rows: &[[Option<&[u8]>; 2]]) -> Vec<Vec<u8>> {
        let mut header = SIGNATURE.to_vec();
        header.extend([0; 8]);
        let mut messages = vec![header];
        for row in rows {
            let mut message = 2i16.to_be_bytes().to_vec();
            for field in row {
                match field {
                    Some(bytes) => {
                        message.extend(i32::try_from(bytes.len()).unwrap().to_be_bytes());
                        message.extend(*bytes);
                    }
                    None => message.extend((-1i32).to_be_bytes()),
                }
            }
            messages.push(message);
        }
        messages.push((-1i16).to_be_bytes().to_vec());
        messages
    }

    fn read_all(messages: &[Vec<u8>]) -> Result<Vec<Vec<Option<Vec<u8>>>>, StoreError> {
        let mut rows = CopyRows::default();
        let mut read = Vec::new();
        for message in messages {
            let flow = rows.read::<2>(message, &mut |fields| {
                read.push(fields.iter().map(|f| f.map(<[u8]>::to_vec)).collect());
                Ok(ControlFlow::Continue(()))
            })?;
            assert!(flow.is_continue());
        }
        rows.check_ended()?;
        Ok(read)
    }

    // Guards against a field read at the wrong offset, a NULL taken for empty bytes, or a cut output believed.
    #[test]
    fn rows_are_read_field_by_field_and_a_cut_or_malformed_output_is_refused() {
        let messages = output(&[[Some(b"ab"), None], [Some(b""), Some(b"xyz")]]);
        let read = read_all(&messages).unwrap();
        assert_eq!(
            read,
            [
                vec![Some(b"ab".to_vec()), None],
                vec![Some(Vec::new()), Some(b"xyz".to_vec())]
            ]
        );
        // Without its end, cut inside a row, or with a bad signature.
        assert!(read_all(&messages[..messages.len() - 1]).is_err());
        let mut cut = messages.clone();
        cut[1].pop();
        assert!(read_all(&cut).is_err());
        let mut unsigned = messages.clone();
        unsigned[0][0] = b'X';
        assert!(read_all(&unsigned).is_err());
        // A row of another width.
        let mut wide = messages;
        wide[1][1] = 3;
        assert!(read_all(&wide).is_err());
    }
}
