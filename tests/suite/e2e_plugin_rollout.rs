//! End-to-end: `kubectl infergate rollout ...` through kubectl's plugin
//! mechanism against the real control plane, with a reconciler of its own
//! and the test playing the kubelet: a rollout driven to promotion and one
//! aborted into a rollback, each watched by `rollout status -w` with its exit
//! code checked; a rollout held by its gate that `-w --timeout` gives up on
//! (2); `promote` and `abort` written by server-side apply and acted on;
//! an annotation a GitOps field manager owns left alone (the manifest change
//! printed instead) unless `--force`, and that manager's re-applied value,
//! acted on before, changing nothing; the human output of `rollout status`
//! compared to recorded expectations.

use crate::support;
use std::process::Output;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::support::plugin::assert_recorded;
use crate::support::{ControlPlane, Reconciler, WAIT, eventually, get};
use infergate::api::rollout::{RolloutPhase, RolloutStatus};
use infergate::api::v1beta1::InferenceService;
use infergate::reconcile::{Config, LeaseTiming};

const ENGINE: &str = "registry.example.com/vllm:0.9";

struct Setup {
    _turn: tokio::sync::MutexGuard<'static, ()>,
    cp: &'static ControlPlane,
    client: Client,
    ns: String,
    _reconciler: Reconciler,
}

/// The control plane, a fresh namespace and a reconciler of this test's own
/// (the tests take turns: only the Lease holder reconciles).
async fn setup(prefix: &str) -> Setup {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let turn = TURN.lock().await;
    let (cp, client, kubeconfig) = support::reconciler_setup(&[support::httproute_crd()]).await;
    let ns = cp.fresh_namespace(prefix).await;
    let config = Config {
        lease: LeaseTiming {
            duration_seconds: 6,
            grace_seconds: 2,
        },
        ..support::reconcile_config(&format!("{prefix}-0"))
    };
    Setup {
        _turn: turn,
        cp,
        client,
        ns,
        _reconciler: Reconciler::start(kubeconfig, config),
    }
}

/// Service `name` at model `v1`; `rollout` is its `spec.rollout` (none: no
/// progressive rollout).
async fn create(client: &Client, ns: &str, name: &str, rollout: Option<serde_json::Value>) {
    let mut spec = json!({"model": {"ref": "v1"}, "engine": {"image": ENGINE}, "replicas": 1,
                          "routing": {"gateway": {"name": "inference-gw", "namespace": "gateways"}}});
    if let Some(r) = rollout {
        spec["rollout"] = r;
    }
    let svc: InferenceService = serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
        "metadata": {"name": name, "namespace": ns}, "spec": spec,
    }))
    .expect("service");
    Api::<InferenceService>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &svc)
        .await
        .expect("create service");
}

fn canary(steps: &[i32], interval: &str) -> serde_json::Value {
    json!({"strategy": "Canary", "steps": steps, "interval": interval, "progressDeadline": "5m"})
}

async fn set_model(client: &Client, ns: &str, model: &str) {
    Api::<InferenceService>::namespaced(client.clone(), ns)
        .patch(
            "chat",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"model": {"ref": model}}})),
        )
        .await
        .expect("patch service");
}

/// `status.rollout` of `chat` once `pred` holds.
async fn wait_rollout(
    client: &Client,
    ns: &str,
    what: &str,
    pred: impl Fn(&RolloutStatus) -> bool,
) -> RolloutStatus {
    eventually(what, WAIT, async || {
        let s = get::<InferenceService>(client, ns, "chat")
            .await
            .ok_or("no service")?;
        let r = s.status.and_then(|st| st.rollout).ok_or("no rollout")?;
        pred(&r).then_some(r.clone()).ok_or(format!("{r:?}"))
    })
    .await
}

/// The model a Deployment serves (`--served-model-name`).
async fn model_of(client: &Client, ns: &str, name: &str) -> Option<String> {
    let d = get::<Deployment>(client, ns, name).await?;
    let args = d.spec?.template.spec?.containers.into_iter().next()?.args?;
    let i = args.iter().position(|a| a == "--served-model-name")?;
    args.get(i + 1).cloned()
}

/// Play the kubelet for a track of `chat` until its Deployment is complete.
async fn track_complete(client: &Client, ns: &str, track: &str, name: &str) {
    support::wait_exists::<Deployment>(client, ns, name).await;
    support::chat_track_complete(client, ns, track, name).await;
}

/// `v1` stable and complete, then `v2` with its canary ready at the first step.
async fn canary_at_the_first_step(client: &Client, ns: &str) {
    wait_rollout(client, ns, "v1 stable", |r| r.phase == RolloutPhase::Stable).await;
    track_complete(client, ns, "primary", "chat").await;
    set_model(client, ns, "v2").await;
    track_complete(client, ns, "canary", "chat-canary").await;
    wait_rollout(client, ns, "the first step", |r| r.weight == Some(10)).await;
}

/// `kubectl infergate ARGS -n NS` on a blocking thread.
fn spawn_plugin(
    cp: &'static ControlPlane,
    ns: &str,
    args: &[&str],
) -> tokio::task::JoinHandle<Output> {
    let mut args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    args.extend(["-n".to_owned(), ns.to_owned()]);
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        cp.kubectl_infergate(&args)
    })
}

async fn plugin(cp: &'static ControlPlane, ns: &str, args: &[&str]) -> Output {
    spawn_plugin(cp, ns, args).await.expect("plugin thread")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn code(out: &Output) -> Option<i32> {
    out.status.code()
}

/// The value `VERB/TOKEN` an action printed it wrote.
fn written(out: &Output) -> String {
    let text = stdout(out);
    let line = text
        .lines()
        .find(|l| l.starts_with("infergate.dev/rollout-action: "))
        .unwrap_or_else(|| panic!("no value written in {}", support::text(out)));
    line.trim_start_matches("infergate.dev/rollout-action: ")
        .trim_end_matches(" written")
        .to_owned()
}

/// The action annotation is owned by the field manager `kubectl-infergate`.
fn assert_applied_by_plugin(svc: &InferenceService) {
    let entry = svc
        .managed_fields()
        .iter()
        .find(|m| m.manager.as_deref() == Some("kubectl-infergate"))
        .unwrap_or_else(|| panic!("no kubectl-infergate manager: {:?}", svc.managed_fields()));
    assert_eq!(entry.operation.as_deref(), Some("Apply"));
    let fields = serde_json::to_string(&entry.fields_v1).expect("fields");
    assert!(
        fields.contains("f:infergate.dev/rollout-action"),
        "{fields}"
    );
    assert!(!fields.contains("f:spec"), "{fields}");
}

/// Watched by `rollout status -w`, a new model walks the steps and is
/// promoted: exit 0, one plain line per change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watched_rollout_promoted_exits_0() {
    let s = setup("plugin-promote").await;
    let (cp, client, ns) = (s.cp, s.client.clone(), s.ns.clone());
    create(&client, &ns, "chat", Some(canary(&[10, 30], "1s"))).await;
    wait_rollout(&client, &ns, "v1 stable", |r| {
        r.phase == RolloutPhase::Stable
    })
    .await;
    track_complete(&client, &ns, "primary", "chat").await;
    set_model(&client, &ns, "v2").await;
    // Started before the reconciler moved on: the old Stable is not the end.
    let watcher = spawn_plugin(
        cp,
        &ns,
        &["rollout", "status", "chat", "-w", "--timeout", "3m"],
    );
    track_complete(&client, &ns, "canary", "chat-canary").await;
    wait_rollout(&client, &ns, "promoting", |r| {
        r.reason.as_deref() == Some("Promoting")
    })
    .await;
    eventually("the primary at v2", WAIT, async || {
        (model_of(&client, &ns, "chat").await.as_deref() == Some("v2")).then_some(())
    })
    .await;
    track_complete(&client, &ns, "primary", "chat").await;
    let out = watcher.await.expect("watcher");
    let text = stdout(&out);
    eprintln!("kubectl infergate rollout status chat -w --timeout 3m:\n{text}");
    assert_eq!(code(&out), Some(0), "{}", support::text(&out));
    assert!(!text.contains('\x1b'), "{text:?}");
    assert!(text.lines().any(|l| l.starts_with("Progressing")), "{text}");
    let last = text.lines().last().unwrap_or_default();
    assert!(last.starts_with("Stable"), "{text}");
    assert!(last.contains("Promoted: v2 is stable"), "{text}");

    let out = plugin(cp, &ns, &["rollout", "status", "chat"]).await;
    assert_eq!(code(&out), Some(0), "{}", support::text(&out));
    assert_recorded("rollout-promoted", &stdout(&out), &[(&ns, "NS")]);
}

/// `rollout abort` through the plugin rolls back a watched rollout: the
/// action exits 0 once acted on, the watcher 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborted_rollout_rolls_back_and_the_watch_exits_1() {
    let s = setup("plugin-abort").await;
    let (cp, client, ns) = (s.cp, s.client.clone(), s.ns.clone());
    create(&client, &ns, "chat", Some(canary(&[10, 30, 60], "10m"))).await;
    canary_at_the_first_step(&client, &ns).await;

    // Without -w: where it stands, exit 0 while in progress.
    let out = plugin(cp, &ns, &["rollout", "status", "chat"]).await;
    assert_eq!(code(&out), Some(0), "{}", support::text(&out));
    let text = stdout(&out);
    // The soak left changes from run to run.
    let soak = text
        .split(", soak ")
        .nth(1)
        .and_then(|t| t.split(" left").next())
        .unwrap_or_else(|| panic!("no soak in {text}"))
        .to_owned();
    assert_recorded(
        "rollout-progressing",
        &text,
        &[
            (&ns, "NS"),
            (&format!(", soak {soak} left"), ", soak SOAK left"),
        ],
    );

    let watcher = spawn_plugin(
        cp,
        &ns,
        &["rollout", "status", "chat", "-w", "--timeout", "2m"],
    );
    let out = plugin(cp, &ns, &["rollout", "abort", "chat"]).await;
    assert_eq!(code(&out), Some(0), "{}", support::text(&out));
    let value = written(&out);
    assert!(value.starts_with("abort/"), "{value}");
    assert!(stdout(&out).contains("acted on"), "{}", support::text(&out));
    let svc = get::<InferenceService>(&client, &ns, "chat").await.unwrap();
    let st = svc.status.clone().and_then(|s| s.rollout).unwrap();
    assert_eq!(st.last_action.as_deref(), Some(value.as_str()));
    assert_eq!(
        svc.annotations().get("infergate.dev/rollout-action"),
        Some(&value)
    );
    assert_applied_by_plugin(&svc);

    let out = watcher.await.expect("watcher");
    assert_eq!(code(&out), Some(1), "{}", support::text(&out));
    let text = stdout(&out);
    assert!(
        text.lines()
            .last()
            .unwrap_or_default()
            .starts_with("RolledBack"),
        "{text}"
    );
    let out = plugin(cp, &ns, &["rollout", "status", "chat"]).await;
    assert_eq!(code(&out), Some(1), "{}", support::text(&out));
    assert!(
        stdout(&out).contains("rolled back"),
        "{}",
        support::text(&out)
    );
}

/// A rollout held by its gate (no Prometheus address): `-w --timeout`
/// gives up with 2; `promote` through the plugin is acted on. A missing
/// service is an error; a service without a canary rollout is stable and
/// refuses actions without writing anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_rollout_times_out_with_2_and_is_promoted() {
    let s = setup("plugin-held").await;
    let (cp, client, ns) = (s.cp, s.client.clone(), s.ns.clone());
    let mut rollout = canary(&[10, 30], "1s");
    rollout["analysis"] = json!({"prometheus": {"query": "up{namespace=\"{{namespace}}\"}",
                                                "threshold": {"max": 1.0}}});
    create(&client, &ns, "chat", Some(rollout)).await;
    canary_at_the_first_step(&client, &ns).await;
    wait_rollout(&client, &ns, "held by the gate", |r| {
        r.reason.as_deref() == Some("NoPrometheusAddress")
    })
    .await;

    let started = std::time::Instant::now();
    let out = plugin(
        cp,
        &ns,
        &["rollout", "status", "chat", "-w", "--timeout", "2s"],
    )
    .await;
    assert_eq!(code(&out), Some(2), "{}", support::text(&out));
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("timed out"),
        "{}",
        support::text(&out)
    );
    assert!(
        stdout(&out).starts_with("Progressing"),
        "{}",
        support::text(&out)
    );
    let out = plugin(cp, &ns, &["rollout", "status", "chat"]).await;
    assert_eq!(code(&out), Some(0), "{}", support::text(&out));
    assert_recorded("rollout-held", &stdout(&out), &[(&ns, "NS")]);

    let out = plugin(cp, &ns, &["rollout", "promote", "chat"]).await;
    assert_eq!(code(&out), Some(0), "{}", support::text(&out));
    let value = written(&out);
    assert!(value.starts_with("promote/"), "{value}");
    let st = wait_rollout(&client, &ns, "promote acted on", |_| true).await;
    assert_eq!(st.last_action.as_deref(), Some(value.as_str()));
    assert_eq!(st.reason.as_deref(), Some("Promoting"), "{st:?}");
    assert_applied_by_plugin(&get::<InferenceService>(&client, &ns, "chat").await.unwrap());

    let out = plugin(cp, &ns, &["rollout", "status", "nosuch"]).await;
    assert_eq!(code(&out), Some(1), "{}", support::text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).starts_with("error: "),
        "{}",
        support::text(&out)
    );

    create(&client, &ns, "plain", None).await;
    let out = plugin(cp, &ns, &["rollout", "status", "plain", "-w"]).await;
    assert_eq!(code(&out), Some(0), "{}", support::text(&out));
    assert!(
        stdout(&out).contains("no canary rollout"),
        "{}",
        support::text(&out)
    );
    let out = plugin(cp, &ns, &["rollout", "promote", "plain"]).await;
    assert_eq!(code(&out), Some(1), "{}", support::text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no canary rollout"),
        "{}",
        support::text(&out)
    );
    let plain = get::<InferenceService>(&client, &ns, "plain")
        .await
        .unwrap();
    assert!(
        !plain
            .annotations()
            .contains_key("infergate.dev/rollout-action")
    );
}

/// The server-side apply of `chat`'s action annotation by the field
/// manager `flux`, as a GitOps tool that owns it applies its copy.
async fn flux_applies(client: &Client, ns: &str, value: &str) {
    Api::<InferenceService>::namespaced(client.clone(), ns)
        .patch(
            "chat",
            &PatchParams::apply("flux").force(),
            &Patch::Apply(json!({
                "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
                "metadata": {"name": "chat",
                             "annotations": {"infergate.dev/rollout-action": value}},
            })),
        )
        .await
        .expect("server-side apply by flux");
}

/// A GitOps tool owns the action annotation: `rollout resume` writes
/// nothing, names the manager and prints the manifest change to make;
/// `--force` takes the annotation over and is acted on; the tool's next
/// apply of its own value (acted on before) changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_annotation_a_gitops_tool_owns_is_taken_only_with_force() {
    let s = setup("plugin-gitops").await;
    let (cp, client, ns) = (s.cp, s.client.clone(), s.ns.clone());
    create(&client, &ns, "chat", Some(canary(&[10, 30, 60], "2s"))).await;
    canary_at_the_first_step(&client, &ns).await;
    flux_applies(&client, &ns, "pause/from-git").await;
    wait_rollout(&client, &ns, "paused by the manifest's value", |r| {
        r.phase == RolloutPhase::Paused
    })
    .await;

    let out = plugin(cp, &ns, &["rollout", "resume", "chat"]).await;
    eprintln!(
        "kubectl infergate rollout resume chat:\n{}",
        support::text(&out)
    );
    assert_eq!(code(&out), Some(1), "{}", support::text(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with(&format!(
            "infergate.dev/rollout-action of {ns}/chat is managed by \"flux\" (Apply), not by kubectl-infergate: nothing was written.\n"
        )),
        "{text}"
    );
    let snippet = text
        .split("\n\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no manifest change in {text}"));
    let manifest: serde_json::Value = serde_saphyr::from_str(snippet).expect("YAML");
    let proposed = manifest["metadata"]["annotations"]["infergate.dev/rollout-action"]
        .as_str()
        .unwrap_or_else(|| panic!("no annotation in {snippet}"))
        .to_owned();
    assert!(proposed.starts_with("resume/"), "{proposed}");
    assert!(
        text.contains(&format!(
            "kubectl infergate rollout resume chat -n {ns} --force"
        )),
        "{text}"
    );
    let svc = get::<InferenceService>(&client, &ns, "chat").await.unwrap();
    assert_eq!(
        svc.annotations()
            .get("infergate.dev/rollout-action")
            .map(String::as_str),
        Some("pause/from-git"),
        "nothing written"
    );
    assert_eq!(
        svc.status.and_then(|s| s.rollout).map(|r| r.phase),
        Some(RolloutPhase::Paused)
    );

    let out = plugin(cp, &ns, &["rollout", "resume", "chat", "--force"]).await;
    assert_eq!(code(&out), Some(0), "{}", support::text(&out));
    let value = written(&out);
    assert!(value.starts_with("resume/") && value != proposed, "{value}");
    let svc = get::<InferenceService>(&client, &ns, "chat").await.unwrap();
    assert_applied_by_plugin(&svc);
    let st = svc.status.and_then(|s| s.rollout).unwrap();
    assert_eq!(
        st.actions_seen,
        ["pause/from-git".to_owned(), value.clone()]
    );

    // The tool applies its copy again: its value, acted on before, changes
    // nothing; the rollout walks every remaining step (2 s each).
    flux_applies(&client, &ns, "pause/from-git").await;
    let st = wait_rollout(&client, &ns, "the last step passed", |r| {
        r.reason.as_deref() == Some("Promoting")
    })
    .await;
    assert_eq!(st.phase, RolloutPhase::Progressing, "{st:?}");
    assert_eq!(st.actions_seen, ["pause/from-git".to_owned(), value]);
    let svc = get::<InferenceService>(&client, &ns, "chat").await.unwrap();
    assert_eq!(
        svc.annotations()
            .get("infergate.dev/rollout-action")
            .map(String::as_str),
        Some("pause/from-git")
    );
}
