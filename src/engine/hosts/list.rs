//! Lists of host patterns: a Secret's annotation and what matches it.

use super::canonical::{canonical_url_host, cut};
use super::pattern::HostPattern;

/// The annotation by which a Secret's owner lists the hosts its token may
/// be sent to (comma-separated host patterns, as this module reads them).
pub use crate::api::vocabulary::names::ANNOTATION_GRAPH_TOKEN_HOSTS as TOKEN_HOSTS_ANNOTATION;

/// The largest number of entries read from one list (an annotation or a
/// policy field); longer lists are refused, not cut.
pub const MAX_ENTRIES: usize = 64;

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
