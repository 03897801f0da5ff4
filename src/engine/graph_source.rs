//! Where a serving graph may come from: the rules for `spec.graph.url` and
//! `spec.graph.bearerTokenSecretRef`, and policies' `limits.allowedGraphHosts`
//! (the fields are listed in `docs/api-reference.md`; who may send a token
//! where is in `docs/security.md`).

use url::Url;

use super::field_error::FieldError;
use super::field_path::Path;
use super::hosts::HostPattern;
use super::names::{check_dns_subdomain, check_secret_key};
use super::policy::Layer;
use crate::api::v1beta1::GraphSpec;

/// A graph URL the fetcher may use: `https`, a host, no user information,
/// no fragment. The error says what is wrong.
pub fn parse_graph_url(url: &str) -> Result<Url, String> {
    let parsed = Url::parse(url).map_err(|e| format!("not a URL: {e}"))?;
    if parsed.scheme() != "https" {
        return Err("must be an https:// URL with a host".to_owned());
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err("must be an https:// URL with a host".to_owned());
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(
            "must not carry credentials (user information): use spec.graph.bearerTokenSecretRef"
                .to_owned(),
        );
    }
    if parsed.fragment().is_some() {
        return Err("must not have a fragment (#...)".to_owned());
    }
    Ok(parsed)
}

/// The host (lowercase, IPv6 in brackets) and port (443 when absent) of a
/// parsed graph URL.
#[must_use]
pub fn host_and_port(url: &Url) -> (&str, u16) {
    (
        url.host_str().unwrap_or_default(),
        url.port_or_known_default().unwrap_or(443),
    )
}

/// The service's own `spec.graph` rules (`at` is `spec.graph`).
#[must_use]
pub fn graph_errors(at: &Path<'_>, g: &GraphSpec) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Err(why) = parse_graph_url(&g.url) {
        errs.push(FieldError::invalid(
            &at.child("url"),
            format!("{:?}", cut(&g.url)),
            &why,
        ));
    }
    if let Some(r) = &g.bearer_token_secret_ref {
        let secret = at.child("bearerTokenSecretRef");
        let (name, key) = (secret.child("name"), secret.child("key"));
        if r.name.is_empty() {
            errs.push(FieldError::required(&name, "the Secret holding the token"));
        } else if let Err(why) = check_dns_subdomain(&r.name) {
            errs.push(FieldError::invalid(
                &name,
                format!("{:?}", cut(&r.name)),
                &why,
            ));
        }
        if r.key.is_empty() {
            errs.push(FieldError::required(
                &key,
                "the key of the token in the Secret",
            ));
        } else if let Err(why) = check_secret_key(&r.key) {
            errs.push(FieldError::invalid(
                &key,
                format!("{:?}", cut(&r.key)),
                &why,
            ));
        }
    }
    errs
}

/// The parsed `allowedGraphHosts` of a layer (bad entries, which admission
/// of the policy refuses, are skipped), or `None` when it sets none.
#[must_use]
pub fn layer_hosts(layer: &Layer<'_>) -> Option<Vec<HostPattern>> {
    let list = layer.limits?.allowed_graph_hosts.as_ref()?;
    Some(
        list.iter()
            .filter_map(|e| HostPattern::parse(e).ok())
            .collect(),
    )
}

/// The layers whose `allowedGraphHosts` do not admit `url` (written at
/// `at`), each with the field error naming it.
#[must_use]
pub fn host_violations<'l, 'a>(
    at: &Path<'_>,
    layers: &'l [Layer<'a>],
    url: &Url,
) -> Vec<(&'l Layer<'a>, FieldError)> {
    let (host, port) = host_and_port(url);
    layers
        .iter()
        .filter_map(|l| {
            let list = l.limits?.allowed_graph_hosts.as_ref()?;
            let patterns = layer_hosts(l)?;
            if super::hosts::any_matches(&patterns, host, port) {
                return None;
            }
            let shown = if list.len() > 8 {
                format!("{} (and {} more)", quoted(&list[..8]), list.len() - 8)
            } else {
                quoted(list)
            };
            Some((
                l,
                FieldError::invalid(
                    at,
                    format!("{:?}", cut(url.as_str())),
                    &format!(
                        "host {host}:{port} is not in the allowed graph hosts {shown} ({})",
                        l.display()
                    ),
                ),
            ))
        })
        .collect()
}

/// Whether an applicable policy lists the URL's host literally (not
/// through `*.`): only then may the fetcher connect to an internal address.
#[must_use]
pub fn host_listed_literally(layers: &[Layer<'_>], url: &Url) -> bool {
    let (host, port) = host_and_port(url);
    layers.iter().any(|l| {
        layer_hosts(l).is_some_and(|ps| ps.iter().any(|p| p.is_literal() && p.matches(host, port)))
    })
}

/// Entry errors of a policy's `allowedGraphHosts` (at `at`), and for a
/// namespace policy the entries no entry of `outer` (a cluster policy that
/// applies to its namespace) covers.
#[must_use]
pub fn policy_host_errors(
    at: &Path<'_>,
    mine: &[String],
    outer: Option<(&[String], &str)>,
) -> (Vec<FieldError>, Vec<FieldError>) {
    let mut invalid = Vec::new();
    let mut loosen = Vec::new();
    let field = |i: usize| at.index(i).to_string();
    let theirs: Option<(Vec<HostPattern>, &[String], &str)> = outer.map(|(list, who)| {
        (
            list.iter()
                .filter_map(|e| HostPattern::parse(e).ok())
                .collect(),
            list,
            who,
        )
    });
    for (i, entry) in mine.iter().enumerate() {
        match HostPattern::parse(entry) {
            Err(why) => invalid.push(FieldError::invalid(
                field(i),
                format!("{:?}", cut(entry)),
                &why,
            )),
            Ok(p) => {
                if let Some((patterns, list, who)) = &theirs
                    && !patterns.iter().any(|t| t.covers(&p))
                {
                    loosen.push(FieldError::invalid(
                        field(i),
                        format!("{:?}", cut(entry)),
                        &format!(
                            "may not loosen the allowed graph hosts {} of {who}",
                            quoted(list)
                        ),
                    ));
                }
            }
        }
    }
    (invalid, loosen)
}

fn quoted(items: &[String]) -> String {
    items
        .iter()
        .map(|i| format!("\"{}\"", cut(i)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn cut(s: &str) -> &str {
    match s.char_indices().nth(256) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::v1beta1::SecretKeyRef;

    #[test]
    fn graph_urls_are_https_with_a_host_and_nothing_else() {
        assert!(parse_graph_url("https://graphs.example.com/v1/g?x=1").is_ok());
        for (url, why) in [
            ("http://graphs.example.com/g", "https://"),
            ("https://", "host"),
            ("https://:8443/g", "host"),
            ("graphs.example.com/g", "not a URL"),
            ("https://user:pw@graphs.example.com/g", "credentials"),
            ("https://user@graphs.example.com/g", "credentials"),
            ("https://graphs.example.com/g#frag", "fragment"),
        ] {
            let e = parse_graph_url(url).expect_err(url);
            assert!(e.contains(why), "{url}: {e}");
        }
        let u = parse_graph_url("https://[FD00::7]:8443/g").expect("v6");
        assert_eq!(host_and_port(&u), ("[fd00::7]", 8443));
        let u = parse_graph_url("https://Graphs.Example.COM/g").expect("upper");
        assert_eq!(host_and_port(&u), ("graphs.example.com", 443));
    }

    #[test]
    fn token_references_are_validated() {
        let g = |name: &str, key: &str| GraphSpec {
            url: "https://graphs.example.com/g".into(),
            bearer_token_secret_ref: Some(SecretKeyRef {
                name: name.into(),
                key: key.into(),
            }),
        };
        let spec = Path::new("spec");
        let at = spec.child("graph");
        assert!(graph_errors(&at, &g("graph-token", "token.v1_A")).is_empty());
        let fields = |e: Vec<FieldError>| e.into_iter().map(|e| e.to_string()).collect::<Vec<_>>();
        let errs = fields(graph_errors(&at, &g("../secrets/x", "a/b")));
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(errs[0].starts_with("spec.graph.bearerTokenSecretRef.name: Invalid value"));
        assert!(errs[1].starts_with("spec.graph.bearerTokenSecretRef.key: Invalid value"));
        let errs = fields(graph_errors(&at, &g("", "..")));
        assert!(errs[0].contains("Required"), "{errs:?}");
        assert!(errs[1].contains("'.' or '..'"), "{errs:?}");
        let long = "a".repeat(254);
        assert!(fields(graph_errors(&at, &g(&long, "k")))[0].contains("253"));
    }

    #[test]
    fn policy_literals_match_url_hosts_in_any_textual_form() {
        use crate::api::policy::{Enforcement, PolicyLimits};
        let limits = |hosts: &[&str]| PolicyLimits {
            allowed_graph_hosts: Some(hosts.iter().map(|h| (*h).to_owned()).collect()),
            ..PolicyLimits::default()
        };
        fn layer(limits: &PolicyLimits) -> Layer<'_> {
            Layer {
                kind: "ClusterInferencePolicy",
                namespace: None,
                name: "graphs",
                priority: 0,
                enforcement: Enforcement::Deny,
                defaults: None,
                limits: Some(limits),
            }
        }
        let url = |u: &str| parse_graph_url(u).expect(u);
        let spec = Path::new("spec");
        let graph = spec.child("graph");
        let at = graph.child("url");
        let forms = [
            "[::ffff:7f00:1]",
            "[::ffff:127.0.0.1]",
            "[0:0:0:0:0:ffff:7f00:1]",
        ];
        for entry in forms {
            let l = limits(&[entry]);
            let layers = [layer(&l)];
            for host in forms {
                let u = url(&format!("https://{host}:8443/g"));
                assert!(host_listed_literally(&layers, &u), "{entry} vs {host}");
                assert!(
                    host_violations(&at, &layers, &u).is_empty(),
                    "{entry} vs {host}"
                );
            }
            let other = url("https://[::ffff:7f00:2]/g");
            assert!(!host_listed_literally(&layers, &other), "{entry}");
            assert_eq!(host_violations(&at, &layers, &other).len(), 1, "{entry}");
        }
        let l = limits(&["Graphs.Example.COM.", "[FD00::7]:8443", "*.ml.example.com"]);
        let layers = [layer(&l)];
        assert!(host_listed_literally(
            &layers,
            &url("https://graphs.example.com./g")
        ));
        assert!(host_listed_literally(
            &layers,
            &url("https://[fd00:0:0::7]:8443/g")
        ));
        assert!(!host_listed_literally(&layers, &url("https://[fd00::7]/g")));
        assert!(!host_listed_literally(
            &layers,
            &url("https://a.ml.example.com/g")
        ));
        assert!(host_violations(&at, &layers, &url("https://a.ml.example.com/g")).is_empty());
    }
}
