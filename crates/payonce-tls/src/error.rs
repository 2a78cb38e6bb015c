//! Why a TLS file was refused.

use std::fmt;
use std::path::PathBuf;

use payonce_model::escape::{EchoPath, Escaped};

/// A certificate, key or roots file that cannot be used. Each variant
/// names the file; none holds a key's bytes.
#[derive(Debug)]
#[non_exhaustive]
pub enum TlsFileError {
    /// The file could not be read.
    Read {
        /// The file.
        file: PathBuf,
        /// The operating system's error.
        error: std::io::Error,
    },
    /// The file is longer than its limit
    /// ([`PEM_FILE_LEN_MAX`](crate::PEM_FILE_LEN_MAX)).
    TooLarge {
        /// The file.
        file: PathBuf,
        /// Its length in bytes.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// The file is not PEM, or a section of it does not decode.
    Pem {
        /// The file.
        file: PathBuf,
        /// What the PEM reader said.
        detail: String,
    },
    /// The file holds no certificate, or more than its limit
    /// ([`CERTIFICATES_PER_FILE_MAX`](crate::CERTIFICATES_PER_FILE_MAX)).
    Certificates {
        /// The file.
        file: PathBuf,
        /// How many it holds (up to one past the limit).
        count: usize,
        /// The limit.
        max: usize,
    },
    /// The file holds no private key.
    NoKey {
        /// The file.
        file: PathBuf,
    },
    /// The private key is not the one the certificate was issued for.
    KeyMismatch {
        /// The certificate file.
        certificate: PathBuf,
        /// The key file.
        key: PathBuf,
    },
    /// rustls refused what the file holds: a key of a kind it cannot sign
    /// with, a certificate it cannot parse as a trust anchor.
    Unusable {
        /// The file.
        file: PathBuf,
        /// What rustls said.
        detail: String,
    },
    /// The operating system's trust store holds no certificate rustls can
    /// use.
    SystemRoots {
        /// What loading it said.
        detail: String,
    },
}

impl fmt::Display for TlsFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsFileError::Read { file, error } => write!(f, "{}: {error}", EchoPath(file)),
            TlsFileError::TooLarge { file, len, max } => write!(
                f,
                "{} is {len} bytes; a PEM file is at most {max}",
                EchoPath(file)
            ),
            TlsFileError::Pem { file, detail } => {
                write!(f, "{} is not PEM: {}", EchoPath(file), Escaped(detail))
            }
            TlsFileError::Certificates { file, count: 0, .. } => {
                write!(f, "{} holds no certificate", EchoPath(file))
            }
            TlsFileError::Certificates { file, max, .. } => {
                write!(f, "{} holds more than {max} certificates", EchoPath(file))
            }
            TlsFileError::NoKey { file } => write!(f, "{} holds no private key", EchoPath(file)),
            TlsFileError::KeyMismatch { certificate, key } => write!(
                f,
                "the private key in {} is not the key of the certificate in {}",
                EchoPath(key),
                EchoPath(certificate)
            ),
            TlsFileError::Unusable { file, detail } => {
                write!(f, "{}: {}", EchoPath(file), Escaped(detail))
            }
            TlsFileError::SystemRoots { detail } => {
                write!(f, "the operating system's trust store: {}", Escaped(detail))
            }
        }
    }
}

impl std::error::Error for TlsFileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TlsFileError::Read { error, .. } => Some(error),
            _ => None,
        }
    }
}
