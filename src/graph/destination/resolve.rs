//! The addresses a fetch may connect to ([`destination`]), and the resolver
//! that lets its client connect to those only ([`Checked`]).

use std::net::{IpAddr, SocketAddr};

use reqwest::Url;
use url::Host;

use super::registry::internal_category;
use crate::engine::graph_source::host_and_port;
use crate::graph::error::GraphError;

/// The resolver of one fetch's client: the checked addresses for its host,
/// nothing for any other name.
pub(in crate::graph) struct Checked {
    pub(in crate::graph) host: String,
    pub(in crate::graph) addrs: Vec<SocketAddr>,
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
pub(in crate::graph) async fn destination(
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
                "its host resolves to {ip}, {category}; internal addresses are reached only when a policy that applies to the namespace lists the host literally in limits.allowedGraphHosts"
            ),
        }),
        _ => Ok(allowed),
    }
}
