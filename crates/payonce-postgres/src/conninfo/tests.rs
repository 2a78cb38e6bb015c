#![allow(clippy::unwrap_used)]

use super::{CONNINFO_LEN_MAX, Conninfo, ConninfoError, is_conninfo};

fn options(text: &str) -> Vec<(String, String)> {
    let conninfo = Conninfo::parse(text).unwrap();
    conninfo
        .options
        .iter()
        .map(|(name, value)| ((*name).to_owned(), value.clone()))
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> = list
        .iter()
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect();
    pairs.sort();
    pairs
}

// Guards against the three ways libpq names several hosts reading
// differently: the URL's authority, its query, and key=value.
#[test]
fn the_three_forms_of_several_hosts_read_the_same() {
    let wanted = pairs(&[
        ("host", "db1,db2"),
        ("port", "5432,5433"),
        ("dbname", "custody"),
        ("sslmode", "verify-full"),
    ]);
    for text in [
        "postgresql://db1:5432,db2:5433/custody?sslmode=verify-full",
        "postgres:///custody?host=db1,db2&port=5432,5433&sslmode=verify-full",
        "host=db1,db2 port=5432,5433 dbname=custody sslmode=verify-full",
        "  host = db1,db2\tport= '5432,5433' dbname =custody sslmode='verify-full'  ",
    ] {
        assert_eq!(options(text), wanted, "{text}");
    }
}

// Guards against a URL's parts losing their percent-decoding, brackets or
// credentials.
#[test]
fn a_url_decodes_its_parts_and_reads_credentials_and_ipv6() {
    assert_eq!(
        options(
            "postgresql://al%40ice:p%3Ass@[::1]:6000,%2Ftmp%2Fs/my%20db?application_name=a%26b"
        ),
        pairs(&[
            ("user", "al@ice"),
            ("password", "p:ss"),
            ("host", "::1,/tmp/s"),
            ("port", "6000,"),
            ("dbname", "my db"),
            ("application_name", "a&b"),
        ])
    );
    assert_eq!(
        options("postgresql://db?ssl=true"),
        pairs(&[("host", "db"), ("sslmode", "require")])
    );
    assert_eq!(options("postgresql://"), pairs(&[]));
}

// Guards against key=value quoting read other than libpq reads it.
#[test]
fn quoted_values_keep_spaces_and_escapes() {
    assert_eq!(
        options(r"password='it\'s' options='-c search_path=a\ b' user=o\'brien"),
        pairs(&[
            ("password", "it's"),
            ("options", "-c search_path=a b"),
            ("user", "o'brien"),
        ])
    );
}

// Guards against a mistake in a connection string being taken, or told
// without where it is.
#[test]
fn mistakes_are_refused_naming_the_option_or_the_place() {
    let refused = |text: &str| Conninfo::parse(text).unwrap_err();
    assert_eq!(
        refused("host=db sslcrl=/x"),
        ConninfoError::NotTaken {
            option: "sslcrl".into()
        }
    );
    assert_eq!(
        refused("postgresql://db?service=x"),
        ConninfoError::NotTaken {
            option: "service".into()
        }
    );
    assert_eq!(
        refused("host=db frobnicate=1"),
        ConninfoError::Unknown {
            option: "frobnicate".into()
        }
    );
    assert!(matches!(
        refused("host=db port"),
        ConninfoError::Syntax { offset: 12, .. }
    ));
    assert!(matches!(refused("host='db"), ConninfoError::Syntax { .. }));
    assert!(matches!(
        refused("postgresql://db/x?sslmode"),
        ConninfoError::Syntax { offset: 18, .. }
    ));
    assert!(matches!(
        refused("postgresql://db/%zz"),
        ConninfoError::Syntax { .. }
    ));
    assert!(matches!(
        refused("postgresql://[::1/x"),
        ConninfoError::Syntax { .. }
    ));
    let long = format!("host={}", "a".repeat(CONNINFO_LEN_MAX));
    assert!(matches!(
        refused(&long),
        ConninfoError::TooLong {
            max: CONNINFO_LEN_MAX,
            ..
        }
    ));
}

// Guards against a password reaching a message through a conninfo.
#[test]
fn the_password_never_shows() {
    for text in [
        "postgresql://alice:hunter2secret@db/custody",
        "postgresql://db/custody?password=hunter2secret",
        "host=db password='hunter2secret'",
    ] {
        let conninfo = Conninfo::parse(text).unwrap();
        assert!(!conninfo.redacted().contains("hunter2secret"), "{text}");
        assert!(!format!("{conninfo:?}").contains("hunter2secret"), "{text}");
        assert!(conninfo.redacted().contains("password=***"), "{text}");
        assert!(!crate::redacted(text).contains("hunter2secret"), "{text}");
    }
    // What does not parse is masked too.
    for text in [
        "postgresql://alice:hunter2secret@db/custody?bogus=1",
        "host=db bogus=1 password=hunter2secret",
    ] {
        assert!(!crate::redacted(text).contains("hunter2secret"), "{text}");
    }
}

// Guards against the environment overriding the string, or filling an
// option payonce does not read.
#[test]
fn the_environment_fills_only_what_the_string_is_silent_on() {
    let env = |name: &str| match name {
        "PGHOST" => Some("envhost".to_owned()),
        "PGSSLMODE" => Some("verify-full".to_owned()),
        "PGSERVICE" => Some("ignored".to_owned()),
        _ => None,
    };
    let conninfo = Conninfo::parse("host=db").unwrap().with_environment(&env);
    assert_eq!(conninfo.get("host"), Some("db"));
    assert_eq!(conninfo.get("sslmode"), Some("verify-full"));
    assert!(!conninfo.has("service"));
}

// Guards against a directory being taken for a connection string, or a
// key=value string for a directory.
#[test]
fn connection_strings_are_told_from_directories() {
    for text in [
        "postgresql://db/custody",
        "postgres://db",
        "host=db dbname=custody",
        "dbname = custody",
    ] {
        assert!(is_conninfo(text), "{text}");
    }
    for text in ["/var/lib/payonce", "ledger", "./a=b", "dir with=sign"] {
        assert!(!is_conninfo(text), "{text}");
    }
}
