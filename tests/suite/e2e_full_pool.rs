//! End-to-end: rollouts on a full GPU pool (API section 14), with the real
//! kube-scheduler placing the pods and kwok running them on GPU Nodes of
//! eight `nvidia.com/gpu`. Each test has a pool (Nodes with a label of its
//! own) and an AcceleratorClass for it, and its own reconciler running as
//! infergate's ServiceAccount with the RBAC of `deploy/`; the tests' users
//! change their services the way they would, with patches.
//!
//! What a plain Deployment does on a full pool is shown first, in the same
//! run: its default rolling update adds a pod that no Node can hold, and
//! the change never arrives.
//!
//! The template change and a restart in the middle of it are in
//! [`rollout`], the canary in [`canary`], the warnings at `kubectl apply`
//! in [`admission`].

#[path = "e2e_full_pool/admission.rs"]
mod admission;
#[path = "e2e_full_pool/canary.rs"]
mod canary;
#[path = "e2e_full_pool/rollout.rs"]
mod rollout;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::support::scheduler::{
    ACCELERATOR_LABEL, GPU_TAINT, RUN_WAIT, Scheduling, accelerator_class, gpu_node, pod_condition,
    scheduling,
};
use crate::support::{self, ControlPlane, WAIT, control_plane, eventually, get};
use infergate::api::AcceleratorClass;
use infergate::api::v1beta1::InferenceService;
use infergate::reconcile::children::httproute::HTTPRoute;

const ENGINE: &str = "registry.example.com/vllm";

/// A pool of its own: the Nodes' label value and its AcceleratorClass.
struct Pool {
    label: String,
    class: String,
    nodes: usize,
}

impl Pool {
    /// A class for the pool `name` and `nodes` Nodes of 8 GPUs in it.
    async fn new(client: &Client, sched: &Scheduling, name: &str, nodes: usize) -> Self {
        let run = std::process::id();
        let pool = Self {
            label: format!("{name}-{run}"),
            class: format!("{name}-{run}"),
            nodes: 0,
        };
        Api::<AcceleratorClass>::all(client.clone())
            .create(
                &PostParams::default(),
                &accelerator_class(&pool.class, &pool.label, 8),
            )
            .await
            .expect("creating the class");
        let mut pool = pool;
        for _ in 0..nodes {
            pool.add_node(client, sched).await;
        }
        // Admission knows classes from its watch: a service naming this
        // one is admitted once that watch has seen it.
        let probe: InferenceService = serde_json::from_value(json!({
            "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
            "metadata": {"name": "class-probe", "namespace": "default"},
            "spec": {"model": {"ref": "m"}, "engine": {"image": format!("{ENGINE}:v1")},
                "accelerator": {"class": pool.class}, "parallelism": {"tensor": 8}}
        }))
        .expect("probe json");
        let services: Api<InferenceService> = Api::namespaced(client.clone(), "default");
        eventually("admission to know the class", WAIT, async || {
            services
                .create(
                    &PostParams {
                        dry_run: true,
                        ..PostParams::default()
                    },
                    &probe,
                )
                .await
                .map(|_| ())
        })
        .await;
        pool
    }

    /// One more Node of 8 GPUs in the pool.
    async fn add_node(&mut self, client: &Client, sched: &Scheduling) -> Node {
        self.nodes += 1;
        sched
            .create_node(
                client,
                gpu_node(&format!("{}-{}", self.label, self.nodes), &self.label, "8"),
            )
            .await
    }
}

/// infergate's webhooks, served (without the reconciler, which each test
/// runs) as infergate's ServiceAccount and registered as `webhooks/`
/// registers them: every write of this module's tests is admitted as in
/// a cluster.
static WEBHOOK: tokio::sync::OnceCell<support::Serve> = tokio::sync::OnceCell::const_new();

/// One test at a time: each runs a reconciler of its own, and one Lease
/// elects one leader.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// What every test runs against: the control plane with the scheduler and
/// kwok, infergate's CRDs and the Gateway API's, the webhooks, and a
/// kubeconfig of infergate's ServiceAccount; and the turn of the test.
async fn setup() -> (
    &'static ControlPlane,
    Client,
    &'static Scheduling,
    PathBuf,
    tokio::sync::MutexGuard<'static, ()>,
) {
    support::init_tracing();
    let turn = ONE_AT_A_TIME.lock().await;
    let cp = control_plane().await;
    let client = cp.client().await;
    let sched = scheduling(cp).await;
    cp.install_crds().await;
    cp.install_crd_file(support::httproute_crd()).await;
    let kubeconfig = cp.deployed_service_account().await;
    WEBHOOK
        .get_or_init(|| async {
            support::install_crypto_provider();
            let cert_dir = cp.dir().join("full-pool-certs");
            std::fs::create_dir_all(&cert_dir).expect("cert dir");
            let (ca, leaf) = support::pki("infergate-full-pool-ca");
            support::write_pair(&cert_dir, &leaf);
            let port = support::free_port().expect("port");
            let probe = support::free_port().expect("port");
            let args = support::serve_args(port, probe, &cert_dir, vec![]);
            let serve = support::Serve::start(args, Some(kubeconfig.clone()));
            support::wait_readyz(probe, WAIT).await;
            support::register_webhooks(cp, port, &ca.cert)
                .await
                .unwrap_or_else(|e| panic!("registering the webhooks: {e:#}"));
            support::wait_webhooks_active(cp, "default").await;
            serve
        })
        .await;
    (cp, client, sched, kubeconfig, turn)
}

/// An InferenceService of `replicas` replicas of 8 GPUs (tensor 8) on
/// `pool`'s class, engine `ENGINE:tag`, with `extra` merged into its spec.
async fn create_service(
    client: &Client,
    ns: &str,
    name: &str,
    pool: &Pool,
    replicas: i32,
    tag: &str,
    extra: Value,
) {
    let mut spec = json!({
        "model": {"ref": "llama3-70b"},
        "engine": {"image": format!("{ENGINE}:{tag}")},
        "replicas": replicas,
        "accelerator": {"class": pool.class},
        "parallelism": {"tensor": 8},
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            spec.insert(k.clone(), v.clone());
        }
    }
    support::create_service_json(client, ns, name, spec).await;
}

/// The pods of `selector` in `ns` that are not being deleted.
async fn pods(client: &Client, ns: &str, selector: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(selector))
        .await
        .expect("listing pods")
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

/// Wait until no pod of `selector` is left in `ns`, not even one being
/// deleted (its devices are free only then).
async fn wait_gone(client: &Client, ns: &str, selector: &str, what: &str) {
    eventually(what, WAIT, async || {
        let left = Api::<Pod>::namespaced(client.clone(), ns)
            .list(&ListParams::default().labels(selector))
            .await
            .map_err(|e| e.to_string())?
            .items
            .len();
        if left == 0 {
            Ok(())
        } else {
            Err(format!("{left} left"))
        }
    })
    .await;
}

/// The engine container's image of a pod.
fn image(p: &Pod) -> String {
    p.spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

fn is_ready(p: &Pod) -> bool {
    pod_condition(p, "Ready").is_some_and(|(status, _, _)| status == "True")
}

fn unschedulable(p: &Pod) -> bool {
    pod_condition(p, "PodScheduled")
        .is_some_and(|(status, reason, _)| status == "False" && reason == "Unschedulable")
}

/// The service's condition `type_` as `(status, reason, message)`.
async fn condition(
    client: &Client,
    ns: &str,
    name: &str,
    type_: &str,
) -> Option<(String, String, String)> {
    let svc: InferenceService = get(client, ns, name).await?;
    svc.status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status, c.reason, c.message))
}

/// Service `chat` of `replicas` replicas on `pool`, routed through a
/// gateway (`extra` merged into its spec), running `v1` on every replica.
async fn routed_chat(
    client: &Client,
    sched: &Scheduling,
    ns: &str,
    pool: &Pool,
    replicas: i32,
    mut extra: Value,
) {
    extra["routing"] = json!({"gateway": {"name": "gw", "namespace": "gateways"}});
    create_service(client, ns, "chat", pool, replicas, "v1", extra).await;
    let n = usize::try_from(replicas).unwrap_or(0);
    wait_all_on(client, sched, ns, &primary_selector("chat"), n, "v1").await;
}

/// Wait until every pod of `selector` (and `n` of them) runs `tag`, is
/// ready, and no other is left.
async fn wait_all_on(
    client: &Client,
    sched: &Scheduling,
    ns: &str,
    selector: &str,
    n: usize,
    tag: &str,
) {
    let want = format!("{ENGINE}:{tag}");
    eventually(
        &format!("{n} ready pods of {selector} on {tag}"),
        RUN_WAIT,
        async || {
            sched.ensure_running();
            let ps = pods(client, ns, selector).await;
            let ok = ps.len() == n && ps.iter().all(|p| image(p) == want && is_ready(p));
            if ok {
                Ok(())
            } else {
                Err(format!(
                    "{:?}; {}",
                    ps.iter()
                        .map(|p| (p.name_any(), image(p), is_ready(p)))
                        .collect::<Vec<_>>(),
                    sched.logs(5)
                ))
            }
        },
    )
    .await;
}

fn primary_selector(service: &str) -> String {
    format!("infergate.dev/service={service},infergate.dev/track=primary")
}
