//! End-to-end: progressive rollout against the real control plane (the
//! published HTTPRoute CRD, kube-controller-manager's Deployment
//! controller), with the test playing the kubelet (pods marked Ready, or a
//! canary container restarting) and a small fake Prometheus answering the
//! query API on loopback.
//!
//! Each test runs its own reconciler (the tests take turns: only the Lease
//! holder reconciles), with `--prometheus-url` pointing at the fake.
//!
//! The fake Prometheus, the set-up and the steps every test takes (create,
//! patch, play the kubelet, wait for the route or the rollout's status) are
//! here; the tests, a module per concern:
//!
//! - [`steps`]: the walk through the steps: a new model becomes stable, each
//!   weight held at least the interval, a crash-looping canary rolled back,
//!   a restarted infergate resuming at the same step, a new target mid
//!   rollout letting go of the route before the canary changes.
//! - [`gate`]: the Prometheus gate: a failing gate rolls back, a query sees
//!   only its namespace and reaches Prometheus confined to it, a gate
//!   without data fails at the deadline, a gate without an address says so.
//! - [`actions`]: the rollout actions: pause, resume and abort once per
//!   value, A-B-A acted on twice, promote skipping the remaining steps.

#[path = "e2e_rollout/actions.rs"]
mod actions;
#[path = "e2e_rollout/gate.rs"]
mod gate;
#[path = "e2e_rollout/steps.rs"]
mod steps;

use crate::support;
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use http_body_util::Full;
use hyper::body::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo};
use k8s_openapi::api::apps::v1::Deployment;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::timeline::route_backends;
use crate::support::{Reconciler, WAIT, eventually, get};
use infergate::api::rollout::RolloutPhase;
use infergate::api::v1beta1::InferenceService;
use infergate::reconcile::{Config, LeaseTiming};

const ENGINE: &str = "registry.example.com/vllm:0.9";

/// A fake Prometheus: `/api/v1/query` answers the value set for the
/// namespace named in the query (`namespace="..."`), or no sample.
#[derive(Clone, Default)]
struct FakePrometheus {
    values: Arc<Mutex<HashMap<String, f64>>>,
    queries: Arc<Mutex<Vec<String>>>,
    url: String,
}

impl FakePrometheus {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let fake = FakePrometheus {
            url: format!("http://{}", listener.local_addr().expect("addr")),
            ..FakePrometheus::default()
        };
        let state = fake.clone();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let state = state.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let state = state.clone();
                        async move {
                            let query = url::form_urlencoded::parse(
                                req.uri().query().unwrap_or_default().as_bytes(),
                            )
                            .find(|(k, _)| k == "query")
                            .map(|(_, v)| v.into_owned())
                            .unwrap_or_default();
                            state.queries.lock().unwrap().push(query.clone());
                            let value = state
                                .values
                                .lock()
                                .unwrap()
                                .iter()
                                .find(|(ns, _)| query.contains(&format!("namespace=\"{ns}\"")))
                                .map(|(_, v)| *v);
                            let result: Vec<_> = value
                                .map(|v| json!({"metric": {}, "value": [1.8e9, v.to_string()]}))
                                .into_iter()
                                .collect();
                            let body = json!({"status": "success",
                                "data": {"resultType": "vector", "result": result}});
                            Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from(
                                body.to_string(),
                            ))))
                        }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tcp), service)
                        .await;
                });
            }
        });
        fake
    }

    fn set(&self, ns: &str, value: f64) {
        self.values.lock().unwrap().insert(ns.to_owned(), value);
    }
}

/// A test's scene: its turn (held to its end), a fresh namespace, its
/// reconciler (started) and the fake Prometheus it asks.
struct Setup {
    _turn: tokio::sync::MutexGuard<'static, ()>,
    client: Client,
    ns: String,
    reconciler: Option<Reconciler>,
    kubeconfig: std::path::PathBuf,
    prometheus: FakePrometheus,
}

/// A reconciler with the Lease identity `id` (a short Lease), asking the
/// Prometheus at `prometheus`.
fn reconciler(kubeconfig: std::path::PathBuf, prometheus: &str, id: &str) -> Reconciler {
    let config = Config {
        lease: LeaseTiming {
            duration_seconds: 6,
            grace_seconds: 2,
        },
        ..support::reconcile_config(id).with_prometheus_url(Some(prometheus.to_owned()))
    };
    Reconciler::start(kubeconfig, config)
}

/// Wait for this test's turn, then set the scene in a namespace named
/// after `prefix`.
async fn setup(prefix: &str) -> Setup {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let turn = TURN.lock().await;
    let (cp, client, kubeconfig) = support::reconciler_setup(&[support::httproute_crd()]).await;
    let ns = cp.fresh_namespace(prefix).await;
    let prometheus = FakePrometheus::start().await;
    let reconciler = reconciler(kubeconfig.clone(), &prometheus.url, &format!("{prefix}-0"));
    Setup {
        _turn: turn,
        client,
        ns,
        reconciler: Some(reconciler),
        kubeconfig,
        prometheus,
    }
}

/// Service `chat` at model `v1`, rolled out in steps with `interval`.
async fn create(
    client: &Client,
    ns: &str,
    steps: &[i32],
    interval: &str,
    extra: serde_json::Value,
) {
    let mut rollout = json!({"strategy": "Canary", "steps": steps, "interval": interval,
                             "progressDeadline": "5m", "maxRestarts": 2});
    if let (Some(r), Some(e)) = (rollout.as_object_mut(), extra.as_object()) {
        r.extend(e.clone());
    }
    let svc: InferenceService = serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
        "metadata": {"name": "chat", "namespace": ns},
        "spec": {"model": {"ref": "v1"}, "engine": {"image": ENGINE}, "replicas": 2,
                 "routing": {"gateway": {"name": "inference-gw", "namespace": "gateways"}},
                 "rollout": rollout},
    }))
    .expect("service");
    Api::<InferenceService>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &svc)
        .await
        .expect("create service");
}

/// Merge-patch service `chat` with `body`.
async fn patch(client: &Client, ns: &str, body: serde_json::Value) {
    Api::<InferenceService>::namespaced(client.clone(), ns)
        .patch("chat", &PatchParams::default(), &Patch::Merge(body))
        .await
        .expect("patch service");
}

/// Move service `chat` to `model`.
async fn set_model(client: &Client, ns: &str, model: &str) {
    patch(client, ns, json!({"spec": {"model": {"ref": model}}})).await;
}

/// Write `action` as the service's `infergate.dev/rollout-action`.
async fn act(client: &Client, ns: &str, action: &str) {
    patch(
        client,
        ns,
        json!({"metadata": {"annotations": {"infergate.dev/rollout-action": action}}}),
    )
    .await;
}

/// `(backend name, weight)` of the route.
async fn route(client: &Client, ns: &str) -> Vec<(String, i32)> {
    route_backends(client, ns, "chat").await
}

/// Wait until the route's backends and weights are `want`.
async fn wait_route(client: &Client, ns: &str, want: &[(&str, i32)]) {
    let want: Vec<(String, i32)> = want.iter().map(|(n, w)| ((*n).to_owned(), *w)).collect();
    eventually(&format!("route {want:?}"), WAIT, async || {
        let got = route(client, ns).await;
        (got == want).then_some(()).ok_or(format!("{got:?}"))
    })
    .await;
}

/// The service's `status.rollout` once `pred` holds.
async fn wait_rollout(
    client: &Client,
    ns: &str,
    what: &str,
    pred: impl Fn(&infergate::api::rollout::RolloutStatus) -> bool,
) -> infergate::api::rollout::RolloutStatus {
    eventually(what, WAIT, async || {
        let s = get::<InferenceService>(client, ns, "chat")
            .await
            .ok_or("no service")?;
        let r = s
            .status
            .and_then(|st| st.rollout)
            .ok_or("no status.rollout")?;
        if pred(&r) {
            Ok(r)
        } else {
            Err(format!("{r:?}"))
        }
    })
    .await
}

/// The service's first version stable (at once, as for every new service).
async fn v1_stable(client: &Client, ns: &str) {
    wait_rollout(client, ns, "v1 stable", |r| r.phase == RolloutPhase::Stable).await;
}

/// The model the track's Deployment serves (`--served-model-name`).
async fn model_of(client: &Client, ns: &str, name: &str) -> Option<String> {
    let d = get::<Deployment>(client, ns, name).await?;
    let args = d.spec?.template.spec?.containers.into_iter().next()?.args?;
    let i = args.iter().position(|a| a == "--served-model-name")?;
    args.get(i + 1).cloned()
}

/// The reasons of the events about the service.
async fn event_reasons(client: &Client, ns: &str) -> Vec<String> {
    Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("chat"))
        .filter_map(|e| e.reason)
        .collect()
}

/// Play the kubelet for a track until its Deployment is complete.
async fn track_complete(client: &Client, ns: &str, track: &str) {
    let name = if track == "primary" {
        "chat"
    } else {
        "chat-canary"
    };
    support::chat_track_complete(client, ns, track, name).await;
}

/// Play the kubelet for the primary until its Deployment is complete.
async fn primary_complete(client: &Client, ns: &str) {
    track_complete(client, ns, "primary").await;
}

/// The canary Deployment exists and all its pods are Ready.
async fn canary_ready(client: &Client, ns: &str) {
    support::wait_exists::<Deployment>(client, ns, "chat-canary").await;
    track_complete(client, ns, "canary").await;
}

/// Once `v1` is stable, move the service to model `v2` and play the kubelet
/// for the canary until the route gives it the first step's 10%.
async fn canary_at_the_first_step(client: &Client, ns: &str) {
    wait_rollout(client, ns, "v1 stable", |r| r.phase == RolloutPhase::Stable).await;
    set_model(client, ns, "v2").await;
    canary_ready(client, ns).await;
    wait_route(client, ns, &[("chat", 90), ("chat-canary", 10)]).await;
}
