//! `payonce serve` over TLS: the listener's certificate chain and key and,
//! for mutual TLS, the CA its clients' certificates must be signed by;
//! read from PEM files into a rustls configuration, and read again when
//! the service is told to (SIGHUP) while connections already open keep
//! the configuration they started with.

use std::path::PathBuf;
use std::sync::Arc;

use payonce_tls::TlsFileError;
use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use rustls::sign::SingleCertAndKey;
use tokio_rustls::TlsAcceptor;

use crate::swap::Swap;

/// The files the listener's TLS is read from.
#[derive(Debug, Clone)]
pub struct ServerTlsFiles {
    /// The certificate chain, the server's own first (`--tls-cert`).
    pub certificate: PathBuf,
    /// Its private key (`--tls-key`).
    pub key: PathBuf,
    /// When given, a client must show a certificate signed by a CA in this
    /// file (`--tls-client-ca`).
    pub client_ca: Option<PathBuf>,
}

/// Why the listener's TLS could not be set up.
#[derive(Debug)]
#[non_exhaustive]
pub enum ServerTlsError {
    /// A file cannot be used: unreadable, not PEM, a key that is not the
    /// certificate's.
    File(TlsFileError),
    /// rustls refused the configuration built from the files.
    Config {
        /// What rustls said.
        detail: String,
    },
}

impl std::fmt::Display for ServerTlsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerTlsError::File(error) => write!(f, "the service's TLS: {error}"),
            ServerTlsError::Config { detail } => write!(
                f,
                "the service's TLS: {}",
                payonce_model::escape::Escaped(detail)
            ),
        }
    }
}

impl std::error::Error for ServerTlsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ServerTlsError::File(error) => Some(error),
            ServerTlsError::Config { .. } => None,
        }
    }
}

impl From<TlsFileError> for ServerTlsError {
    fn from(error: TlsFileError) -> ServerTlsError {
        ServerTlsError::File(error)
    }
}

/// The listener's TLS: its files and the configuration read from them,
/// which [`ServerTls::reload`] replaces. Clones share it.
#[derive(Clone)]
pub struct ServerTls {
    files: ServerTlsFiles,
    current: Arc<Swap<ServerConfig>>,
}

/// Names the files, never the key.
impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Reads `files`: refused if one cannot be read or parsed, or the key
    /// is not the certificate's.
    pub fn load(files: ServerTlsFiles) -> Result<ServerTls, ServerTlsError> {
        let config = server_config(&files)?;
        Ok(ServerTls {
            files,
            current: Arc::new(Swap::new(config)),
        })
    }

    /// Reads the files again, for the handshakes that start after; all or
    /// nothing: on an error the configuration in use stays.
    pub fn reload(&self) -> Result<(), ServerTlsError> {
        self.current.set(server_config(&self.files)?);
        Ok(())
    }

    /// An acceptor with the configuration as it is now.
    pub(crate) fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.current.get())
    }
}

/// The rustls configuration `files` say: TLS 1.2 and 1.3 with
/// [`payonce_tls::provider`], HTTP/1.1 by ALPN, and a client certificate
/// required when a client CA is given.
fn server_config(files: &ServerTlsFiles) -> Result<ServerConfig, ServerTlsError> {
    let identity = payonce_tls::read_identity(&files.certificate, &files.key)?;
    let provider = payonce_tls::provider();
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|error| ServerTlsError::Config {
            detail: error.to_string(),
        })?;
    let builder = match &files.client_ca {
        Some(file) => {
            let roots = payonce_tls::read_roots(file)?;
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|error| ServerTlsError::Config {
                    detail: format!("--tls-client-ca: {error}"),
                })?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config =
        builder.with_cert_resolver(Arc::new(SingleCertAndKey::from(identity.certified_key())));
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}
