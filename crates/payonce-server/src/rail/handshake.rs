//! What a failed send to the HTTP rail says: a TLS handshake that failed,
//! in words (whose certificate, and what is wrong with it), or else the
//! chain of causes, never the URL.

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
pub(super) fn tls_failure<'a>(error: &'a (dyn Error + 'static)) -> Option<&'a rustls::Error> {
    causes(error).find_map(|cause| cause.downcast_ref::<rustls::Error>())
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
        rustls::Error::InvalidMessage(_) => {
            "the rail did not answer in TLS (is it plain HTTP on that port?)".to_owned()
        }
        other => format!("TLS failed: {other}"),
    }
}

fn describe_certificate(error: &CertificateError) -> String {
    let words = match error {
        CertificateError::UnknownIssuer => "is not signed by a root we trust",
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
    let about_us = matches!(
        alert,
        AlertDescription::CertificateRequired
            | AlertDescription::BadCertificate
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateUnknown
            | AlertDescription::CertificateExpired
            | AlertDescription::CertificateRevoked
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::AccessDenied
    );
    match (about_us, client_certificate) {
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
                "not signed by a root we trust",
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
        let found = tls_failure(&io);
        assert!(matches!(
            found,
            Some(rustls::Error::InvalidCertificate(
                CertificateError::UnknownIssuer
            ))
        ));
    }
}
