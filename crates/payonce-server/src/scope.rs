//! Who may use which key: client names, the `Idempotency-Key` header, and
//! the ledger's request key a client's key is scoped to.
//!
//! A client's key `k-1` is the ledger's request key `alice:k-1`: the
//! client's name, a colon, the key. Names hold no colon, so the first colon
//! splits a ledger key back into its client and key, and two clients using
//! the same key never name the same ledger key.

use payonce_model::{REQUEST_KEY_LEN_MAX, RequestKey};

/// Longest client or operator name, in bytes.
pub const NAME_LEN_MAX: usize = 32;

/// Longest key a client may send, in bytes after trimming: what is left of
/// the ledger's [`REQUEST_KEY_LEN_MAX`] once the longest name and the colon
/// are in front of it.
pub const CLIENT_KEY_LEN_MAX: usize = REQUEST_KEY_LEN_MAX - NAME_LEN_MAX - 1;

/// Longest `Idempotency-Key` header value accepted before parsing, in bytes:
/// the longest key with every byte escaped, and its quotes.
pub const IDEMPOTENCY_KEY_HEADER_LEN_MAX: usize = 2 * CLIENT_KEY_LEN_MAX + 2;

/// Why a name or a key was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScopeError {
    /// A client or operator name that is empty, longer than
    /// [`NAME_LEN_MAX`], or holds a byte other than `A-Z a-z 0-9 _ -`.
    BadName {
        /// The name, escaped and bounded.
        name: String,
    },
    /// The `Idempotency-Key` header is not one RFC 8941 string: a quoted
    /// run of printable ASCII where `"` and `\` are escaped with `\`.
    NotAString,
    /// The header value is longer than [`IDEMPOTENCY_KEY_HEADER_LEN_MAX`].
    HeaderTooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// The key breaks the ledger's rules for request keys (empty once
    /// trimmed, say).
    Key(payonce_model::FieldError),
    /// The key is longer than [`CLIENT_KEY_LEN_MAX`] once trimmed.
    KeyTooLong {
        /// Its length in bytes.
        len: usize,
    },
}

impl std::fmt::Display for ScopeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScopeError::BadName { name } => write!(
                f,
                "name \"{name}\" is refused: 1 to {NAME_LEN_MAX} bytes of A-Z, a-z, 0-9, _ and -"
            ),
            ScopeError::NotAString => f.write_str(
                "Idempotency-Key is not an RFC 8941 string: a key in double quotes, such as \"k-1\"",
            ),
            ScopeError::HeaderTooLong { len } => write!(
                f,
                "Idempotency-Key is {len} bytes; at most {IDEMPOTENCY_KEY_HEADER_LEN_MAX}"
            ),
            ScopeError::Key(error) => write!(f, "Idempotency-Key: {error}"),
            ScopeError::KeyTooLong { len } => write!(
                f,
                "Idempotency-Key is {len} bytes once trimmed; at most {CLIENT_KEY_LEN_MAX}"
            ),
        }
    }
}

impl std::error::Error for ScopeError {}

/// Checks a client or operator name.
pub fn check_name(name: &str) -> Result<(), ScopeError> {
    let allowed = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'-';
    if name.is_empty() || name.len() > NAME_LEN_MAX || !name.bytes().all(allowed) {
        return Err(ScopeError::BadName {
            name: payonce_model::escape::bounded(name, NAME_LEN_MAX + 1).into_owned(),
        });
    }
    Ok(())
}

/// The content of an RFC 8941 sf-string (`"k-1"`, `"a\"b"`), unescaped.
pub fn parse_sf_string(value: &[u8]) -> Result<String, ScopeError> {
    if value.len() > IDEMPOTENCY_KEY_HEADER_LEN_MAX {
        return Err(ScopeError::HeaderTooLong { len: value.len() });
    }
    // Surrounding spaces are allowed around a header's value, not inside it.
    let value = value.trim_ascii();
    let inner = value
        .strip_prefix(b"\"")
        .and_then(|rest| rest.strip_suffix(b"\""))
        .ok_or(ScopeError::NotAString)?;
    let mut text = String::with_capacity(inner.len());
    let mut bytes = inner.iter();
    while let Some(&byte) = bytes.next() {
        let byte = match byte {
            b'\\' => match bytes.next() {
                Some(&escaped @ (b'"' | b'\\')) => escaped,
                _ => return Err(ScopeError::NotAString),
            },
            b'"' => return Err(ScopeError::NotAString),
            b' '..=b'~' => byte,
            _ => return Err(ScopeError::NotAString),
        };
        text.push(char::from(byte));
    }
    Ok(text)
}

/// A client's key, checked under the ledger's rules and trimmed as the
/// ledger trims request keys.
pub fn client_key(key: &str) -> Result<RequestKey, ScopeError> {
    let key = RequestKey::new(key).map_err(ScopeError::Key)?;
    if key.len() > CLIENT_KEY_LEN_MAX {
        return Err(ScopeError::KeyTooLong { len: key.len() });
    }
    Ok(key)
}

/// The ledger's request key for `client`'s `key`.
pub fn ledger_key(client: &str, key: &RequestKey) -> String {
    debug_assert!(check_name(client).is_ok());
    format!("{client}:{key}")
}

/// A ledger key split into its client and the client's key; `None` for a
/// key no client of the service wrote (one the library or an operator
/// wrote by hand, without a colon).
pub fn split_ledger_key(ledger_key: &str) -> Option<(&str, &str)> {
    let (client, key) = ledger_key.split_once(':')?;
    check_name(client).ok()?;
    Some((client, key))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Guards against a header parser that accepts what RFC 8941 refuses.
    #[test]
    fn sf_strings_are_unescaped_and_anything_else_is_refused() {
        assert_eq!(parse_sf_string(b"\"k-1\"").unwrap(), "k-1");
        assert_eq!(parse_sf_string(b" \"a\\\"b\\\\c\" ").unwrap(), "a\"b\\c");
        for bad in [
            &b"k-1"[..],
            b"\"k-1",
            b"\"a\"b\"",
            b"\"a\\n\"",
            b"\"\xc3\xa9\"",
            b"\"\t\"",
        ] {
            assert_eq!(parse_sf_string(bad), Err(ScopeError::NotAString), "{bad:?}");
        }
        let long = format!("\"{}\"", "k".repeat(IDEMPOTENCY_KEY_HEADER_LEN_MAX));
        assert!(matches!(
            parse_sf_string(long.as_bytes()),
            Err(ScopeError::HeaderTooLong { .. })
        ));
    }

    // Guards against two clients' keys naming one ledger key.
    #[test]
    fn ledger_keys_of_two_clients_never_meet_and_split_back() {
        let key = client_key(" k-1 ").unwrap();
        assert_eq!(ledger_key("alice", &key), "alice:k-1");
        assert_ne!(ledger_key("alice", &key), ledger_key("bob", &key));
        let tricky = client_key("b:k").unwrap();
        assert_eq!(
            split_ledger_key(&ledger_key("a", &tricky)),
            Some(("a", "b:k"))
        );
        assert_eq!(split_ledger_key("no-colon"), None);
        assert!(check_name("a:b").is_err());
        assert!(check_name(&"n".repeat(NAME_LEN_MAX + 1)).is_err());
        let longest = "k".repeat(CLIENT_KEY_LEN_MAX);
        let scoped = ledger_key(&"n".repeat(NAME_LEN_MAX), &client_key(&longest).unwrap());
        assert!(RequestKey::new(scoped).is_ok());
        assert!(matches!(
            client_key(&format!("{longest}k")),
            Err(ScopeError::KeyTooLong { .. })
        ));
        assert!(matches!(client_key("   "), Err(ScopeError::Key(_))));
    }
}
