//! Every way turning `spec.graph` into a RayService can fail, each with a
//! distinct condition reason. Messages name the URL, the Secret and the key,
//! never the token.

use super::validate::Violations;

/// A failure fetching, decoding, validating or rendering a serving graph.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GraphError {
    /// `spec.graph` is not set on a `backend: RayService` service.
    #[error("spec.graph is required when spec.backend is RayService")]
    Missing,
    /// `spec.graph.url` is not an https URL without credentials.
    #[error("spec.graph.url {url:?} is not usable: {message}")]
    InvalidUrl {
        /// The URL as written in the spec.
        url: String,
        /// What is wrong with it.
        message: String,
    },
    /// The Secret named by `spec.graph.bearerTokenSecretRef` does not exist.
    #[error(
        "secret {namespace}/{name} (spec.graph.bearerTokenSecretRef) not found: create it with the bearer token under key {key:?}"
    )]
    SecretNotFound {
        /// The service's namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// The key the token is expected under.
        key: String,
    },
    /// The Secret exists but has no such key.
    #[error("secret {namespace}/{name} has no key {key:?} (spec.graph.bearerTokenSecretRef.key)")]
    SecretKeyMissing {
        /// The service's namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// The missing key.
        key: String,
    },
    /// The key holds something that cannot be sent as a bearer token.
    #[error("secret {namespace}/{name} key {key:?} is not a usable bearer token: {why}")]
    SecretInvalid {
        /// The service's namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// The key.
        key: String,
        /// Why (never the value).
        why: &'static str,
    },
    /// The Secret could not be read (RBAC, apiserver unavailable).
    #[error("cannot read secret {namespace}/{name}: {message}")]
    SecretUnreadable {
        /// The service's namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// The API error.
        message: String,
    },
    /// The graph server answered 401 or 403.
    #[error(
        "graph server answered {status} for {url}: the bearer token was refused (check spec.graph.bearerTokenSecretRef)"
    )]
    Unauthorized {
        /// The graph URL.
        url: String,
        /// 401 or 403.
        status: u16,
    },
    /// The graph server answered 404 or 410.
    #[error("graph server answered {status} for {url}: no graph at this URL")]
    NotFound {
        /// The graph URL.
        url: String,
        /// 404 or 410.
        status: u16,
    },
    /// Any other unexpected HTTP status (after retries for 5xx and 429).
    #[error("graph server answered {status} for {url}")]
    HttpStatus {
        /// The graph URL.
        url: String,
        /// The status code.
        status: u16,
    },
    /// Connecting or reading took longer than the configured timeouts.
    #[error("fetching {url} timed out ({attempts} attempts, {}s each)", *timeout_ms as f64 / 1000.0)]
    Timeout {
        /// The graph URL.
        url: String,
        /// Attempts made.
        attempts: u32,
        /// Total timeout of one attempt in milliseconds.
        timeout_ms: u64,
    },
    /// The body is larger than the size cap.
    #[error("graph at {url} is larger than the limit of {limit} bytes")]
    TooLarge {
        /// The graph URL.
        url: String,
        /// The size cap in bytes.
        limit: u64,
    },
    /// No connection (DNS, refused, TLS handshake, certificate).
    #[error("graph server for {url} is unreachable: {message}")]
    Unreachable {
        /// The graph URL.
        url: String,
        /// The transport error chain.
        message: String,
    },
    /// The TLS handshake failed: the server's certificate is not trusted
    /// (add its CA with `serve --graph-ca-file`), expired, or for another name.
    #[error(
        "TLS handshake with the graph server for {url} failed: {message} (extra CA roots: infergate serve --graph-ca-file)"
    )]
    Tls {
        /// The graph URL.
        url: String,
        /// The TLS error.
        message: String,
    },
    /// The body is not an encoded `infergate.graph.v1.ServingGraph`.
    #[error("graph is not a valid infergate.graph.v1.ServingGraph protobuf: {message}")]
    Undecodable {
        /// The decoder's error (and the URL when fetched).
        message: String,
    },
    /// The graph breaks a DAG or Ray Serve rule.
    #[error("invalid serving graph: {0}")]
    Invalid(Violations),
    /// The serveConfigV2 YAML could not be produced.
    #[error("cannot generate serveConfigV2: {0}")]
    Render(String),
}

impl GraphError {
    /// The condition reason (CamelCase, distinct per kind of failure).
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Missing => "GraphMissing",
            Self::InvalidUrl { .. } => "GraphURLInvalid",
            Self::SecretNotFound { .. } => "GraphSecretNotFound",
            Self::SecretKeyMissing { .. } => "GraphSecretKeyMissing",
            Self::SecretInvalid { .. } => "GraphSecretInvalid",
            Self::SecretUnreadable { .. } => "GraphSecretUnreadable",
            Self::Unauthorized { .. } => "GraphUnauthorized",
            Self::NotFound { .. } => "GraphNotFound",
            Self::HttpStatus { .. } => "GraphFetchFailed",
            Self::Timeout { .. } => "GraphTimeout",
            Self::TooLarge { .. } => "GraphTooLarge",
            Self::Unreachable { .. } => "GraphUnreachable",
            Self::Tls { .. } => "GraphTLSFailed",
            Self::Undecodable { .. } => "GraphUndecodable",
            Self::Invalid(_) => "GraphInvalid",
            Self::Render(_) => "GraphRenderFailed",
        }
    }

    /// Whether retrying soon may succeed without anyone changing anything
    /// (network trouble, server errors); the reconciler requeues these sooner.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Timeout { .. } | Self::Unreachable { .. } | Self::SecretUnreadable { .. } => true,
            Self::HttpStatus { status, .. } => *status >= 500 || *status == 429,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_distinct() {
        let url = || "https://g.example/x".to_owned();
        let ns = || "team-a".to_owned();
        let all = [
            GraphError::Missing,
            GraphError::InvalidUrl {
                url: url(),
                message: String::new(),
            },
            GraphError::SecretNotFound {
                namespace: ns(),
                name: "s".into(),
                key: "k".into(),
            },
            GraphError::SecretKeyMissing {
                namespace: ns(),
                name: "s".into(),
                key: "k".into(),
            },
            GraphError::SecretInvalid {
                namespace: ns(),
                name: "s".into(),
                key: "k".into(),
                why: "",
            },
            GraphError::SecretUnreadable {
                namespace: ns(),
                name: "s".into(),
                message: String::new(),
            },
            GraphError::Unauthorized {
                url: url(),
                status: 401,
            },
            GraphError::NotFound {
                url: url(),
                status: 404,
            },
            GraphError::HttpStatus {
                url: url(),
                status: 500,
            },
            GraphError::Timeout {
                url: url(),
                attempts: 3,
                timeout_ms: 10_000,
            },
            GraphError::TooLarge {
                url: url(),
                limit: 1,
            },
            GraphError::Unreachable {
                url: url(),
                message: String::new(),
            },
            GraphError::Tls {
                url: url(),
                message: String::new(),
            },
            GraphError::Undecodable {
                message: String::new(),
            },
            GraphError::Invalid(Violations::default()),
            GraphError::Render(String::new()),
        ];
        let reasons: std::collections::BTreeSet<_> = all.iter().map(GraphError::reason).collect();
        assert_eq!(reasons.len(), all.len());
        for e in &all {
            let r = e.reason();
            assert!(
                r.starts_with("Graph") && r.chars().all(|c| c.is_ascii_alphanumeric()),
                "{r}"
            );
        }
    }

    #[test]
    fn transient_errors() {
        let url = || "https://g.example/x".to_owned();
        assert!(
            GraphError::HttpStatus {
                url: url(),
                status: 503
            }
            .is_transient()
        );
        assert!(
            GraphError::HttpStatus {
                url: url(),
                status: 429
            }
            .is_transient()
        );
        assert!(
            !GraphError::HttpStatus {
                url: url(),
                status: 418
            }
            .is_transient()
        );
        assert!(
            !GraphError::Unauthorized {
                url: url(),
                status: 401
            }
            .is_transient()
        );
        assert!(
            GraphError::Unreachable {
                url: url(),
                message: String::new()
            }
            .is_transient()
        );
    }
}
