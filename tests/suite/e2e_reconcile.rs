//! End-to-end: the reconciler against a real kube-apiserver, etcd and
//! kube-controller-manager (garbage collector, deployment and replicaset
//! controllers).
//!
//! Two reconcilers run in this process, each on its own runtime (as two
//! infergate replicas would), competing for the Lease; the tests see them
//! the way a user does: children, owner references, status, events. No
//! kubelet runs, so tests play its part by marking pods Ready through the
//! pods/status subresource.

use crate::support;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::support::{
    ControlPlane, Reconciler, SYSTEM_NAMESPACE, WAIT, condition, control_plane, eventually, get,
    mark_pods_ready, wait_condition, wait_exists, wait_gone,
};
use infergate::api::v1beta1::InferenceService;
use infergate::reconcile::children::httproute::HTTPRoute;
use infergate::reconcile::{Config, LeaseTiming};

const ENGINE: &str = "registry.example.com/vllm:0.9";

// ---------------------------------------------------------------- reconcilers

static INSTANCES: OnceLock<Mutex<Vec<Reconciler>>> = OnceLock::new();
static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

fn next_identity() -> String {
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    format!("reconciler-{n}")
}

/// One reconciler "replica" with a short lease (failover within seconds).
fn start_reconciler(kubeconfig: PathBuf) -> Reconciler {
    let config = Config {
        lease: LeaseTiming {
            duration_seconds: 6,
            grace_seconds: 2,
        },
        ..support::reconcile_config(&next_identity())
    };
    Reconciler::start(kubeconfig, config)
}

/// The control plane with CRDs and two reconcilers running.
async fn setup() -> (&'static ControlPlane, Client) {
    support::init_tracing();
    let cp = control_plane().await;
    cp.install_crds().await;
    let client = cp.client().await;
    if INSTANCES.get().is_none() {
        cp.ensure_namespace(SYSTEM_NAMESPACE).await;
        let kubeconfig = cp.kubeconfig().to_path_buf();
        INSTANCES.get_or_init(|| {
            Mutex::new(vec![
                start_reconciler(kubeconfig.clone()),
                start_reconciler(kubeconfig),
            ])
        });
    }
    (cp, client)
}

// -------------------------------------------------------------------- helpers

/// A spec with `model`, the test engine image and one replica.
fn basic(model: &str) -> serde_json::Value {
    json!({"model": {"ref": model}, "engine": {"image": ENGINE}, "replicas": 1})
}

fn container(d: &Deployment) -> &k8s_openapi::api::core::v1::Container {
    &d.spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
}

fn backends(route: &HTTPRoute) -> Vec<(String, Option<i32>)> {
    route.spec.rules[0]
        .backend_refs
        .iter()
        .map(|b| (b.name.clone(), b.weight))
        .collect()
}

fn assert_child_meta(meta: &ObjectMeta, svc: &InferenceService, track: &str) {
    let labels = meta.labels.clone().unwrap_or_default();
    let name = svc.name_any();
    assert_eq!(labels["app.kubernetes.io/name"], name);
    assert_eq!(labels["app.kubernetes.io/managed-by"], "infergate");
    assert_eq!(labels["infergate.dev/service"], name);
    assert_eq!(labels["infergate.dev/track"], track);
    let owners = meta.owner_references.clone().unwrap_or_default();
    assert_eq!(owners.len(), 1, "{owners:?}");
    assert_eq!(owners[0].kind, "InferenceService");
    assert_eq!(owners[0].name, name);
    assert_eq!(Some(owners[0].uid.clone()), svc.uid());
    assert_eq!(owners[0].controller, Some(true));
}

/// Whether the field manager `infergate` owns `spec.replicas` of the Deployment.
fn infergate_owns_replicas(d: &Deployment) -> bool {
    d.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.manager.as_deref() == Some("infergate"))
        .any(|m| {
            m.fields_v1
                .as_ref()
                .and_then(|f| f.0.get("f:spec"))
                .and_then(|s| s.get("f:replicas"))
                .is_some()
        })
}

// ---------------------------------------------------------------------- tests

/// The whole life of a service with a gateway: Gateway API missing, then
/// installed; children and their fields; readiness driving status and the
/// routed canary weight; spec edits; removing canary, autoscaling and gateway;
/// and garbage collection of everything. Sequential because it owns the
/// cluster-wide HTTPRoute CRD.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_with_gateway_api_installed_later() {
    let (cp, client) = setup().await;
    let ns = cp.fresh_namespace("lifecycle").await;
    support::create_service_json(
        &client,
        &ns,
        "chat",
        json!({
            "model": {"ref": "llama3-8b-q4"},
            "engine": {"image": ENGINE, "port": 8000, "args": ["--max-model-len=4096"],
                       "env": [{"name": "HF_HOME", "value": "/cache"}]},
            "autoscaling": {"minReplicas": 1, "maxReplicas": 4, "targetCPUUtilizationPercent": 70},
            "resources": {"cpu": "2", "memory": "4Gi", "gpuMemory": "24Gi"},
            "accelerator": {"type": "nvidia"},
            "parallelism": {"tensor": 2, "pipeline": 2},
            "canary": {"model": {"ref": "llama3-8b-q5"}, "weight": 20, "replicas": 1},
            "healthCheck": {"path": "/health", "interval": "5s", "timeout": "2s"},
            "routing": {"requestTimeout": "90s", "gateway": {"name": "gw", "namespace": "gateways"}}
        }),
    )
    .await;

    // Without Gateway API: everything but the route, and RoutingReady says why.
    let svc = wait_condition(
        &client,
        &ns,
        "chat",
        "RoutingReady",
        "False",
        "GatewayAPINotInstalled",
        WAIT,
    )
    .await;
    let st = svc.status.clone().unwrap();
    assert_eq!(st.observed_generation, svc.metadata.generation);
    assert_eq!(
        st.route_path.as_deref(),
        Some(format!("/{ns}/chat").as_str())
    );
    assert_eq!(st.request_timeout.as_deref(), Some("90s"));

    let primary: Deployment = wait_exists(&client, &ns, "chat").await;
    assert_child_meta(&primary.metadata, &svc, "primary");
    let c = container(&primary);
    assert_eq!(c.image.as_deref(), Some(ENGINE));
    assert_eq!(
        c.args.clone().unwrap(),
        [
            "--model",
            "llama3-8b-q4",
            "--served-model-name",
            "llama3-8b-q4",
            "--port",
            "8000",
            "--tensor-parallel-size",
            "2",
            "--pipeline-parallel-size",
            "2",
            "--max-model-len=4096"
        ]
    );
    assert_eq!(c.env.clone().unwrap()[0].name, "HF_HOME");
    let res = c.resources.clone().unwrap();
    let limits = res.limits.unwrap();
    assert_eq!(limits["nvidia.com/gpu"].0, "4");
    assert_eq!(limits["cpu"].0, "2");
    assert_eq!(res.requests.unwrap()["memory"].0, "4Gi");
    let ready = c.readiness_probe.clone().unwrap();
    assert_eq!(ready.http_get.unwrap().path.as_deref(), Some("/health"));
    assert_eq!(ready.period_seconds, Some(5));
    assert_eq!(ready.timeout_seconds, Some(2));
    assert!(c.liveness_probe.is_some());
    let pod_labels = primary
        .spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .clone()
        .unwrap()
        .labels
        .unwrap();
    assert_eq!(pod_labels["infergate.dev/gpu-memory"], "24Gi");
    assert!(
        !infergate_owns_replicas(&primary),
        "an HPA-managed Deployment must not have replicas in the applied object"
    );

    let canary: Deployment = wait_exists(&client, &ns, "chat-canary").await;
    assert_child_meta(&canary.metadata, &svc, "canary");
    assert_eq!(canary.spec.as_ref().unwrap().replicas, Some(1));
    assert_eq!(container(&canary).args.clone().unwrap()[1], "llama3-8b-q5");
    for (name, track) in [("chat", "primary"), ("chat-canary", "canary")] {
        let s: Service = wait_exists(&client, &ns, name).await;
        assert_child_meta(&s.metadata, &svc, track);
        let spec = s.spec.unwrap();
        assert_eq!(spec.ports.unwrap()[0].port, 8000);
        assert_eq!(spec.selector.unwrap()["infergate.dev/track"], track);
    }
    let hpa: HorizontalPodAutoscaler = wait_exists(&client, &ns, "chat").await;
    assert_child_meta(&hpa.metadata, &svc, "primary");
    assert_eq!(hpa.spec.scale_target_ref.name, "chat");
    assert_eq!(hpa.spec.min_replicas, Some(1));
    assert_eq!(hpa.spec.max_replicas, 4);
    assert_eq!(
        hpa.spec.metrics.unwrap()[0]
            .resource
            .as_ref()
            .unwrap()
            .target
            .average_utilization,
        Some(70)
    );

    // Installing Gateway API later starts producing routes, without a spec edit.
    cp.install_crd_file(support::httproute_crd()).await;
    let route: HTTPRoute = eventually(
        "the HTTPRoute after installing Gateway API",
        Duration::from_secs(150),
        || get::<HTTPRoute>(&client, &ns, "chat"),
    )
    .await;
    assert_child_meta(&route.metadata, &svc, "primary");
    let parent = &route.spec.parent_refs[0];
    assert_eq!(
        (parent.name.as_str(), parent.namespace.as_deref()),
        ("gw", Some("gateways"))
    );
    let rule = &route.spec.rules[0];
    let m = rule.matches[0].path.clone().unwrap();
    assert_eq!(m.r#type.as_deref(), Some("PathPrefix"));
    assert_eq!(m.value, Some(format!("/{ns}/chat")));
    let rewrite = rule.filters[0].url_rewrite.clone().unwrap().path.unwrap();
    assert_eq!(rewrite.r#type, "ReplacePrefixMatch");
    assert_eq!(rewrite.replace_prefix_match.as_deref(), Some("/"));
    assert_eq!(
        rule.timeouts.clone().unwrap().request.as_deref(),
        Some("90s")
    );
    // The canary has no ready replica yet: nothing is routed to it.
    assert_eq!(backends(&route), [("chat".to_owned(), Some(100))]);
    let svc = wait_condition(
        &client,
        &ns,
        "chat",
        "RoutingReady",
        "True",
        "RouteApplied",
        WAIT,
    )
    .await;
    assert_eq!(svc.status.unwrap().canary.unwrap().weight, Some(0));

    // Readiness: the canary's ready replica brings its weight into the route.
    mark_pods_ready(&client, &ns, "chat", "canary", 1).await;
    let route = eventually("the canary weight routed", WAIT, || async {
        let r = get::<HTTPRoute>(&client, &ns, "chat").await?;
        (backends(&r).len() == 2).then_some(r)
    })
    .await;
    assert_eq!(
        backends(&route),
        [
            ("chat".to_owned(), Some(80)),
            ("chat-canary".to_owned(), Some(20))
        ]
    );
    let svc = eventually(
        "status.canary to report the routed weight",
        WAIT,
        || async {
            let s = get::<InferenceService>(&client, &ns, "chat").await?;
            let c = s.status.as_ref()?.canary.clone()?;
            (c.weight == Some(20) && c.ready_replicas == Some(1)).then_some(s)
        },
    )
    .await;
    let ready = condition(&svc, "Ready").unwrap();
    assert_eq!(ready.status, "False", "the primary is not ready yet");
    mark_pods_ready(&client, &ns, "chat", "primary", 1).await;
    let svc = wait_condition(&client, &ns, "chat", "Ready", "True", "Available", WAIT).await;
    let st = svc.status.unwrap();
    assert_eq!((st.replicas, st.ready_replicas), (Some(1), Some(1)));
    // The printer columns show it.
    let out = cp.kubectl(&["get", "infsvc", "chat", "-n", &ns]);
    let table = String::from_utf8_lossy(&out.stdout).to_string();
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME", "MODEL", "REPLICAS", "READY", "PHASE", "WEIGHT", "PATH", "GRAPH", "GPUS", "AGE"
        ],
        "{table}"
    );
    let row: Vec<&str> = table
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let path = format!("/{ns}/chat");
    // GPUs: 2 x 2 per replica x (4 autoscaled + 1 canary) = 20.
    assert_eq!(
        &row[..8],
        [
            "chat",
            "llama3-8b-q4",
            "1",
            "True",
            "Stable",
            "20",
            path.as_str(),
            "20"
        ],
        "{table}"
    );

    // Spec edits reach the children.
    support::patch_service_spec(
        &client,
        &ns,
        "chat",
        json!({"engine": {"image": "registry.example.com/vllm:1.0"}, "autoscaling": {"maxReplicas": 6}}),
    )
    .await;
    eventually("the new engine image on both Deployments", WAIT, || async {
        let p = get::<Deployment>(&client, &ns, "chat").await?;
        let c = get::<Deployment>(&client, &ns, "chat-canary").await?;
        (container(&p).image.as_deref() == Some("registry.example.com/vllm:1.0")
            && container(&c).image.as_deref() == Some("registry.example.com/vllm:1.0"))
        .then_some(())
    })
    .await;
    eventually("the HPA's new maximum", WAIT, || async {
        let h = get::<HorizontalPodAutoscaler>(&client, &ns, "chat").await?;
        (h.spec.max_replicas == 6).then_some(())
    })
    .await;

    // Removing canary and autoscaling deletes those children; replicas come back.
    support::patch_service_spec(
        &client,
        &ns,
        "chat",
        json!({"canary": null, "autoscaling": null, "replicas": 2}),
    )
    .await;
    wait_gone::<Deployment>(&client, &ns, "chat-canary", WAIT).await;
    wait_gone::<Service>(&client, &ns, "chat-canary", WAIT).await;
    wait_gone::<HorizontalPodAutoscaler>(&client, &ns, "chat", WAIT).await;
    let primary = eventually("replicas managed again", WAIT, || async {
        let d = get::<Deployment>(&client, &ns, "chat").await?;
        (d.spec.as_ref()?.replicas == Some(2)).then_some(d)
    })
    .await;
    assert!(infergate_owns_replicas(&primary));
    eventually(
        "a single backend after the canary is removed",
        WAIT,
        || async {
            let r = get::<HTTPRoute>(&client, &ns, "chat").await?;
            (backends(&r) == [("chat".to_owned(), Some(100))]).then_some(())
        },
    )
    .await;
    eventually("status.canary cleared", WAIT, || async {
        let s = get::<InferenceService>(&client, &ns, "chat").await?;
        let st = s.status?;
        (st.canary.is_none() && st.observed_generation == s.metadata.generation).then_some(())
    })
    .await;

    // Removing the gateway deletes the route.
    support::patch_service_spec(&client, &ns, "chat", json!({"routing": {"gateway": null}})).await;
    wait_gone::<HTTPRoute>(&client, &ns, "chat", WAIT).await;
    wait_condition(
        &client,
        &ns,
        "chat",
        "RoutingReady",
        "False",
        "NoGateway",
        WAIT,
    )
    .await;

    // Events were recorded for creates, updates and deletions.
    let events = Api::<Event>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    let reasons: Vec<String> = events
        .items
        .iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("chat"))
        .filter_map(|e| e.reason.clone())
        .collect();
    for want in [
        "Created",
        "Updated",
        "Deleted",
        "GatewayAPINotInstalled",
        "Ready",
    ] {
        assert!(
            reasons.iter().any(|r| r == want),
            "no {want} event in {reasons:?}"
        );
    }

    // A second service with every child, deleted: the garbage collector removes all.
    support::create_service_json(
        &client,
        &ns,
        "gc",
        json!({
            "model": {"ref": "m"},
            "engine": {"image": ENGINE},
            "replicas": 1,
            "autoscaling": {"minReplicas": 1, "maxReplicas": 2},
            "canary": {"model": {"ref": "m2"}, "weight": 10},
            "routing": {"gateway": {"name": "gw"}}
        }),
    )
    .await;
    let _: HTTPRoute = wait_exists(&client, &ns, "gc").await;
    let _: HorizontalPodAutoscaler = wait_exists(&client, &ns, "gc").await;
    let _: Deployment = wait_exists(&client, &ns, "gc-canary").await;
    let _: Service = wait_exists(&client, &ns, "gc-canary").await;
    Api::<InferenceService>::namespaced(client.clone(), &ns)
        .delete("gc", &DeleteParams::default())
        .await
        .unwrap();
    let gc = Duration::from_secs(150);
    wait_gone::<HTTPRoute>(&client, &ns, "gc", gc).await;
    wait_gone::<HorizontalPodAutoscaler>(&client, &ns, "gc", gc).await;
    for name in ["gc", "gc-canary"] {
        wait_gone::<Deployment>(&client, &ns, name, gc).await;
        wait_gone::<Service>(&client, &ns, name, gc).await;
    }
}

/// Someone edits or deletes a child: the reconciler puts it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_is_corrected() {
    let (cp, client) = setup().await;
    let ns = cp.fresh_namespace("drift").await;
    support::create_service_json(
        &client,
        &ns,
        "s",
        json!({"model": {"ref": "m"}, "engine": {"image": ENGINE}, "replicas": 2}),
    )
    .await;
    let d: Deployment = wait_exists(&client, &ns, "s").await;
    assert_eq!(d.spec.unwrap().replicas, Some(2));
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    deployments
        .patch(
            "s",
            &PatchParams::apply("someone-else").force(),
            &Patch::Apply(json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "s"},
                "spec": {"replicas": 5, "template": {"spec": {"containers": [{"name": "engine", "image": "evil:1"}]}}}
            })),
        )
        .await
        .unwrap();
    eventually("the hand edit reverted", WAIT, || async {
        let d = get::<Deployment>(&client, &ns, "s").await?;
        (d.spec.as_ref()?.replicas == Some(2) && container(&d).image.as_deref() == Some(ENGINE))
            .then_some(())
    })
    .await;
    let old = get::<Service>(&client, &ns, "s").await.unwrap();
    Api::<Service>::namespaced(client.clone(), &ns)
        .delete("s", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the deleted Service recreated", WAIT, || async {
        let s = get::<Service>(&client, &ns, "s").await?;
        (s.uid() != old.uid()).then_some(())
    })
    .await;

    // A child name taken by another service's child is not taken over.
    support::create_service_json(
        &client,
        &ns,
        "x",
        json!({"model": {"ref": "m"}, "engine": {"image": ENGINE}, "replicas": 1,
               "canary": {"model": {"ref": "m2"}, "weight": 10}}),
    )
    .await;
    let taken: Deployment = wait_exists(&client, &ns, "x-canary").await;
    support::create_service_json(&client, &ns, "x-canary", basic("other")).await;
    let svc = wait_condition(
        &client,
        &ns,
        "x-canary",
        "Reconciled",
        "False",
        "ApplyFailed",
        WAIT,
    )
    .await;
    let msg = condition(&svc, "Reconciled").unwrap().message;
    assert!(msg.contains("x-canary"), "{msg}");
    let still: Deployment = get(&client, &ns, "x-canary").await.unwrap();
    assert_eq!(
        still.metadata.owner_references,
        taken.metadata.owner_references
    );
    assert_eq!(container(&still).args.clone().unwrap()[1], "m2");
}

/// An object the validator rejects gets a condition and no children.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_service_gets_a_condition_not_children() {
    let (cp, client) = setup().await;
    let ns = cp.fresh_namespace("invalid").await;
    // No engine image anywhere: no policy, no --default-engine-image.
    support::create_service_json(
        &client,
        &ns,
        "bad",
        json!({"model": {"ref": "m"}, "replicas": 1}),
    )
    .await;
    let svc = wait_condition(
        &client,
        &ns,
        "bad",
        "Reconciled",
        "False",
        "InvalidSpec",
        WAIT,
    )
    .await;
    let cond = condition(&svc, "Reconciled").unwrap();
    assert!(
        cond.message.contains("spec.engine.image"),
        "{}",
        cond.message
    );
    assert!(get::<Deployment>(&client, &ns, "bad").await.is_none());
    assert!(get::<Service>(&client, &ns, "bad").await.is_none());
    // Fixing the spec produces the children.
    support::patch_service_spec(&client, &ns, "bad", json!({"engine": {"image": ENGINE}})).await;
    let _: Deployment = wait_exists(&client, &ns, "bad").await;
    wait_condition(&client, &ns, "bad", "Reconciled", "True", "Applied", WAIT).await;
}

/// A policy tightened after a service exists flags the service and leaves it running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tightened_policy_flags_without_changing() {
    let (cp, client) = setup().await;
    let ns = cp.fresh_namespace("policy").await;
    support::create_service_json(
        &client,
        &ns,
        "s",
        json!({"model": {"ref": "m"}, "engine": {"image": ENGINE}, "replicas": 1,
               "canary": {"model": {"ref": "m2"}, "weight": 40, "replicas": 1}}),
    )
    .await;
    wait_condition(
        &client,
        &ns,
        "s",
        "PolicyCompliant",
        "True",
        "Compliant",
        WAIT,
    )
    .await;
    let before: Deployment = wait_exists(&client, &ns, "s-canary").await;
    let policy: infergate::api::InferencePolicy = serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "InferencePolicy",
        "metadata": {"name": "tight", "namespace": ns},
        "spec": {"limits": {"maxCanaryWeight": 10}}
    }))
    .unwrap();
    Api::<infergate::api::InferencePolicy>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &policy)
        .await
        .unwrap();
    let svc = wait_condition(
        &client,
        &ns,
        "s",
        "PolicyCompliant",
        "False",
        "PolicyViolation",
        WAIT,
    )
    .await;
    let cond = condition(&svc, "PolicyCompliant").unwrap();
    assert!(
        cond.message.contains("spec.canary.weight"),
        "{}",
        cond.message
    );
    assert_eq!(
        svc.spec.canary.as_ref().unwrap().weight,
        40,
        "the service is not changed"
    );
    let after: Deployment = get(&client, &ns, "s-canary").await.unwrap();
    assert_eq!(before.metadata.generation, after.metadata.generation);
    let reconciled = condition(&svc, "Reconciled").unwrap();
    assert_eq!(reconciled.status, "True");
}

/// Exactly one of two reconcilers leads; when it crashes or stops, the other
/// takes over and keeps reconciling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_fails_over() {
    let (cp, client) = setup().await;
    let instances = INSTANCES.get().unwrap();
    let identities: Vec<String> = instances
        .lock()
        .unwrap()
        .iter()
        .map(|i| i.identity.clone())
        .collect();
    let leader = eventually("a lease holder", WAIT, || async {
        support::lease_holder(&client)
            .await
            .filter(|h| identities.contains(h))
    })
    .await;

    // A service whose status an older version wrote differently: the running
    // leader ignores status-only changes, a newly started one re-reconciles
    // everything without any spec edit.
    let ns = cp.fresh_namespace("failover").await;
    support::create_service_json(&client, &ns, "pre", basic("m")).await;
    wait_condition(&client, &ns, "pre", "Reconciled", "True", "Applied", WAIT).await;
    Api::<InferenceService>::namespaced(client.clone(), &ns)
        .patch_status(
            "pre",
            &PatchParams::apply("infergate").force(),
            &Patch::Apply(json!({
                "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
                "status": {"routePath": "/written-by-an-older-version"}
            })),
        )
        .await
        .unwrap();

    // Crash the leader: the lease expires and the other replica takes over.
    let crashed = {
        let mut list = instances.lock().unwrap();
        let pos = list.iter().position(|i| i.identity == leader).unwrap();
        list.remove(pos)
    };
    crashed.crash();
    let kubeconfig = cp.kubeconfig().to_path_buf();
    instances
        .lock()
        .unwrap()
        .push(start_reconciler(kubeconfig.clone()));
    let second = eventually("a new lease holder after the crash", WAIT, || async {
        support::lease_holder(&client)
            .await
            .filter(|h| *h != leader)
    })
    .await;
    eventually(
        "the stale status replaced by the new leader",
        WAIT,
        || async {
            let s = get::<InferenceService>(&client, &ns, "pre").await?;
            let st = s.status?;
            (st.route_path.is_none() && st.conditions.len() == 4).then_some(())
        },
    )
    .await;
    support::create_service_json(&client, &ns, "a", basic("m")).await;
    let _: Deployment = wait_exists(&client, &ns, "a").await;
    let holder = support::lease_holder(&client).await;
    // Events about `a`, created after the failover: the crashed leader recorded
    // events about `pre` before it crashed, which is as it should be. Events
    // are written asynchronously: wait for the first.
    let events_api = Api::<Event>::namespaced(client.clone(), &ns);
    let reporters: std::collections::BTreeSet<String> =
        eventually("events about the new service", WAIT, || async {
            let events = events_api.list(&ListParams::default()).await.ok()?;
            let reporters: std::collections::BTreeSet<String> = events
                .items
                .iter()
                .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("a"))
                .filter_map(|e| e.reporting_instance.clone())
                .collect();
            (!reporters.is_empty()).then_some(reporters)
        })
        .await;
    assert!(!reporters.is_empty());
    assert!(
        reporters.iter().all(|r| Some(r) == holder.as_ref()),
        "only the leader reconciles: events from {reporters:?}, holder {holder:?}"
    );
    assert!(!reporters.contains(&leader));

    // Stop the new leader gracefully: it releases the lease and the third takes over.
    let stopped = {
        let mut list = instances.lock().unwrap();
        let pos = list.iter().position(|i| i.identity == second).unwrap();
        list.remove(pos)
    };
    stopped.stop();
    instances.lock().unwrap().push(start_reconciler(kubeconfig));
    eventually("a lease holder after the graceful stop", WAIT, || async {
        support::lease_holder(&client)
            .await
            .filter(|h| *h != second && *h != leader)
    })
    .await;
    support::create_service_json(&client, &ns, "b", basic("m")).await;
    let _: Deployment = wait_exists(&client, &ns, "b").await;
}
