//! TLS to PostgreSQL with libpq's meanings: `sslmode`, `sslrootcert`,
//! `sslcert` and `sslkey`, and the files libpq looks for in
//! `~/.postgresql/` when they are not given.
//!
//! | sslmode | tried | the server's certificate |
//! | --- | --- | --- |
//! | `disable` | plain only | - |
//! | `allow` | plain, then TLS if the server refused plain | as `require` |
//! | `prefer` (default) | TLS if the server offers it, then plain if TLS failed | as `require` |
//! | `require` | TLS only | checked against the roots if a root file is given or found (`~/.postgresql/root.crt`), else not checked |
//! | `verify-ca` | TLS only | signed by a root |
//! | `verify-full` | TLS only | signed by a root, and covering the host's name |
//!
//! `sslrootcert=system` trusts the operating system's roots and, as in
//! libpq 16, takes only `verify-full` (its default then). Over a Unix
//! socket no TLS is tried, as libpq does. Two departures from libpq, both
//! toward refusing: a root or certificate file named explicitly and missing
//! is refused (libpq goes on without it), and so is `sslrootcert=system`
//! with a weaker mode, whatever libpq version the operator knows.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{WebPkiSupportedAlgorithms, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::conninfo::{Conninfo, ConninfoError};
use crate::refusal::ConnectError;

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SslMode {
    /// Plain only.
    Disable,
    /// Plain, then TLS if the server refused plain.
    Allow,
    /// TLS if the server offers it, then plain if TLS failed.
    Prefer,
    /// TLS only.
    Require,
    /// TLS only, the certificate signed by a trusted root.
    VerifyCa,
    /// TLS only, the certificate signed by a trusted root and covering the
    /// host's name.
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<SslMode, ConninfoError> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => {
                return Err(ConninfoError::Value {
                    option: "sslmode",
                    value: value.to_owned(),
                    expected: "disable, allow, prefer, require, verify-ca or verify-full",
                });
            }
        })
    }

    /// libpq's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// One attempt on one host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Plan {
    /// No TLS.
    Plain,
    /// TLS if the server offers it, plain otherwise.
    TlsIfOffered,
    /// TLS, or nothing.
    TlsRequired,
}

impl Plan {
    pub(crate) fn ssl_mode(self) -> tokio_postgres::config::SslMode {
        match self {
            Plan::Plain => tokio_postgres::config::SslMode::Disable,
            Plan::TlsIfOffered => tokio_postgres::config::SslMode::Prefer,
            Plan::TlsRequired => tokio_postgres::config::SslMode::Require,
        }
    }
}

/// How much of the server's certificate is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verify {
    Nothing,
    Chain,
    ChainAndName,
}

/// A connection string's TLS: the mode, and the connector that checks what
/// the mode says.
#[derive(Clone)]
pub(crate) struct Tls {
    pub(crate) mode: SslMode,
    /// Which roots are trusted, for messages.
    pub(crate) roots: String,
    pub(crate) connector: MakeRustlsConnect,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("mode", &self.mode)
            .field("roots", &self.roots)
            .finish_non_exhaustive()
    }
}

/// Where the trusted roots come from.
enum Roots {
    None,
    File(PathBuf),
    System,
}

impl Tls {
    /// The TLS `conninfo` asks for; `home` is where `~/.postgresql/` is.
    pub(crate) fn new(conninfo: &Conninfo, home: Option<&Path>) -> Result<Tls, ConnectError> {
        let dot = home.map(|home| home.join(".postgresql"));
        let roots = roots(conninfo, dot.as_deref());
        let mode = mode(conninfo, &roots).map_err(ConnectError::Conninfo)?;
        let verify = match (mode, &roots) {
            (SslMode::VerifyFull, _) => Verify::ChainAndName,
            (SslMode::VerifyCa, _) | (_, Roots::File(_)) => Verify::Chain,
            _ => Verify::Nothing,
        };
        if verify != Verify::Nothing && matches!(roots, Roots::None) {
            let expected = dot.map_or("~/.postgresql/root.crt".to_owned(), |dot| {
                dot.join("root.crt").display().to_string()
            });
            return Err(ConnectError::Conninfo(ConninfoError::Conflict {
                rule: format!(
                    "sslmode={} checks the server's certificate, and the root certificate file \
                     {expected} does not exist: give sslrootcert=FILE, use the system's roots \
                     with sslrootcert=system, or a mode that does not check",
                    mode.as_str()
                ),
            }));
        }
        let (store, named) = match &roots {
            Roots::None => (RootCertStore::empty(), "nothing".to_owned()),
            Roots::File(file) => (
                payonce_tls::read_roots(file).map_err(|error| ConnectError::File {
                    option: "sslrootcert",
                    error,
                })?,
                format!("sslrootcert {}", file.display()),
            ),
            Roots::System => (
                payonce_tls::system_roots().map_err(|error| ConnectError::File {
                    option: "sslrootcert",
                    error,
                })?,
                "the system's roots".to_owned(),
            ),
        };
        let identity = crate::tls_identity::identity(conninfo, dot.as_deref())?;
        let config = client_config(verify, store, identity)?;
        Ok(Tls {
            mode,
            roots: named,
            connector: MakeRustlsConnect::new(config),
        })
    }

    /// The attempts on a host, in order: over a Unix socket, plain only.
    pub(crate) fn plans(&self, unix: bool) -> &'static [Plan] {
        if unix {
            return &[Plan::Plain];
        }
        match self.mode {
            SslMode::Disable => &[Plan::Plain],
            SslMode::Allow => &[Plan::Plain, Plan::TlsRequired],
            SslMode::Prefer => &[Plan::TlsIfOffered, Plan::Plain],
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => &[Plan::TlsRequired],
        }
    }
}

/// The roots `conninfo` names, or libpq's default file if it exists.
fn roots(conninfo: &Conninfo, dot: Option<&Path>) -> Roots {
    match conninfo.get("sslrootcert") {
        Some("system") => Roots::System,
        Some(file) => Roots::File(PathBuf::from(file)),
        None => match dot.map(|dot| dot.join("root.crt")) {
            Some(file) if file.exists() => Roots::File(file),
            _ => Roots::None,
        },
    }
}

/// The mode `conninfo` gives, under libpq's rules for `requiressl` and
/// `sslrootcert=system`.
fn mode(conninfo: &Conninfo, roots: &Roots) -> Result<SslMode, ConninfoError> {
    let given = match (conninfo.get("sslmode"), conninfo.get("requiressl")) {
        (Some(mode), _) => Some(SslMode::parse(mode)?),
        (None, Some("1")) => Some(SslMode::Require),
        (None, Some("0") | None) => None,
        (None, Some(other)) => {
            return Err(ConninfoError::Value {
                option: "requiressl",
                value: other.to_owned(),
                expected: "0 or 1",
            });
        }
    };
    match (given, roots) {
        (None | Some(SslMode::VerifyFull), Roots::System) => Ok(SslMode::VerifyFull),
        (Some(weak), Roots::System) => Err(ConninfoError::Conflict {
            rule: format!(
                "weak sslmode \"{}\" may not be used with sslrootcert=system (use \"verify-full\")",
                weak.as_str()
            ),
        }),
        (given, _) => Ok(given.unwrap_or(SslMode::Prefer)),
    }
}

fn client_config(
    verify: Verify,
    roots: RootCertStore,
    identity: Option<payonce_tls::Identity>,
) -> Result<ClientConfig, ConnectError> {
    let provider = payonce_tls::provider();
    let unusable = |detail: String| {
        ConnectError::Conninfo(ConninfoError::Conflict {
            rule: format!("the TLS configuration: {detail}"),
        })
    };
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|error| unusable(error.to_string()))?;
    let verifier: Arc<dyn ServerCertVerifier> = match verify {
        Verify::Nothing => Arc::new(AnyCertificate {
            algorithms: provider.signature_verification_algorithms,
        }),
        Verify::Chain | Verify::ChainAndName => {
            let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|error| unusable(error.to_string()))?;
            if verify == Verify::Chain {
                Arc::new(ChainOnly(webpki))
            } else {
                webpki
            }
        }
    };
    let builder = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    Ok(match identity {
        Some(identity) => builder.with_client_cert_resolver(Arc::new(
            rustls::sign::SingleCertAndKey::from(identity.certified_key()),
        )),
        None => builder.with_no_client_auth(),
    })
}

/// `sslmode=require` (or `prefer`, `allow`) without roots: libpq checks
/// no certificate, so neither does this; the handshake's signatures are
/// still checked, so the peer holds the key of what it presented.
#[derive(Debug)]
struct AnyCertificate {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// `sslmode=verify-ca`: the chain is checked against the roots, and the
/// name is not. webpki checks the chain first and the name after, so a
/// failure on the name alone means the chain held.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verified =
            self.0
                .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now);
        match verified {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
