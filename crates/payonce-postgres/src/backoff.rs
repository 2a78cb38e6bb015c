//! When a process that lost its connection tries to connect again: after
//! an attempt that fails it waits [`RECONNECT_DELAY_MIN`], and twice as
//! long after each further one, up to [`RECONNECT_DELAY_MAX`]; until the
//! next attempt is due, every batch fails at once with the last attempt's
//! error, so callers are answered "cannot record" without waiting.

use std::time::{Duration, Instant};

use payonce::StoreError;

use crate::reach::{RECONNECT_DELAY_MAX, RECONNECT_DELAY_MIN};

/// When a process that lost its connection tries again: bounded
/// exponential backoff, and the error of the last attempt meanwhile.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    /// The wait after the next failure; zero while connected.
    delay: Duration,
    /// No attempt before this.
    next: Option<Instant>,
    /// Why the last attempt failed.
    last: Option<StoreError>,
}

impl Backoff {
    /// `Ok` if an attempt may be made now; otherwise the last attempt's
    /// error, and when the next is due.
    pub(crate) fn due(&self) -> Result<(), StoreError> {
        let (Some(next), Some(last)) = (self.next, &self.last) else {
            return Ok(());
        };
        let wait = next.saturating_duration_since(Instant::now());
        if wait.is_zero() {
            return Ok(());
        }
        Err(StoreError::Failed {
            detail: format!(
                "no primary reachable: {last}; the next attempt to connect is in {} ms",
                wait.as_millis()
            ),
        })
    }

    /// How long until the next attempt is due.
    pub(crate) fn wait(&self) -> Duration {
        self.next.map_or(Duration::ZERO, |next| {
            next.saturating_duration_since(Instant::now())
        })
    }

    /// An attempt failed with `error`: the next waits twice as long as the
    /// last, within [`RECONNECT_DELAY_MIN`] and [`RECONNECT_DELAY_MAX`].
    pub(crate) fn failed(&mut self, error: &StoreError) {
        self.delay = (self.delay * 2).clamp(RECONNECT_DELAY_MIN, RECONNECT_DELAY_MAX);
        self.next = Some(Instant::now() + self.delay);
        self.last = Some(error.clone());
    }

    /// Connected: the next loss starts again from the shortest wait.
    pub(crate) fn connected(&mut self) {
        *self = Backoff::default();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use payonce::StoreError;

    use super::Backoff;
    use crate::reach::{RECONNECT_DELAY_MAX, RECONNECT_DELAY_MIN};

    #[test]
    fn attempts_back_off_twice_as_long_each_time_within_bounds_and_fail_fast_meanwhile() {
        let mut backoff = Backoff::default();
        assert!(backoff.due().is_ok(), "the first attempt is made at once");
        let error = StoreError::Failed {
            detail: "connection refused".to_owned(),
        };
        backoff.failed(&error);
        assert_eq!(backoff.delay, RECONNECT_DELAY_MIN);
        let refused = backoff.due().unwrap_err().to_string();
        assert!(refused.contains("no primary reachable"), "{refused}");
        assert!(refused.contains("connection refused"), "{refused}");
        assert!(backoff.wait() <= RECONNECT_DELAY_MIN);
        let mut delays = vec![backoff.delay];
        for _ in 0..8 {
            backoff.failed(&error);
            delays.push(backoff.delay);
        }
        assert_eq!(delays[1], RECONNECT_DELAY_MIN * 2);
        assert_eq!(delays[8], RECONNECT_DELAY_MAX);
        assert!(delays.windows(2).all(|pair| pair[0] <= pair[1]));
        backoff.connected();
        assert!(backoff.due().is_ok());
    }
}
