//! The real LeaderWorkerSet controller on the test control plane: built from
//! its Go module at a pinned version by `build-lws.sh` (into the cache,
//! once), every CRD of that version installed, the controller run as a child
//! process with its webhook server on a loopback port and a certificate from
//! a CA of the harness's own, and its webhooks registered by
//! `url: https://127.0.0.1:PORT/...` with that CA as caBundle.
//!
//! The controller is cluster-wide: one per control plane
//! ([`ControlPlane::start_lws`]), started by the first test of a module that
//! asks and stopped with the plane. It creates StatefulSets and a headless
//! Service per LeaderWorkerSet; kube-controller-manager's
//! `statefulset-controller` makes the pods, LeaderWorkerSet's pod webhook
//! labels them and gives them their `LWS_*` environment, and the garbage
//! collector removes the lot when the LeaderWorkerSet goes.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::control_plane::ControlPlane;
use super::process::{cached_by_script, spawn_logged, tail};
use super::servers::{free_port, pki, write_pair};

/// LeaderWorkerSet's API group.
pub const LWS_GROUP: &str = "leaderworkerset.x-k8s.io";
/// Its `apiVersion`.
pub const LWS_API_VERSION: &str = "leaderworkerset.x-k8s.io/v1";
/// The label naming a pod's (and a StatefulSet's) LeaderWorkerSet.
pub const LWS_NAME_LABEL: &str = "leaderworkerset.sigs.k8s.io/name";
/// The label holding a pod's group index.
pub const LWS_GROUP_INDEX_LABEL: &str = "leaderworkerset.sigs.k8s.io/group-index";
/// The label holding a pod's index in its group (the leader's is `0`).
pub const LWS_WORKER_INDEX_LABEL: &str = "leaderworkerset.sigs.k8s.io/worker-index";
/// The annotation holding the group size on the pods the controller makes.
const LWS_SIZE_ANNOTATION: &str = "leaderworkerset.sigs.k8s.io/size";

/// How long the controller may take to serve its webhooks and sync its
/// caches (two large CRDs to list and watch, on 2 cores).
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// The registrations' names (cluster-scoped, one controller per plane).
const MUTATING_NAME: &str = "lws-mutating-webhook-configuration";
const VALIDATING_NAME: &str = "lws-validating-webhook-configuration";

/// Where the controller's webhook server serves LeaderWorkerSet defaulting.
pub const MUTATE_LWS_PATH: &str = "/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset";
/// Where it serves LeaderWorkerSet validation.
pub const VALIDATE_LWS_PATH: &str = "/validate-leaderworkerset-x-k8s-io-v1-leaderworkerset";
/// Where it serves the pods' labels and `LWS_*` environment.
pub const MUTATE_POD_PATH: &str = "/mutate--v1-pod";
/// Where it serves pod validation.
pub const VALIDATE_POD_PATH: &str = "/validate--v1-pod";
/// Where it serves DisaggregatedSet validation.
pub const VALIDATE_DISAGGREGATED_PATH: &str =
    "/validate-disaggregatedset-x-k8s-io-v1-disaggregatedset";

/// The directory holding `bin/lws` and the CRDs of its version in `crd/`
/// (built when missing; `INFERGATE_LWS_DIR` names one built elsewhere).
pub fn lws_dir() -> PathBuf {
    cached_by_script(
        "INFERGATE_LWS_DIR",
        "build-lws.sh",
        &[],
        "it builds the LeaderWorkerSet controller from its Go module and needs Go and the Go module proxy",
    )
}

/// The LeaderWorkerSet kind, for [`DynamicObject`] APIs.
pub fn leaderworkerset_resource() -> ApiResource {
    ApiResource {
        group: LWS_GROUP.into(),
        version: "v1".into(),
        api_version: LWS_API_VERSION.into(),
        kind: "LeaderWorkerSet".into(),
        plural: "leaderworkersets".into(),
    }
}

/// The LeaderWorkerSets of namespace `ns`.
pub fn leaderworkersets(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &leaderworkerset_resource())
}

/// The running controller; killed when dropped, and with its control plane.
pub struct Lws {
    child: Mutex<Child>,
    /// Its log file.
    pub log: PathBuf,
    /// The loopback port of its webhook server.
    pub port: u16,
    /// PEM of the CA that signed its serving certificate (the caBundle of
    /// its registrations).
    pub ca_pem: String,
}

impl Drop for Lws {
    fn drop(&mut self) {
        if let Ok(child) = self.child.get_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Lws {
    /// Panic with the end of its log when the controller has exited.
    pub fn ensure_running(&self) {
        if let Some(status) = self.exited() {
            panic!(
                "the LeaderWorkerSet controller exited ({status}); the end of {}:\n{}",
                self.log.display(),
                tail(&self.log, 40)
            );
        }
    }

    /// The last `lines` lines of its log.
    pub fn logs(&self, lines: usize) -> String {
        tail(&self.log, lines)
    }

    fn exited(&self) -> Option<std::process::ExitStatus> {
        let mut child = self.child.lock().expect("lws child lock");
        child.try_wait().ok().flatten()
    }
}

impl ControlPlane {
    /// The LeaderWorkerSet controller of this plane, started on the first
    /// call (later calls, from any test of the module, return the same one):
    /// its CRDs installed server-side, its webhooks registered by URL, and
    /// returned only once it admits a LeaderWorkerSet and a pod through them
    /// and its controllers have synced their caches.
    ///
    /// Panics with the cause and the controller's log when it cannot be
    /// built or started: an end-to-end test never passes by skipping.
    pub async fn start_lws(&self) -> &Lws {
        self.lws
            .get_or_init(|| async {
                let lws = start(self).unwrap_or_else(|e| {
                    panic!("the LeaderWorkerSet controller could not start: {e:#}")
                });
                if let Err(e) = wait_working(self, &lws).await {
                    panic!(
                        "the LeaderWorkerSet controller did not come up: {e:#}\nthe end of {}:\n{}",
                        lws.log.display(),
                        lws.logs(40)
                    );
                }
                lws
            })
            .await
    }
}

/// Install the CRDs, write the certificate and the configuration, and
/// spawn the controller.
fn start(cp: &ControlPlane) -> anyhow::Result<Lws> {
    let cache = lws_dir();
    let crds = cache.join("crd");
    anyhow::ensure!(
        crds.join("leaderworkerset.x-k8s.io_leaderworkersets.yaml")
            .is_file(),
        "no LeaderWorkerSet CRD in {}: run tests/support/build-lws.sh (or make lws)",
        crds.display()
    );
    // Every CRD of the directory: the controller's cache waits for each
    // kind it watches, DisaggregatedSet's among them. Server-side: they are
    // too large for client-side apply's annotation.
    cp.apply_crds(&crds.display().to_string(), true);

    let dir = cp.dir().join("lws");
    let certs = dir.join("certs");
    std::fs::create_dir_all(&certs)?;
    let (ca, serving) = pki("infergate-test-lws-ca");
    write_pair(&certs, &serving);

    let port = free_port()?;
    let config = dir.join("config.yaml");
    std::fs::write(&config, configuration(port, &certs))?;

    let log = cp.dir().join("lws.log");
    let mut cmd = Command::new(cache.join("bin/lws"));
    cmd.arg(format!("--kubeconfig={}", cp.kubeconfig().display()))
        .arg(format!("--config={}", config.display()))
        .arg("--leader-elect=false")
        .arg("--metrics-bind-address=0")
        .arg("--health-probe-bind-address=0")
        .arg("--zap-log-level=info");
    let child = spawn_logged(cmd, &log)?;
    let lws = Lws {
        child: Mutex::new(child),
        log,
        port,
        ca_pem: ca.cert,
    };
    Ok(lws)
}

/// The controller's configuration file: its webhook server on `port` of
/// 127.0.0.1 with the certificate of `certs` (`tls.crt`, `tls.key`), no
/// certificate management of its own (it would write a Secret and patch
/// registrations of its own naming), no leader election, no metrics or
/// probe listeners. The controller decodes it strictly: an unknown field
/// stops it.
fn configuration(port: u16, certs: &Path) -> String {
    format!(
        "apiVersion: config.lws.x-k8s.io/v1alpha1
kind: Configuration
webhook:
  host: 127.0.0.1
  port: {port}
  certDir: {}
leaderElection:
  leaderElect: false
metrics:
  bindAddress: \"0\"
health:
  healthProbeBindAddress: \"0\"
internalCertManagement:
  enable: false
",
        certs.display()
    )
}

/// One webhook of a registration: `name`, served at `path`, for
/// `operations` on `resources` of `group`, selecting objects with
/// `selector` (none: all). Every one of them fails closed and has no side
/// effects.
fn hook(
    lws: &Lws,
    name: &str,
    path: &str,
    (group, resources): (&str, &str),
    operations: &[&str],
    selector: Option<Value>,
) -> Value {
    use base64::Engine as _;
    let mut hook = json!({
        "name": name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": {
            "url": format!("https://127.0.0.1:{}{path}", lws.port),
            "caBundle": base64::engine::general_purpose::STANDARD.encode(&lws.ca_pem),
        },
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "rules": [{
            "apiGroups": [group],
            "apiVersions": ["v1"],
            "operations": operations,
            "resources": [resources],
        }],
    });
    if let Some(selector) = selector {
        hook["objectSelector"] = selector;
    }
    hook
}

/// Register the controller's webhooks as its release does: LeaderWorkerSet
/// defaulting and validation, and the pod webhooks for pods carrying
/// [`LWS_NAME_LABEL`] (the others are not its business, and a pod webhook
/// that fails closed must not stand in front of every pod of the plane);
/// DisaggregatedSet validation.
async fn register(cp: &ControlPlane, lws: &Lws) -> anyhow::Result<()> {
    let client = cp.client().await;
    let lws_pods =
        || Some(json!({"matchExpressions": [{"key": LWS_NAME_LABEL, "operator": "Exists"}]}));
    let sets = (LWS_GROUP, "leaderworkersets");
    let pods = ("", "pods");
    let disaggregated = ("disaggregatedset.x-k8s.io", "disaggregatedsets");
    let create_update: &[&str] = &["CREATE", "UPDATE"];
    let mutating_hooks = [
        hook(
            lws,
            "mleaderworkerset.kb.io",
            MUTATE_LWS_PATH,
            sets,
            create_update,
            None,
        ),
        hook(
            lws,
            "mpod.kb.io",
            MUTATE_POD_PATH,
            pods,
            &["CREATE"],
            lws_pods(),
        ),
    ];
    let validating_hooks = [
        hook(
            lws,
            "vleaderworkerset.kb.io",
            VALIDATE_LWS_PATH,
            sets,
            create_update,
            None,
        ),
        hook(
            lws,
            "vpod.kb.io",
            VALIDATE_POD_PATH,
            pods,
            create_update,
            lws_pods(),
        ),
        hook(
            lws,
            "vdisaggregatedset.kb.io",
            VALIDATE_DISAGGREGATED_PATH,
            disaggregated,
            create_update,
            None,
        ),
    ];
    let mutating: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": MUTATING_NAME},
        "webhooks": mutating_hooks,
    }))?;
    let validating: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": VALIDATING_NAME},
        "webhooks": validating_hooks,
    }))?;
    let params = PatchParams::apply("infergate-tests-lws").force();
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .patch(MUTATING_NAME, &params, &Patch::Apply(&mutating))
        .await?;
    Api::<ValidatingWebhookConfiguration>::all(client)
        .patch(VALIDATING_NAME, &params, &Patch::Apply(&validating))
        .await?;
    Ok(())
}

/// Register the webhooks, then wait until the controller really works:
/// a dry-run LeaderWorkerSet comes back defaulted by its webhook (TLS with
/// the harness's CA, both LeaderWorkerSet hooks), a dry-run pod of a
/// LeaderWorkerSet comes back labelled with its `LWS_*` environment (both
/// pod hooks), and its log says the LeaderWorkerSet and pod controllers
/// have started their workers (which they do once their caches synced).
async fn wait_working(cp: &ControlPlane, lws: &Lws) -> anyhow::Result<()> {
    register(cp, lws).await?;
    let client = cp.client().await;
    let deadline = Instant::now() + START_TIMEOUT;
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let sets = leaderworkersets(&client, "default");
    let pods = Api::<Pod>::namespaced(client, "default");
    let probe_set: DynamicObject = serde_json::from_value(json!({
        "apiVersion": LWS_API_VERSION, "kind": "LeaderWorkerSet",
        "metadata": {"name": "lws-probe", "namespace": "default"},
        "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 1, "workerTemplate": {
            "spec": {"containers": [{"name": "probe", "image": "registry.example.com/probe:1"}]}
        }}},
    }))?;
    let probe_pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "lws-probe-0", "namespace": "default",
            "labels": {LWS_NAME_LABEL: "lws-probe", LWS_WORKER_INDEX_LABEL: "0"},
            "annotations": {LWS_SIZE_ANNOTATION: "1"},
        },
        "spec": {"subdomain": "lws-probe",
                 "containers": [{"name": "probe", "image": "registry.example.com/probe:1"}]},
    }))?;
    let mut last;
    loop {
        if let Some(status) = lws.exited() {
            anyhow::bail!("it exited ({status})");
        }
        last = match sets.create(&dry_run, &probe_set).await {
            Err(e) => format!("dry-run LeaderWorkerSet: {e}"),
            Ok(set)
                if set.data["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"].is_null() =>
            {
                format!(
                    "dry-run LeaderWorkerSet not defaulted: {}",
                    set.data["spec"]
                )
            }
            Ok(_) => match pods.create(&dry_run, &probe_pod).await {
                Err(e) => format!("dry-run pod: {e}"),
                Ok(pod) if !has_lws_env(&pod) => format!("dry-run pod not mutated: {:?}", pod.spec),
                Ok(_) => match unstarted_controllers(&lws.log) {
                    None => return Ok(()),
                    Some(which) => format!("controllers without workers yet: {which}"),
                },
            },
        };
        if Instant::now() >= deadline {
            anyhow::bail!("not working after {START_TIMEOUT:?}; last: {last}");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Whether a pod's first container has the pod webhook's `LWS_GROUP_SIZE`.
fn has_lws_env(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.env.as_ref())
        .is_some_and(|env| env.iter().any(|e| e.name == "LWS_GROUP_SIZE"))
}

/// The controllers (LeaderWorkerSet's, the pods') whose "Starting workers"
/// line its log does not have yet, or `None` when both have started.
fn unstarted_controllers(log: &Path) -> Option<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let started = |name: &str| {
        let field = format!("\"controller\": \"{name}\"");
        text.lines()
            .any(|l| l.contains("Starting workers") && l.contains(&field))
    };
    let missing: Vec<&str> = ["leaderworkerset", "pod"]
        .into_iter()
        .filter(|c| !started(c))
        .collect();
    (!missing.is_empty()).then(|| missing.join(", "))
}
