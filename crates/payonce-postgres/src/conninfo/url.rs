//! The URL form, as libpq reads it:
//! `postgresql://[user[:password]@][host[:port][,...]][/dbname][?option=value&...]`.
//!
//! Hosts in the authority become one `host` option and one `port` option,
//! comma-separated, as libpq makes them; so `?host=a,b&port=p1,p2` in the
//! query and `host=a,b port=p1,p2` in key=value say the same. Every part
//! is percent-decoded (socket directories are written `%2Ftmp`), and an
//! IPv6 address is bracketed (`[::1]:5432`).

use super::error::ConninfoError;

/// The options of the URL whose text after `postgresql://` is `rest`,
/// which starts at byte `start` of the whole string.
pub(super) fn parse(rest: &str, start: usize) -> Result<Vec<(String, String)>, ConninfoError> {
    let mut options = Vec::new();
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let mut authority = &rest[..authority_end];
    if let Some(at) = authority.find('@') {
        let (user, password) = match authority[..at].split_once(':') {
            Some((user, password)) => (user, Some(password)),
            None => (&authority[..at], None),
        };
        if !user.is_empty() {
            options.push(("user".to_owned(), decode(user, start)?));
        }
        if let Some(password) = password {
            options.push(("password".to_owned(), decode(password, start)?));
        }
        authority = &authority[at + 1..];
    }
    let hosts_start = start + authority_end - authority.len();
    hosts(authority, hosts_start, &mut options)?;
    let mut tail = &rest[authority_end..];
    if let Some(path) = tail.strip_prefix('/') {
        let end = path.find('?').unwrap_or(path.len());
        if end > 0 {
            options.push(("dbname".to_owned(), decode(&path[..end], start)?));
        }
        tail = &path[end..];
    }
    if let Some(query) = tail.strip_prefix('?') {
        let query_start = start + rest.len() - query.len();
        parameters(query, query_start, &mut options)?;
    }
    Ok(options)
}

/// `host[:port]` entries separated by commas, into `host` and `port`.
fn hosts(
    authority: &str,
    start: usize,
    options: &mut Vec<(String, String)>,
) -> Result<(), ConninfoError> {
    if authority.is_empty() {
        return Ok(());
    }
    let mut hosts = Vec::new();
    let mut ports = Vec::new();
    let mut offset = start;
    for entry in authority.split(',') {
        let (host, port) = host_and_port(entry, offset)?;
        hosts.push(decode(host, offset)?);
        ports.push(decode(port, offset)?);
        offset += entry.len() + 1;
    }
    options.push(("host".to_owned(), hosts.join(",")));
    if ports.iter().any(|port| !port.is_empty()) {
        options.push(("port".to_owned(), ports.join(",")));
    }
    Ok(())
}

/// An entry's host and port (empty if it has none).
fn host_and_port(entry: &str, offset: usize) -> Result<(&str, &str), ConninfoError> {
    if let Some(bracketed) = entry.strip_prefix('[') {
        let Some((address, after)) = bracketed.split_once(']') else {
            return Err(ConninfoError::Syntax {
                offset,
                expected: "`]` closing an IPv6 address",
            });
        };
        return match after.strip_prefix(':') {
            Some(port) => Ok((address, port)),
            None if after.is_empty() => Ok((address, "")),
            None => Err(ConninfoError::Syntax {
                offset: offset + entry.len() - after.len(),
                expected: "`:`, `,` or `/` after an IPv6 address",
            }),
        };
    }
    Ok(entry.split_once(':').unwrap_or((entry, "")))
}

/// `option=value` pairs separated by `&`. libpq's `ssl=true` is
/// `sslmode=require`.
fn parameters(
    query: &str,
    start: usize,
    options: &mut Vec<(String, String)>,
) -> Result<(), ConninfoError> {
    let mut offset = start;
    for pair in query.split('&') {
        if pair.is_empty() {
            offset += 1;
            continue;
        }
        let Some((option, value)) = pair.split_once('=') else {
            return Err(ConninfoError::Syntax {
                offset,
                expected: "`=` in a query parameter",
            });
        };
        if value.contains('=') {
            return Err(ConninfoError::Syntax {
                offset: offset + option.len() + 1 + value.find('=').unwrap_or(0),
                expected: "one `=` in a query parameter",
            });
        }
        let option = decode(option, offset)?;
        let value = decode(value, offset)?;
        if option == "ssl" && value == "true" {
            options.push(("sslmode".to_owned(), "require".to_owned()));
        } else {
            options.push((option, value));
        }
        offset += pair.len() + 1;
    }
    Ok(())
}

/// `text` with every `%XX` decoded; the result must be UTF-8.
fn decode(text: &str, offset: usize) -> Result<String, ConninfoError> {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] != b'%' {
            decoded.push(bytes[at]);
            at += 1;
            continue;
        }
        let digits = bytes
            .get(at + 1..at + 3)
            .filter(|pair| pair.iter().all(u8::is_ascii_hexdigit))
            .and_then(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok());
        let Some(byte) = digits else {
            return Err(ConninfoError::Syntax {
                offset: offset + at,
                expected: "two hex digits after `%`",
            });
        };
        decoded.push(byte);
        at += 3;
    }
    String::from_utf8(decoded).map_err(|_| ConninfoError::Syntax {
        offset,
        expected: "UTF-8 once percent-decoded",
    })
}
