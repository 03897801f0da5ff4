//! A real control plane for end-to-end tests, in the manner of envtest:
//! etcd, kube-apiserver and kube-controller-manager on free loopback ports,
//! built from their Go modules by `build-control-plane.sh` into a cache
//! outside the repository.
//!
//! One control plane serves all tests of a test binary; each test takes a
//! fresh namespace. The processes die with the test binary (PR_SET_PDEATHSIG
//! on a supervisor thread that lives as long as the process).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, mpsc};
use std::time::{Duration, Instant};

use base64::Engine as _;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::{await_condition, conditions};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};
use tokio::sync::OnceCell;

/// How long the apiserver may take to become ready (2 cores, cold caches).
const READY_TIMEOUT: Duration = Duration::from_secs(120);

static CONTROL_PLANE: OnceCell<ControlPlane> = OnceCell::const_new();
static CRDS: OnceCell<()> = OnceCell::const_new();
static NAMESPACE_SEQ: AtomicU32 = AtomicU32::new(0);

/// A running etcd + kube-apiserver + kube-controller-manager.
pub struct ControlPlane {
    dir: PathBuf,
    bin_dir: PathBuf,
    kubeconfig: PathBuf,
    apiserver_port: u16,
    ca_pem: String,
    children: Mutex<Vec<Child>>,
}

/// The control plane shared by all tests of this test binary, started on first use.
///
/// Panics with the cause (and how to fix it) when it cannot be built or started:
/// an end-to-end test never passes by skipping.
pub async fn control_plane() -> &'static ControlPlane {
    CONTROL_PLANE
        .get_or_init(|| async {
            match ControlPlane::start().await {
                Ok(cp) => cp,
                Err(e) => panic!("the test control plane could not start: {e:#}"),
            }
        })
        .await
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
        self.kubectl_cmd(args)
            .output()
            .unwrap_or_else(|e| panic!("running kubectl {args:?}: {e}"))
    }

    /// Run kubectl with `stdin` as its standard input.
    pub fn kubectl_stdin(&self, args: &[&str], stdin: &str) -> Output {
        let mut child = self
            .kubectl_cmd(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("running kubectl {args:?}: {e}"));
        child
            .stdin
            .take()
            .expect("stdin is piped")
            .write_all(stdin.as_bytes())
            .expect("writing kubectl stdin");
        child.wait_with_output().expect("waiting for kubectl")
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

    /// Install infergate's CRDs (as `infergate crds` generates them) and wait
    /// until they are Established. Idempotent within a test binary.
    pub async fn install_crds(&self) {
        CRDS.get_or_init(|| async {
            let crds = infergate::crdgen::all().expect("generating CRDs");
            let api = Api::<CustomResourceDefinition>::all(self.client().await);
            for crd in crds {
                let name = crd.metadata.name.clone().expect("CRDs are named");
                api.patch(
                    &name,
                    &PatchParams::apply("infergate-tests").force(),
                    &Patch::Apply(&crd),
                )
                .await
                .unwrap_or_else(|e| panic!("installing CRD {name}: {e}"));
                let established =
                    await_condition(api.clone(), &name, conditions::is_crd_established());
                tokio::time::timeout(Duration::from_secs(60), established)
                    .await
                    .unwrap_or_else(|_| panic!("CRD {name} not Established within 60s"))
                    .unwrap_or_else(|e| panic!("watching CRD {name}: {e}"));
            }
        })
        .await;
    }

    async fn start() -> anyhow::Result<Self> {
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
        let mut children = vec![spawn_supervised(etcd, &dir.join("etcd.log"))?];

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
        children.push(spawn_supervised(
            apiserver,
            &dir.join("kube-apiserver.log"),
        )?);

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
        };
        cp.wait_ready().await.with_context(|| {
            format!(
                "kube-apiserver did not become ready; its log:\n{}",
                tail(&dir.join("kube-apiserver.log"), 40)
            )
        })?;

        // kube-controller-manager: garbage collection, namespaces, deployments.
        let mut kcm = Command::new(bin_dir.join("kube-controller-manager"));
        kcm.arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg("--controllers=garbage-collector-controller,namespace-controller,deployment-controller,replicaset-controller")
            .arg("--leader-elect=false")
            .arg("--secure-port=0")
            .arg("--v=0");
        let kcm = spawn_supervised(kcm, &dir.join("kube-controller-manager.log"))?;
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

/// Register infergate's webhooks (`webhooks/*.yaml`) and the CRD's conversion
/// webhook by `url: https://127.0.0.1:PORT/...` with `ca_pem` as caBundle, the way
/// an out-of-cluster webhook is registered. Idempotent (server-side apply / merge patch).
pub async fn register_webhooks(cp: &ControlPlane, port: u16, ca_pem: &str) -> anyhow::Result<()> {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::admissionregistration::v1::{
        MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("webhooks");
    let client = cp.client().await;
    let params = PatchParams::apply("infergate-tests").force();
    let config = |path: Option<String>, fallback: &str| WebhookClientConfig {
        url: Some(format!(
            "https://127.0.0.1:{port}{}",
            path.as_deref().unwrap_or(fallback)
        )),
        ca_bundle: Some(ByteString(ca_pem.as_bytes().to_vec())),
        service: None,
    };

    let mut mutating: MutatingWebhookConfiguration =
        serde_saphyr::from_str(&std::fs::read_to_string(root.join("mutating.yaml"))?)?;
    for hook in mutating.webhooks.iter_mut().flatten() {
        let path = hook
            .client_config
            .service
            .as_ref()
            .and_then(|s| s.path.clone());
        hook.client_config = config(path, "/mutate");
    }
    replace_object(Api::all(client.clone()), &mutating, &params).await?;

    let mut validating: ValidatingWebhookConfiguration =
        serde_saphyr::from_str(&std::fs::read_to_string(root.join("validating.yaml"))?)?;
    for hook in validating.webhooks.iter_mut().flatten() {
        let path = hook
            .client_config
            .service
            .as_ref()
            .and_then(|s| s.path.clone());
        hook.client_config = config(path, "/validate");
    }
    replace_object(Api::all(client.clone()), &validating, &params).await?;

    register_conversion(cp, port, ca_pem).await
}

/// Replace a cluster-scoped object with `obj`: delete it if present, then apply.
/// Registration by URL replaces whatever was registered before (fields owned by
/// another manager, such as a `service` reference, would survive an apply).
async fn replace_object<K>(api: Api<K>, obj: &K, params: &PatchParams) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    let name = obj.meta().name.clone().unwrap_or_default();
    if api.get_opt(&name).await?.is_some() {
        api.delete(&name, &Default::default()).await?;
    }
    api.patch(&name, params, &Patch::Apply(obj)).await?;
    Ok(())
}

/// Point the InferenceService CRD's conversion webhook at `https://127.0.0.1:PORT/convert`.
pub async fn register_conversion(cp: &ControlPlane, port: u16, ca_pem: &str) -> anyhow::Result<()> {
    let client = cp.client().await;
    let ca_b64 = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let conversion = serde_json::json!({"spec": {"conversion": {"strategy": "Webhook", "webhook": {
        "conversionReviewVersions": ["v1"],
        "clientConfig": {"service": null, "url": format!("https://127.0.0.1:{port}/convert"), "caBundle": ca_b64}
    }}}});
    Api::<CustomResourceDefinition>::all(client)
        .patch(
            "inferenceservices.infergate.dev",
            &PatchParams::default(),
            &Patch::Merge(&conversion),
        )
        .await?;
    Ok(())
}

/// Point the CRD's conversion webhook back at the in-cluster Service, as the
/// committed CRD has it (undoes [`register_conversion`]).
pub async fn unregister_conversion(cp: &ControlPlane) -> anyhow::Result<()> {
    use infergate::crdgen::{CONVERT_PATH, SERVICE_NAME, SERVICE_NAMESPACE};
    let conversion = serde_json::json!({"spec": {"conversion": {"webhook": {"clientConfig": {
        "url": null, "caBundle": null,
        "service": {"name": SERVICE_NAME, "namespace": SERVICE_NAMESPACE, "path": CONVERT_PATH, "port": 443}
    }}}}});
    Api::<CustomResourceDefinition>::all(cp.client().await)
        .patch(
            "inferenceservices.infergate.dev",
            &PatchParams::default(),
            &Patch::Merge(&conversion),
        )
        .await?;
    Ok(())
}

/// Wait until the apiserver converts through the webhook: a server-side dry run
/// of a v1alpha1 object must be converted to the storage version v1beta1.
pub async fn wait_conversion_active(cp: &ControlPlane) -> anyhow::Result<()> {
    let probe = "apiVersion: infergate.dev/v1alpha1\nkind: InferenceService\nmetadata:\n  name: conversion-probe\n  namespace: default\nspec:\n  modelRef: probe\n";
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = cp.kubectl_stdin(&["create", "--dry-run=server", "-f", "-"], probe);
        if out.status.success() {
            return Ok(());
        }
        if Instant::now() > deadline {
            anyhow::bail!(
                "conversion webhook not called within 60s: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Wait until the apiserver calls the registered webhooks (new registrations take
/// effect after a short delay): a server-side dry run of a minimal service in
/// `namespace` must come back defaulted.
pub async fn wait_webhooks_active(cp: &ControlPlane, namespace: &str) -> anyhow::Result<()> {
    let manifest = format!(
        "apiVersion: infergate.dev/v1beta1\nkind: InferenceService\nmetadata:\n  name: webhook-probe\n  namespace: {namespace}\nspec:\n  model: {{ref: probe}}\n  engine: {{image: probe/probe}}\n"
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = cp.kubectl_stdin(
            &["apply", "--dry-run=server", "-o", "json", "-f", "-"],
            &manifest,
        );
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if out.status.success() && text.contains("infergate.dev/defaulted-from") {
            return Ok(());
        }
        if Instant::now() > deadline {
            anyhow::bail!("the webhooks are not called within 60s; last answer: {text}");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// A plain-HTTP GET on 127.0.0.1 (the probe port); the status code and body.
pub async fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let code = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((code, body))
}

/// Spawn a process whose output goes to `log` and which dies with this process.
pub fn spawn_logged(cmd: Command, log: &Path) -> std::io::Result<Child> {
    spawn_supervised(cmd, log)
}

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
    /// The process (dies with the test binary).
    pub child: Child,
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
    use anyhow::Context as _;
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
    let _ = cp.kubectl(&["create", "namespace", "infergate-system"]);
    let log = cp.dir().join(format!("infergate-{n}.log"));
    let mut serve = Command::new(binary);
    serve
        .args(["serve", "--namespace", "infergate-system"])
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
    let mut child = spawn_supervised(serve, &log).context("starting infergate serve")?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok((200, _)) = http_get(probe_port, "/readyz").await {
            break;
        }
        if let Some(status) = child.try_wait()? {
            anyhow::bail!("infergate serve exited ({status}):\n{}", tail(&log, 30));
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "infergate serve not ready within 60s:\n{}",
            tail(&log, 30)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    match hooks {
        Hooks::All => {
            register_webhooks(cp, port, &ca_pem).await?;
            wait_webhooks_active(cp, "default").await?;
        }
        Hooks::ConversionOnly => {
            register_conversion(cp, port, &ca_pem).await?;
            wait_conversion_active(cp).await?;
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

/// Build (when missing) and locate the control-plane binaries.
fn build_control_plane() -> anyhow::Result<PathBuf> {
    if let Ok(dir) = std::env::var("INFERGATE_CONTROL_PLANE_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/build-control-plane.sh");
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
            if let Some(pid) = name.strip_prefix("infergate-e2e-")
                && !Path::new("/proc").join(pid).exists()
            {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    let dir = root.join(format!("infergate-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

type SpawnRequest = (Command, PathBuf, mpsc::Sender<std::io::Result<Child>>);

/// Spawn `cmd` from a thread that lives as long as the process, with
/// PR_SET_PDEATHSIG so the child is killed when the test binary exits.
fn spawn_supervised(cmd: Command, log: &Path) -> std::io::Result<Child> {
    static SUPERVISOR: Mutex<Option<mpsc::Sender<SpawnRequest>>> = Mutex::new(None);
    let sender = {
        let mut guard = SUPERVISOR.lock().expect("supervisor lock");
        guard
            .get_or_insert_with(|| {
                let (tx, rx) = mpsc::channel::<SpawnRequest>();
                std::thread::Builder::new()
                    .name("control-plane-supervisor".into())
                    .spawn(move || {
                        for (mut cmd, log, reply) in rx {
                            let result = (|| {
                                let out = std::fs::File::create(&log)?;
                                let err = out.try_clone()?;
                                cmd.stdin(Stdio::null()).stdout(out).stderr(err);
                                // SAFETY: prctl is async-signal-safe; it only sets this
                                // child's parent-death signal before exec.
                                unsafe {
                                    cmd.pre_exec(|| {
                                        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                                            return Err(std::io::Error::last_os_error());
                                        }
                                        Ok(())
                                    });
                                }
                                cmd.spawn()
                            })();
                            let _ = reply.send(result);
                        }
                        // The sender lives in a static: the loop ends only with the process.
                        loop {
                            std::thread::park();
                        }
                    })
                    .expect("spawning the supervisor thread");
                tx
            })
            .clone()
    };
    let (reply_tx, reply_rx) = mpsc::channel();
    sender
        .send((cmd, log.to_path_buf(), reply_tx))
        .map_err(|_| std::io::Error::other("supervisor thread is gone"))?;
    reply_rx
        .recv()
        .map_err(|_| std::io::Error::other("supervisor thread is gone"))?
}

/// A TLS acceptor for a test HTTPS server on 127.0.0.1: a fresh CA (returned as
/// PEM, for clients to trust) and a serving certificate for `localhost` and
/// 127.0.0.1, ALPN h2 and http/1.1, ring as the provider.
pub fn loopback_tls_acceptor(ca_name: &str) -> (String, tokio_rustls::TlsAcceptor) {
    use infergate::webhook::certs::{generate_ca, issue_serving};
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let ca = generate_ca(ca_name, Duration::from_secs(3600)).expect("test CA");
    let leaf = issue_serving(
        &ca,
        &["localhost".to_owned()],
        &[IpAddr::V4(Ipv4Addr::LOCALHOST)],
        Duration::from_secs(3600),
    )
    .expect("test serving certificate");
    let chain = CertificateDer::pem_slice_iter(leaf.cert.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .expect("certificate chain");
    let key = PrivateKeyDer::from_pem_slice(leaf.key.as_bytes()).expect("private key");
    let mut config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("protocol versions")
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .expect("server config");
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    (
        ca.cert,
        tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config)),
    )
}
