//! The rollout actions (`infergate.dev/rollout-action`): pause, resume and
//! abort act once per value (a re-applied annotation does not abort the
//! next rollout), A-B-A acts twice while a GitOps tool's re-applied value
//! changes nothing, and promote skips the remaining steps without more
//! weight.

use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::support::get;
use infergate::api::rollout::RolloutPhase;
use infergate::api::v1beta1::InferenceService;

use super::{
    act, canary_at_the_first_step, canary_ready, create, event_reasons, patch, primary_complete,
    route, set_model, setup, v1_stable, wait_rollout, wait_route,
};

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
