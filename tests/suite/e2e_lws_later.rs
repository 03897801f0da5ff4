//! End-to-end: LeaderWorkerSet installed after the services that need it
//! (API section 15, "Without LWS"). On a plane of its own that starts
//! without the LeaderWorkerSet CRD, a service of tensor 8 x pipeline 2 on
//! a class of 8-GPU nodes, allowed by a ClusterInferencePolicy's
//! `maxNodesPerReplica: 2`, is admitted with a warning naming the missing
//! API and waits with `Ready=False LeaderWorkerSetNotInstalled`; once the
//! CRDs and the real LeaderWorkerSet controller are installed its
//! LeaderWorkerSet appears within 30 s and the group runs on two kwok GPU
//! nodes placed by the real kube-scheduler. infergate's webhooks serve and
//! the reconciler runs as infergate's ServiceAccount with the RBAC of
//! `deploy/`.
//!
//! The module holds one test: installing the CRD is a change of the whole
//! plane, and every step before it needs the CRD absent.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::support::lws::leaderworkersets;
use crate::support::scheduler::{
    RUN_WAIT, Scheduling, accelerator_class, gpu_node, pod_condition, scheduling,
};
use crate::support::{self, ControlPlane, WAIT, control_plane, eventually, get};
use infergate::api::v1beta1::InferenceService;
use infergate::api::{AcceleratorClass, ClusterInferencePolicy};

const ENGINE: &str = "registry.example.com/vllm:0.11.1";

/// The LeaderWorkerSet CRD's name.
const LWS_CRD: &str = "leaderworkersets.leaderworkerset.x-k8s.io";

/// What the admission warning and the status say of the missing API.
const NOT_SERVED: &str = "does not serve the LeaderWorkerSet API";

/// The contract: a waiting service is picked up within this long of the
/// CRD appearing.
const PICKED_UP_WITHIN: Duration = Duration::from_secs(30);

struct Setup {
    cp: &'static ControlPlane,
    client: Client,
    sched: &'static Scheduling,
    kubeconfig: PathBuf,
    _webhook: support::Serve,
}

/// The plane without LeaderWorkerSet: infergate's CRDs, kube-scheduler and
/// kwok, infergate's webhooks served as its ServiceAccount and registered
/// as `webhooks/` registers them, and the policy that lets a replica span
/// two nodes.
async fn setup() -> Setup {
    support::init_tracing();
    let cp = control_plane().await;
    let client = cp.client().await;
    let sched = scheduling(cp).await;
    cp.install_crds().await;
    let kubeconfig = cp.deployed_service_account().await;
    assert!(
        Api::<CustomResourceDefinition>::all(client.clone())
            .get_opt(LWS_CRD)
            .await
            .expect("reading CRDs")
            .is_none(),
        "this plane must start without the LeaderWorkerSet CRD"
    );
    support::install_crypto_provider();
    let cert_dir = cp.dir().join("lws-later-certs");
    std::fs::create_dir_all(&cert_dir).expect("cert dir");
    let (ca, leaf) = support::pki("infergate-lws-later-ca");
    support::write_pair(&cert_dir, &leaf);
    let port = support::free_port().expect("port");
    let probe = support::free_port().expect("port");
    let args = support::serve_args(port, probe, &cert_dir, vec![]);
    let webhook = support::Serve::start(args, Some(kubeconfig.clone()));
    support::wait_readyz(probe, WAIT).await;
    support::register_webhooks(cp, port, &ca.cert)
        .await
        .unwrap_or_else(|e| panic!("registering the webhooks: {e:#}"));
    support::wait_webhooks_active(cp, "default").await;
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
    Setup {
        cp,
        client,
        sched,
        kubeconfig,
        _webhook: webhook,
    }
}

/// A pool of `nodes` Nodes of 8 GPUs with a label of its own and its
/// class, once admission knows the class and the policy (it admits a dry
/// run of a service of tensor 8 x pipeline 2 on it): the class name.
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
    let probe: InferenceService =
        serde_json::from_value(service_json("probe", &label, 1)).expect("service");
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

fn service_json(name: &str, class: &str, replicas: i32) -> serde_json::Value {
    json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": {
            "model": {"ref": "meta-llama/Llama-3.1-405B-Instruct-FP8"},
            "engine": {"image": ENGINE},
            "replicas": replicas,
            "accelerator": {"class": class},
            "parallelism": {"tensor": 8, "pipeline": 2},
        }
    })
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

/// The condition `type_` of service `ns/name`: status, reason, message.
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

/// Seconds from `from` to `to`, both API server timestamps (whole seconds).
fn seconds_between(
    from: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    to: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) -> i64 {
    to.0.as_second() - from.0.as_second()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_node_service_waits_for_leaderworkerset_and_runs_once_it_is_installed() {
    let s = setup().await;
    let class = pool(&s, "lws-later", 2).await;
    let ns = s.cp.fresh_namespace("lws-later").await;
    let _reconciler = support::short_lease_reconciler(&s.kubeconfig, "lws-later");
    let manifest = serde_json::to_string(&service_json("chat", &class, 1)).expect("json");

    // Admission learns from discovery, in the background, that the API is
    // not served; until its first answer it says nothing.
    eventually("admission to warn of the missing API", WAIT, async || {
        let out = s.cp.kubectl_stdin(
            &["create", "--dry-run=server", "-n", &ns, "-f", "-"],
            &manifest,
        );
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.success() && stderr.contains(NOT_SERVED))
            .then_some(())
            .ok_or(stderr)
    })
    .await;

    // 1. Without the CRD: admitted, with a warning naming the missing API.
    let out =
        s.cp.kubectl_stdin(&["create", "-n", &ns, "-f", "-"], &manifest);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "admitted: {stderr}");
    let warning = stderr
        .lines()
        .find(|l| l.starts_with("Warning: ") && l.contains(NOT_SERVED))
        .unwrap_or_else(|| panic!("a warning naming the missing API: {stderr}"));
    assert!(
        warning.contains("leaderworkerset.x-k8s.io/v1")
            && warning.contains("LeaderWorkerSetNotInstalled"),
        "{warning}"
    );

    // It waits: Ready=False and Reconciled=False, LeaderWorkerSetNotInstalled.
    let (_, _, message) = eventually(
        "chat Ready=False LeaderWorkerSetNotInstalled",
        WAIT,
        async || match condition(&s.client, &ns, "chat", "Ready").await {
            Some(c) if c.0 == "False" && c.1 == "LeaderWorkerSetNotInstalled" => Ok(c),
            other => Err(format!("{other:?}")),
        },
    )
    .await;
    assert!(
        message.contains("runs as a LeaderWorkerSet group")
            && message.contains("leaderworkersets.leaderworkerset.x-k8s.io/v1"),
        "{message}"
    );
    let reconciled = condition(&s.client, &ns, "chat", "Reconciled").await;
    assert!(
        matches!(&reconciled, Some((st, r, _)) if st == "False" && r == "LeaderWorkerSetNotInstalled"),
        "{reconciled:?}"
    );
    // Nothing runs in its stead: no Deployment, no pod.
    assert!(get::<Deployment>(&s.client, &ns, "chat").await.is_none());
    assert!(
        pods(&s.client, &ns, "infergate.dev/service=chat")
            .await
            .is_empty()
    );
    // The plugin's `why` says it.
    let out = s.cp.kubectl_infergate(&["why", "chat", "-n", &ns]);
    let why = String::from_utf8_lossy(&out.stdout);
    assert!(why.contains("LeaderWorkerSet is not installed"), "{why}");
    assert!(
        why.contains("kubectl get crd leaderworkersets.leaderworkerset.x-k8s.io"),
        "{why}"
    );

    // 2. Install LeaderWorkerSet: its CRDs, its controller and webhooks.
    let lws = s.cp.start_lws().await;
    let installed = Instant::now();
    let sets = leaderworkersets(&s.client, &ns);
    let set = eventually("LeaderWorkerSet chat-lws", WAIT, async || {
        lws.ensure_running();
        sets.get_opt("chat-lws")
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "not yet".to_owned())
    })
    .await;
    let after_start = installed.elapsed();
    // The CRD's creation and the LeaderWorkerSet's, by the API server's
    // clock (whole seconds): the contract's own measure.
    let crd = Api::<CustomResourceDefinition>::all(s.client.clone())
        .get(LWS_CRD)
        .await
        .expect("the LeaderWorkerSet CRD");
    let after_crd = seconds_between(
        crd.metadata
            .creation_timestamp
            .as_ref()
            .expect("CRD created"),
        set.metadata
            .creation_timestamp
            .as_ref()
            .expect("LeaderWorkerSet created"),
    );
    println!(
        "LeaderWorkerSet chat-lws appeared {:.1} s after start_lws returned, {after_crd} s after the CRD was created (API server clock)",
        after_start.as_secs_f64()
    );
    assert!(
        after_start <= PICKED_UP_WITHIN,
        "chat-lws appeared {after_start:?} after LeaderWorkerSet was installed"
    );
    assert!(
        after_crd <= i64::try_from(PICKED_UP_WITHIN.as_secs()).expect("secs") + 1,
        "chat-lws appeared {after_crd} s after the CRD was created"
    );
    assert_eq!(set.data["spec"]["replicas"], 1);
    assert_eq!(set.data["spec"]["leaderWorkerTemplate"]["size"], 2);

    // The group runs: two pods ready, on the pool's two nodes.
    let placed = eventually(
        "the two pods of chat ready on two nodes",
        RUN_WAIT,
        async || {
            s.sched.ensure_running();
            lws.ensure_running();
            let ps = pods(&s.client, &ns, "infergate.dev/service=chat").await;
            let ready = ps
                .iter()
                .filter(|p| pod_condition(p, "Ready").is_some_and(|(st, _, _)| st == "True"))
                .count();
            if ps.len() == 2 && ready == 2 {
                Ok(ps)
            } else {
                Err(format!(
                    "{} pods, {ready} ready; {}\nlws:\n{}",
                    ps.len(),
                    s.sched.logs(5),
                    lws.logs(5)
                ))
            }
        },
    )
    .await;
    let nodes: BTreeSet<String> = placed
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    let pool_nodes: BTreeSet<String> = (1..=2).map(|i| format!("{class}-{i}")).collect();
    assert_eq!(nodes, pool_nodes, "one pod on each node of the pool");
    for p in &placed {
        let set_label = p
            .labels()
            .get("leaderworkerset.sigs.k8s.io/name")
            .map(String::as_str);
        assert_eq!(set_label, Some("chat-lws"), "{}", p.name_any());
    }

    // Ready, one group; reconciled.
    let ready = eventually("chat Ready with 1 group", RUN_WAIT, async || {
        let svc: InferenceService = get(&s.client, &ns, "chat").await.ok_or("gone")?;
        let st = svc.status.ok_or("no status")?;
        let ready = st
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .ok_or("no Ready")?;
        if ready.status == "True" && st.ready_replicas == Some(1) {
            Ok(installed.elapsed())
        } else {
            Err(format!(
                "{} {}: {} ({:?})",
                ready.status, ready.reason, ready.message, st.ready_replicas
            ))
        }
    })
    .await;
    println!(
        "chat Ready=True with 1 ready replica {:.1} s after start_lws returned",
        ready.as_secs_f64()
    );
    let reconciled = condition(&s.client, &ns, "chat", "Reconciled").await;
    assert!(
        matches!(&reconciled, Some((st, _, _)) if st == "True"),
        "{reconciled:?}"
    );
    assert!(get::<Deployment>(&s.client, &ns, "chat").await.is_none());
    let out = s.cp.kubectl_infergate(&["why", "chat", "-n", &ns]);
    let why = String::from_utf8_lossy(&out.stdout);
    assert!(!why.contains("LeaderWorkerSet is not installed"), "{why}");
}
