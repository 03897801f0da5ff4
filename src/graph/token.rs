//! Bearer tokens for graph fetches, and the rule that a token goes only
//! where its Secret's owner said (`infergate.dev/graph-token-hosts`).
//!
//! A [`BearerToken`]'s `Debug` and `Display` print `[redacted]`, its header
//! value is marked sensitive, and no error message or tracing field carries
//! it.

use std::fmt;

use k8s_openapi::api::core::v1::Secret;
use reqwest::Url;
use reqwest::header::HeaderValue;

use super::error::GraphError;
use crate::api::v1beta1::SecretKeyRef;
use crate::engine::graph_source::host_and_port;
use crate::engine::hosts;
pub use crate::engine::hosts::TOKEN_HOSTS_ANNOTATION;

/// A bearer token read from a Secret, kept as its sensitive
/// `Authorization` header value. Never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct BearerToken(HeaderValue);

impl BearerToken {
    /// A token from the Secret's bytes: UTF-8, surrounding whitespace (a
    /// trailing newline from `echo`) trimmed, not empty, valid in a header.
    pub fn new(raw: &[u8]) -> Result<Self, &'static str> {
        let s = std::str::from_utf8(raw).map_err(|_| "the value is not UTF-8")?;
        let s = s.trim();
        if s.is_empty() {
            return Err("the value is empty");
        }
        if !s.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("the value contains characters not allowed in an HTTP header");
        }
        let mut v = HeaderValue::from_str(&format!("Bearer {s}"))
            .map_err(|_| "the value contains characters not allowed in an HTTP header")?;
        v.set_sensitive(true);
        Ok(Self(v))
    }

    /// The `Authorization` header value, marked sensitive.
    pub(crate) fn header_value(&self) -> HeaderValue {
        self.0.clone()
    }
}

impl fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BearerToken([redacted])")
    }
}

impl fmt::Display for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// The token under `r.key` of `secret` (in `namespace`, for messages), if
/// the Secret allows it to be sent to `url`'s host: its
/// [`TOKEN_HOSTS_ANNOTATION`] must list a matching entry. The annotation is
/// checked first; a Secret that does not allow the host is not read further.
pub fn token_from_secret(
    secret: &Secret,
    namespace: &str,
    r: &SecretKeyRef,
    url: &Url,
) -> Result<BearerToken, GraphError> {
    let (host, port) = host_and_port(url);
    let not_allowed = |why: String| GraphError::SecretNotAllowed {
        namespace: namespace.to_owned(),
        name: r.name.clone(),
        host: format!("{host}:{port}"),
        why,
    };
    let annotation = secret
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(TOKEN_HOSTS_ANNOTATION))
        .ok_or_else(|| not_allowed("the Secret has no such annotation".to_owned()))?;
    let patterns = hosts::parse_list(annotation)
        .map_err(|why| not_allowed(format!("its annotation is not a host list: {why}")))?;
    if !hosts::any_matches(&patterns, host, port) {
        return Err(not_allowed(format!(
            "its annotation lists {} host(s), none of them {host}:{port}",
            patterns.len()
        )));
    }
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(&r.key))
        .map(|b| b.0.as_slice())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|d| d.get(&r.key))
                .map(String::as_bytes)
        })
        .ok_or_else(|| GraphError::SecretKeyMissing {
            namespace: namespace.to_owned(),
            name: r.name.clone(),
            key: r.key.clone(),
        })?;
    BearerToken::new(bytes).map_err(|why| GraphError::SecretInvalid {
        namespace: namespace.to_owned(),
        name: r.name.clone(),
        key: r.key.clone(),
        why,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;

    use super::*;
    use crate::graph::fetch::check_url;

    fn secret(data: &[(&str, &[u8])]) -> Secret {
        let mut s = Secret {
            data: Some(
                data.iter()
                    .map(|(k, v)| ((*k).to_owned(), ByteString(v.to_vec())))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Secret::default()
        };
        s.metadata.annotations = Some(BTreeMap::from([(
            TOKEN_HOSTS_ANNOTATION.to_owned(),
            "graphs.example.com, *.ml.example.com:8443".to_owned(),
        )]));
        s
    }

    fn key_ref() -> SecretKeyRef {
        SecretKeyRef {
            name: "graph-token".into(),
            key: "token".into(),
        }
    }

    fn url(u: &str) -> Url {
        check_url(u).expect("url")
    }

    #[test]
    fn token_is_never_printed() {
        let t = BearerToken::new(b"s3cr3t-value\n").expect("valid");
        assert_eq!(format!("{t}"), "[redacted]");
        assert!(!format!("{t:?}").contains("s3cr3t"));
        assert!(t.header_value().is_sensitive());
        assert_eq!(
            t.header_value().as_bytes(),
            b"Bearer s3cr3t-value",
            "trailing newline trimmed"
        );
    }

    #[test]
    fn token_from_secret_reasons() {
        let here = url("https://graphs.example.com/g");
        let ok = token_from_secret(&secret(&[("token", b"abc")]), "team-a", &key_ref(), &here);
        assert!(ok.is_ok());
        let missing = token_from_secret(&secret(&[("other", b"abc")]), "team-a", &key_ref(), &here)
            .unwrap_err();
        assert_eq!(missing.reason(), "SecretNotFound");
        assert!(
            missing
                .to_string()
                .contains("team-a/graph-token has no key \"token\"")
        );
        let empty = token_from_secret(&secret(&[("token", b" \n")]), "team-a", &key_ref(), &here)
            .unwrap_err();
        assert_eq!(empty.reason(), "SecretNotFound");
        let bad = token_from_secret(&secret(&[("token", b"a b")]), "team-a", &key_ref(), &here)
            .unwrap_err();
        assert!(!bad.to_string().contains("a b"), "the value is not echoed");
    }

    #[test]
    fn a_token_goes_only_to_the_hosts_its_secret_names() {
        let s = secret(&[("token", b"abc")]);
        for allowed in [
            "https://graphs.example.com/g",
            "https://GRAPHS.example.com:9443/g",
            "https://a.ml.example.com:8443/g",
        ] {
            assert!(
                token_from_secret(&s, "team-a", &key_ref(), &url(allowed)).is_ok(),
                "{allowed}"
            );
        }
        for refused in [
            "https://graphs.example.com.evil.io/g",
            "https://a.ml.example.com/g",
            "https://169.254.169.254/latest/meta-data",
            "https://ml.example.com:8443/g",
        ] {
            let e = token_from_secret(&s, "team-a", &key_ref(), &url(refused)).unwrap_err();
            assert_eq!(e.reason(), "SecretNotAllowed", "{refused}");
            assert!(e.to_string().contains(TOKEN_HOSTS_ANNOTATION), "{e}");
        }
        // No annotation, or one that does not parse: nothing is sent.
        let mut bare = s.clone();
        bare.metadata.annotations = None;
        let e = token_from_secret(
            &bare,
            "team-a",
            &key_ref(),
            &url("https://graphs.example.com/g"),
        )
        .unwrap_err();
        assert_eq!(e.reason(), "SecretNotAllowed");
        assert!(e.to_string().contains("has no such annotation"), "{e}");
        let mut garbled = s;
        garbled.metadata.annotations = Some(BTreeMap::from([(
            TOKEN_HOSTS_ANNOTATION.to_owned(),
            "graphs.example.com/path".to_owned(),
        )]));
        let e = token_from_secret(
            &garbled,
            "team-a",
            &key_ref(),
            &url("https://graphs.example.com/g"),
        )
        .unwrap_err();
        assert!(e.to_string().contains("not a host list"), "{e}");
    }

    #[test]
    fn an_ipv6_host_matches_its_annotation_entry_in_any_textual_form() {
        let forms = [
            "[::ffff:7f00:1]",
            "[::ffff:127.0.0.1]",
            "[0:0:0:0:0:ffff:7f00:1]",
        ];
        for entry in forms {
            let mut s = secret(&[("token", b"abc")]);
            s.metadata.annotations = Some(BTreeMap::from([(
                TOKEN_HOSTS_ANNOTATION.to_owned(),
                format!("graphs.example.com, {entry}:8443"),
            )]));
            for host in forms {
                let u = url(&format!("https://{host}:8443/g"));
                assert!(
                    token_from_secret(&s, "team-a", &key_ref(), &u).is_ok(),
                    "{entry} vs {host}"
                );
            }
            let other = url("https://[::ffff:7f00:1]:9443/g");
            let e = token_from_secret(&s, "team-a", &key_ref(), &other).unwrap_err();
            assert_eq!(e.reason(), "SecretNotAllowed", "{entry}");
        }
    }
}
