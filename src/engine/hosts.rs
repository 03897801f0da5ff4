//! Host patterns: the entries of a Secret's `infergate.dev/graph-token-hosts`
//! annotation and of a policy's `limits.allowedGraphHosts`.
//!
//! An entry is a host (`graphs.example.com`, `10.0.0.7`, `[fd00::7]`),
//! optionally with a port (`graph-api.ml.svc:8443`), or `*.` and a domain
//! (`*.ml.example.com`: any subdomain, at any depth, not the domain itself).
//! Hosts compare case-insensitively; an entry without a port matches any
//! port. An entry without `*.` is *literal*: only literal entries can let
//! the fetcher reach an internal address.

use core::net::{Ipv4Addr, Ipv6Addr};
use std::fmt;

/// The annotation by which a Secret's owner lists the hosts its token may
/// be sent to (comma-separated host patterns, as this module reads them).
pub const TOKEN_HOSTS_ANNOTATION: &str = "infergate.dev/graph-token-hosts";

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
        let host = if let Some(inner) = host.strip_prefix('[') {
            let inner = inner
                .strip_suffix(']')
                .ok_or_else(|| "an IPv6 address needs a closing ]".to_owned())?;
            let ip: Ipv6Addr = inner
                .parse()
                .map_err(|_| format!("{inner:?} is not an IPv6 address"))?;
            format!("[{ip}]")
        } else if host.parse::<Ipv4Addr>().is_ok() {
            host.to_owned()
        } else {
            let lower = host.to_ascii_lowercase();
            let lower = lower.strip_suffix('.').unwrap_or(&lower).to_owned();
            dns_name_error(&lower).map_or(Ok(()), Err)?;
            lower
        };
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

    /// Whether the URL host `host` (as `url::Url::host_str` gives it:
    /// lowercase, IPv6 in brackets) on `port` matches.
    #[must_use]
    pub fn matches(&self, host: &str, port: u16) -> bool {
        self.port.is_none_or(|p| p == port) && self.host_matches(host)
    }

    fn host_matches(&self, host: &str) -> bool {
        let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
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
    patterns.iter().any(|p| p.matches(host, port))
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
mod tests {
    use super::*;

    fn p(s: &str) -> HostPattern {
        HostPattern::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn literal_wildcard_and_port_entries_match_as_documented() {
        let lit = p("Graphs.Example.com");
        assert!(lit.is_literal());
        assert!(lit.matches("graphs.example.com", 443));
        assert!(lit.matches("graphs.example.com", 8443), "no port: any port");
        assert!(!lit.matches("x.graphs.example.com", 443));
        assert!(!lit.matches("graphs.example.com.evil.io", 443));

        let port = p("graph-api.ml.svc:8443");
        assert!(port.matches("graph-api.ml.svc", 8443));
        assert!(!port.matches("graph-api.ml.svc", 443));

        let wild = p("*.ml.example.com");
        assert!(!wild.is_literal());
        assert!(wild.matches("a.ml.example.com", 443));
        assert!(wild.matches("a.b.ml.example.com", 443));
        assert!(
            !wild.matches("ml.example.com", 443),
            "not the domain itself"
        );
        assert!(!wild.matches("evilml.example.com", 443));
        assert!(!wild.matches(".ml.example.com", 443));

        let v4 = p("10.0.0.7:8443");
        assert!(v4.matches("10.0.0.7", 8443));
        let v6 = p("[FD00:0::7]:443");
        assert_eq!(v6.to_string(), "[fd00::7]:443");
        assert!(v6.matches("[fd00::7]", 443));
    }

    #[test]
    fn bad_entries_say_why() {
        for (entry, why) in [
            ("", "empty"),
            ("*.", "empty"),
            ("a..b", "label"),
            ("-a.b", "host name"),
            ("a.b:0", "port"),
            ("a.b:http", "port"),
            ("a.b:70000", "port"),
            ("*.10.0.0.1", "addresses"),
            ("[::1", "closing"),
            ("[zz]", "IPv6"),
            ("a/b", "host name"),
            ("user@host", "host name"),
        ] {
            let e = HostPattern::parse(entry).expect_err(entry);
            assert!(e.contains(why), "{entry}: {e}");
        }
        let e = parse_list("a.example.com, b..c").unwrap_err();
        assert!(e.contains("b..c"), "{e}");
        let many = vec!["a.example.com"; MAX_ENTRIES + 1].join(",");
        assert!(parse_list(&many).unwrap_err().contains("more than"));
        assert_eq!(
            parse_list(" a.example.com ,, *.b.example.com:8443 ")
                .expect("list")
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["a.example.com", "*.b.example.com:8443"]
        );
    }

    #[test]
    fn covers_is_narrowing() {
        let outer = p("*.example.com");
        assert!(outer.covers(&p("graphs.example.com")));
        assert!(outer.covers(&p("graphs.example.com:8443")));
        assert!(outer.covers(&p("*.ml.example.com")));
        assert!(outer.covers(&p("*.example.com")));
        assert!(!outer.covers(&p("example.com")));
        assert!(!outer.covers(&p("graphs.example.org")));
        let ported = p("*.example.com:8443");
        assert!(
            !ported.covers(&p("graphs.example.com")),
            "any port is wider"
        );
        assert!(ported.covers(&p("graphs.example.com:8443")));
        let lit = p("graphs.example.com");
        assert!(lit.covers(&p("graphs.example.com:443")));
        assert!(!lit.covers(&p("*.graphs.example.com")));
    }
}
