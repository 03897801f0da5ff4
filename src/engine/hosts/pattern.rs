//! One host pattern: how it is parsed, printed, and matched against a
//! URL's host and against another pattern.

use core::net::Ipv4Addr;
use std::fmt;

use super::canonical::{canonical, canonical_url_host, dns_name_error, split_port};

/// One parsed host pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPattern {
    wildcard: bool,
    /// Lowercase DNS name without trailing dot, dotted IPv4, or `[ipv6]`.
    host: String,
    port: Option<u16>,
}

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

    pub(super) fn matches_canonical(&self, host: &str, port: u16) -> bool {
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
