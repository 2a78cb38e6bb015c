//! How a process reaches the ledger's database: the hosts its URL names,
//! which of them it may use, how long it waits for one, and how often it
//! tries again once it lost its connection.
//!
//! A URL may name several hosts, in either form tokio-postgres reads: the
//! authority (`postgresql://h1:5432,h2:5432/custody`, socket directories
//! percent-encoded) or key=value (`host=h1,h2 port=5432,5432
//! dbname=custody`). A process that writes (a worker, an operator, the
//! ledger's creator) connects only to the host that accepts writes
//! (`target_session_attrs=read-write`, whatever the URL says), so after a
//! failover it finds the promoted standby among the hosts it was given.
//! Readers (audits) take the URL as it is.
//!
//! A worker that lost its connection tries to connect again at its next
//! batch; after an attempt that fails it waits [`RECONNECT_DELAY_MIN`], and
//! twice as long after each further one, up to [`RECONNECT_DELAY_MAX`];
//! until the next attempt is due,
//! every batch fails at once with the last attempt's error, so callers
//! are answered "cannot record" without waiting. An attempt waits at
//! most [`CONNECT_TIMEOUT`] for each host. On TCP, a connection whose
//! peer stopped answering (a partition) is found dead by keepalives
//! within [`DEAD_PEER_MAX`] without a request's time limit, so a server
//! that is slow but alive (a long lock wait, a synchronous standby) is
//! never given up on.

use std::str::FromStr;
use std::time::{Duration, Instant};

use payonce::StoreError;
use tokio_postgres::Config;
use tokio_postgres::config::{Host, TargetSessionAttrs};

/// How long a connection attempt waits for each host, unless the URL says
/// (`connect_timeout`).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The wait before the first attempt to connect again after a connection
/// was lost, or after a failed attempt.
pub const RECONNECT_DELAY_MIN: Duration = Duration::from_millis(100);

/// The longest wait between two attempts to connect again.
pub const RECONNECT_DELAY_MAX: Duration = Duration::from_secs(2);

/// How long a worker whose batch's commit answer was lost keeps asking
/// whether it landed (the server may be failing over) before it answers
/// that it cannot tell.
pub const LOOKUP_PATIENCE: Duration = Duration::from_secs(5);

/// TCP keepalives: the first probe after this long without traffic ...
const KEEPALIVE_IDLE: Duration = Duration::from_secs(1);
/// ... then one every this long ...
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);
/// ... and the connection is dead after this many unanswered.
const KEEPALIVE_RETRIES: u32 = 3;

/// How long a connection on TCP lives on once its peer stopped answering:
/// data sent and never acknowledged for this long ends it, and so do
/// three unanswered keepalive probes after an idle second (this
/// bound covers both).
pub const DEAD_PEER_MAX: Duration = Duration::from_secs(5);

/// What a writer's session asks of the server, on every connection: a
/// transaction left idle (its worker cut off mid-batch) is ended after 5 s,
/// which lets the ledger-wide lock go for the other workers, and the
/// server finds a client that stopped answering by the same keepalives.
/// A batch is idle between its two round trips only while its worker
/// decides, milliseconds.
pub(crate) const WRITER_SETTINGS: &str = "SET idle_in_transaction_session_timeout = '5s'; \
     SET tcp_keepalives_idle = 1; SET tcp_keepalives_interval = 1; \
     SET tcp_keepalives_count = 3; SET tcp_user_timeout = 5000";

/// Which of the URL's hosts a connection may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// The one that accepts writes: a worker's, an operator's.
    Primary,
    /// Whichever the URL says (its own `target_session_attrs`): a reader's.
    AsGiven,
}

/// The connection settings of `url`, with this crate's defaults where the
/// URL says nothing: [`CONNECT_TIMEOUT`], keepalives, and for `target`
/// [`Target::Primary`], only a host that accepts writes.
pub(crate) fn config(url: &str, target: Target) -> Result<Config, StoreError> {
    let mut config = Config::from_str(url).map_err(|error| StoreError::Failed {
        detail: crate::error::chain(&error),
    })?;
    // libpq's `?host=a,b` is read by tokio-postgres as one host named
    // `a,b`, which would fail only when connecting, and confusingly.
    let commas = config.get_hosts().iter().any(|host| match host {
        Host::Tcp(name) => name.contains(','),
        Host::Unix(path) => path.to_string_lossy().contains(','),
    });
    if commas {
        return Err(StoreError::Failed {
            detail: "a host's name holds a comma: several hosts are read from the URL's \
                     authority (postgresql://h1:p1,h2:p2/db, socket directories \
                     percent-encoded) or from key=value (host=h1,h2 port=p1,p2), not from its \
                     query (?host=h1,h2)"
                .to_owned(),
        });
    }
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    config
        .keepalives(true)
        .keepalives_idle(KEEPALIVE_IDLE)
        .keepalives_interval(KEEPALIVE_INTERVAL)
        .keepalives_retries(KEEPALIVE_RETRIES)
        .tcp_user_timeout(DEAD_PEER_MAX);
    if target == Target::Primary {
        config.target_session_attrs(TargetSessionAttrs::ReadWrite);
    }
    Ok(config)
}

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

    use std::time::Duration;

    use payonce::StoreError;
    use tokio_postgres::config::{Host, TargetSessionAttrs};

    use super::{
        Backoff, CONNECT_TIMEOUT, RECONNECT_DELAY_MAX, RECONNECT_DELAY_MIN, Target, config,
    };

    #[test]
    fn both_forms_name_several_hosts_and_a_writer_takes_only_the_one_that_accepts_writes() {
        let forms = [
            "postgresql://%2Ftmp%2Fa:5433,%2Ftmp%2Fb:5434/custody?user=payonce",
            "host=/tmp/a,/tmp/b port=5433,5434 dbname=custody user=payonce",
        ];
        for url in forms {
            let primary = config(url, Target::Primary).unwrap();
            assert_eq!(
                primary.get_hosts(),
                [Host::Unix("/tmp/a".into()), Host::Unix("/tmp/b".into())],
                "{url}"
            );
            assert_eq!(primary.get_ports(), [5433, 5434]);
            assert_eq!(
                primary.get_target_session_attrs(),
                TargetSessionAttrs::ReadWrite
            );
            assert_eq!(primary.get_connect_timeout(), Some(&CONNECT_TIMEOUT));
            let reader = config(url, Target::AsGiven).unwrap();
            assert_eq!(reader.get_target_session_attrs(), TargetSessionAttrs::Any);
        }
        let timeout = config("host=a,b connect_timeout=7", Target::Primary).unwrap();
        assert_eq!(timeout.get_connect_timeout(), Some(&Duration::from_secs(7)));
    }

    #[test]
    fn several_hosts_in_the_query_are_refused_naming_the_forms_that_work() {
        let error = config(
            "postgresql:///custody?host=/tmp/a,/tmp/b&port=5433,5434",
            Target::Primary,
        )
        .unwrap_err();
        let StoreError::Failed { detail } = error else {
            panic!("{error:?}")
        };
        assert!(detail.contains("comma"), "{detail}");
        assert!(detail.contains("postgresql://h1:p1,h2:p2/db"), "{detail}");
    }

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
