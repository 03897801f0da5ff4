//! End-to-end: model-aware routing through Gateway API Inference Extension
//! InferencePools, against the real control plane with the published
//! HTTPRoute and InferencePool CRDs (from their Go modules), the reconciler
//! running as the ServiceAccount of `deploy/` (exactly its RBAC, which must
//! cover every right it grants an endpoint picker), and the extension's own
//! minimal endpoint picker (`cmd/lwepp`, built from the same module) reading
//! infergate's pool with the rights infergate's Role gives it.
//!
//! No kubelet and no gateway controller run here: the test plays the kubelet
//! (engine and picker pods Running, Ready, with addresses, so that a picker
//! pod a pool or Service selected would be listed as an endpoint) and writes
//! a gateway's report into a pool's status. On a real cluster the endpoint picker's own pods would
//! start from the Deployment infergate made, a gateway implementing the
//! extension would call the picker for every request and report on the pools,
//! and requests would reach the pod the picker chose.

use crate::support;
use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::support::{
    Reconciler, WAIT, eventually, get, merge_patch, spawn_logged, wait_condition, wait_exists,
    wait_gone,
};
use infergate::api::v1beta1::InferenceService;
use infergate::reconcile::children::endpoint_picker::ANNOTATION_CONFIG_HASH as CONFIG_HASH;
use infergate::reconcile::children::httproute::HTTPRoute;
use infergate::reconcile::children::inferencepool::InferencePool;

/// An optional CRD is picked up within 30 s of being installed.
const APPEAR: Duration = Duration::from_secs(30);

/// `(kind, name, weight)` of each backendRef of the route `chat`.
async fn backends(client: &Client, ns: &str) -> Vec<(String, String, i32)> {
    get::<HTTPRoute>(client, ns, "chat")
        .await
        .map(|r| {
            r.spec
                .rules
                .iter()
                .flat_map(|rule| rule.backend_refs.iter())
                .map(|b| {
                    (
                        b.kind.clone().unwrap_or_default(),
                        b.name.clone(),
                        b.weight.unwrap_or(1),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

async fn wait_backends(client: &Client, ns: &str, want: &[(&str, &str, i32)]) {
    let want: Vec<(String, String, i32)> = want
        .iter()
        .map(|(k, n, w)| ((*k).to_owned(), (*n).to_owned(), *w))
        .collect();
    eventually(&format!("route backends {want:?}"), WAIT, async || {
        let got = backends(client, ns).await;
        (got == want).then_some(()).ok_or(format!("{got:?}"))
    })
    .await;
}

/// Wait until the RoutingReady condition of `chat` is `status` for
/// `reason`; its message.
async fn routing_ready(client: &Client, ns: &str, status: &str, reason: &str) -> String {
    let s = wait_condition(client, ns, "chat", "RoutingReady", status, reason, WAIT).await;
    support::condition(&s, "RoutingReady").unwrap().message
}

/// Play the kubelet: every live pod of the track Running and Ready, with an
/// address (the endpoint picker only lists pods that have one).
async fn pods_up(client: &Client, ns: &str, track: &str, want: usize) -> Vec<String> {
    let subnet = if track == "primary" { 1 } else { 2 };
    let selector = format!("infergate.dev/service=chat,infergate.dev/track={track}");
    pods_ready(client, ns, &selector, subnet, want).await
}

/// Play the kubelet for the endpoint picker of the pool `pool`: its pods
/// Running and Ready, with addresses (in 10.3.0.0/24), so that a pool or a
/// Service selecting them would list them as endpoints.
async fn picker_pods_up(client: &Client, ns: &str, pool: &str, want: usize) -> Vec<Pod> {
    let selector = format!("infergate.dev/component=endpoint-picker,infergate.dev/pool={pool}");
    let names = pods_ready(client, ns, &selector, 3, want).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut out = Vec::new();
    for name in names {
        out.push(pods.get(&name).await.expect("picker pod"));
    }
    out
}

/// Every live pod `selector` matches Running and Ready with an address in
/// `10.<subnet>.0.0/24`, once there are at least `want`; their names.
async fn pods_ready(
    client: &Client,
    ns: &str,
    selector: &str,
    subnet: u8,
    want: usize,
) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    eventually(&format!("{want} pods {selector} up"), WAIT, async || {
        let list = pods
            .list(&ListParams::default().labels(selector))
            .await
            .map_err(|e| e.to_string())?;
        let live: Vec<Pod> = list
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        if live.len() < want {
            return Err(format!("{} pods", live.len()));
        }
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let mut names = Vec::new();
        for (i, p) in live.iter().enumerate() {
            let ip = format!("10.{subnet}.0.{}", i + 10);
            pods.patch_status(
                &p.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {
                    "phase": "Running",
                    "podIP": ip, "podIPs": [{"ip": ip}],
                    "conditions": [
                        {"type": "Ready", "status": "True", "lastTransitionTime": now},
                        {"type": "ContainersReady", "status": "True", "lastTransitionTime": now}
                    ]
                }})),
            )
            .await
            .map_err(|e| e.to_string())?;
            names.push(p.name_any());
        }
        Ok(names)
    })
    .await
}

/// Whether `selector` (matchLabels) selects a pod labelled `labels`.
fn selects(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// No InferencePool and no Service but the picker's own selects any of
/// the picker's `pods` (each Ready, with an address): the pools' and
/// Services' selectors as the API server holds them, judged against the
/// pods' labels as stored.
async fn picker_pods_are_no_endpoints(client: &Client, ns: &str, pods: &[Pod]) {
    let pools = Api::<InferencePool>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .expect("pools");
    let services = Api::<Service>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .expect("services");
    assert!(!pools.items.is_empty() && !services.items.is_empty());
    for pod in pods {
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        let ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone());
        assert!(ip.is_some(), "{} has an address", pod.name_any());
        for pool in &pools.items {
            assert!(
                !selects(&pool.spec.selector.match_labels, &labels),
                "InferencePool {} selects the picker's pod {} ({ip:?}, labels {labels:?})",
                pool.name_any(),
                pod.name_any()
            );
        }
        for svc in &services.items {
            let selector = svc
                .spec
                .as_ref()
                .and_then(|s| s.selector.clone())
                .unwrap_or_default();
            if svc.name_any().ends_with("-epp") {
                // The picker's own Service, which the gateway calls.
                assert!(selects(&selector, &labels), "{}", svc.name_any());
                continue;
            }
            assert!(
                !selects(&selector, &labels),
                "Service {} selects the picker's pod {} ({ip:?}, labels {labels:?})",
                svc.name_any(),
                pod.name_any()
            );
        }
    }
}

/// The picker Deployment's configuration digest on its pod template.
async fn config_hash(client: &Client, ns: &str, name: &str) -> Option<String> {
    get::<Deployment>(client, ns, name)
        .await?
        .spec?
        .template
        .metadata?
        .annotations?
        .remove(CONFIG_HASH)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_route_through_inference_pools_with_their_own_endpoint_pickers() {
    let (cp, client, sa_kubeconfig) = support::reconciler_setup(&[support::httproute_crd()]).await;
    let ns = cp.fresh_namespace("pools").await;
    let _reconciler = Reconciler::start(sa_kubeconfig, support::reconcile_config("pools-e2e"));

    let services: Api<InferenceService> = Api::namespaced(client.clone(), &ns);
    let svc: InferenceService = serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
        "metadata": {"name": "chat", "namespace": ns},
        "spec": {
            "model": {"ref": "llama3-8b"},
            "engine": {"image": "registry.example.com/vllm:0.9"},
            "replicas": 2,
            "routing": {
                "gateway": {"name": "inference-gw", "namespace": "gateways"},
                "backendKind": "InferencePool",
                "endpointPicker": {"image": "registry.example.com/epp:v1",
                                   "failureMode": "FailOpen",
                                   "config": "plugins: []\n"},
            },
        },
    }))
    .expect("service");
    services
        .create(&PostParams::default(), &svc)
        .await
        .expect("create service");

    // Without the InferencePool CRD: the workload, no route to Services
    // (never a silent fallback), and RoutingReady names the CRD.
    let message = routing_ready(&client, &ns, "False", "InferencePoolNotInstalled").await;
    assert!(
        message.contains("inferencepools.inference.networking.k8s.io"),
        "{message}"
    );
    wait_exists::<Deployment>(&client, &ns, "chat").await;
    assert!(get::<HTTPRoute>(&client, &ns, "chat").await.is_none());

    // The published CRD arrives: the pool, its endpoint picker and the route
    // to the pool appear without a restart.
    cp.apply_crds(support::inferencepool_crd(), true);
    let pools: Api<InferencePool> = Api::namespaced(client.clone(), &ns);
    let pool = eventually("InferencePool chat", APPEAR, async || {
        pools
            .get_opt("chat")
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "not yet".to_owned())
    })
    .await;
    assert_eq!(pool.spec.target_ports[0].number, 8000);
    assert_eq!(
        pool.spec.selector.match_labels,
        [
            ("infergate.dev/service".to_owned(), "chat".to_owned()),
            ("infergate.dev/track".to_owned(), "primary".to_owned())
        ]
        .into()
    );
    let epp_ref = pool
        .spec
        .endpoint_picker_ref
        .clone()
        .expect("endpointPickerRef");
    assert_eq!(
        (epp_ref.name.as_str(), epp_ref.port.number),
        ("chat-epp", 9002)
    );
    wait_exists::<ServiceAccount>(&client, &ns, "chat-epp").await;
    wait_exists::<Role>(&client, &ns, "chat-epp").await;
    wait_exists::<RoleBinding>(&client, &ns, "chat-epp").await;
    wait_exists::<ConfigMap>(&client, &ns, "chat-epp").await;
    wait_exists::<Deployment>(&client, &ns, "chat-epp").await;
    wait_exists::<Service>(&client, &ns, "chat-epp").await;
    wait_backends(&client, &ns, &[("InferencePool", "chat", 100)]).await;
    let message = routing_ready(&client, &ns, "True", "RouteApplied").await;
    assert!(
        message.contains("no gateway controller has reported"),
        "{message}"
    );

    // The picker's container is bounded (the built-in requests and memory
    // limit) and its pod template carries the digest of its configuration.
    let epp = get::<Deployment>(&client, &ns, "chat-epp")
        .await
        .expect("chat-epp");
    let pod_spec = epp.spec.clone().and_then(|s| s.template.spec).expect("pod");
    let bounds = pod_spec.containers[0].resources.clone().expect("resources");
    let figures =
        |l: Option<BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>| {
            l.unwrap_or_default()
                .into_iter()
                .map(|(k, q)| format!("{k}={}", q.0))
                .collect::<Vec<_>>()
        };
    assert_eq!(figures(bounds.requests), ["cpu=100m", "memory=256Mi"]);
    assert_eq!(figures(bounds.limits), ["memory=1Gi"]);
    let first_hash = config_hash(&client, &ns, "chat-epp")
        .await
        .expect("config hash");

    // The picker's own pods, Running and Ready with addresses, are no
    // pool's and no engine Service's endpoints.
    let picker_pods = picker_pods_up(&client, &ns, "chat", 1).await;
    picker_pods_are_no_endpoints(&client, &ns, &picker_pods).await;

    // The extension's endpoint picker, with the rights infergate gave
    // chat-epp, reads the pool and lists exactly the primary's engine pods
    // (never the picker's own pods, ready and addressed as they are).
    let engine_pods = pods_up(&client, &ns, "primary", 2).await;
    let epp_kubeconfig =
        support::service_account_kubeconfig(cp, &ns, "chat-epp").expect("chat-epp token");
    let lwepp = support::lwepp_binary();
    let log = cp.dir().join(format!("lwepp-{ns}.log"));
    let mut cmd = Command::new(&lwepp);
    cmd.args([
        "--pool-name=chat",
        &format!("--pool-namespace={ns}"),
        "--pool-group=inference.networking.k8s.io",
        &format!("--grpc-port={}", support::free_port().expect("port")),
        &format!("--grpc-health-port={}", support::free_port().expect("port")),
        &format!("--metrics-port={}", support::free_port().expect("port")),
        "--zap-log-level=5",
    ])
    .env("KUBECONFIG", &epp_kubeconfig);
    let mut picker = spawn_logged(cmd, &log).expect("starting lwepp");
    eventually(
        "the endpoint picker to list the pool's pods",
        WAIT,
        async || {
            let text = std::fs::read_to_string(&log).map_err(|e| e.to_string())?;
            let added: Vec<&String> = engine_pods
                .iter()
                .filter(|p| {
                    text.lines()
                        .any(|l| l.contains("Pod added") && l.contains(p.as_str()))
                })
                .collect();
            (added.len() == engine_pods.len())
                .then_some(())
                .ok_or_else(|| {
                    format!(
                        "{} of {engine_pods:?} added; log tail: {}",
                        added.len(),
                        support::tail(&log, 5)
                    )
                })
        },
    )
    .await;
    let text = std::fs::read_to_string(&log).expect("lwepp log");
    for pod in &picker_pods {
        let name = pod.name_any();
        assert!(
            !text
                .lines()
                .any(|l| l.contains("Pod added") && l.contains(name.as_str())),
            "the picker's own pod {name} is an endpoint of pool chat: {}",
            support::tail(&log, 20)
        );
    }
    assert!(
        !text.contains("forbidden"),
        "the picker's Role covers what it reads: {}",
        support::tail(&log, 20)
    );
    let _ = picker.kill();
    let _ = picker.wait();

    // A new configuration: the ConfigMap holds it, the pod template's
    // digest changes, and the Deployment rolls the picker's pods (a pod
    // with the new digest), which read it at start.
    merge_patch(
        &services,
        "chat",
        json!({"spec": {"routing": {"endpointPicker": {"config": "plugins: [queue-scorer]\n"}}}}),
        "new picker config",
    )
    .await;
    let new_hash = eventually(
        "a new config digest on chat-epp",
        WAIT,
        async || match config_hash(&client, &ns, "chat-epp").await {
            Some(h) if h != first_hash => Ok(h),
            other => Err(format!("{other:?}")),
        },
    )
    .await;
    let cm = get::<ConfigMap>(&client, &ns, "chat-epp")
        .await
        .expect("chat-epp ConfigMap");
    assert_eq!(
        cm.data
            .unwrap_or_default()
            .get("config.yaml")
            .map(String::as_str),
        Some("plugins: [queue-scorer]\n")
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    eventually(
        "a picker pod with the new config digest",
        WAIT,
        async || {
            let list = pods
                .list(
                    &ListParams::default()
                        .labels("infergate.dev/component=endpoint-picker,infergate.dev/pool=chat"),
                )
                .await
                .map_err(|e| e.to_string())?;
            let hashes: Vec<Option<String>> = list
                .items
                .iter()
                .map(|p| p.annotations().get(CONFIG_HASH).cloned())
                .collect();
            hashes
                .contains(&Some(new_hash.clone()))
                .then_some(())
                .ok_or(format!("{hashes:?}"))
        },
    )
    .await;

    // A canary gets its own pool and picker; the route names its pool only
    // once a canary pod is ready.
    merge_patch(
        &services,
        "chat",
        json!({"spec": {"canary": {"model": {"ref": "llama3-8b-v2"}, "weight": 20}}}),
        "add canary",
    )
    .await;
    wait_exists::<InferencePool>(&client, &ns, "chat-canary").await;
    wait_exists::<Deployment>(&client, &ns, "chat-canary-epp").await;
    assert_eq!(
        backends(&client, &ns).await,
        [("InferencePool".to_owned(), "chat".to_owned(), 100)]
    );
    pods_up(&client, &ns, "canary", 1).await;
    wait_backends(
        &client,
        &ns,
        &[
            ("InferencePool", "chat", 80),
            ("InferencePool", "chat-canary", 20),
        ],
    )
    .await;

    // A gateway's report on a pool reaches RoutingReady.
    pools
        .patch_status(
            "chat-canary",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"parents": [{
                "parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway",
                              "name": "inference-gw", "namespace": "gateways"},
                "conditions": [
                    {"type": "Accepted", "status": "True", "reason": "Accepted", "message": "",
                     "lastTransitionTime": "2026-11-25T00:00:00Z"},
                    {"type": "ResolvedRefs", "status": "False", "reason": "InvalidExtensionRef",
                     "message": "Service chat-canary-epp has no endpoints",
                     "lastTransitionTime": "2026-11-25T00:00:00Z"}
                ]
            }]}})),
        )
        .await
        .expect("pool status");
    let message = routing_ready(&client, &ns, "False", "InferencePoolNotAccepted").await;
    assert!(message.contains("InvalidExtensionRef"), "{message}");

    // Removing the canary: the route lets go of its pool first, then the
    // pool and its picker go.
    merge_patch(
        &services,
        "chat",
        json!({"spec": {"canary": null}}),
        "remove canary",
    )
    .await;
    wait_backends(&client, &ns, &[("InferencePool", "chat", 100)]).await;
    wait_gone::<InferencePool>(&client, &ns, "chat-canary", WAIT).await;
    wait_gone::<Deployment>(&client, &ns, "chat-canary-epp", WAIT).await;
    wait_gone::<Role>(&client, &ns, "chat-canary-epp", WAIT).await;

    // Back to Services: the route points at the Services, and every pool
    // and picker object goes.
    merge_patch(
        &services,
        "chat",
        json!({"spec": {"routing": {"backendKind": "Service"}}}),
        "switch back",
    )
    .await;
    wait_backends(&client, &ns, &[("Service", "chat", 100)]).await;
    wait_gone::<InferencePool>(&client, &ns, "chat", WAIT).await;
    for gone in ["chat-epp"] {
        wait_gone::<Deployment>(&client, &ns, gone, WAIT).await;
        wait_gone::<Service>(&client, &ns, gone, WAIT).await;
        wait_gone::<ServiceAccount>(&client, &ns, gone, WAIT).await;
        wait_gone::<Role>(&client, &ns, gone, WAIT).await;
        wait_gone::<RoleBinding>(&client, &ns, gone, WAIT).await;
        wait_gone::<ConfigMap>(&client, &ns, gone, WAIT).await;
    }
    routing_ready(&client, &ns, "True", "RouteApplied").await;
}
