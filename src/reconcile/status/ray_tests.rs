//! A RayService-backed service's status: why its pods (head and workers)
//! do not start, as a Deployment's; the last good graph applied while its
//! source fails.

use k8s_openapi::jiff::Timestamp;

use super::*;
use crate::api::vocabulary::GraphReason;
use crate::reconcile::children::rayservice::RayServiceObserved;
use crate::reconcile::pods::PodState;

fn ts(s: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + s).expect("time")
}

/// KubeRay's word on the RayService: not ready while its cluster starts.
fn initializing() -> RayServiceObserved {
    RayServiceObserved {
        ready: false,
        reason: "RayServiceNotReady".into(),
        message: "RayService rag: Initializing".into(),
    }
}

fn obs(
    observed: RayServiceObserved,
    workers: Option<(i32, i32)>,
    blocker: Option<PodState>,
    graph: GraphUse,
) -> Observation {
    let mut o = Observation::before_applying(
        Some(3),
        Outcome::RayServiceApplied {
            observed,
            nodes: 2,
            workers,
            blocker: blocker.map(Box::new),
            graph,
            routing: Routing::NoGateway,
        },
        PolicyResult::Compliant,
    );
    o.route_path = Some("/team-a/rag".into());
    o
}

fn ready(st: &crate::api::v1beta1::InferenceServiceStatus) -> (String, String, String) {
    let c = condition(Some(st), READY).expect("Ready");
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

#[test]
fn a_ray_services_pods_say_why_it_is_not_ready_as_a_deployments_do() {
    let scheduler = "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) had untolerated taint {nvidia.com/gpu: present}.";
    let cases = [
        (
            PodState::Unschedulable {
                message: scheduler.into(),
            },
            "Unschedulable",
            format!("primary: 0/2 replicas ready: {scheduler}"),
        ),
        (
            PodState::ImagePullFailed {
                image: "registry.example.com/ray:gone".into(),
                message: "not found".into(),
                backing_off: false,
            },
            "ImagePullFailed",
            "primary: 0/2 replicas ready: image \"registry.example.com/ray:gone\" cannot be pulled: not found".into(),
        ),
        (
            PodState::CrashLooping {
                container: "ray-worker".into(),
                exit_code: 137,
                reason: "OOMKilled".into(),
            },
            "CrashLooping",
            "primary: 0/2 replicas ready: container \"ray-worker\" is crash-looping (last exit code 137, OOMKilled)".into(),
        ),
        (
            PodState::Starting,
            "Starting",
            "primary: 0/2 replicas ready; pods are starting".into(),
        ),
    ];
    for (state, reason, message) in cases {
        let st = compute(
            None,
            &obs(initializing(), Some((0, 2)), Some(state), GraphUse::Current),
            ts(0),
        );
        assert_eq!(ready(&st), ("False".into(), reason.into(), message));
    }
    // Without the cluster's counts yet (KubeRay has not reported them).
    let st = compute(
        None,
        &obs(
            initializing(),
            None,
            Some(PodState::Unschedulable {
                message: scheduler.into(),
            }),
            GraphUse::Current,
        ),
        ts(0),
    );
    assert_eq!(
        ready(&st),
        (
            "False".into(),
            "Unschedulable".into(),
            format!("primary: {scheduler}")
        )
    );
    // No pod says why: what KubeRay says.
    let st = compute(
        None,
        &obs(initializing(), Some((0, 2)), None, GraphUse::Current),
        ts(0),
    );
    assert_eq!(
        ready(&st),
        (
            "False".into(),
            "RayServiceNotReady".into(),
            "RayService rag: Initializing".into()
        )
    );
}

#[test]
fn a_serving_ray_service_short_of_workers_says_why_and_a_complete_one_is_ready() {
    let serving = RayServiceObserved {
        ready: true,
        reason: "RayServiceReady".into(),
        message: "RayService rag: Running".into(),
    };
    let stuck = Some(PodState::Unschedulable {
        message: "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.".into(),
    });
    // Scaled from 1 to 3: two workers find no node.
    let st = compute(
        None,
        &obs(
            serving.clone(),
            Some((1, 3)),
            stuck.clone(),
            GraphUse::Current,
        ),
        ts(0),
    );
    assert_eq!(ready(&st).1, "Unschedulable");
    assert!(
        ready(&st)
            .2
            .starts_with("primary: 1/3 replicas ready: 0/3 nodes")
    );
    // Every worker ready: what KubeRay says, whatever a stray pod holds.
    let st = compute(
        None,
        &obs(serving, Some((3, 3)), stuck, GraphUse::Current),
        ts(0),
    );
    assert_eq!(
        ready(&st),
        (
            "True".into(),
            "RayServiceReady".into(),
            "RayService rag: Running".into()
        )
    );
}

#[test]
fn the_last_good_graph_applied_while_the_source_fails_says_stale_and_a_wait_keeps_it() {
    let first = compute(
        None,
        &obs(initializing(), Some((0, 1)), None, GraphUse::Current),
        ts(0),
    );
    let stale = GraphUse::LastGood {
        reason: GraphReason::ConnectFailure,
        message: "connecting to https://graphs.example.com/rag: refused".into(),
        live: Some("sha256:0a0a0a0a0a0a from https://graphs.example.com/rag".into()),
    };
    // Scaled to 2 while the source fails: applied, with the last good graph.
    let failed = compute(
        Some(&first),
        &obs(initializing(), Some((0, 2)), None, stale),
        ts(60),
    );
    let g = condition(Some(&failed), GRAPH_READY).expect("GraphReady");
    assert_eq!(
        (g.status.as_str(), g.reason.as_str()),
        ("False", "StaleGraph")
    );
    assert!(
        g.message
            .contains("the last good graph (sha256:0a0a0a0a0a0a")
            && g.message.contains("ConnectFailure: connecting"),
        "{}",
        g.message
    );
    let r = condition(Some(&failed), RECONCILED).expect("Reconciled");
    assert_eq!(
        (r.status.as_str(), r.reason.as_str()),
        ("False", "ConnectFailure")
    );
    assert!(
        r.message.contains("applied with the last good graph"),
        "{}",
        r.message
    );
    assert_eq!(failed.replicas, Some(2), "the new replicas are reported");
    // While the next fetch waits out its backoff, GraphReady and
    // Reconciled keep their words; what the RayService says is updated.
    let waiting = compute(
        Some(&failed),
        &obs(
            initializing(),
            Some((1, 2)),
            Some(PodState::Starting),
            GraphUse::Waiting,
        ),
        ts(90),
    );
    assert_eq!(
        condition(Some(&waiting), GRAPH_READY),
        condition(Some(&failed), GRAPH_READY)
    );
    assert_eq!(
        condition(Some(&waiting), RECONCILED),
        condition(Some(&failed), RECONCILED)
    );
    assert_eq!(ready(&waiting).1, "Starting");
    assert_eq!(waiting.ready_replicas, Some(1));
}
