//! The reconciler's errors, and how an API server's answer is told apart.

use super::children::BuildError;

/// Errors of the reconciler.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("kubernetes api error: {0}")]
    Kube(#[from] kube::Error),
    /// One of infergate's CRDs is not installed.
    #[error(
        "the CRD {0} is not installed: install infergate's CRDs with `infergate crds | kubectl apply -f -` (or `kubectl apply -f crds/`), then restart infergate"
    )]
    CrdMissing(String),
    /// Leader election failed.
    #[error("leader election failed: {0}")]
    Lease(String),
    /// A child object could not be built.
    #[error("failed to build child object: {0}")]
    Build(#[from] BuildError),
    /// The serving-graph fetcher could not be built (`--graph-ca-file`).
    #[error("{0}")]
    GraphFetcher(#[from] crate::graph::fetch::FetcherError),
    /// A graph token's Secret could not be read (not RBAC: the apiserver).
    #[error("{0}")]
    SecretUnreadable(String),
    /// The object lacks metadata the reconciler needs.
    #[error("object has no {0}")]
    MissingMetadata(&'static str),
    /// A child's name is taken by an object another controller owns.
    #[error(
        "{kind} {name} already exists and is controlled by {owner}: rename the service or remove that object"
    )]
    ForeignChild {
        /// Kind of the child.
        kind: &'static str,
        /// Its name.
        name: String,
        /// `Kind name` of its controller.
        owner: String,
    },
}

impl Error {
    /// A short, bounded label for the `infergate_reconcile_total{result}` metric.
    #[must_use]
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Kube(kube::Error::Api(s)) if status_not_found(s) => "not_found",
            Self::Kube(kube::Error::Api(s)) if status_conflict(s) => "conflict",
            Self::Kube(kube::Error::Api(_)) => "api_error",
            Self::Kube(_) => "transport_error",
            Self::CrdMissing(_) => "crd_missing",
            Self::Lease(_) => "lease_error",
            Self::Build(_) => "build_error",
            Self::MissingMetadata(_) => "missing_metadata",
            Self::GraphFetcher(_) => "graph_fetcher",
            Self::SecretUnreadable(_) => "secret_unreadable",
            Self::ForeignChild { .. } => "foreign_child",
        }
    }

    /// The apiserver answered 404 NotFound.
    #[must_use]
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Kube(kube::Error::Api(s)) if status_not_found(s))
    }

    /// The API of the object is not served: a 404, or the refusal of a
    /// create while its CRD is being deleted (a 403 that names the
    /// terminating CRD, unlike a 403 of RBAC).
    #[must_use]
    pub fn is_api_gone(&self) -> bool {
        match self {
            Self::Kube(kube::Error::Api(s)) => {
                status_not_found(s)
                    || (s.code == 403
                        && s.message
                            .contains("while custom resource definition is terminating"))
            }
            _ => false,
        }
    }

    /// The apiserver answered 409 Conflict.
    #[must_use]
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Kube(kube::Error::Api(s)) if status_conflict(s))
    }
}

/// A 404, with or without a parseable Status body (an unknown API group
/// answers a plain-text `404 page not found`).
pub(crate) fn status_not_found(s: &kube::core::Status) -> bool {
    s.is_not_found() || s.code == 404
}

/// A 409 Conflict.
pub(crate) fn status_conflict(s: &kube::core::Status) -> bool {
    s.is_conflict() || s.code == 409
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16, reason: &str) -> Error {
        Error::Kube(kube::Error::Api(Box::new(kube::core::Status {
            code,
            reason: reason.to_owned(),
            ..kube::core::Status::default()
        })))
    }

    #[test]
    fn not_found_is_told_apart_from_other_errors() {
        assert!(api_error(404, "NotFound").is_not_found());
        // An unknown API group answers with a plain-text body.
        assert!(api_error(404, "Failed to parse error data").is_not_found());
        assert!(!api_error(500, "InternalError").is_not_found());
        assert!(api_error(409, "Conflict").is_conflict());
        assert!(!api_error(404, "NotFound").is_conflict());
        assert_eq!(api_error(404, "NotFound").metric_label(), "not_found");
        assert_eq!(api_error(409, "Conflict").metric_label(), "conflict");
        assert_eq!(api_error(422, "Invalid").metric_label(), "api_error");
        assert_eq!(
            Error::CrdMissing("inferenceservices.infergate.dev".into()).metric_label(),
            "crd_missing"
        );
    }

    #[test]
    fn an_api_is_gone_when_not_found_or_its_crd_is_terminating() {
        assert!(api_error(404, "NotFound").is_api_gone());
        let terminating = Error::Kube(kube::Error::Api(Box::new(kube::core::Status {
            code: 403,
            reason: "Forbidden".to_owned(),
            message: "inferencepools.inference.networking.k8s.io \"chat\" is forbidden: create not allowed while custom resource definition is terminating".to_owned(),
            ..kube::core::Status::default()
        })));
        assert!(terminating.is_api_gone());
        // A refusal of RBAC is not.
        assert!(!api_error(403, "Forbidden").is_api_gone());
        assert!(!api_error(500, "InternalError").is_api_gone());
    }

    #[test]
    fn missing_crd_message_says_how_to_install() {
        let msg = Error::CrdMissing("inferenceservices.infergate.dev".into()).to_string();
        assert!(msg.contains("inferenceservices.infergate.dev"));
        assert!(msg.contains("infergate crds | kubectl apply -f -"));
    }
}
