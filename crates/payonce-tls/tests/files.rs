//! Reading TLS files: what is refused, and that the refusal names the file.

use payonce_tls::testing::TestCa;
use payonce_tls::{TlsFileError, read_certificates, read_identity, read_roots};

// Guards against a key that is not the certificate's being taken, which
// would fail only at the first handshake, far from the file at fault.
#[test]
fn a_key_that_is_not_the_certificates_is_refused_naming_both_files() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("payonce test CA").unwrap();
    let (certificate, key) = ca
        .server(&["localhost"])
        .unwrap()
        .write(dir.path(), "a")
        .unwrap();
    let (_, other_key) = ca
        .server(&["localhost"])
        .unwrap()
        .write(dir.path(), "b")
        .unwrap();
    let identity = read_identity(&certificate, &key).unwrap();
    assert_eq!(identity.chain().len(), 1);
    assert!(!format!("{identity:?}").contains("PRIVATE"));
    let error = read_identity(&certificate, &other_key).unwrap_err();
    assert!(
        matches!(&error, TlsFileError::KeyMismatch { certificate: c, key: k }
            if *c == certificate && *k == other_key),
        "{error:?}"
    );
    let said = error.to_string();
    assert!(said.contains("b.key") && said.contains("a.crt"), "{said}");
}

// Guards against empty, swapped or oversized files being taken for
// certificates or keys.
#[test]
fn files_without_what_they_should_hold_are_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("payonce test CA").unwrap();
    let (certificate, key) = ca
        .client("payonce")
        .unwrap()
        .write(dir.path(), "c")
        .unwrap();
    let missing = dir.path().join("missing.crt");
    assert!(matches!(
        read_certificates(&missing),
        Err(TlsFileError::Read { file, .. }) if file == missing
    ));
    // A key file holds no certificate; a certificate file no key.
    assert!(matches!(
        read_certificates(&key),
        Err(TlsFileError::Certificates { count: 0, .. })
    ));
    assert!(matches!(
        read_identity(&certificate, &certificate),
        Err(TlsFileError::NoKey { file }) if file == certificate
    ));
    let big = dir.path().join("big.crt");
    let len = payonce_tls::PEM_FILE_LEN_MAX + 1;
    std::fs::File::create(&big).unwrap().set_len(len).unwrap();
    assert!(matches!(
        read_roots(&big),
        Err(TlsFileError::TooLarge { len: found, .. }) if found == len
    ));
    let roots = read_roots(&ca.write(dir.path(), "ca").unwrap()).unwrap();
    assert_eq!(roots.len(), 1);
}
