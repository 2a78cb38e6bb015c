//! Reading PEM files: certificates, roots, and a certificate's key.

use std::fmt;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

use crate::error::TlsFileError;

/// Longest PEM file read, in bytes: a bundle of every public root
/// (Debian's `ca-certificates.crt` is about 220 KiB) fits many times over.
pub const PEM_FILE_LEN_MAX: u64 = 4 << 20;

/// Most certificates read from one file.
pub const CERTIFICATES_PER_FILE_MAX: usize = 4096;

/// The bytes of `file`, refused past [`PEM_FILE_LEN_MAX`] before they are
/// read.
fn read_pem(file: &Path) -> Result<Vec<u8>, TlsFileError> {
    let read = |error| TlsFileError::Read {
        file: file.to_owned(),
        error,
    };
    let opened = std::fs::File::open(file).map_err(read)?;
    let len = opened.metadata().map_err(read)?.len();
    if len > PEM_FILE_LEN_MAX {
        return Err(TlsFileError::TooLarge {
            file: file.to_owned(),
            len,
            max: PEM_FILE_LEN_MAX,
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    // The file may grow between the two reads: never past the limit.
    opened
        .take(PEM_FILE_LEN_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(read)?;
    if bytes.len() as u64 > PEM_FILE_LEN_MAX {
        return Err(TlsFileError::TooLarge {
            file: file.to_owned(),
            len: bytes.len() as u64,
            max: PEM_FILE_LEN_MAX,
        });
    }
    Ok(bytes)
}

fn pem_error(file: &Path, error: &pem::Error) -> TlsFileError {
    TlsFileError::Pem {
        file: file.to_owned(),
        detail: error.to_string(),
    }
}

/// The certificates of the PEM file `file`, in order: a chain (the
/// end-entity certificate first), or a bundle of roots. Refused if it holds
/// none, or more than [`CERTIFICATES_PER_FILE_MAX`].
pub fn read_certificates(file: &Path) -> Result<Vec<CertificateDer<'static>>, TlsFileError> {
    let bytes = read_pem(file)?;
    let mut certificates = Vec::new();
    for certificate in CertificateDer::pem_slice_iter(&bytes) {
        if certificates.len() == CERTIFICATES_PER_FILE_MAX {
            return Err(TlsFileError::Certificates {
                file: file.to_owned(),
                count: certificates.len() + 1,
                max: CERTIFICATES_PER_FILE_MAX,
            });
        }
        certificates.push(certificate.map_err(|error| pem_error(file, &error))?);
    }
    if certificates.is_empty() {
        return Err(TlsFileError::Certificates {
            file: file.to_owned(),
            count: 0,
            max: CERTIFICATES_PER_FILE_MAX,
        });
    }
    Ok(certificates)
}

/// The certificates of `file` as a trust store. Refused if one of them
/// cannot be a trust anchor: a roots file that is partly unusable is a
/// mistake to fix, not to work around.
pub fn read_roots(file: &Path) -> Result<RootCertStore, TlsFileError> {
    let mut roots = RootCertStore::empty();
    for certificate in read_certificates(file)? {
        roots
            .add(certificate)
            .map_err(|error| TlsFileError::Unusable {
                file: file.to_owned(),
                detail: format!("a certificate cannot be a root: {error}"),
            })?;
    }
    Ok(roots)
}

/// The operating system's trust store (`/etc/ssl/certs` on Debian, or
/// where `SSL_CERT_FILE` and `SSL_CERT_DIR` say). Certificates it cannot
/// parse are left out, as every TLS client does; a store with none left is
/// refused.
pub fn system_roots() -> Result<RootCertStore, TlsFileError> {
    let loaded = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(loaded.certs);
    if added == 0 {
        let detail = match loaded.errors.first() {
            Some(error) => format!("no usable certificate ({error})"),
            None => "no usable certificate".to_owned(),
        };
        return Err(TlsFileError::SystemRoots { detail });
    }
    Ok(roots)
}

/// A certificate chain and its private key, checked to belong together.
#[derive(Clone)]
pub struct Identity {
    key: Arc<CertifiedKey>,
}

impl Identity {
    /// The chain and the key, as rustls signs with them.
    pub fn certified_key(&self) -> Arc<CertifiedKey> {
        self.key.clone()
    }

    /// The chain, the end-entity certificate first.
    pub fn chain(&self) -> &[CertificateDer<'static>] {
        &self.key.cert
    }
}

/// The key stays out of every message.
impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("chain", &self.key.cert.len())
            .finish_non_exhaustive()
    }
}

/// The certificate chain in `certificate` and the private key in `key`
/// (PKCS#8, PKCS#1 or SEC1, in PEM), refused unless the key is the one the
/// chain's first certificate was issued for.
pub fn read_identity(certificate: &Path, key: &Path) -> Result<Identity, TlsFileError> {
    let chain = read_certificates(certificate)?;
    let bytes = read_pem(key)?;
    let private = match PrivateKeyDer::from_pem_slice(&bytes) {
        Ok(private) => private,
        Err(pem::Error::NoItemsFound) => {
            return Err(TlsFileError::NoKey {
                file: key.to_owned(),
            });
        }
        Err(error) => return Err(pem_error(key, &error)),
    };
    let provider = crate::provider();
    let signing = provider
        .key_provider
        .load_private_key(private)
        .map_err(|error| TlsFileError::Unusable {
            file: key.to_owned(),
            detail: error.to_string(),
        })?;
    let certified = CertifiedKey::new(chain, signing);
    match certified.keys_match() {
        Ok(()) => {}
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            return Err(TlsFileError::KeyMismatch {
                certificate: certificate.to_owned(),
                key: key.to_owned(),
            });
        }
        // aws-lc-rs keys all know their public half; a key that cannot tell
        // is refused rather than trusted.
        Err(error) => {
            return Err(TlsFileError::Unusable {
                file: key.to_owned(),
                detail: error.to_string(),
            });
        }
    }
    Ok(Identity {
        key: Arc::new(certified),
    })
}
