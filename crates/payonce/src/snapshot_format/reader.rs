//! Reading a snapshot's body record by record, wherever its bytes are. A
//! body in memory is read in place. A body in a file is read a piece at a
//! time into one buffer that is reused, so a load never holds the whole
//! snapshot in memory beside the state it builds: the first touch of
//! fresh memory is most of what a load costs (docs/performance.md).

use super::error::SnapshotError;
use super::fields::In;

/// Bytes of a snapshot read from storage at a time, unless its
/// [`SnapshotFile`] says otherwise: enough that a read costs its copying
/// and little more, and a small buffer beside a snapshot (about 2 GB at
/// 10M withdrawals).
pub const SNAPSHOT_READ_LEN: usize = 8 << 20;

/// A snapshot in storage that can be read a piece at a time
/// ([`crate::SnapshotStore::open`]).
pub trait SnapshotFile: Send + Sync {
    /// Its length in bytes, header included.
    fn byte_len(&self) -> u64;
    /// Appends to `into` the `len` bytes from `offset` on; fewer only at
    /// the end of the file.
    fn read_at(&self, offset: u64, len: usize, into: &mut Vec<u8>) -> Result<(), SnapshotError>;
    /// How many bytes a reading asks for at a time: [`SNAPSHOT_READ_LEN`].
    fn piece_len(&self) -> usize {
        SNAPSHOT_READ_LEN
    }
    /// A handle on the same bytes that stays readable after the snapshot
    /// is renamed, replaced or removed (a file descriptor, or a pin on a
    /// database's rows): what a state loaded from it reads its archive,
    /// from byte `from` to the end, through later. `None` (the default):
    /// the store has none, and the archive is read into memory while the
    /// snapshot is loaded.
    fn lasting(&self, from: u64) -> Option<std::sync::Arc<dyn SnapshotFile>> {
        let _ = from;
        None
    }
    /// Whether an opening believes an archive read through this handle
    /// before reading every block's checksum, leaving them to a pass on a
    /// thread of its own while the ledger serves, each block also checked
    /// whenever a name reads it: a store where reading every byte means
    /// sending it over a network to each new process (a database). `false`
    /// (the default): every block is checked before the snapshot is
    /// believed.
    fn checked_in_background(&self) -> bool {
        false
    }
}

/// Where a body's bytes are.
#[derive(Clone, Copy)]
pub(crate) enum BodyBytes<'a> {
    /// In memory, whole.
    Slice(&'a [u8]),
    /// In `file`, from byte `at` on, `len` bytes, read `piece` bytes at
    /// a time ([`SNAPSHOT_READ_LEN`]).
    File {
        file: &'a dyn SnapshotFile,
        at: u64,
        len: usize,
        piece: usize,
    },
}

impl BodyBytes<'_> {
    /// The body's length.
    pub(crate) fn len(&self) -> usize {
        match *self {
            BodyBytes::Slice(body) => body.len(),
            BodyBytes::File { len, .. } => len,
        }
    }
}

/// Walks a body from its first byte, one record at a time.
pub(crate) struct Reader<'a> {
    body: BodyBytes<'a>,
    /// Of a body in a file: its bytes from `start` on, as far as read.
    window: Vec<u8>,
    start: usize,
    /// The next byte to read, in the body.
    pos: usize,
    /// The checksum of the body's bytes before `hashed_to`, once
    /// [`Reader::hash_from_here`] started it.
    crc: Option<crc32fast::Hasher>,
    hashed_to: usize,
}

impl<'a> Reader<'a> {
    /// A reader at `body`'s first byte.
    pub(crate) fn new(body: BodyBytes<'a>) -> Self {
        Reader {
            body,
            window: Vec::new(),
            start: 0,
            pos: 0,
            crc: None,
            hashed_to: 0,
        }
    }

    /// The next byte to read, in the body.
    pub(crate) fn at(&self) -> usize {
        self.pos
    }

    /// Runs `read` on the body from the next byte on, and moves past what
    /// it read. A read that ran past the bytes in hand, but not past the
    /// body, is run again once more are read: `read` must change nothing
    /// before its last field is read.
    pub(crate) fn record<T, E: From<SnapshotError>>(
        &mut self,
        mut read: impl FnMut(&mut In<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        loop {
            let len = self.body.len();
            let mut input = match self.body {
                BodyBytes::Slice(body) => In::window(&body[self.pos..], self.pos, len),
                BodyBytes::File { .. } => {
                    In::window(&self.window[self.pos - self.start..], self.pos, len)
                }
            };
            let result = read(&mut input);
            let (short, at) = (input.ran_short(), input.at());
            if result.is_err() && short {
                self.read_more()?;
                continue;
            }
            assert!(at >= self.pos, "a record is read forward");
            self.pos = at;
            return result;
        }
    }

    /// Moves to byte `at` of the body, reading past what lies between a
    /// piece at a time, so the window never holds more than a piece.
    pub(crate) fn skip_to(&mut self, at: usize) -> Result<(), SnapshotError> {
        assert!(at >= self.pos, "a reader skips forward");
        while self.pos < at {
            let step = match self.body {
                BodyBytes::Slice(_) => at - self.pos,
                BodyBytes::File { piece, .. } => (at - self.pos).min(piece),
            };
            self.record(|input| input.skip("body", step))?;
        }
        Ok(())
    }

    /// Moves to byte `at` of the body without reading what lies between:
    /// where a section starts that another reader reads the bytes before.
    /// Only before the reader hashes, as the bytes passed over are not.
    pub(crate) fn jump_to(&mut self, at: usize) {
        assert!(self.crc.is_none(), "a hashing reader reads every byte");
        assert!(
            at >= self.pos && at <= self.body.len(),
            "a reader jumps forward, within its body"
        );
        self.window.clear();
        self.start = at;
        self.pos = at;
    }

    /// The bytes the window holds, for a test of how far a reading
    /// reached into memory.
    #[cfg(test)]
    pub(crate) fn window_capacity(&self) -> usize {
        self.window.capacity()
    }

    /// Keeps a checksum of the body's bytes from the next one on.
    pub(crate) fn hash_from_here(&mut self) {
        self.crc = Some(crc32fast::Hasher::new());
        self.hashed_to = self.pos;
    }

    /// The checksum of the body's bytes from where
    /// [`Reader::hash_from_here`] was called to the next one.
    pub(crate) fn hashed(mut self) -> crc32fast::Hasher {
        self.hash_window();
        self.crc.unwrap_or_default()
    }

    /// The checksum of the whole body, read from its first byte in a
    /// reading of its own.
    pub(crate) fn checksum(body: BodyBytes<'_>) -> Result<u32, SnapshotError> {
        let mut reader = Reader::new(body);
        reader.hash_from_here();
        reader.skip_to(body.len())?;
        Ok(reader.hashed().finalize())
    }

    /// Hashes the bytes read since the last hashing, up to the next one.
    fn hash_window(&mut self) {
        let Some(crc) = &mut self.crc else { return };
        let bytes = match self.body {
            BodyBytes::Slice(body) => &body[self.hashed_to..self.pos],
            BodyBytes::File { .. } => {
                &self.window[self.hashed_to - self.start..self.pos - self.start]
            }
        };
        crc.update(bytes);
        self.hashed_to = self.pos;
    }

    /// Reads more of a body in a file into the window, after what is left
    /// of it from the next byte on: a piece, and at least as many bytes as
    /// the window held, so a record longer than a window is read in a few
    /// passes.
    fn read_more(&mut self) -> Result<(), SnapshotError> {
        let BodyBytes::File {
            file,
            at,
            len,
            piece,
        } = self.body
        else {
            unreachable!("a body in memory is whole: no field runs short of it")
        };
        self.hash_window();
        self.window.drain(..self.pos - self.start);
        self.start = self.pos;
        let from = self.start + self.window.len();
        let wanted = piece.max(self.window.len()).min(len - from);
        assert!(
            wanted > 0,
            "a field ran short of a body that was read whole"
        );
        self.window.reserve(wanted);
        let before = self.window.len();
        file.read_at(at + from as u64, wanted, &mut self.window)?;
        let read = self.window.len() - before;
        if read != wanted {
            return Err(SnapshotError::Length {
                expected: at + len as u64,
                found: at + (from + read) as u64,
            });
        }
        Ok(())
    }
}
