//! What a failed send to the HTTP rail says. A TLS failure is told
//! apart by when it happened: in the handshake, before the rail could take
//! any request (in words: whose certificate, and what is wrong with it),
//! or on a connection that was already carrying the request, where the
//! rail may have acted on it. Anything else is the chain of causes, never
//! the URL.

use std::error::Error;

use rustls::{AlertDescription, CertificateError};

/// Most causes followed down an error's chain.
const CAUSES_MAX: usize = 16;

/// The causes of `error`, from itself down: an `io::Error` that wraps
/// another is followed into what it wraps (its `source()` skips it).
fn causes<'a>(error: &'a (dyn Error + 'static)) -> impl Iterator<Item = &'a (dyn Error + 'static)> {
    std::iter::successors(Some(error), |&current| {
        let wrapped = current
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .map(|inner| inner as &(dyn Error + 'static));
        wrapped.or_else(move || current.source())
    })
    .take(CAUSES_MAX)
}

/// The TLS failure among `error`'s causes, if that is what went wrong.
fn find_tls<'a>(error: &'a (dyn Error + 'static)) -> Option<&'a rustls::Error> {
    causes(error).find_map(|cause| cause.downcast_ref::<rustls::Error>())
}

/// A TLS failure of a send, by when it happened.
#[derive(Debug, Clone, Copy)]
pub(super) enum TlsFailure<'a> {
    /// In the handshake: the rail took no request.
    Handshake(&'a rustls::Error),
    /// On an established connection, once the request could have been
    /// sent: the rail may have acted on it.
    AfterRequest(&'a rustls::Error),
}

/// The TLS failure of a send that got `error`, if that is what went wrong.
/// It is a handshake failure only when no request byte could have reached
/// the rail's application: the connection was never made
/// (`is_connect`), or the failure is one only a handshake raises (a
/// certificate refused, by us or by the rail's alert). Any other (a record
/// that cannot be decrypted, a corrupt message, an alert about something
/// else) came on a connection that was carrying the request.
pub(super) fn tls_failure(error: &reqwest::Error) -> Option<TlsFailure<'_>> {
    let tls = find_tls(error)?;
    match error.is_connect() || handshake_only(tls) {
        true => Some(TlsFailure::Handshake(tls)),
        false => Some(TlsFailure::AfterRequest(tls)),
    }
}

/// Whether only a handshake raises `error`: a certificate we refused, or
/// the rail's alert about a certificate. In TLS 1.3 the rail checks our
/// certificate after we have finished our side of the handshake, so its
/// refusal may come when the request was already written; its TLS layer
/// refused the connection, and never handed the request on.
fn handshake_only(error: &rustls::Error) -> bool {
    match error {
        rustls::Error::InvalidCertificate(_) => true,
        rustls::Error::AlertReceived(alert) => about_a_certificate(*alert),
        _ => false,
    }
}

/// Whether `alert` is a refusal of a certificate (or of a connection
/// without one).
fn about_a_certificate(alert: AlertDescription) -> bool {
    matches!(
        alert,
        AlertDescription::CertificateRequired
            | AlertDescription::BadCertificate
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateUnknown
            | AlertDescription::CertificateExpired
            | AlertDescription::CertificateRevoked
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::AccessDenied
    )
}

/// `error` and its causes, joined with `: `, each said once. `reqwest`'s
/// own words are taken without the URL.
pub(super) fn chain(error: reqwest::Error) -> String {
    let error = error.without_url();
    let mut said: Vec<String> = Vec::new();
    for cause in causes(&error) {
        let text = cause.to_string();
        if said.last() != Some(&text) {
            said.push(text);
        }
    }
    said.join(": ")
}

/// What `error`, in a handshake with the rail, means. `client_certificate`
/// says whether we showed one.
pub(super) fn describe(error: &rustls::Error, client_certificate: bool) -> String {
    match error {
        rustls::Error::InvalidCertificate(error) => describe_certificate(error),
        rustls::Error::AlertReceived(alert) => describe_alert(*alert, client_certificate),
        // Before any record of the rail's was read, this is its first
        // answer: not TLS at all.
        rustls::Error::InvalidMessage(_) => {
            "the rail did not answer in TLS (is it plain HTTP on that port?)".to_owned()
        }
        other => format!("TLS failed: {other}"),
    }
}

fn describe_certificate(error: &CertificateError) -> String {
    let words = match error {
        CertificateError::UnknownIssuer => "is not signed by a CA we trust",
        CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
            "does not cover the rail's host name"
        }
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => "has expired",
        CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
            "is not valid yet"
        }
        CertificateError::Revoked => "is revoked",
        CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. } => {
            "is not a server certificate"
        }
        other => return format!("the rail's certificate was refused: {other}"),
    };
    format!("the rail's certificate {words}")
}

fn describe_alert(alert: AlertDescription, client_certificate: bool) -> String {
    match (about_a_certificate(alert), client_certificate) {
        (true, false) => format!(
            "the rail requires a client certificate and we showed none (its alert: {alert:?}); \
             give --rail-cert and --rail-key"
        ),
        (true, true) => format!("the rail refused our client certificate (its alert: {alert:?})"),
        (false, _) => format!("the rail refused the handshake (its alert: {alert:?})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Guards against a certificate problem or a refusal by the rail told
    // in rustls' words only, or as some other one.
    #[test]
    fn each_failure_in_its_own_words() {
        let certificate = |error| rustls::Error::InvalidCertificate(error);
        let cases = [
            (
                certificate(CertificateError::UnknownIssuer),
                "not signed by a CA we trust",
            ),
            (
                certificate(CertificateError::NotValidForName),
                "does not cover the rail's host",
            ),
            (certificate(CertificateError::Expired), "has expired"),
            (
                certificate(CertificateError::NotValidYet),
                "is not valid yet",
            ),
            (certificate(CertificateError::Revoked), "is revoked"),
            (
                rustls::Error::AlertReceived(AlertDescription::BadCertificate),
                "refused our client certificate",
            ),
            (
                rustls::Error::AlertReceived(AlertDescription::ProtocolVersion),
                "refused the handshake",
            ),
        ];
        for (error, words) in cases {
            let said = describe(&error, true);
            assert!(said.contains(words), "{error:?}: {said}");
        }
        let said = describe(
            &rustls::Error::AlertReceived(AlertDescription::CertificateRequired),
            false,
        );
        assert!(said.contains("we showed none") && said.contains("--rail-cert"));
    }

    // Guards against a TLS failure missed because an io::Error hides what
    // it wraps from `source()`.
    #[test]
    fn a_tls_failure_is_found_inside_an_io_error() {
        let tls = rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer);
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, tls);
        let found = find_tls(&io);
        assert!(matches!(
            found,
            Some(rustls::Error::InvalidCertificate(
                CertificateError::UnknownIssuer
            ))
        ));
    }

    // Guards against a failure on a connection already carrying the
    // request taken for a refused handshake, which would tell an operator
    // the rail took nothing.
    #[test]
    fn only_certificate_failures_are_handshake_only() {
        let certificate = rustls::Error::InvalidCertificate(CertificateError::Expired);
        assert!(handshake_only(&certificate));
        for alert in [
            AlertDescription::CertificateRequired,
            AlertDescription::UnknownCA,
            AlertDescription::BadCertificate,
        ] {
            assert!(
                handshake_only(&rustls::Error::AlertReceived(alert)),
                "{alert:?}"
            );
        }
        for later in [
            rustls::Error::DecryptError,
            rustls::Error::AlertReceived(AlertDescription::BadRecordMac),
            rustls::Error::AlertReceived(AlertDescription::InternalError),
            rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType),
        ] {
            assert!(!handshake_only(&later), "{later:?}");
        }
    }
}
