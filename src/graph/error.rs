//! Every way turning `spec.graph` into a RayService can fail, each with a
//! distinct condition reason. Messages name the URL, the Secret and the key,
//! never the token.

use super::violation::Violations;
use crate::api::vocabulary::GraphReason;
use crate::api::vocabulary::message::{GrantTokenReader, SecretRef};
use crate::engine::hosts::TOKEN_HOSTS_ANNOTATION;

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
        "{secret} (spec.graph.bearerTokenSecretRef) not found: create it with the bearer token under key {key:?}",
        secret = SecretRef::new(.namespace, .name)
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
    #[error(
        "{secret} has no key {key:?} (spec.graph.bearerTokenSecretRef.key)",
        secret = SecretRef::new(.namespace, .name)
    )]
    SecretKeyMissing {
        /// The service's namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// The missing key.
        key: String,
    },
    /// The key holds something that cannot be sent as a bearer token.
    #[error(
        "{secret} key {key:?} is not a usable bearer token: {why}",
        secret = SecretRef::new(.namespace, .name)
    )]
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
    /// The Secret does not allow its token to be sent to the URL's host: it
    /// lacks the `infergate.dev/graph-token-hosts` annotation, the
    /// annotation is unreadable, or no entry matches.
    #[error(
        "{secret} does not allow its token to be sent to {host}: {why}; the Secret's owner lists the hosts in its annotation {annotation} (for example {annotation}: \"{host}\")",
        secret = SecretRef::new(.namespace, .name),
        annotation = TOKEN_HOSTS_ANNOTATION
    )]
    SecretNotAllowed {
        /// The service's namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// The URL's `host:port`.
        host: String,
        /// What is missing or wrong.
        why: String,
    },
    /// infergate may not read the Secret: the namespace has not opted in.
    #[error(
        "infergate may not read {secret}: the namespace has not allowed it; to allow it: {grant}",
        secret = SecretRef::new(.namespace, .name),
        grant = GrantTokenReader::new(.namespace, .service_account)
    )]
    SecretForbidden {
        /// The service's namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// infergate's ServiceAccount as `namespace:name`.
        service_account: String,
    },
    /// The Secret could not be read for another reason (apiserver
    /// unavailable): not a condition, the reconcile is retried.
    #[error(
        "cannot read {secret}: {message}",
        secret = SecretRef::new(.namespace, .name)
    )]
    SecretUnreadable {
        /// The service's namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// The API error.
        message: String,
    },
    /// The URL's host resolves only to addresses the fetcher refuses
    /// (loopback, private, link-local...), or a redirect led elsewhere.
    #[error("graph URL {url} is not an allowed destination: {message}")]
    DestinationNotAllowed {
        /// The graph URL.
        url: String,
        /// Which address or redirect, and how to allow it.
        message: String,
    },
    /// The host name did not resolve.
    #[error("cannot resolve the host of {url}: {message}")]
    Dns {
        /// The graph URL.
        url: String,
        /// The resolver's error.
        message: String,
    },
    /// No connection (refused, reset, unreachable) or the exchange broke.
    #[error("cannot connect to the graph server for {url}: {message}")]
    Connect {
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
    /// The server answered something other than 200 or 304.
    #[error("graph server answered {status} for {url}{detail}")]
    HttpStatus {
        /// The graph URL.
        url: String,
        /// The status code.
        status: u16,
        /// What the status usually means, starting with `: ` (or empty).
        detail: &'static str,
    },
    /// The fetch did not complete within its deadline (DNS, connection,
    /// TLS, headers and body together).
    #[error("fetching {url} did not complete within {}s", *timeout_ms as f64 / 1000.0)]
    Timeout {
        /// The graph URL.
        url: String,
        /// The deadline in milliseconds.
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
    /// Every slot the fetch could use is taken: the service waits in its
    /// namespace's line (first come, first served). Not a failure: after
    /// a wait of more than [`crate::graph::fetch::FetchOptions::queued_after`]
    /// it is reported as `GraphReady=Unknown`, reason `FetchQueued`.
    #[error(
        "waiting {}s for a graph fetch slot, {} in namespace {namespace}'s line (at most {per_namespace} graph fetches of a namespace and {total} in all run at once)",
        waited.as_secs(),
        place(*ahead)
    )]
    Queued {
        /// The service's namespace.
        namespace: String,
        /// Services of the namespace ahead of it in line.
        ahead: usize,
        /// How long it has waited.
        waited: std::time::Duration,
        /// Fetches of one namespace at once.
        per_namespace: usize,
        /// Fetches at once in all.
        total: usize,
    },
    /// The last fetch of this service failed and its backoff has not
    /// expired: not a condition (status keeps that failure).
    #[error("the last fetch failed; next attempt in {}s", retry_in.as_secs())]
    BackingOff {
        /// Time until the next attempt.
        retry_in: std::time::Duration,
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
    /// A deployment asks more than one worker of the service offers.
    #[error(
        "the graph cannot be placed on the service's workers: {}",
        .0.join("; ")
    )]
    Unschedulable(Vec<String>),
    /// The serveConfigV2 YAML could not be produced.
    #[error("cannot generate serveConfigV2: {0}")]
    Render(String),
}

impl GraphError {
    /// The `GraphReady` condition reason (the table in
    /// `examples/graphs/README.md`, "Condition reasons").
    #[must_use]
    pub fn reason(&self) -> GraphReason {
        match self {
            Self::InvalidUrl { .. } | Self::DestinationNotAllowed { .. } => {
                GraphReason::DestinationNotAllowed
            }
            Self::SecretNotFound { .. }
            | Self::SecretKeyMissing { .. }
            | Self::SecretInvalid { .. }
            | Self::SecretUnreadable { .. } => GraphReason::SecretNotFound,
            Self::SecretNotAllowed { .. } => GraphReason::SecretNotAllowed,
            Self::SecretForbidden { .. } => GraphReason::SecretForbidden,
            Self::Dns { .. } => GraphReason::DnsFailure,
            Self::Connect { .. } | Self::BackingOff { .. } => GraphReason::ConnectFailure,
            Self::Queued { .. } => GraphReason::FetchQueued,
            Self::Tls { .. } => GraphReason::TlsFailure,
            Self::HttpStatus { .. } => GraphReason::HttpStatus,
            Self::Timeout { .. } => GraphReason::Timeout,
            Self::TooLarge { .. } => GraphReason::TooLarge,
            Self::Missing | Self::Undecodable { .. } | Self::Invalid(_) | Self::Render(_) => {
                GraphReason::InvalidGraph
            }
            Self::Unschedulable(_) => GraphReason::Unschedulable,
        }
    }

    /// Whether the fetch itself failed (the service backs off before the
    /// next one), as opposed to a Secret or a graph that must be changed.
    #[must_use]
    pub fn is_fetch_failure(&self) -> bool {
        matches!(
            self,
            Self::DestinationNotAllowed { .. }
                | Self::Dns { .. }
                | Self::Connect { .. }
                | Self::Tls { .. }
                | Self::HttpStatus { .. }
                | Self::Timeout { .. }
                | Self::TooLarge { .. }
                | Self::Undecodable { .. }
        )
    }

    /// Whether this is no failure but a reason to come back later
    /// ([`GraphError::Queued`], [`GraphError::BackingOff`],
    /// [`GraphError::SecretUnreadable`]): the status keeps what it says,
    /// but for a long wait in line (`FetchQueued`).
    #[must_use]
    pub fn is_deferral(&self) -> bool {
        matches!(
            self,
            Self::Queued { .. } | Self::BackingOff { .. } | Self::SecretUnreadable { .. }
        )
    }
}

/// A place in line for a message: `first`, `number 2`...
fn place(ahead: usize) -> String {
    if ahead == 0 {
        "first".to_owned()
    } else {
        format!("number {}", ahead.saturating_add(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reasons `GraphReady` may carry (`examples/graphs/README.md`).
    const API_REASONS: [&str; 13] = [
        "DestinationNotAllowed",
        "DNSFailure",
        "ConnectFailure",
        "TLSFailure",
        "HTTPStatus",
        "Timeout",
        "TooLarge",
        "InvalidGraph",
        "Unschedulable",
        "FetchQueued",
        "SecretNotFound",
        "SecretNotAllowed",
        "SecretForbidden",
    ];

    fn all() -> Vec<GraphError> {
        let url = || "https://g.example/x".to_owned();
        let ns = || "team-a".to_owned();
        vec![
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
            GraphError::SecretNotAllowed {
                namespace: ns(),
                name: "s".into(),
                host: "g.example:443".into(),
                why: "no annotation".into(),
            },
            GraphError::SecretForbidden {
                namespace: ns(),
                name: "s".into(),
                service_account: "infergate-system:infergate".into(),
            },
            GraphError::SecretUnreadable {
                namespace: ns(),
                name: "s".into(),
                message: String::new(),
            },
            GraphError::DestinationNotAllowed {
                url: url(),
                message: String::new(),
            },
            GraphError::Dns {
                url: url(),
                message: String::new(),
            },
            GraphError::Connect {
                url: url(),
                message: String::new(),
            },
            GraphError::Tls {
                url: url(),
                message: String::new(),
            },
            GraphError::HttpStatus {
                url: url(),
                status: 500,
                detail: "",
            },
            GraphError::Timeout {
                url: url(),
                timeout_ms: 10_000,
            },
            GraphError::TooLarge {
                url: url(),
                limit: 1,
            },
            GraphError::Undecodable {
                message: String::new(),
            },
            GraphError::Invalid(Violations::default()),
            GraphError::Render(String::new()),
            GraphError::Unschedulable(vec!["deployment \"g\" asks num_gpus 8".into()]),
            GraphError::Queued {
                namespace: ns(),
                ahead: 2,
                waited: std::time::Duration::from_secs(12),
                per_namespace: 2,
                total: 8,
            },
            GraphError::BackingOff {
                retry_in: std::time::Duration::from_secs(5),
            },
        ]
    }

    #[test]
    fn every_condition_reason_is_one_the_api_names() {
        let mut used = std::collections::BTreeSet::new();
        for e in all() {
            assert!(
                API_REASONS.contains(&e.reason().as_str()),
                "{e:?}: {}",
                e.reason()
            );
            if !e.is_deferral() || e.reason() == "FetchQueued" {
                used.insert(e.reason().as_str());
            }
        }
        // Every reason comes from some failure, or from a long wait in line.
        assert_eq!(used.len(), API_REASONS.len(), "{used:?}");
    }

    #[test]
    fn fetch_failures_and_deferrals() {
        for e in all() {
            assert!(!(e.is_fetch_failure() && e.is_deferral()), "{e:?}");
        }
        let forbidden = all()
            .into_iter()
            .find(|e| e.reason() == "SecretForbidden")
            .unwrap()
            .to_string();
        assert!(
            forbidden.contains("kubectl create rolebinding infergate-graph-token-reader --namespace team-a --clusterrole infergate-graph-token-reader --serviceaccount infergate-system:infergate"),
            "{forbidden}"
        );
        let not_allowed = all()
            .into_iter()
            .find(|e| e.reason() == "SecretNotAllowed")
            .unwrap()
            .to_string();
        assert!(
            not_allowed.contains("infergate.dev/graph-token-hosts"),
            "{not_allowed}"
        );
    }
}
