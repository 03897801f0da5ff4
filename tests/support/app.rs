//! infergate under test, in process: the shared webhook state, `serve` and
//! the reconciler, each on a thread and runtime of its own (as a replica
//! would run them), and as the built binary against the control plane.
//!
//! This is the one place that knows how the crate's entry points are called.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;

use infergate::app::{self, Certificates};
use infergate::engine::ServerDefaults;
use infergate::metrics::Metrics;
use infergate::reconcile::Config;
use infergate::state::ClusterState;
use infergate::webhook::admission::Admission;
use infergate::webhook::server::AppState;
use infergate::webhook::tls::CertResolver;

use super::control_plane::{ControlPlane, SYSTEM_NAMESPACE, client_from, control_plane};
use super::process::{spawn_logged, tail};
use super::servers::{free_port, http_get};
use super::wait::{WAIT, eventually, wait_conversion_active, wait_webhooks_active};
use super::webhooks::{register_conversion, register_webhooks};

/// Log to stderr as `RUST_LOG` says (once per process).
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .try_init();
}

// ------------------------------------------------------------------ webhook

/// The webhook's shared state over the watched `state` with `server`
/// defaults and fresh metrics: no certificate loaded, TLS not bound.
pub fn app_state(state: ClusterState, server: ServerDefaults) -> Arc<AppState> {
    Arc::new(AppState::new(
        Arc::new(state),
        server,
        Metrics::new(),
        Arc::new(CertResolver::new()),
    ))
}

/// The admission handlers over the watched `state` with `server` defaults
/// and fresh metrics.
pub fn admission(state: ClusterState, server: ServerDefaults) -> Admission {
    Admission {
        state: Arc::new(state),
        server,
        metrics: Metrics::new(),
        access: infergate::webhook::access::AccessReviewer::default(),
        ledger: infergate::state::ledger::Ledger::default(),
        names: infergate::state::names::NamesLedger::default(),
        owners: infergate::webhook::confine::Owners::default(),
    }
}

/// `serve` arguments: TLS on 127.0.0.1:`port` with `tls.crt`/`tls.key` from
/// `cert_dir`, probes on 127.0.0.1:`probe`, policies from `policy_files`
/// (none: from the cluster), no reconciler.
pub fn serve_args(
    port: u16,
    probe: u16,
    cert_dir: &Path,
    policy_files: Vec<PathBuf>,
) -> app::Options {
    app::Options {
        listen: ([127, 0, 0, 1], port).into(),
        probe_listen: ([127, 0, 0, 1], probe).into(),
        certificates: Some(Certificates::Files {
            cert: cert_dir.join("tls.crt"),
            key: cert_dir.join("tls.key"),
        }),
        policy_files,
        reconcile: false,
        namespace: SYSTEM_NAMESPACE.into(),
        drain_period: Duration::ZERO,
        ..app::Options::default()
    }
}

/// The command line of `infergate serve` without a cluster: TLS on
/// 127.0.0.1:`port` with `tls.crt`/`tls.key` from `cert_dir`, probes on
/// 127.0.0.1:`probe`, policies from `policy_file`, no reconciler.
pub fn serve_command_line(
    port: u16,
    probe: u16,
    cert_dir: &Path,
    policy_file: &Path,
) -> Vec<std::ffi::OsString> {
    vec![
        "serve".into(),
        "--no-reconcile".into(),
        "--listen".into(),
        format!("127.0.0.1:{port}").into(),
        "--probe-listen".into(),
        format!("127.0.0.1:{probe}").into(),
        "--tls-cert-file".into(),
        cert_dir.join("tls.crt").into(),
        "--tls-key-file".into(),
        cert_dir.join("tls.key").into(),
        "--policy-file".into(),
        policy_file.into(),
    ]
}

/// `infergate serve` in process, on its own thread and runtime (it outlives
/// the runtime of any one test).
pub struct Serve {
    shutdown: CancellationToken,
    thread: Option<JoinHandle<Result<(), String>>>,
}

impl Serve {
    /// Serve `args`, with an API client from `kubeconfig` when given (without
    /// one, `args` must name policy files and no reconciler).
    pub fn start(args: app::Options, kubeconfig: Option<PathBuf>) -> Self {
        let shutdown = CancellationToken::new();
        let token = shutdown.clone();
        let thread = std::thread::Builder::new()
            .name("serve".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .map_err(|e| format!("serve runtime: {e}"))?;
                rt.block_on(async move {
                    let mut client = None;
                    if let Some(path) = kubeconfig {
                        let c = client_from(&path).await;
                        client = Some(c.map_err(|e| format!("api client: {e:#}"))?);
                    }
                    let result = app::serve(args, client, Metrics::new(), token)
                        .await
                        .map_err(|e| e.to_string());
                    if let Err(e) = &result {
                        eprintln!("serve failed: {e}");
                    }
                    result
                })
            })
            .expect("spawning the serve thread");
        Self {
            shutdown,
            thread: Some(thread),
        }
    }

    /// Shut down and wait up to `timeout` for `serve` to return; its result,
    /// or `None` when it did not return in time.
    pub async fn stop(mut self, timeout: Duration) -> Option<Result<(), String>> {
        self.shutdown.cancel();
        let thread = self.thread.take()?;
        let deadline = Instant::now() + timeout;
        while !thread.is_finished() {
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Some(
            thread
                .join()
                .unwrap_or_else(|_| Err("serve panicked".to_owned())),
        )
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

// --------------------------------------------------------------- reconciler

/// The shared control plane ready for a reconciler test (tracing on):
/// infergate's CRDs and the CRD files `crds` installed; with an admin client
/// and the kubeconfig of the ServiceAccount `deploy/` gives the reconciler.
pub async fn reconciler_setup(
    crds: &[&'static str],
) -> (&'static ControlPlane, kube::Client, PathBuf) {
    init_tracing();
    let cp = control_plane().await;
    cp.install_crds().await;
    for crd in crds {
        cp.install_crd_file(crd).await;
    }
    let client = cp.client().await;
    let sa_kubeconfig = cp.deployed_service_account().await;
    (cp, client, sa_kubeconfig)
}

impl ControlPlane {
    /// The reconciler the tests of a module share on their plane, as the
    /// admin, with the built-in defaults: started on first use, stopped
    /// with the plane. (A test that started its own beside it would share
    /// the Lease and wait for its term.)
    pub async fn shared_reconciler(&self) -> &Reconciler {
        self.reconciler
            .get_or_init(|| async {
                self.ensure_namespace(SYSTEM_NAMESPACE).await;
                Reconciler::start(
                    self.kubeconfig().to_path_buf(),
                    reconcile_config("shared-reconciler"),
                )
            })
            .await
    }
}

/// The reconciler's configuration: built-in defaults, fresh metrics, the
/// Lease in [`SYSTEM_NAMESPACE`] under `identity`.
pub fn reconcile_config(identity: &str) -> Config {
    Config::new(
        ServerDefaults::default(),
        Metrics::new(),
        SYSTEM_NAMESPACE,
        identity,
    )
}

/// Who holds infergate's Lease (none when it is released).
pub async fn lease_holder(client: &kube::Client) -> Option<String> {
    kube::Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(
        client.clone(),
        SYSTEM_NAMESPACE,
    )
    .get_opt(infergate::reconcile::LEASE_NAME)
    .await
    .ok()
    .flatten()
    .and_then(|l| l.spec?.holder_identity)
    .filter(|h| !h.is_empty())
}

/// A reconciler as the user of `kubeconfig` with a short lease (6 s, 2 s
/// grace), so a successor leads soon after it stops.
pub fn short_lease_reconciler(kubeconfig: &Path, identity: &str) -> Reconciler {
    let config = Config {
        lease: infergate::reconcile::LeaseTiming {
            duration_seconds: 6,
            grace_seconds: 2,
        },
        ..reconcile_config(identity)
    };
    Reconciler::start(kubeconfig.to_path_buf(), config)
}

/// One reconciler "replica": its own thread and current-thread runtime, so a
/// crash can be simulated by dropping the runtime without any cleanup.
/// Stopped gracefully when dropped.
pub struct Reconciler {
    /// Its identity in the Lease.
    pub identity: String,
    token: CancellationToken,
    crash: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Reconciler {
    /// Run the reconciler with `config`, as the user of `kubeconfig`.
    pub fn start(kubeconfig: PathBuf, config: Config) -> Self {
        let identity = config.identity.clone();
        let token = CancellationToken::new();
        let (crash_tx, crash_rx) = tokio::sync::oneshot::channel::<()>();
        let run_token = token.clone();
        let id = identity.clone();
        let thread = std::thread::Builder::new()
            .name(format!("reconciler-{identity}"))
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("reconciler runtime");
                rt.block_on(async move {
                    let client = client_from(&kubeconfig).await.expect("reconciler client");
                    tokio::select! {
                        r = infergate::reconcile::run(client, config, run_token) => {
                            if let Err(e) = r {
                                eprintln!("reconciler {id} failed: {e}");
                            }
                        }
                        _ = crash_rx => {}
                    }
                });
                // Dropping the runtime drops every task unpolled: no lease release.
                drop(rt);
            })
            .expect("spawning the reconciler thread");
        Self {
            identity,
            token,
            crash: Some(crash_tx),
            thread: Some(thread),
        }
    }

    /// Ask it to stop gracefully (the lease is released), without waiting.
    pub fn cancel(&self) {
        self.token.cancel();
    }

    /// Graceful stop (the lease is released).
    pub fn stop(self) {
        drop(self);
    }

    /// Simulated crash (the lease is left to expire).
    pub fn crash(mut self) {
        if let Some(c) = self.crash.take() {
            let _ = c.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Reconciler {
    fn drop(&mut self) {
        self.token.cancel();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

// ------------------------------------------------------------------- binary

/// An `infergate serve` process running against a control plane.
pub struct Infergate {
    /// The TLS webhook port on 127.0.0.1.
    pub port: u16,
    /// The plain probe/metrics port on 127.0.0.1.
    pub probe_port: u16,
    /// PEM of the CA that signed the serving certificate.
    pub ca_pem: String,
    /// Where its log goes.
    pub log: PathBuf,
    /// The process, killed when this is dropped (or with the test binary).
    pub child: Child,
}

impl Drop for Infergate {
    /// The test that started it is over: its webhooks and its reconciler
    /// (which may hold the Lease) must not outlive it on a plane the
    /// module's next test uses.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Which of infergate's webhooks the apiserver is told about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hooks {
    /// Mutating, validating and conversion.
    All,
    /// Only the CRD's conversion webhook (admission left to the schema and CEL).
    ConversionOnly,
}

/// Start the `infergate` binary (`serve`, with certificates from `infergate certs`
/// and `extra_args`), wait for /readyz, register its webhooks by URL and wait
/// until the apiserver calls them.
pub async fn start_infergate(
    cp: &ControlPlane,
    binary: &Path,
    extra_args: &[&str],
    hooks: Hooks,
) -> anyhow::Result<Infergate> {
    start_infergate_as(cp, binary, cp.kubeconfig(), extra_args, hooks).await
}

/// [`start_infergate`] with the credentials of `kubeconfig` (e.g. a ServiceAccount
/// token) for infergate itself; registration is done as the admin.
pub async fn start_infergate_as(
    cp: &ControlPlane,
    binary: &Path,
    kubeconfig: &Path,
    extra_args: &[&str],
    hooks: Hooks,
) -> anyhow::Result<Infergate> {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let n = SEQ.fetch_add(1, Ordering::SeqCst);
    let certs = cp.dir().join(format!("infergate-certs-{n}"));
    let out = Command::new(binary)
        .args([
            "certs",
            "--dns",
            "localhost",
            "--ip",
            "127.0.0.1",
            "--out-dir",
        ])
        .arg(&certs)
        .output()
        .context("running infergate certs")?;
    anyhow::ensure!(
        out.status.success(),
        "infergate certs failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ca_pem = std::fs::read_to_string(certs.join("ca.crt"))?;

    let port = free_port()?;
    let probe_port = free_port()?;
    cp.ensure_namespace(SYSTEM_NAMESPACE).await;
    let log = cp.dir().join(format!("infergate-{n}.log"));
    let mut serve = Command::new(binary);
    serve
        .args(["serve", "--namespace", SYSTEM_NAMESPACE])
        .arg(format!("--listen=127.0.0.1:{port}"))
        .arg(format!("--probe-listen=127.0.0.1:{probe_port}"))
        .arg(format!(
            "--tls-cert-file={}",
            certs.join("tls.crt").display()
        ))
        .arg(format!(
            "--tls-key-file={}",
            certs.join("tls.key").display()
        ))
        .args(extra_args)
        .env("KUBECONFIG", kubeconfig)
        .env("POD_NAME", format!("infergate-test-{n}"));
    let mut child = spawn_logged(serve, &log).context("starting infergate serve")?;
    eventually("infergate serve to be ready", WAIT, async || {
        if let Some(status) = child.try_wait().expect("infergate serve status") {
            panic!("infergate serve exited ({status}):\n{}", tail(&log, 30));
        }
        match http_get(probe_port, "/readyz").await {
            Ok((200, _)) => Ok(()),
            _ => Err(format!("its log:\n{}", tail(&log, 30))),
        }
    })
    .await;
    match hooks {
        Hooks::All => {
            register_webhooks(cp, port, &ca_pem).await?;
            wait_webhooks_active(cp, "default").await;
        }
        Hooks::ConversionOnly => {
            register_conversion(cp, port, &ca_pem).await?;
            wait_conversion_active(cp).await;
        }
    }
    Ok(Infergate {
        port,
        probe_port,
        ca_pem,
        log,
        child,
    })
}
