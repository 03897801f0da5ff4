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

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
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
use crate::support::{self, ControlPlane, Reconciler, WAIT, control_plane, eventually, get};
use infergate::api::AcceleratorClass;
use infergate::api::v1beta1::InferenceService;
use infergate::reconcile::children::httproute::HTTPRoute;
use infergate::reconcile::{Config, LeaseTiming};

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

/// A reconciler running as infergate's ServiceAccount (`deploy/`'s RBAC),
/// with a short lease so a successor leads soon after it stops.
fn reconciler(kubeconfig: &Path, identity: &str) -> Reconciler {
    let config = Config {
        lease: LeaseTiming {
            duration_seconds: 6,
            grace_seconds: 2,
        },
        ..support::reconcile_config(identity)
    };
    Reconciler::start(kubeconfig.to_path_buf(), config)
}

/// What every test runs against: the control plane with the scheduler and
/// kwok, infergate's CRDs and the Gateway API's, and a kubeconfig of
/// infergate's ServiceAccount.
async fn setup() -> (&'static ControlPlane, Client, &'static Scheduling, PathBuf) {
    support::init_tracing();
    let cp = control_plane().await;
    let client = cp.client().await;
    let sched = scheduling(cp).await;
    cp.install_crds().await;
    cp.install_crd_file(support::httproute_crd()).await;
    let kubeconfig = cp.deployed_service_account().await;
    (cp, client, sched, kubeconfig)
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

/// Merge-patch the spec of service `name` the way its team would.
async fn patch_spec(client: &Client, ns: &str, name: &str, spec: Value) {
    Api::<InferenceService>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": spec })),
        )
        .await
        .unwrap_or_else(|e| panic!("patching {ns}/{name}: {e}"));
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

/// What a second-by-second watch of a rollout saw.
#[derive(Debug, Default)]
struct Seen {
    /// The fewest ready pods at any sample.
    min_ready: Option<usize>,
    /// The most pods (not being deleted) at any sample.
    max_pods: usize,
    /// How long each pod was seen Pending (first to last sample).
    pending: BTreeMap<String, (Instant, Instant)>,
    /// The `RolloutCapacity` conditions seen, in order, without repeats.
    capacity: Vec<(String, String, String)>,
}

impl Seen {
    async fn sample(&mut self, client: &Client, ns: &str, service: &str) -> Vec<Pod> {
        let ps = pods(client, ns, &primary_selector(service)).await;
        let ready = ps.iter().filter(|p| is_ready(p)).count();
        self.min_ready = Some(self.min_ready.map_or(ready, |m| m.min(ready)));
        self.max_pods = self.max_pods.max(ps.len());
        let now = Instant::now();
        for p in &ps {
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            if phase == Some("Pending") || phase.is_none() {
                self.pending
                    .entry(p.name_any())
                    .and_modify(|(_, last)| *last = now)
                    .or_insert((now, now));
            }
        }
        if let Some(c) = condition(client, ns, service, "RolloutCapacity").await
            && self.capacity.last() != Some(&c)
        {
            self.capacity.push(c);
        }
        ps
    }

    fn longest_pending(&self) -> Duration {
        self.pending
            .values()
            .map(|(first, last)| last.duration_since(*first))
            .max()
            .unwrap_or_default()
    }
}

fn primary_selector(service: &str) -> String {
    format!("infergate.dev/service={service},infergate.dev/track=primary")
}

/// Sample every second until every primary pod of `service` runs `tag`
/// and is ready and `RolloutCapacity` is True, or `within` passes (then
/// panic with what was seen). `each` runs after every sample.
async fn watch_rollout(
    client: &Client,
    sched: &Scheduling,
    ns: &str,
    service: &str,
    replicas: usize,
    tag: &str,
    within: Duration,
    mut each: impl AsyncFnMut(&[Pod]),
) -> (Seen, Duration) {
    let want = format!("{ENGINE}:{tag}");
    let start = Instant::now();
    let mut seen = Seen::default();
    loop {
        sched.ensure_running();
        let ps = seen.sample(client, ns, service).await;
        each(&ps).await;
        let done = ps.len() == replicas
            && ps.iter().all(|p| image(p) == want && is_ready(p))
            && seen.capacity.last().is_some_and(|c| c.0 == "True");
        if done {
            return (seen, start.elapsed());
        }
        assert!(
            start.elapsed() < within,
            "the rollout of {ns}/{service} to {tag} did not complete within {within:?}: pods {:?}, seen {seen:?}; {}",
            ps.iter()
                .map(|p| (p.name_any(), image(p), is_ready(p)))
                .collect::<Vec<_>>(),
            sched.logs(10)
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// A plain Deployment of two 8-GPU pods with the default strategy, on a
/// full pool: its image change adds a pod no Node can hold, which stays
/// Unschedulable while the old pods go on running the old image.
async fn a_plain_deployment_stays_stuck(
    client: &Client,
    sched: &Scheduling,
    ns: &str,
    pool: &Pool,
) {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let d: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "plain"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "plain"}},
            "template": {
                "metadata": {"labels": {"app": "plain"}},
                "spec": {
                    "nodeSelector": {ACCELERATOR_LABEL: pool.label},
                    "tolerations": [{"key": GPU_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [{"name": "engine", "image": format!("{ENGINE}:v1"),
                        "resources": {"limits": {"nvidia.com/gpu": "8"}}}]
                }
            }
        }
    }))
    .expect("deployment json");
    deployments
        .create(&PostParams::default(), &d)
        .await
        .expect("creating the plain Deployment");
    wait_all_on(client, sched, ns, "app=plain", 2, "v1").await;
    deployments
        .patch(
            "plain",
            &PatchParams::default(),
            // As `kubectl set image` does: a strategic merge, by container name.
            &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [
                {"name": "engine", "image": format!("{ENGINE}:v2")}
            ]}}}})),
        )
        .await
        .expect("changing the plain Deployment's image");
    let stuck = eventually(
        "the plain Deployment's new pod Unschedulable",
        WAIT,
        async || {
            let ps = pods(client, ns, "app=plain").await;
            ps.into_iter()
                .find(|p| image(p).ends_with(":v2") && unschedulable(p))
                .map(|p| p.name_any())
        },
    )
    .await;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        sched.ensure_running();
        let ps = pods(client, ns, "app=plain").await;
        let new: Vec<_> = ps.iter().filter(|p| image(p).ends_with(":v2")).collect();
        assert!(
            new.len() == 1 && new[0].name_any() == stuck && unschedulable(new[0]),
            "the plain Deployment's new pod {stuck} stays Unschedulable: {:?}",
            ps.iter()
                .map(|p| (p.name_any(), image(p), pod_condition(p, "PodScheduled")))
                .collect::<Vec<_>>()
        );
        let old_ready = ps
            .iter()
            .filter(|p| image(p).ends_with(":v1") && is_ready(p))
            .count();
        assert_eq!(
            old_ready,
            2,
            "the old pods go on serving the old image: {:?}",
            ps.iter()
                .map(|p| (p.name_any(), image(p), p.status.as_ref().map(|s| (&s.phase, &s.conditions))))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    deployments
        .delete("plain", &DeleteParams::foreground())
        .await
        .expect("deleting the plain Deployment");
    eventually("the plain Deployment's pods gone", WAIT, async || {
        let left = Api::<Pod>::namespaced(client.clone(), ns)
            .list(&ListParams::default().labels("app=plain"))
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

/// Section 14's template change on a full pool: a plain Deployment stays
/// stuck for 60 s; infergate's service replaces in place (ready replicas
/// never below 1, no pod Pending over 15 s, done within 60 s), and a
/// restart after the first replacement adds no pod; with a third Node the
/// next change surges (never below 2 ready); with `Wait` the Deployment
/// keeps its old template until another service is deleted, then the
/// change completes within 30 s of the room appearing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_change_on_a_full_pool_replaces_in_place_surges_with_room_or_waits() {
    let (cp, client, sched, kubeconfig) = setup().await;
    let mut pool = Pool::new(&client, sched, "roll", 2).await;
    let ns = cp.fresh_namespace("full-pool").await;

    a_plain_deployment_stays_stuck(&client, sched, &ns, &pool).await;

    let mut leader = reconciler(&kubeconfig, "full-pool-first");
    create_service(&client, &ns, "chat", &pool, 2, "v1", json!({})).await;
    wait_all_on(&client, sched, &ns, &primary_selector("chat"), 2, "v1").await;

    // Replace (the default): one replica at a time, in place; infergate
    // stops after the first replacement and another starts.
    patch_spec(
        &client,
        &ns,
        "chat",
        json!({"engine": {"image": format!("{ENGINE}:v2")}}),
    )
    .await;
    let mut restarted = false;
    let (seen, took) = watch_rollout(
        &client,
        sched,
        &ns,
        "chat",
        2,
        "v2",
        Duration::from_secs(60),
        async |ps: &[Pod]| {
            let replaced = ps.iter().any(|p| image(p).ends_with(":v2") && is_ready(p));
            if replaced && !restarted {
                restarted = true;
                let old =
                    std::mem::replace(&mut leader, reconciler(&kubeconfig, "full-pool-second"));
                old.stop();
            }
        },
    )
    .await;
    assert!(restarted, "infergate was restarted mid-rollout");
    assert!(
        seen.min_ready.is_some_and(|m| m >= 1),
        "ready replicas never below 1: {seen:?}"
    );
    assert!(
        seen.max_pods <= 2,
        "no extra pod, before or after the restart: {seen:?}"
    );
    assert!(
        seen.longest_pending() <= Duration::from_secs(15),
        "no pod Pending over 15 s: {seen:?}"
    );
    let replacing = seen
        .capacity
        .iter()
        .find(|c| c.1 == "ReplacingInPlace")
        .unwrap_or_else(|| panic!("RolloutCapacity said it replaces in place: {seen:?}"));
    assert_eq!(replacing.0, "False");
    assert_eq!(
        replacing.2,
        format!(
            "needs 8 nvidia.com/gpu in {}, 0 free: replacing 1 of 2 replicas at a time",
            pool.class
        )
    );
    let done = seen.capacity.last().expect("a last RolloutCapacity");
    assert_eq!(
        (done.0.as_str(), done.1.as_str()),
        ("True", "RolledOut"),
        "{seen:?}"
    );
    eprintln!("replaced in place in {took:?}: {seen:?}");

    // A third Node: the next change surges, never below 2 ready.
    pool.add_node(&client, sched).await;
    patch_spec(
        &client,
        &ns,
        "chat",
        json!({"engine": {"image": format!("{ENGINE}:v3")}}),
    )
    .await;
    let (seen, _) = watch_rollout(
        &client,
        sched,
        &ns,
        "chat",
        2,
        "v3",
        Duration::from_secs(60),
        async |_: &[Pod]| {},
    )
    .await;
    assert_eq!(
        seen.min_ready,
        Some(2),
        "a surge keeps both replicas ready: {seen:?}"
    );
    assert!(
        seen.capacity.iter().all(|c| c.0 == "True"),
        "a change that fits never says otherwise: {seen:?}"
    );
    let d: Deployment = get(&client, &ns, "chat").await.expect("the Deployment");
    assert!(
        d.spec
            .as_ref()
            .and_then(|s| s.strategy.as_ref())
            .and_then(|s| s.rolling_update.as_ref())
            .and_then(|r| r.max_surge.clone())
            != Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(0)),
        "the surge rollout carries no in-place strategy: {:?}",
        d.spec.and_then(|s| s.strategy)
    );

    // Another service takes the free Node; with Wait the change waits on
    // the old template until that service goes.
    create_service(&client, &ns, "filler", &pool, 1, "v1", json!({})).await;
    wait_all_on(&client, sched, &ns, &primary_selector("filler"), 1, "v1").await;
    patch_spec(
        &client,
        &ns,
        "chat",
        json!({"engine": {"image": format!("{ENGINE}:v4")}, "rollout": {"onFullPool": "Wait"}}),
    )
    .await;
    eventually(
        "RolloutCapacity WaitingForCapacity",
        WAIT,
        async || match condition(&client, &ns, "chat", "RolloutCapacity").await {
            Some(c) if c.1 == "WaitingForCapacity" => Ok(c),
            other => Err(format!("{other:?}")),
        },
    )
    .await;
    let held = Instant::now();
    while held.elapsed() < Duration::from_secs(20) {
        let c = condition(&client, &ns, "chat", "RolloutCapacity")
            .await
            .expect("RolloutCapacity");
        assert_eq!(c.0, "False");
        assert_eq!(c.1, "WaitingForCapacity");
        assert_eq!(
            c.2,
            format!(
                "needs 8 nvidia.com/gpu in {}, 0 free: waiting for room (rollout.onFullPool: Wait)",
                pool.class
            )
        );
        let ps = pods(&client, &ns, &primary_selector("chat")).await;
        let images: BTreeSet<String> = ps.iter().map(image).collect();
        assert_eq!(
            images,
            BTreeSet::from([format!("{ENGINE}:v3")]),
            "only the old template runs"
        );
        let d: Deployment = get(&client, &ns, "chat").await.expect("the Deployment");
        let template = d.spec.as_ref().map(|s| image_of_template(&s.template));
        assert_eq!(
            template.as_deref(),
            Some(format!("{ENGINE}:v3").as_str()),
            "the Deployment keeps its old template"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    Api::<InferenceService>::namespaced(client.clone(), &ns)
        .delete("filler", &DeleteParams::default())
        .await
        .expect("deleting the other service");
    eventually("the other service's pod gone", WAIT, async || {
        let left = Api::<Pod>::namespaced(client.clone(), &ns)
            .list(&ListParams::default().labels("infergate.dev/service=filler"))
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
    let (seen, took) = watch_rollout(
        &client,
        sched,
        &ns,
        "chat",
        2,
        "v4",
        Duration::from_secs(30),
        async |_: &[Pod]| {},
    )
    .await;
    eprintln!("the waiting change completed {took:?} after the room appeared: {seen:?}");
    drop(leader);
}

fn image_of_template(t: &k8s_openapi::api::core::v1::PodTemplateSpec) -> String {
    t.spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

/// The backends the service's HTTPRoute names, with their weights.
async fn backends(client: &Client, ns: &str, name: &str) -> Vec<(String, Option<i32>)> {
    let Some(route) = get::<HTTPRoute>(client, ns, name).await else {
        return Vec::new();
    };
    route
        .spec
        .rules
        .iter()
        .flat_map(|r| r.backend_refs.iter())
        .map(|b| (b.name.clone(), b.weight))
        .collect()
}

/// Section 14's canary on a full pool with `Wait` (the default): no
/// canary pod is made, the route stays on the primary and `CanaryReady`
/// says why with the numbers; a Node added lets it start within 30 s, and
/// its weight is routed once it is ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_on_a_full_pool_waits_without_a_pending_pod_and_starts_when_a_node_joins() {
    let (cp, client, sched, kubeconfig) = setup().await;
    let mut pool = Pool::new(&client, sched, "canary", 2).await;
    let ns = cp.fresh_namespace("full-canary").await;
    let _leader = reconciler(&kubeconfig, "full-canary");
    create_service(
        &client,
        &ns,
        "chat",
        &pool,
        2,
        "v1",
        json!({"routing": {"gateway": {"name": "gw", "namespace": "gateways"}}}),
    )
    .await;
    wait_all_on(&client, sched, &ns, &primary_selector("chat"), 2, "v1").await;

    patch_spec(
        &client,
        &ns,
        "chat",
        json!({"canary": {"model": {"ref": "llama3-70b-ft"}, "weight": 20, "replicas": 1}}),
    )
    .await;
    let numbers = format!("needs 8 nvidia.com/gpu in {}, 0 free", pool.class);
    eventually(
        "CanaryReady CanaryCapacity",
        WAIT,
        async || match condition(&client, &ns, "chat", "CanaryReady").await {
            Some(c) if c.1 == "CanaryCapacity" => Ok(c),
            other => Err(format!("{other:?}")),
        },
    )
    .await;
    let held = Instant::now();
    while held.elapsed() < Duration::from_secs(20) {
        let c = condition(&client, &ns, "chat", "CanaryReady")
            .await
            .expect("CanaryReady");
        assert_eq!((c.0.as_str(), c.1.as_str()), ("False", "CanaryCapacity"));
        assert!(c.2.starts_with(&numbers), "{c:?}");
        assert!(c.2.contains("canary.onFullPool: Wait"), "{c:?}");
        let canary_pods = pods(
            &client,
            &ns,
            "infergate.dev/service=chat,infergate.dev/track=canary",
        )
        .await;
        assert!(
            canary_pods.is_empty(),
            "no canary pod is left Pending: {canary_pods:?}"
        );
        let routed = backends(&client, &ns, "chat").await;
        assert_eq!(
            routed,
            [("chat".to_owned(), Some(100))],
            "the route stays on the primary"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }

    pool.add_node(&client, sched).await;
    let joined = Instant::now();
    eventually(
        "the canary's pod running",
        Duration::from_secs(30),
        async || {
            sched.ensure_running();
            let ps = pods(
                &client,
                &ns,
                "infergate.dev/service=chat,infergate.dev/track=canary",
            )
            .await;
            let running = ps
                .iter()
                .any(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
            if running {
                Ok(())
            } else {
                Err(format!(
                    "{:?}",
                    ps.iter()
                        .map(|p| (
                            p.name_any(),
                            p.status.as_ref().and_then(|s| s.phase.clone())
                        ))
                        .collect::<Vec<_>>()
                ))
            }
        },
    )
    .await;
    eprintln!(
        "the canary started {:?} after the Node joined",
        joined.elapsed()
    );
    eventually("the canary's weight routed", WAIT, async || {
        let routed = backends(&client, &ns, "chat").await;
        if routed
            == [
                ("chat".to_owned(), Some(80)),
                ("chat-canary".to_owned(), Some(20)),
            ]
        {
            Ok(())
        } else {
            Err(format!("{routed:?}"))
        }
    })
    .await;
    let c = condition(&client, &ns, "chat", "CanaryReady")
        .await
        .expect("CanaryReady");
    assert_eq!((c.0.as_str(), c.1.as_str()), ("True", "Available"), "{c:?}");
}
