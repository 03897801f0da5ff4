//! The walk through the steps: a new model walks every step and becomes
//! stable (the primary rolled first, then the canary gone), a crash-looping
//! canary is rolled back and not retried, a restarted infergate resumes at
//! the same step (the canary's weight never going back), a new target mid
//! rollout lets go of the route before the canary changes, and every
//! weight is held at least the interval on the route.

use crate::support;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::support::timeline::{Timeline, assert_route_first, story};
use crate::support::{Reconciler, WAIT, eventually, get, wait_gone};
use infergate::api::rollout::RolloutPhase;
use infergate::api::v1beta1::InferenceService;
use infergate::reconcile::children::httproute::HTTPRoute;

use super::{
    ENGINE, Setup, canary_at_the_first_step, canary_ready, create, event_reasons, model_of,
    primary_complete, reconciler, route, set_model, setup, v1_stable, wait_rollout, wait_route,
};

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

/// A version that differs only in `spec.model.image` (an image volume; the
/// engine's container and arguments stay the same): the canary counts as
/// ready, and the primary as rolled, only once pods of the new template
/// are ready; until the kubelet stand-in readies them, the weight stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_model_image_alone_moves_no_weight_before_its_pods_serve() {
    let s = setup("rollout-image").await;
    let (client, ns) = (s.client.clone(), s.ns.clone());
    create(&client, &ns, &[50], "2s", json!({})).await;
    v1_stable(&client, &ns).await;
    // Weights from an image volume, in the first version already.
    let image = |tag: &str| json!({"spec": {"model": {"ref": "v1", "image": format!("registry.example.com/weights:{tag}")}}});
    super::patch(&client, &ns, image("1")).await;
    wait_rollout(&client, &ns, "the first image rolled out", |r| {
        r.phase == RolloutPhase::Progressing
    })
    .await;
    canary_ready(&client, &ns).await;
    primary_rolled_to(&client, &ns, "1").await;
    wait_rollout(&client, &ns, "image 1 stable", |r| {
        r.phase == RolloutPhase::Stable
            && r.stable.as_ref().is_some_and(|v| v.model.image.is_some())
    })
    .await;
    wait_route(&client, &ns, &[("chat", 100)]).await;

    // Image 2: the same container and arguments, another volume.
    super::patch(&client, &ns, image("2")).await;
    support::wait_exists::<Deployment>(&client, &ns, "chat-canary").await;
    // The canary's new pods are not ready: no weight, however long.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(route(&client, &ns).await, [("chat".to_owned(), 100)]);
    canary_ready(&client, &ns).await;
    wait_route(&client, &ns, &[("chat", 50), ("chat-canary", 50)]).await;
    // Past the last step the primary's template takes image 2; its new
    // pods are not ready, so the canary keeps its weight and the rollout
    // stays at its last step, promoting.
    let st = wait_rollout(&client, &ns, "promoting", |r| {
        r.reason.as_deref() == Some("Promoting")
    })
    .await;
    assert_eq!(st.step, Some(0), "the last index of one step");
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        route(&client, &ns).await,
        [("chat".to_owned(), 50), ("chat-canary".to_owned(), 50)],
        "the weight stays until the primary's new pods serve"
    );
    let st = wait_rollout(&client, &ns, "still promoting", |r| {
        r.phase == RolloutPhase::Progressing
    })
    .await;
    assert_eq!(st.step, Some(0));
    primary_rolled_to(&client, &ns, "2").await;
    wait_rollout(&client, &ns, "image 2 stable", |r| {
        r.phase == RolloutPhase::Stable
            && r.stable.as_ref().and_then(|v| v.model.image.as_deref())
                == Some("registry.example.com/weights:2")
    })
    .await;
    wait_route(&client, &ns, &[("chat", 100)]).await;
}

/// A canary whose target changes mid-rollout by its model image alone
/// (the same container and arguments) carries no weight until a pod of the
/// new template is ready: the pods of the target before it do not count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_retargeted_mid_rollout_by_model_image_alone_carries_no_weight_before_its_pods_serve()
 {
    let s = setup("rollout-retarget").await;
    let (client, ns) = (s.client.clone(), s.ns.clone());
    // One step held for an hour: the rollout stays mid-way until promoted.
    create(&client, &ns, &[50], "1h", json!({})).await;
    v1_stable(&client, &ns).await;
    let image = |tag: &str| json!({"spec": {"model": {"ref": "v1", "image": format!("registry.example.com/weights:{tag}")}}});
    super::patch(&client, &ns, image("1")).await;
    canary_ready(&client, &ns).await;
    wait_route(&client, &ns, &[("chat", 50), ("chat-canary", 50)]).await;
    super::act(&client, &ns, "promote/1").await;
    primary_rolled_to(&client, &ns, "1").await;
    wait_rollout(&client, &ns, "image 1 stable", |r| {
        r.phase == RolloutPhase::Stable
    })
    .await;
    wait_route(&client, &ns, &[("chat", 100)]).await;

    // Image 2 mid-way: its canary pods ready, half the traffic.
    super::patch(&client, &ns, image("2")).await;
    canary_ready(&client, &ns).await;
    wait_route(&client, &ns, &[("chat", 50), ("chat-canary", 50)]).await;
    // Image 3 while image 2 holds half: the canary's ready pods are of
    // image 2; the new target's pods are not ready, so no weight, however
    // long.
    super::patch(&client, &ns, image("3")).await;
    wait_route(&client, &ns, &[("chat", 100)]).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        route(&client, &ns).await,
        [("chat".to_owned(), 100)],
        "no weight before a pod of the new target is ready"
    );
    let st = wait_rollout(&client, &ns, "the rollout restarted at image 3", |r| {
        r.phase == RolloutPhase::Progressing
    })
    .await;
    assert_eq!(
        st.target.as_ref().and_then(|v| v.model.image.as_deref()),
        Some("registry.example.com/weights:3")
    );
    canary_ready(&client, &ns).await;
    wait_route(&client, &ns, &[("chat", 50), ("chat-canary", 50)]).await;
    let canary = get::<Deployment>(&client, &ns, "chat-canary")
        .await
        .expect("canary");
    let mounted = canary
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|p| p.volumes)
        .unwrap_or_default()
        .iter()
        .find_map(|v| v.image.as_ref()?.reference.clone());
    assert_eq!(mounted.as_deref(), Some("registry.example.com/weights:3"));
}

/// Once the rollout promotes and the primary's template mounts weights
/// `tag`, play the kubelet for the primary until it is complete.
async fn primary_rolled_to(client: &kube::Client, ns: &str, tag: &str) {
    wait_rollout(client, ns, "promoting", |r| {
        r.reason.as_deref() == Some("Promoting")
    })
    .await;
    let want = format!("registry.example.com/weights:{tag}");
    eventually(
        &format!("the primary's template mounts {want}"),
        WAIT,
        async || {
            let d = get::<Deployment>(client, ns, "chat")
                .await
                .ok_or("no primary")?;
            let volumes = d
                .spec
                .and_then(|s| s.template.spec)
                .and_then(|p| p.volumes)
                .unwrap_or_default();
            let image = volumes
                .iter()
                .find_map(|v| v.image.as_ref()?.reference.clone());
            (image.as_deref() == Some(want.as_str()))
                .then_some(())
                .ok_or(format!("{image:?}"))
        },
    )
    .await;
    primary_complete(client, ns).await;
}
