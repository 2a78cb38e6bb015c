//! A record as given to a writer, and a name as asked.

/// A record to write: opaque bytes under two names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Record<'a> {
    /// The name a run is ordered by (payonce: a request key).
    pub primary: &'a [u8],
    /// The second name it is found by (payonce: a withdrawal id).
    pub secondary: &'a [u8],
    /// What the caller keeps under them.
    pub payload: &'a [u8],
}

/// A name to look up or prefetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Name<'a> {
    /// A primary name.
    Primary(&'a [u8]),
    /// A secondary name.
    Secondary(&'a [u8]),
}
