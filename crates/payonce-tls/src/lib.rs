//! TLS files as rustls configurations, for every hop payonce makes or
//! answers: the PostgreSQL backend's connections, the HTTP rail's client
//! and `payonce serve`'s listener.
//!
//! - [`read_certificates`] reads a PEM file of certificates (a chain, or a
//!   bundle of roots); [`read_roots`] makes a bundle a trust store, and
//!   [`system_roots`] is the operating system's.
//! - [`read_identity`] reads a certificate chain and its private key, and
//!   refuses a key that is not the certificate's.
//! - [`provider`] is the one cryptography every configuration is built
//!   with (aws-lc-rs).
//!
//! Every refusal is a [`TlsFileError`] naming the file. A private key
//! never reaches a message: [`Identity`]'s `Debug` leaves it out.
//!
//! This crate reads files and builds values; it opens no connection and
//! decides nothing about who may connect, which is each hop's own.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let missing = dir.path().join("ca.crt");
//! let error = payonce_tls::read_roots(&missing).unwrap_err();
//! assert!(error.to_string().contains("ca.crt"));
//! # Ok(())
//! # }
//! ```

mod error;
mod files;
#[cfg(feature = "testing")]
pub mod testing;

use std::sync::Arc;

pub use crate::error::TlsFileError;
pub use crate::files::{
    CERTIFICATES_PER_FILE_MAX, Identity, PEM_FILE_LEN_MAX, read_certificates, read_identity,
    read_roots, system_roots,
};

/// The cryptography every configuration is built with: rustls' default,
/// aws-lc-rs, which prefers a post-quantum key exchange (X25519MLKEM768)
/// with peers that offer one.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}
