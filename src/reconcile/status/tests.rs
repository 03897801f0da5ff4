//! Status and conditions from observations, and the events they call for.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use super::*;
use crate::api::v1beta1::{CanaryStatus, InferenceServiceStatus};
use crate::api::vocabulary::GraphReason;
use crate::reconcile::pods::PodState;

pub(super) fn ts(s: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + s).unwrap()
}

pub(super) fn applied(
    primary_ready: i32,
    canary_ready: Option<i32>,
    routing: Routing,
) -> Observation {
    Observation {
        generation: Some(3),
        outcome: Outcome::Applied {
            primary: TrackReplicas {
                desired: 2,
                ready: primary_ready,
                updated: 2,
                total: 2,
                observed: true,
                blocker: None,
            },
            canary: canary_ready.map(|r| TrackReplicas {
                desired: 1,
                ready: r,
                updated: 1,
                total: 1,
                observed: true,
                blocker: None,
            }),
            routed_weight: canary_ready.map(|r| if r > 0 { 10 } else { 0 }),
            routing,
        },
        policy: PolicyResult::Compliant,
        route_path: Some("/team-a/chat".into()),
        request_timeout: Some("5m".into()),
        rollout: None,
        capacity: None,
        graph: None,
        rollout_capacity: None,
        canary_capacity: None,
    }
}

pub(super) fn routed() -> Routing {
    Routing::Applied {
        gateway: "gateways/gw".into(),
        path: "/team-a/chat".into(),
        rejection: None,
        pools: None,
    }
}

/// A service of two ready replicas routed at `/a` through `gateways/gw`,
/// with what the gateway said.
fn on_gateway(rejection: Option<String>, pools: Option<PoolReport>) -> Observation {
    applied(
        2,
        None,
        Routing::Applied {
            gateway: "gateways/gw".into(),
            path: "/a".into(),
            rejection,
            pools,
        },
    )
}

/// What a reconcile that applied nothing observed at `generation`.
fn not_applied(generation: i64, outcome: Outcome) -> Observation {
    Observation::before_applying(Some(generation), outcome, PolicyResult::Compliant)
}

pub(super) fn cond<'a>(st: &'a InferenceServiceStatus, t: &str) -> &'a Condition {
    st.conditions.iter().find(|c| c.type_ == t).unwrap()
}

#[test]
fn fields_and_conditions_of_an_applied_service() {
    let st = compute(None, &applied(2, Some(1), routed()), ts(0));
    assert_eq!(st.observed_generation, Some(3));
    assert_eq!(st.replicas, Some(2));
    assert_eq!(st.ready_replicas, Some(2));
    assert_eq!(
        st.canary,
        Some(CanaryStatus {
            replicas: Some(1),
            ready_replicas: Some(1),
            weight: Some(10)
        })
    );
    assert_eq!(st.route_path.as_deref(), Some("/team-a/chat"));
    assert_eq!(st.request_timeout.as_deref(), Some("5m"));
    let types: Vec<_> = st.conditions.iter().map(|c| c.type_.as_str()).collect();
    // A service with a canary says whether it is ready on its own.
    assert_eq!(
        types,
        [
            READY,
            RECONCILED,
            ROUTING_READY,
            POLICY_COMPLIANT,
            crate::api::vocabulary::ConditionType::CanaryReady.as_str()
        ]
    );
    for c in &st.conditions {
        assert_eq!(c.status, "True", "{c:?}");
        assert_eq!(c.observed_generation, Some(3));
        assert!(!c.reason.is_empty() && !c.message.is_empty());
    }
}

#[test]
fn ready_needs_every_track_complete() {
    let st = compute(None, &applied(1, None, routed()), ts(0));
    let r = cond(&st, READY);
    assert_eq!(
        (r.status.as_str(), r.reason.as_str()),
        ("False", "Progressing")
    );
    assert_eq!(r.message, "1/2 primary replicas ready");
    let st = compute(None, &applied(2, Some(0), routed()), ts(0));
    assert_eq!(cond(&st, READY).status, "False");
    assert_eq!(
        cond(&st, READY).message,
        "2/2 primary replicas ready, 0/1 canary replicas ready"
    );
    assert_eq!(st.canary.unwrap().weight, Some(0));
    // A rollout the deployment controller has not seen yet is not ready.
    let mut obs = applied(2, None, routed());
    if let Outcome::Applied { primary, .. } = &mut obs.outcome {
        primary.observed = false;
    }
    assert_eq!(cond(&compute(None, &obs, ts(0)), READY).status, "False");
}

#[test]
fn last_transition_time_moves_only_on_status_change() {
    let st1 = compute(None, &applied(1, None, routed()), ts(0));
    let st2 = compute(Some(&st1), &applied(1, None, routed()), ts(60));
    assert_eq!(
        st1, st2,
        "an unchanged observation gives an identical status"
    );
    let st3 = compute(Some(&st2), &applied(2, None, routed()), ts(120));
    assert_eq!(cond(&st3, READY).last_transition_time, Time(ts(120)));
    assert_eq!(
        cond(&st3, RECONCILED).last_transition_time,
        Time(ts(0)),
        "Reconciled stayed True"
    );
    // Reason and message changes alone keep the time.
    let mut obs = applied(2, None, routed());
    obs.policy = PolicyResult::Violation("x".into());
    let st4 = compute(Some(&st3), &obs, ts(180));
    obs.policy = PolicyResult::Warning("y".into());
    let st5 = compute(Some(&st4), &obs, ts(240));
    let p = cond(&st5, POLICY_COMPLIANT);
    assert_eq!(p.reason, "PolicyWarning");
    assert_eq!(p.last_transition_time, Time(ts(180)));
}

#[test]
fn routing_conditions_say_why() {
    let st = compute(None, &applied(2, None, Routing::NoGateway), ts(0));
    assert_eq!(cond(&st, ROUTING_READY).reason, "NoGateway");
    let st = compute(
        None,
        &applied(
            2,
            None,
            Routing::GatewayApiMissing {
                gateway: "gateways/gw".into(),
            },
        ),
        ts(0),
    );
    let c = cond(&st, ROUTING_READY);
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "GatewayAPINotInstalled")
    );
    assert!(c.message.contains("httproutes.gateway.networking.k8s.io"));
    let st = compute(
        None,
        &on_gateway(Some("NotAllowedByListeners".into()), None),
        ts(0),
    );
    assert_eq!(cond(&st, ROUTING_READY).reason, "RouteNotAccepted");
    // Ready does not depend on routing.
    assert_eq!(cond(&st, READY).status, "True");
}

#[test]
fn invalid_spec_keeps_observed_numbers_and_flags_reconciled() {
    let st1 = compute(None, &applied(2, Some(1), routed()), ts(0));
    let obs = not_applied(
        4,
        Outcome::Invalid("spec.replicas: Invalid value: -1".into()),
    );
    let st = compute(Some(&st1), &obs, ts(10));
    assert_eq!(st.observed_generation, Some(4));
    assert_eq!(st.replicas, Some(2));
    assert_eq!(st.route_path.as_deref(), Some("/team-a/chat"));
    let r = cond(&st, RECONCILED);
    assert_eq!(
        (r.status.as_str(), r.reason.as_str()),
        ("False", "InvalidSpec")
    );
    assert!(r.message.contains("spec.replicas"));
    assert_eq!(cond(&st, READY).reason, "InvalidSpec");
    assert_eq!(cond(&st, ROUTING_READY).status, "True", "routing untouched");
}

#[test]
fn apply_failure_leaves_ready_alone() {
    let st1 = compute(None, &applied(2, None, routed()), ts(0));
    let obs = not_applied(3, Outcome::Failed("conflict".into()));
    let st = compute(Some(&st1), &obs, ts(10));
    assert_eq!(cond(&st, READY).status, "True");
    assert_eq!(cond(&st, RECONCILED).reason, "ApplyFailed");
}

#[test]
fn removing_the_canary_clears_its_status() {
    let st1 = compute(None, &applied(2, Some(1), routed()), ts(0));
    let st2 = compute(Some(&st1), &applied(2, None, routed()), ts(1));
    assert!(st2.canary.is_none());
}

#[test]
fn track_replicas_read_a_deployment() {
    let d: crate::reconcile::watch::watched::WatchedDeployment =
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "chat", "generation": 4},
            "spec": {"replicas": 3, "selector": {}, "template": {}},
            "status": {"observedGeneration": 4, "readyReplicas": 2, "updatedReplicas": 3}
        }))
        .unwrap();
    let r = TrackReplicas::of(&d);
    assert_eq!(
        r,
        TrackReplicas {
            desired: 3,
            ready: 2,
            updated: 3,
            total: 0,
            observed: true,
            blocker: None,
        }
    );
    assert!(!r.complete());
    // Every wanted replica ready and one of the new template, but the
    // ready one is the old pod: not complete until the old pod is gone.
    let mid = |total| TrackReplicas {
        desired: 1,
        ready: 1,
        updated: 1,
        total,
        observed: true,
        blocker: None,
    };
    assert!(!mid(2).complete());
    assert!(mid(1).complete());
}

fn ray(outcome: Outcome) -> Observation {
    Observation {
        generation: Some(4),
        outcome,
        policy: PolicyResult::Compliant,
        route_path: Some("/team-a/chat".into()),
        request_timeout: None,
        rollout: None,
        capacity: None,
        graph: None,
        rollout_capacity: None,
        canary_capacity: None,
    }
}

#[test]
fn graph_failure_keeps_ready_and_names_the_reason() {
    let ok = ray(Outcome::RayServiceApplied {
        workers: Some((1, 2)),
        observed: crate::reconcile::children::rayservice::RayServiceObserved {
            ready: true,
            reason: "RayServiceReady".into(),
            message: "RayService chat: running".into(),
        },
        nodes: 3,
        blocker: None,
        graph: GraphUse::Current,
        routing: Routing::NoGateway,
    });
    let before = compute(None, &ok, ts(0));
    assert_eq!(condition(Some(&before), READY).unwrap().status, "True");
    assert_eq!(
        condition(Some(&before), READY).unwrap().reason,
        "RayServiceReady"
    );
    assert_eq!(
        condition(Some(&before), GRAPH_READY).unwrap().status,
        "True"
    );
    assert_eq!(before.route_path.as_deref(), Some("/team-a/chat"));
    assert_eq!(
        (before.replicas, before.ready_replicas),
        (Some(2), Some(1)),
        "the workers the Ray cluster has"
    );

    let failed = ray(Outcome::GraphFailed {
        reason: GraphReason::HttpStatus,
        message: "graph server answered 401".into(),
        stale: None,
    });
    let after = compute(Some(&before), &failed, ts(10));
    let graph = condition(Some(&after), GRAPH_READY).unwrap();
    assert_eq!(
        (graph.status.as_str(), graph.reason.as_str()),
        ("False", "HTTPStatus")
    );
    assert_eq!(graph.message, "graph server answered 401");
    let rec = condition(Some(&after), RECONCILED).unwrap();
    assert_eq!(rec.reason, "HTTPStatus");
    assert!(rec.message.contains("left as it is"), "{}", rec.message);
    assert!(
        !rec.message.contains("401"),
        "the failure is told once, in GraphReady: {}",
        rec.message
    );
    // A message of any size is cut to 1 KiB with what was left out.
    let huge = ray(Outcome::GraphFailed {
        reason: GraphReason::InvalidGraph,
        message: "nodes[0].name: x; ".repeat(100_000),
        stale: None,
    });
    let cut = compute(Some(&before), &huge, ts(11));
    let graph = condition(Some(&cut), GRAPH_READY).unwrap();
    assert!(graph.message.len() <= 1024, "{}", graph.message.len());
    assert!(graph.message.ends_with("more bytes)"), "{}", graph.message);
    // The RayService still serves: Ready is what was last observed.
    assert_eq!(
        condition(Some(&after), READY),
        condition(Some(&before), READY)
    );
}

fn ray_applied(routing: Routing, digest: &str) -> Observation {
    let mut obs = ray(Outcome::RayServiceApplied {
        workers: None,
        observed: crate::reconcile::children::rayservice::RayServiceObserved {
            ready: true,
            reason: "RayServiceReady".into(),
            message: "m".into(),
        },
        nodes: 2,
        blocker: None,
        graph: GraphUse::Current,
        routing,
    });
    obs.graph = Some(GraphReport {
        fetched: true,
        applied: Some(AppliedGraph {
            url: "https://graphs.example.com/rag".into(),
            digest: digest.into(),
            etag: Some("\"v1\"".into()),
        }),
        error: None,
        refresh: None,
    });
    obs
}

#[test]
fn a_failed_refetch_keeps_the_live_graph_and_says_stale() {
    let digest = format!("sha256:{}", "0a".repeat(32));
    let before = compute(None, &ray_applied(Routing::NoGateway, &digest), ts(0));
    let g = before.graph.clone().expect("status.graph");
    assert_eq!(g.short_digest.as_deref(), Some("0a0a0a0a0a0a"));
    assert_eq!(g.applied_at, Some(Time(ts(0))));
    let mut failed = ray(Outcome::GraphFailed {
        reason: GraphReason::Timeout,
        message: "fetching https://graphs.example.com/rag did not complete within 10s".into(),
        stale: live_graph(Some(&before)),
    });
    failed.graph = Some(GraphReport {
        fetched: true,
        error: Some("Timeout: too slow".into()),
        ..GraphReport::default()
    });
    let after = compute(Some(&before), &failed, ts(60));
    let c = condition(Some(&after), GRAPH_READY).unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "StaleGraph")
    );
    assert!(
        c.message
            .contains("sha256:0a0a0a0a0a0a from https://graphs.example.com/rag")
            && c.message.contains("keeps serving")
            && c.message.contains("Timeout: fetching"),
        "{}",
        c.message
    );
    let g = after.graph.clone().expect("status.graph");
    assert_eq!(
        g.digest.as_deref(),
        Some(digest.as_str()),
        "the live graph stays"
    );
    assert_eq!(g.applied_at, Some(Time(ts(0))));
    assert_eq!(g.last_fetch_at, Some(Time(ts(60))));
    assert_eq!(g.last_fetch_error.as_deref(), Some("Timeout: too slow"));
    // The RayService still serves.
    assert_eq!(
        condition(Some(&after), READY),
        condition(Some(&before), READY)
    );
}

#[test]
fn a_ray_route_waits_for_the_serve_service_then_is_ready() {
    let digest = format!("sha256:{}", "0b".repeat(32));
    let waiting = Routing::ServeServiceMissing {
        gateway: "infra/public".into(),
        service: "rag-serve-svc".into(),
        detail: "it does not exist yet".into(),
    };
    let st = compute(None, &ray_applied(waiting, &digest), ts(0));
    let c = condition(Some(&st), ROUTING_READY).unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "ServeServiceMissing")
    );
    assert!(
        c.message.contains("rag-serve-svc: it does not exist yet")
            && c.message.contains("gateway infra/public"),
        "{}",
        c.message
    );
    let routed = Routing::Applied {
        gateway: "infra/public".into(),
        path: "/team-a/rag".into(),
        rejection: None,
        pools: None,
    };
    let st = compute(Some(&st), &ray_applied(routed, &digest), ts(10));
    let c = condition(Some(&st), ROUTING_READY).unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", "RouteApplied")
    );
}

#[test]
fn a_long_wait_in_line_is_graph_ready_unknown_and_nothing_else_moves() {
    let failed = ray(Outcome::GraphFailed {
        reason: GraphReason::Timeout,
        message: "fetching https://g.example/x did not complete within 10s".into(),
        stale: None,
    });
    let before = compute(None, &failed, ts(0));
    let queued = ray(Outcome::GraphQueued(
        "waiting 12s for a graph fetch slot, number 3 in namespace team-a's line".into(),
    ));
    let after = compute(Some(&before), &queued, ts(30));
    let graph = condition(Some(&after), GRAPH_READY).unwrap();
    assert_eq!(
        (graph.status.as_str(), graph.reason.as_str()),
        ("Unknown", "FetchQueued")
    );
    assert!(graph.message.contains("number 3"), "{}", graph.message);
    assert_eq!(graph.last_transition_time, Time(ts(30)));
    // Reconciled and Ready keep what they said.
    assert_eq!(
        condition(Some(&after), RECONCILED),
        condition(Some(&before), RECONCILED)
    );
    assert_eq!(condition(Some(&after), READY), None);
}

#[test]
fn rayservice_status_maps_to_ready() {
    for (reason, ready, want) in [
        ("RayServicePending", false, "RayServicePending"),
        ("RayServiceNotReady", false, "RayServiceNotReady"),
        ("RayServiceReady", true, "RayServiceReady"),
    ] {
        let obs = ray(Outcome::RayServiceApplied {
            workers: None,
            observed: crate::reconcile::children::rayservice::RayServiceObserved {
                ready,
                reason: reason.into(),
                message: "m".into(),
            },
            nodes: 1,
            blocker: None,
            graph: GraphUse::Current,
            routing: Routing::NoGateway,
        });
        let st = compute(None, &obs, ts(0));
        let c = condition(Some(&st), READY).unwrap();
        assert_eq!(c.reason, want);
        assert_eq!(c.status, if ready { "True" } else { "False" });
    }
    let missing = compute(None, &ray(Outcome::RayServiceApiMissing), ts(0));
    assert_eq!(
        condition(Some(&missing), RECONCILED).unwrap().reason,
        "RayServiceNotInstalled"
    );
    assert!(condition(Some(&missing), READY).is_none());
}

#[test]
fn routing_ready_follows_what_gateways_say_about_the_pools() {
    let with_pools = |report: PoolReport| {
        let st = compute(None, &on_gateway(None, Some(report)), ts(0));
        let c = cond(&st, ROUTING_READY).clone();
        (c.status, c.reason, c.message)
    };
    let names = vec!["chat".to_owned(), "chat-canary".to_owned()];
    let (status, reason, message) = with_pools(PoolReport {
        names: names.clone(),
        reported: false,
        complaints: vec![],
    });
    assert_eq!((status.as_str(), reason.as_str()), ("True", "RouteApplied"));
    assert!(
        message.contains("InferencePool chat, chat-canary"),
        "{message}"
    );
    assert!(
        message.contains("no gateway controller has reported"),
        "{message}"
    );
    let (status, _, message) = with_pools(PoolReport {
        names: names.clone(),
        reported: true,
        complaints: vec![],
    });
    assert_eq!(status, "True");
    assert!(message.contains("accepted by the gateway"), "{message}");
    let (status, reason, message) = with_pools(PoolReport {
        names,
        reported: true,
        complaints: vec!["ResolvedRefs on Gateway gw: InvalidExtensionRef: no such Service".into()],
    });
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "InferencePoolNotAccepted")
    );
    assert!(message.contains("InvalidExtensionRef"), "{message}");

    let st = compute(
        None,
        &applied(2, None, Routing::InferencePoolApiMissing),
        ts(0),
    );
    let c = cond(&st, ROUTING_READY);
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "InferencePoolNotInstalled")
    );
    assert!(
        c.message
            .contains("inferencepools.inference.networking.k8s.io"),
        "{}",
        c.message
    );
}

/// A service of two primary replicas, `ready` of them ready, and a canary
/// of one, none ready, with what their pods say.
fn blocked(ready: i32, primary: Option<PodState>, canary: Option<Option<PodState>>) -> Observation {
    let mut obs = applied(ready, canary.as_ref().map(|_| 0), routed());
    if let Outcome::Applied {
        primary: p,
        canary: c,
        ..
    } = &mut obs.outcome
    {
        p.blocker = primary.map(Box::new);
        if let (Some(c), Some(state)) = (c.as_mut(), canary) {
            c.blocker = state.map(Box::new);
        }
    }
    obs
}

fn ready_of(obs: &Observation) -> (String, String, String) {
    let st = compute(None, obs, ts(0));
    let r = cond(&st, READY);
    (r.status.clone(), r.reason.clone(), r.message.clone())
}

const SCHEDULER: &str = "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) had untolerated taint {nvidia.com/gpu: present}. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.";

#[test]
fn ready_says_why_the_pods_of_a_track_do_not_start() {
    let unschedulable = PodState::Unschedulable {
        message: SCHEDULER.into(),
    };
    assert_eq!(
        ready_of(&blocked(0, Some(unschedulable.clone()), None)),
        (
            "False".into(),
            "Unschedulable".into(),
            format!("primary: 0/2 replicas ready: {SCHEDULER}")
        )
    );
    let pull = PodState::ImagePullFailed {
        image: "registry.example.com/vllm:bad".into(),
        message: "rpc error: code = NotFound desc = failed to pull and unpack image \"registry.example.com/vllm:bad\": not found".into(),
        backing_off: false,
    };
    let (status, reason, message) = ready_of(&blocked(2, None, Some(Some(pull))));
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "ImagePullFailed")
    );
    assert_eq!(
        message,
        "canary: 0/1 replicas ready: image \"registry.example.com/vllm:bad\" cannot be pulled: rpc error: code = NotFound desc = failed to pull and unpack image \"registry.example.com/vllm:bad\": not found"
    );
    let crash = PodState::CrashLooping {
        container: "engine".into(),
        exit_code: 1,
        reason: "Error".into(),
    };
    assert_eq!(
        ready_of(&blocked(1, Some(crash), None)),
        (
            "False".into(),
            "CrashLooping".into(),
            "primary: 1/2 replicas ready: container \"engine\" is crash-looping (last exit code 1, Error)".into()
        )
    );
    assert_eq!(
        ready_of(&blocked(0, Some(PodState::Starting), None)),
        (
            "False".into(),
            "Starting".into(),
            "primary: 0/2 replicas ready; pods are starting".into()
        )
    );
    // The more telling state of the two tracks; the primary's on a tie.
    let (_, reason, message) = ready_of(&blocked(
        0,
        Some(PodState::Starting),
        Some(Some(unschedulable.clone())),
    ));
    assert_eq!(reason, "Unschedulable");
    assert!(
        message.starts_with("canary: 0/1 replicas ready: 0/3 nodes"),
        "{message}"
    );
    let (_, reason, message) = ready_of(&blocked(
        0,
        Some(PodState::Starting),
        Some(Some(PodState::Starting)),
    ));
    assert_eq!(reason, "Starting");
    assert!(message.starts_with("primary: 0/2"), "{message}");
    // The three that need someone to act are warnings; Starting is not.
    assert!(Reason::Unschedulable.is_warning());
    assert!(Reason::ImagePullFailed.is_warning());
    assert!(Reason::CrashLooping.is_warning());
    assert!(!Reason::Starting.is_warning());
}

#[test]
fn ready_stays_progressing_without_a_blocker_or_when_enough_replicas_are_ready() {
    // No pod seen yet.
    let (_, reason, message) = ready_of(&blocked(0, None, None));
    assert_eq!(reason, "Progressing");
    assert_eq!(message, "0/2 primary replicas ready");
    // Every wanted replica is ready, not all of them updated: a new pod
    // that does not start is no reason for the service to be short.
    let mut obs = blocked(
        2,
        Some(PodState::Unschedulable {
            message: SCHEDULER.into(),
        }),
        None,
    );
    if let Outcome::Applied { primary, .. } = &mut obs.outcome {
        primary.updated = 1;
    }
    assert_eq!(ready_of(&obs).1, "Progressing");
    // A complete rollout is Available whatever a stray pod says.
    let (status, reason, _) = ready_of(&blocked(2, Some(PodState::Starting), None));
    assert_eq!((status.as_str(), reason.as_str()), ("True", "Available"));
}

#[test]
fn the_schedulers_and_the_kubelets_words_are_kept_whole_to_a_kibibyte_after_the_prefix() {
    use crate::reconcile::pods::classify::{KEPT_MAX, kept};
    let long = format!(
        "0/900 nodes are available: {}",
        "1 node(s) had untolerated taint {x: y}, ".repeat(60)
    );
    let state = PodState::Unschedulable {
        message: kept(&long),
    };
    let (_, reason, message) = ready_of(&blocked(0, Some(state), None));
    assert_eq!(reason, "Unschedulable");
    // infergate's prefix, then the scheduler's first kibibyte, whole.
    assert_eq!(
        message,
        format!("primary: 0/2 replicas ready: {}", &long[..KEPT_MAX])
    );
    // A kubelet's ImagePullBackOff message of 2,888 bytes (as a registry
    // that lists its whole error body makes it).
    let kubelet = format!(
        "Back-off pulling image \"registry.example.com/vllm:bad\": ErrImagePull: failed to pull and unpack image: {}",
        "unexpected status from GET request: 403 Forbidden; ".repeat(60)
    );
    let kubelet = &kubelet[..2888];
    let pull = PodState::ImagePullFailed {
        image: "registry.example.com/vllm:bad".into(),
        message: kept(kubelet),
        backing_off: true,
    };
    let (_, reason, message) = ready_of(&blocked(0, Some(pull), None));
    assert_eq!(reason, "ImagePullFailed");
    let prefix =
        "primary: 0/2 replicas ready: image \"registry.example.com/vllm:bad\" cannot be pulled: ";
    assert_eq!(message, format!("{prefix}{}", &kubelet[..KEPT_MAX]));
    assert!(message.len() <= crate::telemetry::CONDITION_MESSAGE_MAX);
}

#[test]
fn a_container_the_kubelet_cannot_create_is_starting_with_its_words() {
    let (status, reason, message) = ready_of(&blocked(
        0,
        Some(PodState::Waiting {
            container: "engine".into(),
            reason: "CreateContainerConfigError".into(),
            message: "secret \"hf\" not found".into(),
        }),
        None,
    ));
    assert_eq!((status.as_str(), reason.as_str()), ("False", "Starting"));
    assert!(
        message.contains(
            "container \"engine\" waits: CreateContainerConfigError: secret \"hf\" not found"
        ),
        "{message}"
    );
}

#[test]
fn a_service_that_no_longer_fits_is_told_in_policy_compliant_and_stays_reconciled() {
    let mut obs = applied(1, None, routed());
    obs.policy = PolicyResult::NoLongerFits(
        "spec.parallelism.tensor: Invalid value: 1: on 1 x l4 (tensor 1) the weights leave no room"
            .into(),
    );
    let st = compute(None, &obs, ts(0));
    let p = cond(&st, POLICY_COMPLIANT);
    assert_eq!(
        (p.status.as_str(), p.reason.as_str()),
        ("False", "NoLongerFits")
    );
    assert!(
        p.message.contains("the weights leave no room"),
        "{}",
        p.message
    );
    assert_eq!(cond(&st, RECONCILED).status, "True");
}
