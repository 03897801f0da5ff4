//! The co-located reconciler: leader election, the controller, the children
//! it makes, and the status it reports.
//!
//! `infergate serve` calls [`run`] unless `--no-reconcile`. Every replica
//! competes for one coordination.k8s.io Lease ([`LEASE_NAME`] in infergate's
//! namespace); only the holder runs the controller, and it stops the moment
//! the lease is lost. Webhooks are served by every replica regardless.
//!
//! - [`controller`]: the children's watches, triggers from the shared
//!   [`crate::state`], the reconcile flows, server-side apply, deletion, events;
//! - [`children`]: the desired children as pure functions (Deployments,
//!   Services, HPAs, and the HTTPRoute and RayService types infergate writes);
//! - [`graph`]: from `spec.graph` to the desired RayService (Secret, fetch
//!   through [`crate::graph::fetch::GraphSource`], validation, builder);
//! - [`status`]: status and conditions as a pure function of what was observed.

pub mod analysis;
pub mod apply;
pub mod children;
pub mod controller;
pub mod discovery;
mod events;
pub mod flow;
pub mod graph;
mod progress;
pub mod rollout;
pub mod status;
pub mod watches;

use std::time::Duration;

use kube_lease_manager::{LeaseCreateMode, LeaseManagerBuilder};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

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
    /// Extra CA roots for fetching serving graphs (`serve --graph-ca-file`).
    pub graph_ca_file: Option<std::path::PathBuf>,
    /// The serving-graph fetcher; built from [`Config::graph_ca_file`] at
    /// start-up when not set.
    pub graph_fetcher: Option<std::sync::Arc<crate::graph::fetch::GraphFetcher>>,
    /// The namespaces reconciled (children are watched there only).
    pub scope: crate::state::Scope,
    /// infergate's ServiceAccount as `namespace:name` (named in the
    /// RoleBinding command of a `SecretForbidden` condition).
    pub service_account: String,
    /// How often `backend: RayService` services are re-reconciled so graph
    /// changes on the server are picked up ([`controller::GRAPH_RESYNC`]).
    pub graph_resync: Duration,
    /// The process's watched state (policies, namespaces, services), shared
    /// with the webhooks; [`run`] starts its own when `None`.
    pub state: Option<std::sync::Arc<crate::state::ClusterState>>,
    /// The Prometheus of rollout analyses when no ClusterInferencePolicy
    /// names one (`serve --prometheus-url`).
    pub prometheus_url: Option<String>,
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
        let namespace = namespace.into();
        Self {
            server,
            metrics,
            service_account: format!("{namespace}:infergate"),
            scope: crate::state::Scope::All,
            namespace,
            identity: identity.into(),
            lease: LeaseTiming::default(),
            graph_ca_file: None,
            graph_fetcher: None,
            graph_resync: controller::GRAPH_RESYNC,
            state: None,
            prometheus_url: None,
        }
    }

    /// Read policies, namespaces and services from `state` (the webhooks'
    /// watches) instead of starting watches of its own.
    #[must_use]
    pub fn with_state(mut self, state: std::sync::Arc<crate::state::ClusterState>) -> Self {
        self.state = Some(state);
        self
    }

    /// Reconcile only the namespaces of `scope`.
    #[must_use]
    pub fn with_scope(mut self, scope: crate::state::Scope) -> Self {
        self.scope = scope;
        self
    }

    /// infergate runs as the ServiceAccount `name` (in its namespace).
    #[must_use]
    pub fn with_service_account(mut self, name: &str) -> Self {
        self.service_account = format!("{}:{name}", self.namespace);
        self
    }

    /// Trust the CA certificates in `path` (PEM) when fetching serving graphs.
    #[must_use]
    pub fn with_graph_ca_file(mut self, path: Option<std::path::PathBuf>) -> Self {
        self.graph_ca_file = path;
        self
    }

    /// Ask this Prometheus for rollout analyses when no
    /// ClusterInferencePolicy names one.
    #[must_use]
    pub fn with_prometheus_url(mut self, url: Option<String>) -> Self {
        self.prometheus_url = url;
        self
    }

    /// Fetch serving graphs with `fetcher` (its roots and limits).
    #[must_use]
    pub fn with_graph_fetcher(
        mut self,
        fetcher: std::sync::Arc<crate::graph::fetch::GraphFetcher>,
    ) -> Self {
        self.graph_fetcher = Some(fetcher);
        self
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
    Build(#[from] children::BuildError),
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

/// Run the controller with leader election until `shutdown` is cancelled.
///
/// Fails fast (with instructions) when infergate's CRDs are missing. Retries
/// leader election and API errors otherwise; on shutdown the lease is released
/// so another replica takes over at once.
pub async fn run(
    client: kube::Client,
    config: Config,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    discovery::preflight(&client, &config.scope).await?;
    let mut config = config;
    let state = match &config.state {
        Some(state) => std::sync::Arc::clone(state),
        None => {
            let state = std::sync::Arc::new(crate::state::ClusterState::default());
            state.spawn_watches(client.clone(), &config.scope, true, shutdown.clone());
            state
        }
    };
    if config.graph_fetcher.is_none() && config.graph_ca_file.is_some() {
        // A bad --graph-ca-file fails at start-up, not at the first graph.
        let fetcher = crate::graph::fetch::GraphFetcher::from_ca_file(
            crate::graph::fetch::FetchOptions::default(),
            config.graph_ca_file.as_deref(),
        )?;
        config.graph_fetcher = Some(std::sync::Arc::new(fetcher));
    }
    let timing = config.lease;
    if timing.duration_seconds == 0 || timing.grace_seconds >= timing.duration_seconds {
        return Err(Error::Lease(format!(
            "lease grace ({}s) must be shorter than its duration ({}s)",
            timing.grace_seconds, timing.duration_seconds
        )));
    }
    let mut delay = Duration::from_secs(1);
    let manager = loop {
        let built = LeaseManagerBuilder::new(client.clone(), LEASE_NAME)
            .with_namespace(config.namespace.clone())
            .with_create_mode(LeaseCreateMode::AutoCreate)
            .with_identity(config.identity.clone())
            .with_field_manager(format!("infergate-lease-{}", config.identity))
            .with_duration(timing.duration_seconds)
            .with_grace(timing.grace_seconds)
            .build();
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            built = built => match built {
                Ok(m) => break m,
                Err(e) => {
                    warn!(error = %e, namespace = %config.namespace, lease = LEASE_NAME, "cannot set up the leader-election lease; retrying");
                }
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            () = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(Duration::from_secs(30));
    };
    let (mut leader, lease_task) = manager.watch().await;
    info!(identity = %config.identity, lease = LEASE_NAME, "waiting for leadership");
    let mut result = Ok(());
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            changed = leader.wait_for(|is_leader| *is_leader) => {
                if changed.is_err() {
                    result = Err(Error::Lease("the lease manager stopped".to_owned()));
                    break;
                }
            }
        }
        info!(identity = %config.identity, "acquired the lease; starting the reconciler");
        let term = shutdown.child_token();
        let mut session = tokio::spawn(controller::run_controller(
            client.clone(),
            config.clone(),
            std::sync::Arc::clone(&state),
            term.clone(),
        ));
        let lost = tokio::select! {
            () = shutdown.cancelled() => false,
            changed = leader.wait_for(|is_leader| !*is_leader) => {
                if changed.is_err() {
                    result = Err(Error::Lease("the lease manager stopped".to_owned()));
                }
                true
            }
            ended = &mut session => {
                match ended {
                    Ok(Ok(())) => warn!("reconciler ended on its own; restarting it while the lease is held"),
                    Ok(Err(e)) => error!(error = %e, "reconciler failed; restarting it while the lease is held"),
                    Err(e) => error!(error = %e, "reconciler task panicked; restarting it while the lease is held"),
                }
                false
            }
        };
        term.cancel();
        if !session.is_finished() {
            let _ = session.await;
        }
        if lost {
            warn!(identity = %config.identity, "lost the lease; reconciler stopped");
        }
        if shutdown.is_cancelled() || result.is_err() {
            break;
        }
        if !lost {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    // Closing the channel makes the lease task release the lease and end.
    drop(leader);
    match lease_task.await {
        Ok(Ok(_)) => info!(identity = %config.identity, "released the lease"),
        Ok(Err(e)) => warn!(error = %e, "failed to release the lease"),
        Err(e) => warn!(error = %e, "lease task failed"),
    }
    result
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
    fn missing_crd_message_says_how_to_install() {
        let msg = Error::CrdMissing("inferenceservices.infergate.dev".into()).to_string();
        assert!(msg.contains("inferenceservices.infergate.dev"));
        assert!(msg.contains("infergate crds | kubectl apply -f -"));
    }
}
