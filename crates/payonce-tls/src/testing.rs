//! Certificate authorities the tests make for themselves: a CA, the
//! certificates it issues for servers and clients, PEM files of both
//! written where a server or a client reads them, and a client's rustls
//! configuration trusting a CA.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A certificate and its key, in PEM.
#[derive(Clone)]
pub struct Issued {
    /// The certificate.
    pub certificate: String,
    /// Its private key (PKCS#8).
    pub key: String,
}

impl std::fmt::Debug for Issued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issued").finish_non_exhaustive()
    }
}

impl Issued {
    /// Writes `NAME.crt` and `NAME.key` (mode 0600) in `dir`, and returns
    /// their paths.
    pub fn write(&self, dir: &Path, name: &str) -> std::io::Result<(PathBuf, PathBuf)> {
        let certificate = dir.join(format!("{name}.crt"));
        let key = dir.join(format!("{name}.key"));
        std::fs::write(&certificate, &self.certificate)?;
        std::fs::write(&key, &self.key)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))?;
        }
        Ok((certificate, key))
    }
}

/// A certificate authority of the tests' own.
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    /// The CA's own certificate, in PEM: what a peer trusts.
    pub certificate: String,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa").finish_non_exhaustive()
    }
}

fn named(common_name: &str) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, common_name);
    name
}

impl TestCa {
    /// A new CA named `common_name`, with a key of its own.
    pub fn new(common_name: &str) -> Result<TestCa, rcgen::Error> {
        let mut params = CertificateParams::default();
        params.distinguished_name = named(common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate()?;
        let certificate = params.self_signed(&key)?.pem();
        Ok(TestCa {
            issuer: Issuer::new(params, key),
            certificate,
        })
    }

    /// Writes the CA's certificate to `dir/NAME.crt` and returns its path.
    pub fn write(&self, dir: &Path, name: &str) -> std::io::Result<PathBuf> {
        let path = dir.join(format!("{name}.crt"));
        std::fs::write(&path, &self.certificate)?;
        Ok(path)
    }

    fn issue(
        &self,
        params: &mut CertificateParams,
        usage: ExtendedKeyUsagePurpose,
    ) -> Result<Issued, rcgen::Error> {
        params.extended_key_usages = vec![usage];
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate()?;
        let certificate = params.signed_by(&key, &self.issuer)?.pem();
        Ok(Issued {
            certificate,
            key: key.serialize_pem(),
        })
    }

    /// A server certificate covering `names` (DNS names or IP addresses).
    pub fn server(&self, names: &[&str]) -> Result<Issued, rcgen::Error> {
        let names: Vec<String> = names.iter().map(|&name| name.to_owned()).collect();
        let mut params = CertificateParams::new(names.clone())?;
        params.distinguished_name = named(names.first().map_or("server", String::as_str));
        self.issue(&mut params, ExtendedKeyUsagePurpose::ServerAuth)
    }

    /// A client certificate whose common name is `common_name` (for
    /// PostgreSQL's `cert` authentication, the role's name).
    pub fn client(&self, common_name: &str) -> Result<Issued, rcgen::Error> {
        let mut params = CertificateParams::default();
        params.distinguished_name = named(common_name);
        self.issue(&mut params, ExtendedKeyUsagePurpose::ClientAuth)
    }
}

/// A client's rustls configuration (on [`crate::provider`]) trusting `ca`
/// alone (nothing without it) and showing `identity` when given: what the
/// tests' HTTPS clients are built on.
pub fn client_config(
    ca: Option<&TestCa>,
    identity: Option<&Issued>,
) -> Result<rustls::ClientConfig, Box<dyn std::error::Error + Send + Sync>> {
    let mut roots = rustls::RootCertStore::empty();
    if let Some(ca) = ca {
        roots.add(CertificateDer::from_pem_slice(ca.certificate.as_bytes())?)?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(crate::provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
    Ok(match identity {
        Some(issued) => {
            let chain = CertificateDer::pem_slice_iter(issued.certificate.as_bytes())
                .collect::<Result<Vec<_>, _>>()?;
            let key = PrivateKeyDer::from_pem_slice(issued.key.as_bytes())?;
            builder.with_client_auth_cert(chain, key)?
        }
        None => builder.with_no_client_auth(),
    })
}
