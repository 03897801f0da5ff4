//! Where a graph fetch may connect: the URL's address, or what its host
//! resolves to, without internal addresses unless a policy lists the host
//! literally; and the resolver that lets a fetch's client connect only to
//! the addresses checked (no second lookup, no other name).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use reqwest::Url;
use url::Host;

use super::error::GraphError;
use crate::engine::graph_source::host_and_port;

/// The resolver of one fetch's client: the checked addresses for its host,
/// nothing for any other name.
pub(super) struct Checked {
    pub(super) host: String,
    pub(super) addrs: Vec<SocketAddr>,
}

impl reqwest::dns::Resolve for Checked {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let result: Result<reqwest::dns::Addrs, Box<dyn std::error::Error + Send + Sync>> =
            if name.as_str().eq_ignore_ascii_case(&self.host) {
                Ok(Box::new(self.addrs.clone().into_iter()))
            } else {
                Err(format!("{} is not the checked graph host", name.as_str()).into())
            };
        Box::pin(std::future::ready(result))
    }
}

/// The addresses a fetch of `url` may connect to: the URL's address, or
/// what its host resolves to, without the internal ones unless
/// `internal_allowed`.
pub(super) async fn destination(
    url: &Url,
    internal_allowed: bool,
) -> Result<Vec<SocketAddr>, GraphError> {
    let (_, port) = host_and_port(url);
    let resolved: Vec<SocketAddr> = match url.host() {
        Some(Host::Ipv4(ip)) => vec![SocketAddr::new(IpAddr::V4(ip), port)],
        Some(Host::Ipv6(ip)) => vec![SocketAddr::new(IpAddr::V6(ip), port)],
        Some(Host::Domain(d)) => tokio::net::lookup_host((d, port))
            .await
            .map_err(|e| GraphError::Dns {
                url: url.to_string(),
                message: e.to_string(),
            })?
            .take(32)
            .collect(),
        None => Vec::new(),
    };
    if resolved.is_empty() {
        return Err(GraphError::Dns {
            url: url.to_string(),
            message: "no addresses".to_owned(),
        });
    }
    if internal_allowed {
        return Ok(resolved);
    }
    let mut refused = None;
    let allowed: Vec<SocketAddr> = resolved
        .into_iter()
        .filter(|a| match internal_category(a.ip()) {
            Some(category) => {
                refused.get_or_insert((a.ip(), category));
                false
            }
            None => true,
        })
        .collect();
    match (allowed.is_empty(), refused) {
        (true, Some((ip, category))) => Err(GraphError::DestinationNotAllowed {
            url: url.to_string(),
            message: format!(
                "its host resolves to {ip}, a {category} address; internal addresses are reached only when a policy that applies to the namespace lists the host literally in limits.allowedGraphHosts"
            ),
        }),
        _ => Ok(allowed),
    }
}

/// What kind of internal address `ip` is, or `None` for a public one:
/// loopback, unspecified, link-local, private (RFC 1918), unique local
/// (RFC 4193), shared (CGNAT, RFC 6598), multicast, broadcast, `0.0.0.0/8`;
/// IPv4-mapped and NAT64 (`64:ff9b::/96`) IPv6 addresses as their IPv4.
#[must_use]
pub fn internal_category(ip: IpAddr) -> Option<&'static str> {
    fn v4(ip: Ipv4Addr) -> Option<&'static str> {
        let o = ip.octets();
        if ip.is_loopback() {
            Some("loopback")
        } else if ip.is_unspecified() || o[0] == 0 {
            Some("unspecified")
        } else if ip.is_link_local() {
            Some("link-local")
        } else if ip.is_private() {
            Some("private (RFC 1918)")
        } else if o[0] == 100 && (o[1] & 0xc0) == 64 {
            Some("shared (CGNAT, RFC 6598)")
        } else if ip.is_multicast() || ip.is_broadcast() {
            Some("multicast or broadcast")
        } else {
            None
        }
    }
    match ip {
        IpAddr::V4(ip) => v4(ip),
        IpAddr::V6(ip) => {
            if let Some(mapped) = ip.to_ipv4_mapped() {
                return v4(mapped);
            }
            let s = ip.segments();
            if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
                let [a, b] = s[6].to_be_bytes();
                let [c, d] = s[7].to_be_bytes();
                return v4(Ipv4Addr::new(a, b, c, d));
            }
            if ip.is_loopback() {
                Some("loopback")
            } else if ip.is_unspecified() {
                Some("unspecified")
            } else if ip.is_unicast_link_local() {
                Some("link-local")
            } else if ip.is_unique_local() {
                Some("unique local (RFC 4193)")
            } else if ip.is_multicast() {
                Some("multicast or broadcast")
            } else {
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::fetch::check_url;

    fn url(u: &str) -> Url {
        check_url(u).expect("url")
    }

    #[test]
    fn internal_addresses_are_named() {
        for (ip, category) in [
            ("127.0.0.1", "loopback"),
            ("::1", "loopback"),
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "unspecified"),
            ("::", "unspecified"),
            ("169.254.169.254", "link-local"),
            ("fe80::1", "link-local"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("192.168.1.1", "private"),
            ("fd00::7", "unique local"),
            ("100.64.0.1", "CGNAT"),
            ("100.127.255.255", "CGNAT"),
            ("::ffff:10.0.0.1", "private"),
            ("64:ff9b::a9fe:a9fe", "link-local"),
            ("224.0.0.1", "multicast"),
            ("255.255.255.255", "broadcast"),
        ] {
            let c = internal_category(ip.parse().unwrap());
            assert!(c.is_some_and(|c| c.contains(category)), "{ip}: {c:?}");
        }
        for ip in ["8.8.8.8", "100.128.0.1", "172.32.0.1", "2606:4700::1111"] {
            assert_eq!(internal_category(ip.parse().unwrap()), None, "{ip}");
        }
    }

    #[tokio::test]
    async fn internal_destinations_need_a_literal_policy_entry() {
        for u in [
            "https://127.0.0.1:8443/g",
            "https://[::1]/g",
            "https://169.254.169.254/latest",
            "https://localhost/g",
        ] {
            let e = destination(&url(u), false).await.unwrap_err();
            assert_eq!(e.reason(), "DestinationNotAllowed", "{u}: {e}");
            assert!(e.to_string().contains("allowedGraphHosts"), "{e}");
            assert!(destination(&url(u), true).await.is_ok(), "{u}");
        }
        let public = destination(&url("https://8.8.8.8/g"), false).await.unwrap();
        assert_eq!(public, vec!["8.8.8.8:443".parse::<SocketAddr>().unwrap()]);
        let e = destination(&url("https://no-such-host.invalid/g"), false)
            .await
            .unwrap_err();
        assert_eq!(e.reason(), "DNSFailure", "{e}");
    }
}
