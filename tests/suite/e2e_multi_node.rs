//! End-to-end: models larger than a node (API section 15). A service of
//! tensor 8 x pipeline 2 on a class of 8-GPU nodes, admitted under a
//! ClusterInferencePolicy's `maxNodesPerReplica: 2`, runs each replica as
//! a LeaderWorkerSet group of two pods, with the real LeaderWorkerSet
//! controller (its webhooks inject the group's variables and labels),
//! kube-controller-manager's StatefulSet controller making the pods, the
//! real kube-scheduler placing them and kwok running them on GPU Nodes.
//! infergate's webhooks serve as in a cluster; the reconciler runs as
//! infergate's ServiceAccount with the RBAC of `deploy/`.
//!
//! Scaling, canaries, full-pool rollouts and budgets of groups are in
//! [`groups`], a change of shape in [`shape`].

#[path = "e2e_multi_node/groups.rs"]
mod groups;
#[path = "e2e_multi_node/shape.rs"]
mod shape;

use std::collections::BTreeSet;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::support::lws::leaderworkersets;
use crate::support::scheduler::{
    RUN_WAIT, Scheduling, accelerator_class, gpu_node, pod_condition, scheduling,
};
use crate::support::{self, ControlPlane, WAIT, control_plane, eventually, get};
use infergate::api::v1beta1::InferenceService;
use infergate::api::{AcceleratorClass, ClusterInferencePolicy};

const ENGINE: &str = "registry.example.com/vllm:0.11.1";

/// infergate's webhooks, served as infergate's ServiceAccount and
/// registered as `webhooks/` registers them.
static WEBHOOK: tokio::sync::OnceCell<support::Serve> = tokio::sync::OnceCell::const_new();

/// One test at a time: each runs a reconciler, and one Lease elects one.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct Setup {
    cp: &'static ControlPlane,
    client: Client,
    sched: &'static Scheduling,
    kubeconfig: PathBuf,
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

async fn setup() -> Setup {
    support::init_tracing();
    let turn = ONE_AT_A_TIME.lock().await;
    let cp = control_plane().await;
    let client = cp.client().await;
    let sched = scheduling(cp).await;
    cp.install_crds().await;
    cp.start_lws().await;
    let kubeconfig = cp.deployed_service_account().await;
    WEBHOOK
        .get_or_init(|| async {
            support::install_crypto_provider();
            let cert_dir = cp.dir().join("multi-node-certs");
            std::fs::create_dir_all(&cert_dir).expect("cert dir");
            let (ca, leaf) = support::pki("infergate-multi-node-ca");
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
            // The platform lets a replica span two nodes.
            let policy: ClusterInferencePolicy = serde_json::from_value(json!({
                "apiVersion": "infergate.dev/v1beta1", "kind": "ClusterInferencePolicy",
                "metadata": {"name": "multi-node"},
                "spec": {"limits": {"maxNodesPerReplica": 2}}
            }))
            .expect("policy");
            Api::<ClusterInferencePolicy>::all(client.clone())
                .create(&PostParams::default(), &policy)
                .await
                .expect("creating the policy");
            serve
        })
        .await;
    Setup {
        cp,
        client,
        sched,
        kubeconfig,
        _turn: turn,
    }
}

/// A pool of `nodes` Nodes of 8 GPUs with a label of its own, its class,
/// and a service of tensor 8 x pipeline 2 admitted on it (admission knows
/// classes and policies from its watches): the class name.
async fn pool(s: &Setup, name: &str, nodes: usize) -> String {
    let label = format!("{name}-{}", std::process::id());
    Api::<AcceleratorClass>::all(s.client.clone())
        .create(
            &PostParams::default(),
            &accelerator_class(&label, &label, 8),
        )
        .await
        .expect("creating the class");
    for i in 1..=nodes {
        s.sched
            .create_node(&s.client, gpu_node(&format!("{label}-{i}"), &label, "8"))
            .await;
    }
    let probe = service_json("probe", &label, 1);
    let services: Api<InferenceService> = Api::namespaced(s.client.clone(), "default");
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    eventually(
        "admission to know the class and the policy",
        WAIT,
        async || services.create(&dry, &probe).await.map(|_| ()),
    )
    .await;
    label
}

fn service_json(name: &str, class: &str, replicas: i32) -> InferenceService {
    serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": {
            "model": {"ref": "meta-llama/Llama-3.1-405B-Instruct-FP8"},
            "engine": {"image": ENGINE},
            "replicas": replicas,
            "accelerator": {"class": class},
            "parallelism": {"tensor": 8, "pipeline": 2},
        }
    }))
    .expect("service")
}

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

fn env_of(p: &Pod, name: &str) -> Option<String> {
    p.spec
        .as_ref()?
        .containers
        .first()?
        .env
        .as_ref()?
        .iter()
        .find(|e| e.name == name)?
        .value
        .clone()
}

fn args_of(p: &Pod) -> Vec<String> {
    p.spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.args.clone())
        .unwrap_or_default()
}

fn label<'a>(p: &'a Pod, key: &str) -> Option<&'a str> {
    p.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// Whether every label of `selector` is on `p`.
fn selects(selector: &std::collections::BTreeMap<String, String>, p: &Pod) -> bool {
    selector
        .iter()
        .all(|(k, v)| label(p, k) == Some(v.as_str()))
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_node_replica_runs_as_a_leaderworkerset_group_on_four_nodes() {
    let s = setup().await;
    let class = pool(&s, "lws-four", 4).await;
    let ns = s.cp.fresh_namespace("multi-node").await;
    let _reconciler = support::short_lease_reconciler(&s.kubeconfig, "multi-node-four");
    Api::<InferenceService>::namespaced(s.client.clone(), &ns)
        .create(&PostParams::default(), &service_json("chat", &class, 2))
        .await
        .expect("admitted under maxNodesPerReplica 2");

    // LeaderWorkerSet chat-lws: 2 groups of 2.
    let lws_api = leaderworkersets(&s.client, &ns);
    let lws = eventually("LeaderWorkerSet chat-lws", WAIT, async || {
        lws_api
            .get_opt("chat-lws")
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "not yet".to_owned())
    })
    .await;
    assert_eq!(lws.data["spec"]["replicas"], 2);
    assert_eq!(lws.data["spec"]["leaderWorkerTemplate"]["size"], 2);
    assert!(
        get::<k8s_openapi::api::apps::v1::Deployment>(&s.client, &ns, "chat")
            .await
            .is_none()
    );

    // Four pods on four nodes, each with the engine's flags and the
    // variables LWS injected.
    let all = "infergate.dev/service=chat";
    let placed = eventually(
        "four pods of chat ready on four nodes",
        RUN_WAIT,
        async || {
            s.sched.ensure_running();
            let ps = pods(&s.client, &ns, all).await;
            let ready = ps
                .iter()
                .filter(|p| pod_condition(p, "Ready").is_some_and(|(st, _, _)| st == "True"))
                .count();
            if ps.len() == 4 && ready == 4 {
                Ok(ps)
            } else {
                Err(format!(
                    "{} pods, {ready} ready; {}",
                    ps.len(),
                    s.sched.logs(5)
                ))
            }
        },
    )
    .await;
    let nodes: BTreeSet<String> = placed
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    assert_eq!(nodes.len(), 4, "one node each: {nodes:?}");
    let headless: Service = get(&s.client, &ns, "chat-lws")
        .await
        .expect("LWS's headless Service");
    let headless_selector = headless.spec.and_then(|s| s.selector).unwrap_or_default();
    let mut leaders = Vec::new();
    for p in &placed {
        let args = args_of(p).join(" ");
        let group = label(p, "leaderworkerset.sigs.k8s.io/group-index").expect("group index");
        let index = label(p, "leaderworkerset.sigs.k8s.io/worker-index").expect("worker index");
        assert!(
            args.contains("--tensor-parallel-size 8 --pipeline-parallel-size 2 --nnodes 2 --master-addr $(LWS_LEADER_ADDRESS) --master-port 29500 --node-rank"),
            "{}: {args}",
            p.name_any()
        );
        let address = env_of(p, "LWS_LEADER_ADDRESS").expect("LWS_LEADER_ADDRESS");
        assert_eq!(
            address,
            format!("chat-lws-{group}.chat-lws.{ns}"),
            "{}",
            p.name_any()
        );
        assert_eq!(env_of(p, "LWS_GROUP_SIZE").as_deref(), Some("2"));
        assert_eq!(env_of(p, "LWS_WORKER_INDEX").as_deref(), Some(index));
        if index == "0" {
            assert!(args.ends_with("--node-rank 0"), "{args}");
            assert_eq!(label(p, "infergate.dev/track"), Some("primary"));
            leaders.push(p.clone());
        } else {
            assert!(
                args.ends_with("--node-rank $(LWS_WORKER_INDEX) --headless"),
                "{args}"
            );
            assert_eq!(label(p, "infergate.dev/track"), None);
            assert_eq!(label(p, "infergate.dev/worker-of"), Some("primary"));
        }
    }
    assert_eq!(leaders.len(), 2);
    // The leader each pod is pointed at resolves through LWS's own
    // headless Service: `<lws>-<group>` is a leader pod it selects.
    for leader in &leaders {
        assert!(selects(&headless_selector, leader), "{headless_selector:?}");
        let group = label(leader, "leaderworkerset.sigs.k8s.io/group-index").unwrap_or_default();
        assert_eq!(leader.name_any(), format!("chat-lws-{group}"));
    }
    // Service chat selects the two leaders and no worker.
    let svc: Service = get(&s.client, &ns, "chat").await.expect("Service chat");
    let selector = svc.spec.and_then(|s| s.selector).unwrap_or_default();
    let selected: BTreeSet<String> = placed
        .iter()
        .filter(|p| selects(&selector, p))
        .map(ResourceExt::name_any)
        .collect();
    let leader_names: BTreeSet<String> = leaders.iter().map(ResourceExt::name_any).collect();
    assert_eq!(selected, leader_names);

    // Ready, two groups.
    eventually("chat Ready with 2 groups", WAIT, async || {
        let svc: InferenceService = get(&s.client, &ns, "chat").await.ok_or("gone")?;
        let st = svc.status.ok_or("no status")?;
        let ready = st
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .ok_or("no Ready")?;
        if ready.status == "True" && st.ready_replicas == Some(2) {
            Ok(())
        } else {
            Err(format!(
                "{} {}: {} ({:?})",
                ready.status, ready.reason, ready.message, st.ready_replicas
            ))
        }
    })
    .await;

    // Deleting the service takes the LeaderWorkerSet, and through the
    // garbage collector its StatefulSets and pods.
    Api::<InferenceService>::namespaced(s.client.clone(), &ns)
        .delete("chat", &DeleteParams::foreground())
        .await
        .expect("deleting");
    eventually("the group's pods gone", WAIT, async || {
        let left = Api::<Pod>::namespaced(s.client.clone(), &ns)
            .list(&ListParams::default().labels("leaderworkerset.sigs.k8s.io/name=chat-lws"))
            .await
            .map_err(|e| e.to_string())?
            .items
            .len();
        let lws = lws_api
            .get_opt("chat-lws")
            .await
            .map_err(|e| e.to_string())?;
        if left == 0 && lws.is_none() {
            Ok(())
        } else {
            Err(format!(
                "{left} pods left, LeaderWorkerSet {}",
                lws.is_some()
            ))
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_that_cannot_be_placed_names_its_group_pod_and_the_schedulers_words() {
    let s = setup().await;
    let class = pool(&s, "lws-three", 3).await;
    let ns = s.cp.fresh_namespace("multi-node").await;
    let _reconciler = support::short_lease_reconciler(&s.kubeconfig, "multi-node-three");
    Api::<InferenceService>::namespaced(s.client.clone(), &ns)
        .create(&PostParams::default(), &service_json("chat", &class, 2))
        .await
        .expect("admitted");
    let (status, reason, message) = eventually(
        "Ready=False Unschedulable naming the group",
        RUN_WAIT,
        async || {
            s.sched.ensure_running();
            match condition(&s.client, &ns, "chat", "Ready").await {
                Some(c) if c.1 == "Unschedulable" && c.2.contains("group 1, pod chat-lws-1") => {
                    Ok(c)
                }
                other => Err(format!("{other:?}; {}", s.sched.logs(3))),
            }
        },
    )
    .await;
    assert_eq!(status, "False");
    assert_eq!(reason, "Unschedulable");
    assert!(message.contains("nodes are available"), "{message}");
    // The plugin's `why` says it.
    let out = s.cp.kubectl_infergate(&["why", "chat", "-n", &ns]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("group 1, pod chat-lws-1"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_denies_shapes_past_the_limit_and_a_dry_run_shows_the_defaults() {
    let s = setup().await;
    let class = pool(&s, "lws-admit", 1).await;
    let ns = s.cp.fresh_namespace("multi-node").await;
    // A dry run of the admitted shape shows the defaults and warns that
    // one node cannot hold a group.
    let out = s.cp.kubectl_stdin(
        &[
            "create",
            "--dry-run=server",
            "-o",
            "json",
            "-n",
            &ns,
            "-f",
            "-",
        ],
        &serde_json::to_string(&service_json("chat", &class, 1)).expect("json"),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let defaulted: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(defaulted["spec"]["accelerator"]["type"], "nvidia");
    assert!(
        defaulted["spec"]["engine"]["shmSize"].is_string(),
        "{defaulted}"
    );
    let warned = String::from_utf8_lossy(&out.stderr);
    assert!(
        warned.contains(&format!(
            "a replica needs 2 nodes of AcceleratorClass {class}; 1 exists"
        )),
        "{warned}"
    );
    for (tensor, pipeline, want) in [
        (
            16,
            1,
            "spec.parallelism.tensor: Invalid value: 16: must be at most the 8 devices per node",
        ),
        (
            8,
            3,
            "tensor 8 x pipeline 3 devices per replica span 3 nodes",
        ),
    ] {
        let mut svc = service_json("chat", &class, 1);
        svc.spec.parallelism =
            serde_json::from_value(json!({"tensor": tensor, "pipeline": pipeline})).ok();
        let out = s.cp.kubectl_stdin(
            &["create", "--dry-run=server", "-n", &ns, "-f", "-"],
            &serde_json::to_string(&svc).expect("json"),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(want), "{err}");
    }
}
