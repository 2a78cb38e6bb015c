//! A value the running service replaces whole when its files are reread:
//! the tokens, the listener's TLS configuration, the rail's HTTP client.
//! A reader takes the value as it is now and keeps it for as long as it
//! needs (a request its tokens, a connection its TLS configuration); a
//! replacement is seen by the next reader.

use std::sync::{Arc, PoisonError, RwLock};

/// The current `T`, replaced whole.
pub(crate) struct Swap<T>(RwLock<Arc<T>>);

impl<T> Swap<T> {
    pub(crate) fn new(value: T) -> Swap<T> {
        Swap(RwLock::new(Arc::new(value)))
    }

    /// The value now.
    pub(crate) fn get(&self) -> Arc<T> {
        // Nothing panics while holding the lock (a clone, an assignment),
        // so a poisoned one still holds a whole value.
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replaces it for every later reader.
    pub(crate) fn set(&self, value: T) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(value);
    }
}
