//! What the reconciler needs from `serve`, and the lease's timing.

use std::time::Duration;

/// Periodic re-reconcile of `backend: RayService` services: picks up graph
/// changes on the server (a conditional GET, cheap when nothing changed).
pub const GRAPH_RESYNC: Duration = Duration::from_secs(60);

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
    /// changes on the server are picked up ([`GRAPH_RESYNC`]).
    pub graph_resync: Duration,
    /// The process's watched state (policies, namespaces, services), shared
    /// with the webhooks; [`super::run`] starts its own when `None`.
    pub state: Option<std::sync::Arc<crate::state::ClusterState>>,
    /// The Prometheus of rollout analyses when no ClusterInferencePolicy
    /// names one (`serve --prometheus-url`).
    pub prometheus_url: Option<String>,
    /// The GPU budget ledgers, shared with the webhooks; each leadership
    /// term watches its own when `None`.
    pub ledger: Option<crate::state::ledger::Ledger>,
    /// The names ledgers, shared with the webhooks; each leadership term
    /// watches its own when `None`.
    pub names: Option<crate::state::names::NamesLedger>,
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
            graph_resync: GRAPH_RESYNC,
            state: None,
            prometheus_url: None,
            ledger: None,
            names: None,
        }
    }

    /// Read policies, namespaces and services from `state` (the webhooks'
    /// watches) instead of starting watches of its own.
    #[must_use]
    pub fn with_state(mut self, state: std::sync::Arc<crate::state::ClusterState>) -> Self {
        self.state = Some(state);
        self
    }

    /// Correct the ledgers of `ledger` (the webhooks') instead of watching
    /// them anew each term.
    #[must_use]
    pub fn with_ledger(mut self, ledger: crate::state::ledger::Ledger) -> Self {
        self.ledger = Some(ledger);
        self
    }

    /// Correct the names ledgers of `names` (the webhooks') instead of
    /// watching them anew each term.
    #[must_use]
    pub fn with_names(mut self, names: crate::state::names::NamesLedger) -> Self {
        self.names = Some(names);
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
