//! End-to-end: progressive rollout against the real control plane (the
//! published HTTPRoute CRD, kube-controller-manager's Deployment
//! controller), with the test playing the kubelet (pods marked Ready, or a
//! canary container restarting) and a small fake Prometheus answering the
//! query API on loopback.
//!
//! Each test runs its own reconciler (the tests take turns: only the Lease
//! holder reconciles), with `--prometheus-url` pointing at the fake.

use crate::support;
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::support::timeline::{Timeline, assert_route_first, route_backends, story};
use crate::support::{Reconciler, WAIT, eventually, get, wait_gone};
use infergate::api::rollout::RolloutPhase;
use infergate::api::v1beta1::InferenceService;
use infergate::reconcile::children::httproute::HTTPRoute;
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

struct Setup {
    _turn: tokio::sync::MutexGuard<'static, ()>,
    client: Client,
    ns: String,
    reconciler: Option<Reconciler>,
    kubeconfig: std::path::PathBuf,
    prometheus: FakePrometheus,
}

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

async fn patch(client: &Client, ns: &str, body: serde_json::Value) {
    Api::<InferenceService>::namespaced(client.clone(), ns)
        .patch("chat", &PatchParams::default(), &Patch::Merge(body))
        .await
        .expect("patch service");
}

async fn set_model(client: &Client, ns: &str, model: &str) {
    patch(client, ns, json!({"spec": {"model": {"ref": model}}})).await;
}

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

/// The model the track's Deployment serves (`--served-model-name`).
/// The service's first version stable (at once, as for every new service).
async fn v1_stable(client: &Client, ns: &str) {
    wait_rollout(client, ns, "v1 stable", |r| r.phase == RolloutPhase::Stable).await;
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_model_walks_every_step_and_becomes_stable() {
    let s = setup("rollout").await;
    let (client, ns) = (s.client.clone(), s.ns.clone());
    create(&client, &ns, &[10, 30, 60], "3s", json!({})).await;
    // The first version is stable at once.
    let st = wait_rollout(&client, &ns, "v1 stable", |r| {
        r.phase == RolloutPhase::Stable
    })
    .await;
    assert_eq!(st.stable.unwrap().model.r#ref, "v1");
    primary_complete(&client, &ns).await;
    wait_route(&client, &ns, &[("chat", 100)]).await;

    set_model(&client, &ns, "v2").await;
    wait_rollout(&client, &ns, "progressing", |r| {
        r.phase == RolloutPhase::Progressing
    })
    .await;
    // The primary keeps v1, the canary runs v2; no weight before it is ready.
    support::wait_exists::<Deployment>(&client, &ns, "chat-canary").await;
    assert_eq!(model_of(&client, &ns, "chat").await.as_deref(), Some("v1"));
    assert_eq!(
        model_of(&client, &ns, "chat-canary").await.as_deref(),
        Some("v2")
    );
    assert_eq!(route(&client, &ns).await, [("chat".to_owned(), 100)]);
    canary_ready(&client, &ns).await;
    for w in [10, 30, 60] {
        wait_route(&client, &ns, &[("chat", 100 - w), ("chat-canary", w)]).await;
    }
    // After the last step the primary is rolled to v2 first (the canary
    // keeping its weight), then the canary goes and v2 is stable.
    wait_rollout(&client, &ns, "promoting", |r| {
        r.reason.as_deref() == Some("Promoting")
    })
    .await;
    eventually("the primary's template at v2", WAIT, async || {
        (model_of(&client, &ns, "chat").await.as_deref() == Some("v2")).then_some(())
    })
    .await;
    wait_route(&client, &ns, &[("chat", 40), ("chat-canary", 60)]).await;
    primary_complete(&client, &ns).await;
    let st = wait_rollout(&client, &ns, "v2 stable", |r| {
        r.phase == RolloutPhase::Stable && r.stable.as_ref().is_some_and(|s| s.model.r#ref == "v2")
    })
    .await;
    assert_eq!(st.reason.as_deref(), Some("Promoted"));
    wait_route(&client, &ns, &[("chat", 100)]).await;
    wait_gone::<Deployment>(&client, &ns, "chat-canary", WAIT).await;
    let s = get::<InferenceService>(&client, &ns, "chat").await.unwrap();
    assert_eq!(s.status.unwrap().canary, None);
    let events = event_reasons(&client, &ns).await;
    for reason in [
        "RolloutStarted",
        "RolloutStep",
        "RolloutPromoting",
        "RolloutPromoted",
    ] {
        assert!(events.iter().any(|e| e == reason), "{reason} in {events:?}");
    }
    assert_eq!(model_of(&client, &ns, "chat").await.as_deref(), Some("v2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_looping_canary_is_rolled_back_and_not_retried() {
    let s = setup("rollback").await;
    let (client, ns) = (s.client.clone(), s.ns.clone());
    create(&client, &ns, &[10, 30, 60], "30s", json!({})).await;
    canary_at_the_first_step(&client, &ns).await;
    // The canary's container restarts more than maxRestarts (2) times.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for p in pods
        .list(
            &ListParams::default().labels("infergate.dev/service=chat,infergate.dev/track=canary"),
        )
        .await
        .expect("pods")
        .items
    {
        pods.patch_status(
            &p.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"containerStatuses": [{
                "name": "engine", "image": ENGINE, "imageID": "", "ready": false,
                "restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}})),
        )
        .await
        .expect("restarts");
    }
    // A pod change alone does not trigger a reconcile; the rollout's poll does.
    let st = wait_rollout(&client, &ns, "rolled back", |r| {
        r.phase == RolloutPhase::RolledBack
    })
    .await;
    assert_eq!(st.reason.as_deref(), Some("CanaryRestarts"));
    wait_route(&client, &ns, &[("chat", 100)]).await;
    wait_gone::<Deployment>(&client, &ns, "chat-canary", WAIT).await;
    let events = event_reasons(&client, &ns).await;
    assert!(events.iter().any(|e| e == "RolledBack"), "{events:?}");
    // Nothing is retried until the spec changes.
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert!(
        get::<Deployment>(&client, &ns, "chat-canary")
            .await
            .is_none()
    );
    let st = wait_rollout(&client, &ns, "still rolled back", |_| true).await;
    assert_eq!(st.phase, RolloutPhase::RolledBack);
    assert_eq!(st.stable.unwrap().model.r#ref, "v1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_prometheus_gate_rolls_back() {
    let s = setup("gate").await;
    let (client, ns, prometheus) = (s.client.clone(), s.ns.clone(), s.prometheus.clone());
    let query = "histogram_quantile(0.99, rate(latency{namespace=\"{{namespace}}\",pod=~\"{{canary}}-.*\"}[5m]))";
    create(
        &client,
        &ns,
        &[10, 30],
        "2s",
        json!({"analysis": {"prometheus": {"query": query, "threshold": {"max": 1.0}, "failureLimit": 2}}}),
    )
    .await;
    prometheus.set(&ns, 5.0);
    canary_at_the_first_step(&client, &ns).await;
    let st = wait_rollout(&client, &ns, "rolled back by the gate", |r| {
        r.phase == RolloutPhase::RolledBack
    })
    .await;
    assert_eq!(st.reason.as_deref(), Some("AnalysisFailed"));
    assert!(
        st.message
            .unwrap_or_default()
            .contains("5 is above the maximum 1")
    );
    wait_route(&client, &ns, &[("chat", 100)]).await;
    // The query ran with its placeholders filled in, at least failureLimit times.
    let asked: Vec<String> = prometheus
        .queries
        .lock()
        .unwrap()
        .iter()
        .filter(|q| q.contains(&format!("namespace=\"{ns}\"")))
        .cloned()
        .collect();
    assert!(asked.len() >= 2, "{asked:?}");
    assert!(asked[0].contains("pod=~\"chat-canary-.*\""), "{asked:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_query_sees_only_its_namespace() {
    let s = setup("scope").await;
    let (client, ns, prometheus) = (s.client.clone(), s.ns.clone(), s.prometheus.clone());
    // Another namespace's matcher, a regex over every namespace, a negated
    // one and a selector with none, across a subquery and an on() join.
    let query = concat!(
        r#"max_over_time(sum(rate(errors{namespace="other-team",pod=~"{{canary}}-.*"}[1m]))[5m:1m])"#,
        r#" / on() group_left sum(rate(requests{namespace=~".*"}[1m] offset 1m))"#,
        r#" + 0 * count(up{namespace!="{{namespace}}"} or vector(0))"#,
    );
    create(
        &client,
        &ns,
        &[10, 30],
        "2s",
        json!({"analysis": {"prometheus": {"query": query, "threshold": {"max": 1.0}}}}),
    )
    .await;
    // Sent as written, the query would read other-team's failing value.
    prometheus.set("other-team", 5.0);
    canary_at_the_first_step(&client, &ns).await;
    let scoped = format!(
        r#"max_over_time(sum(rate(errors{{namespace="{ns}",pod=~"chat-canary-.*"}}[1m]))[5m:1m]) / on () group_left () sum(rate(requests{{namespace="{ns}"}}[1m] offset 1m)) + 0 * count(up{{namespace="{ns}"}} or vector(0))"#
    );
    eventually("the scoped query asked twice", WAIT, async || {
        let n = prometheus.queries.lock().unwrap().len();
        (n >= 2).then_some(()).ok_or(format!("{n} queries"))
    })
    .await;
    // Its own namespace has no sample yet: the gate holds at the first step.
    let st = wait_rollout(&client, &ns, "progressing", |_| true).await;
    assert_eq!(st.phase, RolloutPhase::Progressing, "{st:?}");
    assert_eq!(st.step, Some(0), "{st:?}");
    prometheus.set(&ns, 0.5);
    wait_route(&client, &ns, &[("chat", 70), ("chat-canary", 30)]).await;
    let asked = prometheus.queries.lock().unwrap().clone();
    assert!(asked.len() >= 3, "{asked:?}");
    for q in &asked {
        assert_eq!(q, &scoped);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actions_pause_resume_and_abort_once_per_value() {
    let s = setup("actions").await;
    let (client, ns) = (s.client.clone(), s.ns.clone());
    create(&client, &ns, &[10, 30, 60], "2s", json!({})).await;
    canary_at_the_first_step(&client, &ns).await;
    act(&client, &ns, "pause/1").await;
    let st = wait_rollout(&client, &ns, "paused", |r| r.phase == RolloutPhase::Paused).await;
    let weight = st.weight;
    assert_eq!(st.last_action.as_deref(), Some("pause/1"));
    // Held well past the interval.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let st = wait_rollout(&client, &ns, "still paused", |_| true).await;
    assert_eq!((st.phase, st.weight), (RolloutPhase::Paused, weight));
    act(&client, &ns, "resume/1").await;
    wait_rollout(&client, &ns, "resumed and advancing", |r| {
        r.phase == RolloutPhase::Progressing && r.weight > weight
    })
    .await;
    act(&client, &ns, "abort/1").await;
    let st = wait_rollout(&client, &ns, "aborted", |r| {
        r.phase == RolloutPhase::RolledBack
    })
    .await;
    assert_eq!(st.reason.as_deref(), Some("Aborted"));
    wait_route(&client, &ns, &[("chat", 100)]).await;
    // The annotation stays (a GitOps tool keeps re-applying it): a new
    // version's rollout is not aborted by it again.
    set_model(&client, &ns, "v3").await;
    wait_rollout(&client, &ns, "v3 progressing", |r| {
        r.phase == RolloutPhase::Progressing
            && r.target.as_ref().is_some_and(|t| t.model.r#ref == "v3")
    })
    .await;
    patch(
        &client,
        &ns,
        json!({"metadata": {"labels": {"reapplied": "yes"}}}),
    )
    .await;
    canary_ready(&client, &ns).await;
    let st = wait_rollout(&client, &ns, "v3 carrying weight", |r| r.weight >= Some(10)).await;
    assert_eq!(st.phase, RolloutPhase::Progressing);
    assert_eq!(st.last_action.as_deref(), Some("abort/1"));
    let events = event_reasons(&client, &ns).await;
    for reason in ["RolloutPaused", "RolloutResumed", "RolledBack"] {
        assert!(events.iter().any(|e| e == reason), "{reason} in {events:?}");
    }
}

/// A, B, A acts twice: the values acted on are a set. The third write (a
/// GitOps tool's server-side apply of its own copy, the value it applied
/// first) changes nothing: the rollout resumed by B walks on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_b_a_acts_twice_and_a_reapplied_value_changes_nothing() {
    let s = setup("aba").await;
    let (client, ns) = (s.client.clone(), s.ns.clone());
    create(&client, &ns, &[10, 30, 60], "2s", json!({})).await;
    canary_at_the_first_step(&client, &ns).await;
    let services = Api::<InferenceService>::namespaced(client.clone(), &ns);
    let gitops_apply = |value: &'static str| {
        let services = services.clone();
        async move {
            services
                .patch(
                    "chat",
                    &PatchParams::apply("gitops").force(),
                    &Patch::Apply(json!({
                        "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
                        "metadata": {"name": "chat",
                                     "annotations": {"infergate.dev/rollout-action": value}},
                    })),
                )
                .await
                .expect("server-side apply by the gitops manager");
        }
    };
    // A, by the GitOps tool: paused.
    gitops_apply("pause/A").await;
    let paused = wait_rollout(&client, &ns, "A acted on", |r| {
        r.phase == RolloutPhase::Paused
    })
    .await;
    assert_eq!(paused.actions_seen, ["pause/A"]);
    // B, by hand: resumed.
    act(&client, &ns, "resume/B").await;
    let resumed = wait_rollout(&client, &ns, "B acted on", |r| {
        r.actions_seen.iter().any(|a| a == "resume/B")
    })
    .await;
    assert_eq!(resumed.phase, RolloutPhase::Progressing);
    // A again, applied by the same manager: not acted on. The rollout
    // walks every remaining step (each soaks 2 s, so the reconciles that
    // read A again come before the last) as if nothing had been written.
    gitops_apply("pause/A").await;
    let svc = get::<InferenceService>(&client, &ns, "chat").await.unwrap();
    assert_eq!(
        svc.annotations()
            .get("infergate.dev/rollout-action")
            .map(String::as_str),
        Some("pause/A")
    );
    let st = wait_rollout(&client, &ns, "the last step passed after A again", |r| {
        r.reason.as_deref() == Some("Promoting")
    })
    .await;
    assert_eq!(st.phase, RolloutPhase::Progressing, "{st:?}");
    assert_eq!(st.actions_seen, ["pause/A", "resume/B"]);
    assert_eq!(st.last_action.as_deref(), Some("resume/B"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promote_skips_the_remaining_steps_without_more_weight() {
    let s = setup("promote").await;
    let (client, ns) = (s.client.clone(), s.ns.clone());
    create(&client, &ns, &[10, 30, 60], "1m", json!({})).await;
    v1_stable(&client, &ns).await;
    primary_complete(&client, &ns).await;
    set_model(&client, &ns, "v2").await;
    canary_ready(&client, &ns).await;
    wait_route(&client, &ns, &[("chat", 90), ("chat-canary", 10)]).await;
    act(&client, &ns, "promote/now").await;
    // Never more than the current weight while the primary is rolled.
    wait_rollout(&client, &ns, "promoting", |r| {
        r.reason.as_deref() == Some("Promoting")
    })
    .await;
    assert_eq!(
        route(&client, &ns).await,
        [("chat".to_owned(), 90), ("chat-canary".to_owned(), 10)]
    );
    primary_complete(&client, &ns).await;
    let st = wait_rollout(&client, &ns, "v2 stable", |r| {
        r.phase == RolloutPhase::Stable
    })
    .await;
    assert_eq!(st.stable.unwrap().model.r#ref, "v2");
    wait_route(&client, &ns, &[("chat", 100)]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_infergate_resumes_at_the_same_step() {
    let Setup {
        client,
        ns,
        mut reconciler,
        kubeconfig,
        prometheus,
        ..
    } = setup("resume").await;
    create(&client, &ns, &[10, 30, 60], "4s", json!({})).await;
    v1_stable(&client, &ns).await;
    // Every version of the route, across the restart.
    let timeline = Timeline::start(&client, &ns).await;
    set_model(&client, &ns, "v2").await;
    canary_ready(&client, &ns).await;
    let at_step_2 = wait_rollout(&client, &ns, "step 2", |r| r.step == Some(1)).await;
    // Stop infergate in the middle of step 2 and start another: every
    // route version after this revision is the new reconciler's.
    reconciler.take().expect("reconciler").stop();
    let stopped_at: u64 = get::<HTTPRoute>(&client, &ns, "chat")
        .await
        .and_then(|r| r.resource_version())
        .and_then(|v| v.parse().ok())
        .expect("the route's resourceVersion");
    let _again = reconciler_again(kubeconfig, &prometheus.url, &ns);
    let st = wait_rollout(&client, &ns, "the new reconciler's first status", |_| true).await;
    assert!(st.step >= at_step_2.step && st.weight >= Some(30), "{st:?}");
    wait_route(&client, &ns, &[("chat", 40), ("chat-canary", 60)]).await;
    let seen = timeline.stop().await;
    let told = story(&seen);
    // The canary's weight in every route version never goes back: the new
    // reconciler's first write keeps step 2 (never 10, or 0, after 30).
    let weights: Vec<(u64, i32)> = seen
        .iter()
        .filter(|s| s.kind == "HTTPRoute" && s.name == "chat")
        .map(|s| (s.revision, s.weight("chat-canary")))
        .collect();
    assert!(
        weights.windows(2).all(|w| w[0].1 <= w[1].1),
        "the canary's weight went back: {weights:?}\n{told}"
    );
    let before: Vec<i32> = weights
        .iter()
        .filter(|(r, _)| *r <= stopped_at)
        .map(|(_, w)| *w)
        .collect();
    let after: Vec<i32> = weights
        .iter()
        .filter(|(r, _)| *r > stopped_at)
        .map(|(_, w)| *w)
        .collect();
    assert!(
        before.last().is_some_and(|w| *w >= 30),
        "{weights:?}\n{told}"
    );
    // The new reconciler wrote the route (unless the old one had already
    // reached the last step), and never below step 2's weight.
    assert!(
        after.first().is_none_or(|w| *w >= 30) && (!after.is_empty() || before.last() == Some(&60)),
        "the new reconciler's route versions: {after:?}\n{told}"
    );
    assert_eq!(weights.last().map(|w| w.1), Some(60), "{told}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_target_mid_rollout_lets_go_of_the_route_before_the_canary_changes() {
    let s = setup("retarget").await;
    let (client, ns) = (s.client.clone(), s.ns.clone());
    create(&client, &ns, &[10, 30, 60], "4s", json!({})).await;
    v1_stable(&client, &ns).await;
    primary_complete(&client, &ns).await;
    let timeline = Timeline::start(&client, &ns).await;
    set_model(&client, &ns, "v2").await;
    canary_ready(&client, &ns).await;
    // New targets while the canary carries 30% or 10%: each restarts at
    // the first step, the route letting go of the canary (weight 0, no
    // backendRef) before the canary's template changes.
    let targets = [("v3", 30), ("v4", 10), ("v5", 30), ("v6", 10)];
    for (target, at) in targets {
        wait_route(&client, &ns, &[("chat", 100 - at), ("chat-canary", at)]).await;
        set_model(&client, &ns, target).await;
        wait_rollout(&client, &ns, &format!("{target} restarted"), |r| {
            r.phase == RolloutPhase::Progressing
                && r.target.as_ref().is_some_and(|t| t.model.r#ref == target)
        })
        .await;
        eventually(
            &format!("the canary's template at {target}"),
            WAIT,
            async || {
                (model_of(&client, &ns, "chat-canary").await.as_deref() == Some(target))
                    .then_some(())
            },
        )
        .await;
        canary_ready(&client, &ns).await;
    }
    wait_route(&client, &ns, &[("chat", 90), ("chat-canary", 10)]).await;
    // Back to the stable version: the rollout ends at once, the route
    // first, then the canary goes.
    set_model(&client, &ns, "v1").await;
    let st = wait_rollout(&client, &ns, "reverted", |r| {
        r.phase == RolloutPhase::Stable
    })
    .await;
    assert_eq!(st.reason.as_deref(), Some("Reverted"));
    wait_route(&client, &ns, &[("chat", 100)]).await;
    wait_gone::<Deployment>(&client, &ns, "chat-canary", WAIT).await;
    let seen = timeline.stop().await;
    let told = story(&seen);
    let checked = assert_route_first(&seen, "chat", "chat-canary");
    // Four template changes, the Deployment and the Service going.
    assert!(checked >= targets.len() + 2, "{checked} checked:\n{told}");
    // Between two weights of different targets the route named no canary.
    let weights: Vec<i32> = seen
        .iter()
        .filter(|s| s.kind == "HTTPRoute" && s.name == "chat")
        .map(|s| s.weight("chat-canary"))
        .collect();
    let zeros = weights.windows(2).filter(|w| w[0] > 0 && w[1] == 0).count();
    assert!(zeros > targets.len(), "{weights:?}\n{told}");
    assert_eq!(model_of(&client, &ns, "chat").await.as_deref(), Some("v1"));
}

fn reconciler_again(kubeconfig: std::path::PathBuf, prometheus: &str, ns: &str) -> Reconciler {
    reconciler(kubeconfig, prometheus, &format!("{ns}-1"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gate_sends_only_queries_confined_to_the_namespace() {
    let s = setup("confined").await;
    let (client, ns, prometheus) = (s.client.clone(), s.ns.clone(), s.prometheus.clone());
    // Another namespace's matcher, a regex matcher, none at all, an
    // `on()` join and a subquery: every selector must reach Prometheus
    // pinned to the service's namespace.
    let query = "sum(rate(confined_latency{namespace=\"kube-system\"}[5m])) / on() \
                 sum(max_over_time(rate(confined_requests{namespace=~\".+\"}[1m])[5m:1m])) \
                 + ignoring(pod) count(confined_up)";
    create(
        &client,
        &ns,
        &[10, 30],
        "2s",
        json!({"analysis": {"prometheus": {"query": query, "threshold": {"max": 1.0}}}}),
    )
    .await;
    prometheus.set(&ns, 5.0);
    canary_at_the_first_step(&client, &ns).await;
    let st = wait_rollout(&client, &ns, "rolled back by the gate", |r| {
        r.phase == RolloutPhase::RolledBack
    })
    .await;
    assert_eq!(st.reason.as_deref(), Some("AnalysisFailed"));
    // The fake serves every test of this binary: this test's queries are
    // the ones naming its metrics.
    let asked: Vec<String> = prometheus
        .queries
        .lock()
        .unwrap()
        .iter()
        .filter(|q| q.contains("confined_"))
        .cloned()
        .collect();
    assert!(!asked.is_empty());
    let pinned = format!("namespace=\"{ns}\"");
    for q in &asked {
        assert!(!q.contains("kube-system") && !q.contains(".+"), "{q}");
        // Every selector carries exactly the service's namespace.
        let expr = promql_parser::parser::parse(q).expect("valid PromQL");
        let text = expr.to_string();
        assert_eq!(text.matches("namespace").count(), 3, "{q}");
        assert_eq!(text.matches(&pinned).count(), 3, "{q}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_without_data_fails_at_the_deadline_asking_once_per_interval() {
    let s = setup("nodata").await;
    let (client, ns, prometheus) = (s.client.clone(), s.ns.clone(), s.prometheus.clone());
    create(
        &client,
        &ns,
        &[10, 30],
        "3s",
        json!({"progressDeadline": "15s",
               "analysis": {"prometheus": {"query": "up", "threshold": {"min": 1.0}}}}),
    )
    .await;
    // No value set: every query answers no sample.
    canary_at_the_first_step(&client, &ns).await;
    wait_rollout(&client, &ns, "holding for data", |r| {
        r.reason.as_deref() == Some("AnalysisNoData")
    })
    .await;
    let st = wait_rollout(&client, &ns, "failed for want of data", |r| {
        r.phase == RolloutPhase::RolledBack
    })
    .await;
    assert_eq!(st.reason.as_deref(), Some("AnalysisNoData"));
    assert!(st.message.unwrap_or_default().len() <= 1024);
    // Asked at 3 s, 6 s, ... within the 15 s: once per interval, never faster.
    // The fake serves every test of this binary: count this namespace's.
    let mine = format!("namespace=\"{ns}\"");
    let asked = prometheus
        .queries
        .lock()
        .unwrap()
        .iter()
        .filter(|q| q.contains(&mine))
        .count();
    assert!((1..=6).contains(&asked), "{asked} queries");
    wait_route(&client, &ns, &[("chat", 100)]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_weight_is_held_at_least_the_interval_on_the_route() {
    use futures::StreamExt;
    use kube::runtime::WatchStreamExt;
    let s = setup("soak").await;
    let (client, ns) = (s.client.clone(), s.ns.clone());
    create(&client, &ns, &[10, 30, 60], "3s", json!({})).await;
    // Watch the route: when each weight of the canary first appears.
    let seen: Arc<Mutex<Vec<(i32, std::time::Instant)>>> = Arc::default();
    let watch = {
        let seen = seen.clone();
        let api: Api<HTTPRoute> = Api::namespaced(client.clone(), &ns);
        tokio::spawn(async move {
            let mut stream = kube::runtime::watcher(api, kube::runtime::watcher::Config::default())
                .applied_objects()
                .boxed();
            while let Some(Ok(r)) = stream.next().await {
                let now = std::time::Instant::now();
                let w = r.spec.rules[0]
                    .backend_refs
                    .iter()
                    .find(|b| b.name == "chat-canary")
                    .map_or(0, |b| b.weight.unwrap_or(1));
                let mut seen = seen.lock().unwrap();
                if seen.last().map(|l| l.0) != Some(w) {
                    seen.push((w, now));
                }
            }
        })
    };
    canary_at_the_first_step(&client, &ns).await;
    wait_rollout(&client, &ns, "promoting", |r| {
        r.reason.as_deref() == Some("Promoting")
    })
    .await;
    wait_route(&client, &ns, &[("chat", 40), ("chat-canary", 60)]).await;
    watch.abort();
    let seen = seen.lock().unwrap().clone();
    let weights: Vec<i32> = seen.iter().map(|s| s.0).collect();
    for pair in seen.windows(2) {
        let (w, from) = pair[0];
        if w == 10 || w == 30 {
            let held = pair[1].1.duration_since(from);
            assert!(
                held >= Duration::from_secs(3),
                "weight {w} held {held:?} (< 3s): {weights:?}"
            );
        }
    }
    assert!(weights.windows(2).any(|p| p == [10, 30]), "{weights:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_with_no_prometheus_address_says_so_in_status() {
    let Setup {
        client,
        ns,
        mut reconciler,
        kubeconfig,
        ..
    } = setup("noaddress").await;
    // This reconciler knows no Prometheus (and no policy names one).
    reconciler.take().expect("reconciler").stop();
    let config = Config {
        lease: LeaseTiming {
            duration_seconds: 6,
            grace_seconds: 2,
        },
        ..support::reconcile_config(&format!("{ns}-1"))
    };
    let _bare = Reconciler::start(kubeconfig, config);
    create(
        &client,
        &ns,
        &[10, 30],
        "2s",
        json!({"progressDeadline": "30s",
               "analysis": {"prometheus": {"query": "up", "threshold": {"min": 1.0}}}}),
    )
    .await;
    canary_at_the_first_step(&client, &ns).await;
    let st = wait_rollout(&client, &ns, "held for want of an address", |r| {
        r.reason.as_deref() == Some("NoPrometheusAddress")
    })
    .await;
    let message = st.message.unwrap_or_default();
    assert!(
        message.contains("no Prometheus address")
            && message.contains("defaults.rollout.analysis.prometheus.address"),
        "{message}"
    );
    assert_eq!(st.weight, Some(10));
}
