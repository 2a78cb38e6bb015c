//! Making a connection: each host in order, each with the attempts its
//! `sslmode` allows ([`crate::tls`]), until one is accepted; otherwise
//! what every attempt came to.
//!
//! A later attempt on the same host is made only when the one before was
//! refused by the server or failed in the handshake (`allow` then tries
//! TLS, `prefer` plain), never when the host could not be reached or
//! accepts no writes: those go to the next host.

use tokio_postgres::config::Host;

use crate::reach::{Reach, Target};
use crate::refusal::{ConnectError, HostRefusal, Refusal, classify};
use crate::tls::Plan;

/// The first connection `attempt` makes to one of `reach`'s hosts.
/// `attempt` connects with one host's settings and the TLS connector.
pub(crate) fn first_accepted<C>(
    reach: &Reach,
    mut attempt: impl FnMut(
        &tokio_postgres::Config,
        tokio_postgres_rustls::MakeRustlsConnect,
    ) -> Result<C, tokio_postgres::Error>,
) -> Result<C, ConnectError> {
    let mut attempts = Vec::new();
    for endpoint in reach.endpoints() {
        let unix = matches!(endpoint.host, Host::Unix(_));
        for &plan in reach.tls.plans(unix) {
            let (config, ignored) = reach.config_for(endpoint, plan);
            let error = match attempt(&config, reach.tls.connector.clone()) {
                Ok(connected) => return Ok(connected),
                Err(error) => error,
            };
            let name = endpoint.name();
            let refusal = classify(
                &error,
                &reach.tls.roots,
                &name,
                reach.user(),
                ignored.as_deref(),
            );
            tracing::debug!(host = %name, port = endpoint.port, %refusal, "a connection attempt failed");
            let next_host = matches!(refusal, Refusal::Unreachable | Refusal::ReadOnly);
            attempts.push(HostRefusal {
                host: name,
                port: endpoint.port,
                tls: plan != Plan::Plain,
                refusal,
                cause: crate::error::chain(&error),
            });
            if next_host {
                break;
            }
        }
    }
    Err(ConnectError::Refused { attempts })
}

/// A synchronous client of `url`'s database, for `target`.
pub(crate) fn client(url: &str, target: Target) -> Result<postgres::Client, ConnectError> {
    let reach = Reach::new(url, target)?;
    first_accepted(&reach, |config, tls| {
        postgres::Config::from(config.clone()).connect(tls)
    })
}
