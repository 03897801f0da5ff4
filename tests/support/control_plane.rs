//! A real control plane for end-to-end tests, in the manner of envtest:
//! etcd, kube-apiserver and kube-controller-manager on free loopback ports,
//! built from their Go modules by `build-control-plane.sh` into a cache
//! outside the repository; kubeconfigs, kubectl and namespaces on it.
//!
//! The tests of one module share a control plane ([`control_plane`]); each
//! test takes a fresh namespace. A module's plane starts with its first test
//! and stops once its last test has ended; whatever is left runs until the
//! test binary exits and dies with it (see [`spawn_logged`]).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};
use tokio::sync::OnceCell;

use super::fixtures::root;
use super::process::{run, spawn_logged, tail, text};
use super::servers::free_port;

/// infergate's own namespace, as `deploy/` has it (its Lease, its Secret).
pub const SYSTEM_NAMESPACE: &str = "infergate-system";

/// How long the apiserver may take to become ready (2 cores, cold caches).
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// How long a module's control plane outlives the end of its last running
/// test. libtest hands out tests in name order, so a module's tests run one
/// after another: the next one starts as soon as a thread is free, well
/// within this.
const IDLE_GRACE: Duration = Duration::from_secs(20);

static NAMESPACE_SEQ: AtomicU32 = AtomicU32::new(0);

/// Set (to anything) before the control plane starts, the API server writes
/// an audit log of every request ([`ControlPlane::audit_log`]); benchmarks
/// use it, and the test modules of [`AUDITED_MODULES`] always have one.
pub const AUDIT_ENV: &str = "INFERGATE_TEST_AUDIT";

/// The test modules whose control plane writes an audit log: they count
/// the requests infergate sends.
pub const AUDITED_MODULES: [&str; 1] = ["e2e_drift"];

/// A running etcd + kube-apiserver + kube-controller-manager.
pub struct ControlPlane {
    dir: PathBuf,
    bin_dir: PathBuf,
    kubeconfig: PathBuf,
    apiserver_port: u16,
    ca_pem: String,
    children: Mutex<Vec<Child>>,
    /// The CRD files installed on it so far ([`Self::install_crd_file`]).
    pub(super) crds_installed: tokio::sync::Mutex<BTreeSet<&'static str>>,
    /// The scheduler and kwok against it, once started.
    pub(super) scheduling: OnceCell<super::scheduler::Scheduling>,
    /// Its module's shared reconciler, once started.
    pub(super) reconciler: OnceCell<super::app::Reconciler>,
    /// The LeaderWorkerSet controller against it, once started.
    pub(super) lws: OnceCell<super::lws::Lws>,
}

/// The control plane of the calling test's module, started on its first use.
///
/// Which module a test belongs to comes from its thread's name, which
/// libtest sets to the test's path (`e2e_rollout::a_canary_...`): call this
/// on the test's own thread (the body of a `#[tokio::test]`), not from a
/// spawned task, and hand the reference on. A program that is not a test
/// (a benchmark, thread `main`) gets one plane of its own. The tests of one
/// module may rely on one another's cluster-wide objects (registrations,
/// CRDs, the reconciler's Lease); different modules never share a plane.
///
/// Panics with the cause (and how to fix it) when it cannot be built or started:
/// an end-to-end test never passes by skipping.
pub async fn control_plane() -> &'static ControlPlane {
    let module = calling_module();
    let cell = Plane::enter(&module);
    *cell
        .get_or_init(|| async {
            let audited =
                std::env::var_os(AUDIT_ENV).is_some() || AUDITED_MODULES.contains(&module.as_str());
            match ControlPlane::start(audited).await {
                Ok(cp) => &*Box::leak(Box::new(cp)),
                Err(e) => panic!("the test control plane could not start: {e:#}"),
            }
        })
        .await
}

/// The module of the test running on this thread: the first segment of
/// the thread's name.
fn calling_module() -> String {
    let thread = std::thread::current();
    let name = thread.name().unwrap_or("main");
    match name.split_once("::") {
        Some((module, _)) => module.to_owned(),
        None if name == "main" => name.to_owned(),
        None => panic!(
            "control_plane() called on thread {name:?}, which is no test's own: call it in the test's body and pass the plane on"
        ),
    }
}

/// One module's control plane, while any of its tests runs.
struct Plane {
    cell: Arc<OnceCell<&'static ControlPlane>>,
    /// Test threads of the module that have asked for it and not ended.
    users: usize,
    /// Tells this plane from a later one of the same module.
    generation: u64,
}

static PLANES: Mutex<BTreeMap<String, Plane>> = Mutex::new(BTreeMap::new());
static GENERATION: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The modules whose planes this thread uses; dropped when it ends.
    static USING: RefCell<Vec<User>> = const { RefCell::new(Vec::new()) };
}

/// A test thread's use of its module's plane, released when the thread ends.
struct User(String);

impl Drop for User {
    fn drop(&mut self) {
        Plane::leave(&self.0);
    }
}

impl Plane {
    /// Count this thread as a user of `module`'s plane (once) and return
    /// the cell that holds it.
    fn enter(module: &str) -> Arc<OnceCell<&'static ControlPlane>> {
        let mut planes = PLANES.lock().expect("planes lock");
        let plane = planes.entry(module.to_owned()).or_insert_with(|| Plane {
            cell: Arc::new(OnceCell::new()),
            users: 0,
            generation: GENERATION.fetch_add(1, Ordering::SeqCst),
        });
        USING.with(|using| {
            let mut using = using.borrow_mut();
            if !using.iter().any(|u| u.0 == module) {
                plane.users += 1;
                using.push(User(module.to_owned()));
            }
        });
        plane.cell.clone()
    }

    /// One user of `module`'s plane ended; the last one stops it after
    /// [`IDLE_GRACE`] unless another test of the module has come.
    fn leave(module: &str) {
        let generation = {
            let mut planes = PLANES.lock().expect("planes lock");
            let Some(plane) = planes.get_mut(module) else {
                return;
            };
            plane.users -= 1;
            if plane.users > 0 {
                return;
            }
            plane.generation
        };
        let module = module.to_owned();
        std::thread::spawn(move || {
            std::thread::sleep(IDLE_GRACE);
            let idle = {
                let mut planes = PLANES.lock().expect("planes lock");
                match planes.get(&module) {
                    Some(p) if p.users == 0 && p.generation == generation => planes.remove(&module),
                    _ => None,
                }
            };
            if let Some(cp) = idle.and_then(|p| p.cell.get().copied()) {
                cp.stop();
            }
        });
    }
}

impl ControlPlane {
    /// Path of the admin kubeconfig (client certificate in `system:masters`).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Directory holding kube-apiserver, kube-controller-manager, kubectl and etcd.
    pub fn bin_dir(&self) -> &Path {
        &self.bin_dir
    }

    /// Scratch directory of this control plane (logs, certificates).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The API server's audit log (written only when [`AUDIT_ENV`] was set,
    /// or for the modules of [`AUDITED_MODULES`]).
    pub fn audit_log(&self) -> PathBuf {
        self.dir.join("audit.log")
    }

    /// `https://127.0.0.1:PORT` of the apiserver.
    pub fn apiserver_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.apiserver_port)
    }

    /// PEM of the CA that signed the apiserver's serving and admin client certificates.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// A new admin client bound to the caller's runtime.
    pub async fn client(&self) -> kube::Client {
        client_from(&self.kubeconfig)
            .await
            .unwrap_or_else(|e| panic!("admin client: {e:#}"))
    }

    /// Run kubectl against this control plane.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        run(&mut self.kubectl_cmd(args), None)
    }

    /// Run `kubectl infergate ARGS` through kubectl's plugin mechanism: the
    /// built `infergate` binary as `kubectl-infergate` on `PATH`, the
    /// kubeconfig from `KUBECONFIG` (kubectl passes no flags before the
    /// plugin's name on to it).
    pub fn kubectl_infergate(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(self.bin_dir.join("kubectl"));
        cmd.arg("infergate")
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("PATH", super::plugin::plugin_path())
            .env("NO_COLOR", "1");
        run(&mut cmd, None)
    }

    /// Let infergate's ServiceAccount read the graph tokens of `ns`: the
    /// RoleBinding a namespace creates to opt in (deploy/'s ClusterRole
    /// `infergate-graph-token-reader`).
    pub fn bind_graph_token_reader(&self, ns: &str) {
        let out = self.kubectl(&[
            "create",
            "rolebinding",
            "infergate-graph-token-reader",
            "--namespace",
            ns,
            "--clusterrole",
            "infergate-graph-token-reader",
            "--serviceaccount",
            "infergate-system:infergate",
        ]);
        assert!(out.status.success(), "{}", text(&out));
    }

    /// Run kubectl with `stdin` as its standard input.
    pub fn kubectl_stdin(&self, args: &[&str], stdin: &str) -> Output {
        run(&mut self.kubectl_cmd(args), Some(stdin.as_bytes()))
    }

    fn kubectl_cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(self.bin_dir.join("kubectl"));
        cmd.arg("--kubeconfig").arg(&self.kubeconfig).args(args);
        cmd
    }

    /// Create a namespace with a unique name starting with `prefix`.
    pub async fn fresh_namespace(&self, prefix: &str) -> String {
        self.fresh_namespace_with_labels(prefix, BTreeMap::new())
            .await
    }

    /// Create a namespace with a unique name and the given labels.
    pub async fn fresh_namespace_with_labels(
        &self,
        prefix: &str,
        labels: BTreeMap<String, String>,
    ) -> String {
        let seq = NAMESPACE_SEQ.fetch_add(1, Ordering::SeqCst);
        let name = format!("{prefix}-{}-{seq}", std::process::id() % 100_000);
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(labels),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        Api::<Namespace>::all(self.client().await)
            .create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
        name
    }

    /// Create the namespace `name` unless it exists.
    pub async fn ensure_namespace(&self, name: &str) {
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        match Api::<Namespace>::all(self.client().await)
            .create(&PostParams::default(), &ns)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("creating namespace {name}: {e}"),
        }
    }

    async fn start(audited: bool) -> anyhow::Result<Self> {
        use anyhow::Context as _;
        let bin_dir = build_control_plane()?;
        let dir = scratch_dir()?;
        let pki = dir.join("pki");
        std::fs::create_dir_all(&pki)?;

        // Certificates: one CA for the apiserver's serving cert and the admin client cert.
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "infergate-test-ca");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = CertifiedIssuer::self_signed(ca_params, ca_key)?;
        let ca_pem = ca.pem();

        let serving_key = KeyPair::generate()?;
        let mut serving = CertificateParams::new(vec![
            "localhost".to_string(),
            "kubernetes".to_string(),
            "kubernetes.default".to_string(),
            "kubernetes.default.svc".to_string(),
        ])?;
        serving
            .subject_alt_names
            .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        serving
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let serving_cert = serving.signed_by(&serving_key, &ca)?;

        let admin_key = KeyPair::generate()?;
        let mut admin = CertificateParams::new(Vec::<String>::new())?;
        admin.distinguished_name.push(DnType::CommonName, "admin");
        admin
            .distinguished_name
            .push(DnType::OrganizationName, "system:masters");
        admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let admin_cert = admin.signed_by(&admin_key, &ca)?;

        let sa_key = KeyPair::generate()?;

        std::fs::write(pki.join("ca.crt"), &ca_pem)?;
        std::fs::write(pki.join("apiserver.crt"), serving_cert.pem())?;
        std::fs::write(pki.join("apiserver.key"), serving_key.serialize_pem())?;
        std::fs::write(pki.join("sa.key"), sa_key.serialize_pem())?;
        std::fs::write(pki.join("sa.pub"), sa_key.public_key_pem())?;

        // etcd.
        let etcd_client = free_port()?;
        let etcd_peer = free_port()?;
        let mut etcd = Command::new(bin_dir.join("etcd"));
        etcd.arg("--name=default")
            .arg(format!("--data-dir={}", dir.join("etcd").display()))
            .arg(format!(
                "--listen-client-urls=http://127.0.0.1:{etcd_client}"
            ))
            .arg(format!(
                "--advertise-client-urls=http://127.0.0.1:{etcd_client}"
            ))
            .arg(format!("--listen-peer-urls=http://127.0.0.1:{etcd_peer}"))
            .arg(format!(
                "--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}"
            ))
            .arg(format!(
                "--initial-cluster=default=http://127.0.0.1:{etcd_peer}"
            ))
            .arg("--unsafe-no-fsync")
            .arg("--log-level=warn");
        let mut children = vec![spawn_logged(etcd, &dir.join("etcd.log"))?];

        // kube-apiserver.
        let port = free_port()?;
        let mut apiserver = Command::new(bin_dir.join("kube-apiserver"));
        apiserver
            .arg(format!("--etcd-servers=http://127.0.0.1:{etcd_client}"))
            .arg(format!("--cert-dir={}", pki.display()))
            .arg(format!(
                "--tls-cert-file={}",
                pki.join("apiserver.crt").display()
            ))
            .arg(format!(
                "--tls-private-key-file={}",
                pki.join("apiserver.key").display()
            ))
            .arg(format!("--client-ca-file={}", pki.join("ca.crt").display()))
            .arg(format!("--secure-port={port}"))
            .arg("--bind-address=127.0.0.1")
            .arg("--advertise-address=127.0.0.1")
            .arg("--service-cluster-ip-range=10.0.0.0/24")
            .arg("--allow-privileged=true")
            .arg("--authorization-mode=RBAC")
            .arg("--disable-admission-plugins=ServiceAccount")
            .arg(format!("--service-account-issuer=https://127.0.0.1:{port}"))
            .arg(format!(
                "--service-account-key-file={}",
                pki.join("sa.pub").display()
            ))
            .arg(format!(
                "--service-account-signing-key-file={}",
                pki.join("sa.key").display()
            ))
            .arg("--v=0");
        if audited {
            // Benchmarks count requests by user and verb from the API
            // server's own record (one JSON line per request).
            let policy = dir.join("audit-policy.yaml");
            std::fs::write(
                &policy,
                "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n",
            )?;
            apiserver
                .arg(format!("--audit-policy-file={}", policy.display()))
                .arg(format!(
                    "--audit-log-path={}",
                    dir.join("audit.log").display()
                ))
                .arg("--audit-log-format=json")
                .arg("--audit-log-maxsize=0");
        }
        children.push(spawn_logged(apiserver, &dir.join("kube-apiserver.log"))?);

        // Kubeconfig with the admin client certificate.
        let kubeconfig = dir.join("kubeconfig");
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: infergate-test\n  cluster:\n    server: https://127.0.0.1:{port}\n    certificate-authority-data: {}\nusers:\n- name: admin\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: infergate-test\n  context:\n    cluster: infergate-test\n    user: admin\n    namespace: default\ncurrent-context: infergate-test\n",
                b64(&ca_pem),
                b64(&admin_cert.pem()),
                b64(&admin_key.serialize_pem()),
            ),
        )?;

        let cp = ControlPlane {
            dir: dir.clone(),
            bin_dir: bin_dir.clone(),
            kubeconfig: kubeconfig.clone(),
            apiserver_port: port,
            ca_pem,
            children: Mutex::new(children),
            crds_installed: tokio::sync::Mutex::const_new(BTreeSet::new()),
            scheduling: OnceCell::new(),
            reconciler: OnceCell::new(),
            lws: OnceCell::new(),
        };
        cp.wait_ready().await.with_context(|| {
            format!(
                "kube-apiserver did not become ready; its log:\n{}",
                tail(&dir.join("kube-apiserver.log"), 40)
            )
        })?;

        // kube-controller-manager: garbage collection, namespaces, deployments,
        // StatefulSets (LeaderWorkerSet's groups), aggregated ClusterRoles
        // (`view`, `edit`, `admin`).
        let mut kcm = Command::new(bin_dir.join("kube-controller-manager"));
        kcm.arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg("--controllers=garbage-collector-controller,namespace-controller,deployment-controller,replicaset-controller,statefulset-controller,clusterrole-aggregation-controller")
            .arg("--leader-elect=false")
            .arg("--secure-port=0")
            .arg("--v=0");
        let kcm = spawn_logged(kcm, &dir.join("kube-controller-manager.log"))?;
        cp.children.lock().expect("children lock").push(kcm);
        Ok(cp)
    }

    /// Poll an authenticated /readyz, then wait for namespace `default`.
    async fn wait_ready(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            self.ensure_running()?;
            let last = match client_from(&self.kubeconfig).await {
                Ok(client) => {
                    let req = http::Request::get("/readyz").body(Vec::new())?;
                    match client.request_text(req).await {
                        Ok(body) if body.trim() == "ok" => {
                            let ns = Api::<Namespace>::all(client);
                            if ns.get_opt("default").await?.is_some() {
                                return Ok(());
                            }
                            "namespace default not created yet".to_string()
                        }
                        Ok(body) => body,
                        Err(e) => e.to_string(),
                    }
                }
                Err(e) => format!("{e:#}"),
            };
            if Instant::now() > deadline {
                anyhow::bail!("not ready after {READY_TIMEOUT:?}: {last}");
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    /// Stop this plane: its module's shared reconciler, the processes
    /// started against it (the children of the test binary whose command
    /// line names its directory: infergate, the scheduler, the operators),
    /// then kube-controller-manager, kube-apiserver and etcd.
    fn stop(&self) {
        if let Some(reconciler) = self.reconciler.get() {
            reconciler.cancel();
        }
        kill_children_naming(&self.dir);
        let mut children = self.children.lock().expect("children lock");
        for child in children.iter_mut().rev() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // Its directory stays, logs and all, until the next run.
    }

    fn ensure_running(&self) -> anyhow::Result<()> {
        let mut children = self.children.lock().expect("children lock");
        for child in children.iter_mut() {
            if let Some(status) = child.try_wait()? {
                anyhow::bail!(
                    "a control-plane process exited early ({status}); logs in {}:\netcd: {}\nkube-apiserver: {}",
                    self.dir.display(),
                    tail(&self.dir.join("etcd.log"), 20),
                    tail(&self.dir.join("kube-apiserver.log"), 20)
                );
            }
        }
        Ok(())
    }
}

impl ControlPlane {
    /// The ServiceAccount `infergate` with the RBAC of `deploy/`, applied in
    /// [`SYSTEM_NAMESPACE`], and the admission policy that confines what it
    /// writes (`deploy/admissionpolicy.yaml`, which needs infergate's CRDs
    /// installed); returns a kubeconfig with a token of that account.
    pub async fn deployed_service_account(&self) -> PathBuf {
        // Tests of one binary run at once: one `kubectl apply` at a time
        // (two creating the same ServiceAccount would race).
        static APPLY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
        let _one = APPLY.lock().await;
        self.ensure_namespace(SYSTEM_NAMESPACE).await;
        let deploy = root().join("deploy");
        let out = self.kubectl(&[
            "apply",
            "-n",
            SYSTEM_NAMESPACE,
            "-f",
            &deploy.join("serviceaccount.yaml").display().to_string(),
            "-f",
            &deploy.join("rbac.yaml").display().to_string(),
            "-f",
            &deploy.join("admissionpolicy.yaml").display().to_string(),
        ]);
        assert!(
            out.status.success(),
            "applying deploy/ RBAC: {}",
            text(&out)
        );
        service_account_kubeconfig(self, SYSTEM_NAMESPACE, "infergate")
            .unwrap_or_else(|e| panic!("ServiceAccount kubeconfig: {e:#}"))
    }
}

/// A kubeconfig for the ServiceAccount `namespace/name`, with a token from the
/// TokenRequest API (`kubectl create token`).
pub fn service_account_kubeconfig(
    cp: &ControlPlane,
    namespace: &str,
    name: &str,
) -> anyhow::Result<PathBuf> {
    let out = cp.kubectl(&["create", "token", name, "-n", namespace, "--duration=2h"]);
    anyhow::ensure!(
        out.status.success(),
        "kubectl create token: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let token = String::from_utf8(out.stdout)?.trim().to_string();
    let path = cp.dir().join(format!("kubeconfig-{namespace}-{name}"));
    let ca = base64::engine::general_purpose::STANDARD.encode(&cp.ca_pem);
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: infergate-test\n  cluster:\n    server: {}\n    certificate-authority-data: {ca}\nusers:\n- name: {name}\n  user:\n    token: {token}\ncontexts:\n- name: sa\n  context:\n    cluster: infergate-test\n    user: {name}\n    namespace: {namespace}\ncurrent-context: sa\n",
            cp.apiserver_url()
        ),
    )?;
    Ok(path)
}

/// An admin client from a kubeconfig file.
pub async fn client_from(path: &Path) -> anyhow::Result<kube::Client> {
    let kubeconfig = Kubeconfig::read_from(path)?;
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

/// Build (when missing) and locate the control-plane binaries (kubectl among
/// them), without starting anything.
pub fn build_control_plane() -> anyhow::Result<PathBuf> {
    if let Ok(dir) = std::env::var("INFERGATE_CONTROL_PLANE_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let script = root().join("tests/support/build-control-plane.sh");
    let out = Command::new("bash")
        .arg(&script)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| anyhow::anyhow!("running {}: {e}", script.display()))?;
    if !out.status.success() {
        anyhow::bail!(
            "{} failed ({}); it builds kube-apiserver and etcd from their Go modules and needs Go and the Go module proxy. Run it by hand to see the cause, or set INFERGATE_CONTROL_PLANE_BIN to a directory holding the binaries",
            script.display(),
            out.status
        );
    }
    let dir = String::from_utf8(out.stdout)?.trim().to_string();
    Ok(PathBuf::from(dir))
}

/// A scratch directory for this test process; removes those of dead processes.
fn scratch_dir() -> anyhow::Result<PathBuf> {
    let root = std::env::temp_dir();
    if let Ok(entries) = std::fs::read_dir(&root) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            // `infergate-e2e-<pid>-<plane>`: a test binary's that has exited.
            if let Some(pid) = name.strip_prefix("infergate-e2e-")
                && let Some(pid) = pid.split('-').next()
                && !Path::new("/proc").join(pid).exists()
            {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    static PLANE_SEQ: AtomicU32 = AtomicU32::new(0);
    let plane = PLANE_SEQ.fetch_add(1, Ordering::SeqCst);
    let dir = root.join(format!("infergate-e2e-{}-{plane}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Kill this process's children whose command line names `dir` or a path
/// below it.
fn kill_children_naming(dir: &Path) {
    let me = std::process::id().to_string();
    let dir = dir.display().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let proc = entry.path();
        let stat = std::fs::read_to_string(proc.join("stat")).unwrap_or_default();
        // `pid (comm) state ppid ...`: comm may hold spaces, the rest not.
        let parent = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1));
        if parent != Some(me.as_str()) {
            continue;
        }
        // Arguments end in NUL: `dir` whole, or a path below it (plane 1's
        // directory is a prefix of plane 12's name, not of its paths).
        let cmdline = std::fs::read(proc.join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline);
        if cmdline.contains(&format!("{dir}/")) || cmdline.contains(&format!("{dir}\0")) {
            // SAFETY: kill(2) with a pid read from /proc; a process gone
            // since is ESRCH, ignored.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}
