//! The composition root of `infergate serve`: it builds the shared state,
//! the certificate source, the TLS webhook server, the probe server and
//! (unless told not to) the reconciler, and stops them all on one shutdown
//! signal. [`Options`] is everything it needs; `cli` fills it from flags,
//! tests and benchmarks from [`Options::default`].

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::engine::ServerDefaults;
use crate::metrics::{CertificateKind, Metrics};
use crate::state::ClusterState;
use crate::telemetry::LogFormat;
use crate::webhook::server::{self, AppState};
use crate::webhook::tls::selfsigned::{self, SelfSignedConfig};
use crate::webhook::tls::{self, CertResolver};
use crate::webhook::{limits, listener};

/// How often `--tls-cert-file`/`--tls-key-file` are checked for changes.
pub const CERT_FILE_POLL: Duration = Duration::from_secs(2);
/// Address of the TLS webhook listener unless told otherwise.
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 8443);
/// Address of the plain-HTTP probe listener unless told otherwise.
pub const DEFAULT_PROBE_LISTEN: SocketAddr =
    SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 8080);
/// infergate's own namespace (Secret, Lease) unless told otherwise.
pub const DEFAULT_NAMESPACE: &str = "infergate-system";
/// Serving after SIGTERM unless told otherwise: longer than an endpoint
/// update takes to reach the API servers (seconds) on a loaded cluster.
pub const DEFAULT_DRAIN_PERIOD: Duration = Duration::from_secs(15);
/// Webhook connections open at once unless told otherwise.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1000;

/// Where the serving certificate comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Certificates {
    /// PEM files, reloaded when they change (`--tls-cert-file`, `--tls-key-file`).
    Files {
        /// The certificate chain.
        cert: PathBuf,
        /// The private key.
        key: PathBuf,
    },
    /// Generated and rotated, kept in a Secret, CA injected into the
    /// webhook configurations and the CRD (`--self-signed`).
    SelfSigned {
        /// Extra DNS SANs (`--cert-dns`).
        dns_names: Vec<String>,
        /// Extra IP SANs (`--cert-ip`).
        ips: Vec<IpAddr>,
    },
}

/// Everything `serve` needs, as plain values.
#[derive(Clone, Debug)]
pub struct Options {
    /// Address of the TLS webhook listener.
    pub listen: SocketAddr,
    /// Address of the plain-HTTP listener for `/healthz`, `/readyz`, `/metrics`.
    pub probe_listen: SocketAddr,
    /// The certificate source; `None` is refused at start.
    pub certificates: Option<Certificates>,
    /// Policy manifests to load instead of watching policies.
    pub policy_files: Vec<PathBuf>,
    /// Defaults from flags (`--default-engine-image`, `--default-replicas`).
    pub server_defaults: ServerDefaults,
    /// Run the reconciler (with leader election) besides the webhooks.
    pub reconcile: bool,
    /// infergate's own namespace (Secret, Lease).
    pub namespace: String,
    /// Extra CA certificates (PEM) trusted when fetching serving graphs.
    pub graph_ca_file: Option<PathBuf>,
    /// Prometheus of rollout analyses (`serve --prometheus-url`).
    pub prometheus_url: Option<String>,
    /// infergate's ServiceAccount name (`serve --service-account`).
    pub service_account: String,
    /// The namespaces to manage (`serve --namespaces`); empty: all.
    pub namespaces: Vec<String>,
    /// Log format.
    pub log_format: LogFormat,
    /// Serving after SIGTERM before the listener stops accepting.
    pub drain_period: Duration,
    /// Most webhook connections open at once.
    pub max_connections: usize,
    /// The memory limit that sizes the budget of request bytes in flight;
    /// `None` reads the cgroup's.
    pub memory_limit: Option<u64>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            listen: DEFAULT_LISTEN,
            probe_listen: DEFAULT_PROBE_LISTEN,
            certificates: None,
            policy_files: Vec::new(),
            server_defaults: ServerDefaults::default(),
            reconcile: true,
            namespace: DEFAULT_NAMESPACE.to_owned(),
            graph_ca_file: None,
            prometheus_url: None,
            service_account: "infergate".to_owned(),
            namespaces: Vec::new(),
            log_format: LogFormat::Text,
            drain_period: DEFAULT_DRAIN_PERIOD,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            memory_limit: None,
        }
    }
}

impl Options {
    /// Whether these options need a Kubernetes client: policies are watched
    /// unless given as files, self-signed certificates live in a Secret, and
    /// the reconciler works on the cluster.
    #[must_use]
    pub fn needs_cluster(&self) -> bool {
        self.policy_files.is_empty()
            || self.reconcile
            || matches!(self.certificates, Some(Certificates::SelfSigned { .. }))
    }
}

/// Errors that stop `serve`.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// No certificate source was given.
    #[error("no serving certificate: pass --tls-cert-file and --tls-key-file, or --self-signed")]
    NoCertificateSource,
    /// Watching policies or reconciling needs a cluster.
    #[error(
        "no kubernetes client: policies are watched unless --policy-file is given, and the reconciler needs one unless --no-reconcile"
    )]
    NeedsCluster,
    /// Certificates could not be loaded.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// Self-signed certificates could not be set up.
    #[error("self-signed certificates: {0}")]
    SelfSigned(#[from] selfsigned::Error),
    /// `--policy-file` could not be loaded.
    #[error(transparent)]
    PolicyFile(#[from] crate::state::files::PolicyFileError),
    /// No Kubernetes client could be built.
    #[error("failed to create kubernetes client: {0}")]
    Client(#[from] kube::Error),
    /// A listener could not be bound.
    #[error("{0}")]
    Bind(#[from] std::io::Error),
    /// The TLS listener's connection workers could not be started.
    #[error("failed to start the webhook connection workers: {0}")]
    Workers(std::io::Error),
    /// The reconciler failed.
    #[error("reconciler failed: {0}")]
    Reconcile(String),
}

/// This replica's identity: `POD_NAME`, else `HOSTNAME`, else the process id.
#[must_use]
pub fn identity() -> String {
    std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| format!("infergate-{}", std::process::id()))
}

/// Run `infergate serve` until a shutdown signal.
pub fn run(args: Options) -> ExitCode {
    crate::telemetry::init(args.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: failed to start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let shutdown = CancellationToken::new();
    let signals = {
        let _in_runtime = runtime.enter();
        listener::signal_shutdown(shutdown.clone())
    };
    match signals {
        Ok(wait) => {
            runtime.spawn(wait);
        }
        Err(e) => {
            eprintln!("error: failed to install the SIGTERM/SIGINT handlers: {e}");
            return ExitCode::from(2);
        }
    }
    let result = runtime.block_on(async {
        let client = if args.needs_cluster() {
            Some(kube::Client::try_default().await?)
        } else {
            None
        };
        serve(args, client, Metrics::new(), shutdown).await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "serve failed");
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The GPU budget ledgers (watched in infergate's namespace, written at
/// admission, corrected by the reconciler) and the names ledgers (one
/// owner per served name on each Gateway, the same way); empty without a
/// cluster.
fn ledgers(
    client: Option<&kube::Client>,
    namespace: &str,
    scope: &crate::state::Scope,
    metrics: &Metrics,
    stop: &CancellationToken,
) -> (
    crate::state::ledger::Ledger,
    crate::state::names::NamesLedger,
) {
    let Some(client) = client else {
        return Default::default();
    };
    (
        crate::state::ledger::Ledger::start(
            client.clone(),
            namespace,
            metrics.clone(),
            stop.clone(),
        ),
        crate::state::names::NamesLedger::start(
            client.clone(),
            namespace,
            scope.clone(),
            stop.clone(),
        ),
    )
}

/// The server, for callers that bring their own runtime, client and shutdown
/// token (tests, benchmarks). `client` is needed when
/// [`Options::needs_cluster`]. Once `shutdown` is cancelled, `/readyz`
/// turns 503 and the reconciler hands over its lease at once; the webhooks
/// keep answering for [`Options::drain_period`], then in-flight requests
/// finish, and it returns.
pub async fn serve(
    args: Options,
    client: Option<kube::Client>,
    metrics: Metrics,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    if client.is_none() && args.needs_cluster() {
        return Err(ServeError::NeedsCluster);
    }
    // Stops what must outlive the drain (watches, certificates, probes)
    // once the webhook listener has stopped.
    let stop = CancellationToken::new();
    let _stop_on_return = stop.clone().drop_guard();
    let (limits, budget) = request_limits(&args);

    // Certificates first: nothing is served without one.
    let resolver = Arc::new(CertResolver::new());
    let background = start_certificates(&args, client.as_ref(), &resolver, &metrics, &stop).await?;

    let scope = crate::state::Scope::from_list(&args.namespaces);
    if let crate::state::Scope::Namespaces(list) = &scope {
        tracing::info!(namespaces = %list.join(","), "managing only these namespaces");
    }
    let cluster = watched_state(&args, client.as_ref(), &scope, &stop)?;

    let (ledger, names) = ledgers(client.as_ref(), &args.namespace, &scope, &metrics, &stop);
    let state = Arc::new(
        AppState::new(
            Arc::clone(&cluster),
            args.server_defaults.clone(),
            metrics.clone(),
            Arc::clone(&resolver),
        )
        .with_intake(budget)
        .with_access(crate::webhook::access::AccessReviewer::new(
            client.clone(),
            metrics.clone(),
        ))
        .with_ledger(ledger.clone())
        .with_names(names.clone())
        .with_owners(crate::webhook::confine::Owners::new(client.clone())),
    );
    {
        let state = Arc::clone(&state);
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            shutdown.cancelled().await;
            state.draining.store(true, Ordering::Release);
        });
    }

    let probe_listener = listener::bind(args.probe_listen).await?;
    let probe = tokio::spawn(listener::serve_plain(
        probe_listener,
        server::probe_router(Arc::clone(&state)),
        listener::Limits::probe(),
        stop.clone(),
    ));
    let tls_listener = listener::bind(args.listen).await?;
    state.tls_bound.store(true, Ordering::Release);
    tracing::info!(listen = %args.listen, probe = %args.probe_listen, "serving webhooks");

    let reconciler = client.as_ref().filter(|_| args.reconcile).map(|client| {
        let config = crate::reconcile::Config::new(
            args.server_defaults.clone(),
            metrics.clone(),
            args.namespace.clone(),
            identity(),
        )
        .with_graph_ca_file(args.graph_ca_file.clone())
        .with_prometheus_url(args.prometheus_url.clone())
        .with_service_account(&args.service_account)
        .with_scope(scope.clone())
        .with_state(Arc::clone(&cluster))
        .with_ledger(ledger)
        .with_names(names);
        start_reconciler(client.clone(), config, shutdown.clone())
    });

    let tls_config = tls::server_config(Arc::clone(&resolver))?;
    let drain = listener::Drain {
        signal: shutdown.clone(),
        period: args.drain_period,
        timeout: listener::DRAIN_TIMEOUT,
    };
    let result = listener::serve_tls_with(
        tls_listener,
        tls_config,
        server::router(state),
        limits,
        drain,
        listener::default_workers(),
    )
    .await
    .map_err(ServeError::Workers);
    // Already cancelled after a signal; stops the rest if serving failed.
    shutdown.cancel();
    stop.cancel();
    let result = wait_for_the_rest(result, reconciler, probe, background).await;
    tracing::info!("stopped");
    result
}

/// The listener's limits (the open-files limit raised as far as it goes,
/// `--max-connections`) and the budget of bytes in flight for the memory
/// limit (`--memory-limit`, else the cgroup's).
fn request_limits(args: &Options) -> (listener::Limits, limits::Intake) {
    let limits = match listener::raise_open_files_limit() {
        Ok(open_files) => listener::Limits::webhook().within_open_files(open_files),
        Err(e) => {
            tracing::warn!(error = %e, "failed to read or raise the open-files limit");
            listener::Limits::webhook()
        }
    };
    let limits = listener::Limits {
        max_connections: limits.max_connections.min(args.max_connections.max(1)),
        ..limits
    };
    let memory_limit = args.memory_limit.or_else(limits::cgroup_memory_limit);
    let budget = limits::Intake::for_memory_limit(memory_limit);
    tracing::info!(
        memory_limit,
        budget_bytes = budget.total_bytes(),
        max_connections = limits.max_connections,
        drain_period = ?args.drain_period,
        "request limits"
    );
    (limits, budget)
}

/// Load the serving certificate into `resolver` (from files, or made and
/// rotated in-cluster) and start what keeps it current.
async fn start_certificates(
    args: &Options,
    client: Option<&kube::Client>,
    resolver: &Arc<CertResolver>,
    metrics: &Metrics,
    stop: &CancellationToken,
) -> Result<Vec<tokio::task::JoinHandle<()>>, ServeError> {
    match &args.certificates {
        Some(Certificates::Files { cert, key }) => {
            let sc = tls::load_files(cert, key)?;
            metrics.set_certificate_expiry(CertificateKind::Serving, sc.not_after);
            resolver.set(sc.key);
            Ok(vec![tokio::spawn(tls::watch_files(
                cert.clone(),
                key.clone(),
                Arc::clone(resolver),
                metrics.clone(),
                CERT_FILE_POLL,
                stop.clone(),
            ))])
        }
        Some(Certificates::SelfSigned { dns_names, ips }) => {
            let Some(client) = client else {
                return Err(ServeError::NeedsCluster);
            };
            let mut cfg = SelfSignedConfig::new(&args.namespace, &identity());
            cfg.dns_names.extend(dns_names.iter().cloned());
            cfg.ips.extend(ips.iter().copied());
            Ok(vec![
                selfsigned::start(
                    client.clone(),
                    cfg,
                    Arc::clone(resolver),
                    metrics.clone(),
                    stop.clone(),
                )
                .await?,
            ])
        }
        None => Err(ServeError::NoCertificateSource),
    }
}

/// The watched state: policies from `--policy-file`s, or watched with the
/// rest (classes, profiles, services) when there is a cluster.
fn watched_state(
    args: &Options,
    client: Option<&kube::Client>,
    scope: &crate::state::Scope,
    stop: &CancellationToken,
) -> Result<Arc<ClusterState>, ServeError> {
    let cluster = Arc::new(if args.policy_files.is_empty() {
        ClusterState::default()
    } else {
        let loaded = crate::state::files::load_policies(&args.policy_files)?;
        let state = ClusterState::new(loaded.policies);
        state.set_classes(loaded.classes);
        state.set_profiles(loaded.profiles);
        state
    });
    if let Some(client) = client {
        cluster.spawn_watches(
            client.clone(),
            scope,
            args.policy_files.is_empty(),
            stop.clone(),
        );
    }
    Ok(cluster)
}

/// The reconciler on a task of its own; its failure shuts the server down.
fn start_reconciler(
    client: kube::Client,
    config: crate::reconcile::Config,
    shutdown: CancellationToken,
) -> tokio::task::JoinHandle<Result<(), ServeError>> {
    tokio::spawn(async move {
        let result = crate::reconcile::run(client, config, shutdown.clone()).await;
        if let Err(e) = &result {
            tracing::error!(error = %e, "reconciler stopped; shutting down");
            shutdown.cancel();
        }
        result.map_err(|e| ServeError::Reconcile(e.to_string()))
    })
}

/// Once the listener has stopped: wait (bounded) for the reconciler, the
/// probe listener and the background tasks; the first failure is the one
/// reported.
async fn wait_for_the_rest(
    mut result: Result<(), ServeError>,
    reconciler: Option<tokio::task::JoinHandle<Result<(), ServeError>>>,
    probe: tokio::task::JoinHandle<()>,
    background: Vec<tokio::task::JoinHandle<()>>,
) -> Result<(), ServeError> {
    if let Some(r) = reconciler {
        let reconciled = match tokio::time::timeout(Duration::from_secs(20), r).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => Err(ServeError::Reconcile(e.to_string())),
            Err(_) => {
                tracing::warn!("reconciler did not stop in time");
                Ok(())
            }
        };
        if result.is_ok() {
            result = reconciled;
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), probe).await;
    for task in background {
        let _ = tokio::time::timeout(Duration::from_secs(6), task).await;
    }
    result
}
