//! The one canonical form entries and URL hosts are compared in, and the
//! pieces of an entry (host, port) checked on their own.

use core::net::Ipv6Addr;

/// `host` in the one form entries and URL hosts are compared in: an IPv6
/// address in brackets as `Ipv6Addr` prints it, an IPv4 address dotted (read
/// as a URL's host is read), a DNS name lowercase without a trailing dot.
/// The error says why a bracketed host is not an IPv6 address.
pub(super) fn canonical(host: &str) -> Result<String, String> {
    if let Some(inner) = host.strip_prefix('[') {
        let inner = inner
            .strip_suffix(']')
            .ok_or_else(|| "an IPv6 address needs a closing ]".to_owned())?;
        let ip: Ipv6Addr = inner
            .parse()
            .map_err(|_| format!("{:?} is not an IPv6 address", cut(inner)))?;
        return Ok(format!("[{ip}]"));
    }
    if let Ok(url::Host::Ipv4(ip)) = url::Host::parse(host) {
        return Ok(ip.to_string());
    }
    let lower = host.to_ascii_lowercase();
    Ok(lower.strip_suffix('.').unwrap_or(&lower).to_owned())
}

/// A URL's host in the canonical form (as it is, lowercase, when it is
/// not one a URL can have).
pub(super) fn canonical_url_host(host: &str) -> String {
    canonical(host).unwrap_or_else(|_| host.to_ascii_lowercase())
}

pub(super) fn cut(s: &str) -> &str {
    match s.char_indices().nth(64) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// `host[:port]` → host and port; an IPv6 host keeps its brackets.
pub(super) fn split_port(s: &str) -> Result<(&str, Option<u16>), String> {
    let (host, port) = if s.starts_with('[') {
        match s.rfind(']') {
            Some(i) if i + 1 == s.len() => (s, None),
            Some(i) => {
                let port = s[i + 1..]
                    .strip_prefix(':')
                    .ok_or_else(|| "expected :port after ]".to_owned())?;
                (&s[..=i], Some(port))
            }
            None => return Err("an IPv6 address needs a closing ]".to_owned()),
        }
    } else {
        match s.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        }
    };
    let port = match port {
        None => None,
        Some(p) => Some(
            p.parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| format!("{:?} is not a port (1-65535)", cut(p)))?,
        ),
    };
    if host.is_empty() {
        return Err("empty host".to_owned());
    }
    Ok((host, port))
}

/// Why `name` (lowercase, no trailing dot) is not a DNS name, if it isn't.
pub(super) fn dns_name_error(name: &str) -> Option<String> {
    if name.len() > 253 {
        return Some("a host name may not be longer than 253 characters".to_owned());
    }
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Some(format!(
                "{:?} is not a host name: every label has 1 to 63 characters",
                cut(name)
            ));
        }
        let ok = label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
            && !label.starts_with('-')
            && !label.ends_with('-');
        if !ok {
            return Some(format!(
                "{:?} is not a host name (letters, digits, '-' and '.')",
                cut(name)
            ));
        }
    }
    None
}
