//! A GitOps tool beside infergate: it owns a service's manifest (its own
//! field manager, server-side apply) and re-applies its copy whenever the
//! cluster drifts from Git. A rollout action it carries acts once; a
//! re-applied copy of a value already acted on repeats nothing, even after
//! somebody else wrote another value in between.

use std::time::Duration;

use kube::Api;

use infergate::api::v1beta1::InferenceService;

use super::TURN;
use crate::support::{self, Hooks, WAIT, text};

/// The service as Git holds it: `replicas`, and the rollout action `action`.
fn manifest(ns: &str, replicas: u32, action: &str) -> String {
    format!(
        "apiVersion: infergate.dev/v1beta1\nkind: InferenceService\nmetadata:\n  name: chat\n  namespace: {ns}\n  annotations: {{infergate.dev/rollout-action: {action}}}\nspec:\n  model: {{ref: llama3-8b}}\n  engine: {{image: registry.example.com/vllm:0.9}}\n  replicas: {replicas}\n"
    )
}

/// The values acted on, once the reconciler has seen the service's
/// current generation.
async fn actions_seen(client: &kube::Client, ns: &str, what: &str, want: &[&str]) -> Vec<String> {
    let api: Api<InferenceService> = Api::namespaced(client.clone(), ns);
    support::eventually(what, WAIT, async || {
        let svc = api.get("chat").await.map_err(|e| e.to_string())?;
        let status = svc.status.clone().unwrap_or_default();
        let current = status.observed_generation == svc.metadata.generation;
        let seen = status.rollout.map(|r| r.actions_seen).unwrap_or_default();
        if current && seen == want {
            Ok(seen)
        } else {
            Err(format!(
                "observed generation current: {current}; actionsSeen {seen:?}"
            ))
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gitops_tool_reapplying_its_copy_repeats_no_action() {
    let _turn = TURN.lock().await;
    support::init_tracing();
    let cp = support::control_plane().await;
    cp.install_crds().await;
    let _server = support::start_infergate(cp, support::binary(), &[], Hooks::All)
        .await
        .unwrap_or_else(|e| panic!("starting infergate: {e:#}"));
    let ns = cp.fresh_namespace("citizen-gitops").await;
    let client = cp.client().await;
    let gitops = |yaml: String| {
        let out = cp.kubectl_stdin(
            &[
                "apply",
                "--server-side",
                "--force-conflicts",
                "--field-manager=argocd",
                "-f",
                "-",
            ],
            &yaml,
        );
        assert!(out.status.success(), "the GitOps apply: {}", text(&out));
    };

    // Git holds `pause/A`: acted on once.
    gitops(manifest(&ns, 1, "pause/A"));
    actions_seen(&client, &ns, "pause/A is acted on", &["pause/A"]).await;

    // Somebody resumes by hand (another field manager).
    let out = cp.kubectl(&[
        "annotate",
        "infsvc",
        "chat",
        "-n",
        &ns,
        "--overwrite",
        "infergate.dev/rollout-action=resume/B",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    actions_seen(
        &client,
        &ns,
        "resume/B is acted on",
        &["pause/A", "resume/B"],
    )
    .await;

    // The GitOps tool puts its copy back (with a change of its own, so that
    // a reconcile of what it wrote is seen): `pause/A` again, ignored.
    gitops(manifest(&ns, 2, "pause/A"));
    let seen = actions_seen(
        &client,
        &ns,
        "the re-applied copy is reconciled",
        &["pause/A", "resume/B"],
    )
    .await;
    assert_eq!(seen, ["pause/A", "resume/B"]);
    let svc = Api::<InferenceService>::namespaced(client.clone(), &ns)
        .get("chat")
        .await
        .expect("service");
    assert_eq!(
        svc.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("infergate.dev/rollout-action"))
            .map(String::as_str),
        Some("pause/A"),
        "the GitOps tool's value is what the object holds"
    );
    assert_eq!(
        svc.status
            .and_then(|s| s.rollout)
            .and_then(|r| r.last_action)
            .as_deref(),
        Some("resume/B"),
        "the last action acted on is still the resume"
    );
    // And it stays so: a few more reconciles act on nothing.
    tokio::time::sleep(Duration::from_secs(3)).await;
    actions_seen(
        &client,
        &ns,
        "nothing more is acted on",
        &["pause/A", "resume/B"],
    )
    .await;
}
