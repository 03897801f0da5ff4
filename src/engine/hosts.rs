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

mod canonical;
mod list;
mod pattern;

pub use list::{MAX_ENTRIES, TOKEN_HOSTS_ANNOTATION, any_matches, parse_list};
pub use pattern::HostPattern;

#[cfg(test)]
mod tests;
