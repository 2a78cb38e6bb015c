//! Where a run's bytes are read from and written to: two small traits, so
//! a file, a database's chunks or memory can hold a run.

use std::fmt;
use std::io;
use std::sync::Arc;

use crate::error::RunError;

/// Where a run's bytes are read from. Files and database chunks are
/// implemented by callers; memory (`[u8]`, `Vec<u8>`, `Arc<[u8]>`) here.
pub trait RunSource: Send + Sync + fmt::Debug {
    /// Puts the `len` bytes at `offset` in `into`, replacing what it
    /// held. A failure is a [`RunError::Io`] ([`RunError::read_failed`]);
    /// fewer bytes than asked are refused by the run as a truncation.
    fn read_at(&self, offset: u64, len: usize, into: &mut Vec<u8>) -> Result<(), RunError>;

    /// How many bytes the run has.
    fn byte_len(&self) -> u64;
}

impl RunSource for [u8] {
    fn read_at(&self, offset: u64, len: usize, into: &mut Vec<u8>) -> Result<(), RunError> {
        let part = usize::try_from(offset)
            .ok()
            .and_then(|start| self.get(start..start.checked_add(len)?));
        let Some(part) = part else {
            let kind = io::ErrorKind::UnexpectedEof;
            let detail = format!("a run of {} bytes", self.len());
            return Err(RunError::read_failed(
                offset,
                len as u64,
                io::Error::new(kind, detail),
            ));
        };
        into.clear();
        into.extend_from_slice(part);
        Ok(())
    }

    fn byte_len(&self) -> u64 {
        self.len() as u64
    }
}

impl RunSource for Vec<u8> {
    fn read_at(&self, offset: u64, len: usize, into: &mut Vec<u8>) -> Result<(), RunError> {
        self.as_slice().read_at(offset, len, into)
    }

    fn byte_len(&self) -> u64 {
        self.len() as u64
    }
}

impl<T: RunSource + ?Sized> RunSource for Arc<T> {
    fn read_at(&self, offset: u64, len: usize, into: &mut Vec<u8>) -> Result<(), RunError> {
        (**self).read_at(offset, len, into)
    }

    fn byte_len(&self) -> u64 {
        (**self).byte_len()
    }
}

/// Where a run's bytes are written, in order. Files are implemented by
/// callers (who decide when to sync); memory (`Vec<u8>`) here.
pub trait RunSink {
    /// Appends `bytes`. A failure poisons the [`crate::RunWriter`].
    fn append(&mut self, bytes: &[u8]) -> Result<(), RunError>;
}

impl RunSink for Vec<u8> {
    fn append(&mut self, bytes: &[u8]) -> Result<(), RunError> {
        self.extend_from_slice(bytes);
        Ok(())
    }
}

impl<S: RunSink + ?Sized> RunSink for &mut S {
    fn append(&mut self, bytes: &[u8]) -> Result<(), RunError> {
        (**self).append(bytes)
    }
}

/// A sink that keeps nothing: for checking what a writer or a merge would
/// write, or counting its bytes.
#[derive(Debug, Default, Clone, Copy)]
pub struct DiscardSink;

impl RunSink for DiscardSink {
    fn append(&mut self, _bytes: &[u8]) -> Result<(), RunError> {
        Ok(())
    }
}
