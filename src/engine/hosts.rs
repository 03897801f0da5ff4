//! Host patterns: the entries of a Secret's `infergate.dev/graph-token-hosts`
//! annotation and of a policy's `limits.allowedGraphHosts`.
//!
//! An entry is a host (`graphs.example.com`, `10.0.0.7`, `[fd00::7]`),
//! optionally with a port (`graph-api.ml.svc:8443`), or `*.` and a domain
//! (`*.ml.example.com`: any subdomain, at any depth, not the domain itself).
//! An entry and a URL's host compare in one canonical form: an IPv6
//! address as `Ipv6Addr` prints it (so `[::ffff:7f00:1]`,
//! `[::ffff:127.0.0.1]` and `[0:0:0:0:0:ffff:7f00:1]` are one host), an IPv4
//! address dotted, a DNS name lowercase without a trailing dot. An entry
//! without a port matches any port. An entry without `*.` is *literal*: only literal entries can let
//! the fetcher reach an internal address.

use core::net::{Ipv4Addr, Ipv6Addr};
use std::fmt;

/// The annotation by which a Secret's owner lists the hosts its token may
/// be sent to (comma-separated host patterns, as this module reads them).
pub use crate::api::vocabulary::names::ANNOTATION_GRAPH_TOKEN_HOSTS as TOKEN_HOSTS_ANNOTATION;

/// One parsed host pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPattern {
    wildcard: bool,
    /// Lowercase DNS name without trailing dot, dotted IPv4, or `[ipv6]`.
    host: String,
    port: Option<u16>,
}

/// The largest number of entries read from one list (an annotation or a
/// policy field); longer lists are refused, not cut.
pub const MAX_ENTRIES: usize = 64;

impl HostPattern {
    /// Parse one entry; the error says what is wrong with it.
    pub fn parse(entry: &str) -> Result<Self, String> {
        let s = entry.trim();
        if s.is_empty() {
            return Err("empty host".to_owned());
        }
        if s.len() > 260 {
            return Err("longer than 260 characters".to_owned());
        }
        let (wildcard, rest) = match s.strip_prefix("*.") {
            Some(r) => (true, r),
            None => (false, s),
        };
        let (host, port) = split_port(rest)?;
        let host = canonical(host)?;
        if !host.starts_with('[') && host.parse::<Ipv4Addr>().is_err() {
            dns_name_error(&host).map_or(Ok(()), Err)?;
        }
        if wildcard && (host.starts_with('[') || host.parse::<Ipv4Addr>().is_ok()) {
            return Err("*. applies to domain names, not addresses".to_owned());
        }
        Ok(Self {
            wildcard,
            host,
            port,
        })
    }

    /// `true` for an entry without `*.`.
    #[must_use]
    pub fn is_literal(&self) -> bool {
        !self.wildcard
    }

    /// Whether the URL host `host` (as `url::Url::host_str` gives it, IPv6
    /// in brackets, in any of its textual forms) on `port` matches.
    #[must_use]
    pub fn matches(&self, host: &str, port: u16) -> bool {
        self.matches_canonical(&canonical_url_host(host), port)
    }

    fn matches_canonical(&self, host: &str, port: u16) -> bool {
        self.port.is_none_or(|p| p == port) && self.host_matches(host)
    }

    /// `host` is in the canonical form.
    fn host_matches(&self, host: &str) -> bool {
        if self.wildcard {
            host.strip_suffix(self.host.as_str())
                .and_then(|prefix| prefix.strip_suffix('.'))
                .is_some_and(|prefix| !prefix.is_empty() && !prefix.ends_with('.'))
        } else {
            host == self.host
        }
    }

    /// Whether every host and port `other` matches, `self` matches too (a
    /// namespace policy's entry `other` only narrows `self`).
    #[must_use]
    pub fn covers(&self, other: &HostPattern) -> bool {
        if let Some(p) = self.port
            && other.port != Some(p)
        {
            return false;
        }
        match (self.wildcard, other.wildcard) {
            (false, false) => self.host == other.host,
            (false, true) => false,
            (true, false) => self.host_matches(&other.host),
            (true, true) => other.host == self.host || self.host_matches(&other.host),
        }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.wildcard {
            f.write_str("*.")?;
        }
        f.write_str(&self.host)?;
        if let Some(p) = self.port {
            write!(f, ":{p}")?;
        }
        Ok(())
    }
}

/// Parse a comma-separated list (the annotation's value): the patterns, or
/// the first bad entry and why.
pub fn parse_list(list: &str) -> Result<Vec<HostPattern>, String> {
    let entries: Vec<&str> = list.split(',').filter(|e| !e.trim().is_empty()).collect();
    if entries.len() > MAX_ENTRIES {
        return Err(format!(
            "more than {MAX_ENTRIES} entries ({})",
            entries.len()
        ));
    }
    entries
        .into_iter()
        .map(|e| HostPattern::parse(e).map_err(|why| format!("{:?}: {why}", cut(e.trim()))))
        .collect()
}

/// Whether any of `patterns` matches `host` on `port`.
#[must_use]
pub fn any_matches(patterns: &[HostPattern], host: &str, port: u16) -> bool {
    let host = canonical_url_host(host);
    patterns.iter().any(|p| p.matches_canonical(&host, port))
}

/// `host` in the one form entries and URL hosts are compared in: an IPv6
/// address in brackets as `Ipv6Addr` prints it, an IPv4 address dotted (read
/// as a URL's host is read), a DNS name lowercase without a trailing dot.
/// The error says why a bracketed host is not an IPv6 address.
fn canonical(host: &str) -> Result<String, String> {
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
fn canonical_url_host(host: &str) -> String {
    canonical(host).unwrap_or_else(|_| host.to_ascii_lowercase())
}

fn cut(s: &str) -> &str {
    match s.char_indices().nth(64) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// `host[:port]` → host and port; an IPv6 host keeps its brackets.
fn split_port(s: &str) -> Result<(&str, Option<u16>), String> {
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
fn dns_name_error(name: &str) -> Option<String> {
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

#[cfg(test)]
mod tests;
