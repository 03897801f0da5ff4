use super::*;
use crate::plugin::facts::{ConditionFacts, RolloutFacts, ServiceFacts, TrackFacts};

fn cond(type_: &str, status: &str, reason: &str, message: &str) -> ConditionFacts {
    ConditionFacts {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
    }
}

/// A reconciled, routed, compliant Deployment service `team-a/chat`
/// whose Ready condition is `ready`.
fn facts(ready: ConditionFacts) -> ServiceFacts {
    ServiceFacts {
        namespace: "team-a".to_owned(),
        name: "chat".to_owned(),
        backend: "Deployment".to_owned(),
        generation: Some(2),
        observed_generation: Some(2),
        tracks: vec![TrackFacts {
            track: "primary".to_owned(),
            deployment: "chat".to_owned(),
            model: "llama3-8b".to_owned(),
            ready: 0,
            desired: 1,
            exists: true,
            ..TrackFacts::default()
        }],
        conditions: vec![
            ready,
            cond("Reconciled", "True", "Applied", "every child is applied"),
            cond(
                "RoutingReady",
                "True",
                "RouteApplied",
                "HTTPRoute routes /chat through gateway infra/gw",
            ),
            cond(
                "PolicyCompliant",
                "True",
                "Compliant",
                "the service complies with every applicable policy",
            ),
        ],
        ..ServiceFacts::default()
    }
}

fn set(f: &mut ServiceFacts, c: ConditionFacts) {
    match f.conditions.iter_mut().find(|x| x.type_ == c.type_) {
        Some(x) => *x = c,
        None => f.conditions.push(c),
    }
}

const UNSCHEDULABLE: &str = "primary: 0/1 replicas ready: 0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, 2 Preemption is not helpful for scheduling.";

fn reasons(f: &ServiceFacts) -> Vec<String> {
    explain(f).into_iter().map(|f| f.reason).collect()
}

#[test]
fn a_ready_service_says_so_in_one_sentence() {
    let f = facts(cond(
        "Ready",
        "True",
        "Available",
        "1/1 primary replicas ready",
    ));
    let e = explanation(&f);
    assert!(e.ready);
    assert!(e.findings.is_empty(), "{:?}", e.findings);
    assert_eq!(
        render(&e, Some("1/1 primary replicas ready")),
        "InferenceService team-a/chat is ready: 1/1 primary replicas ready.\n"
    );
}

#[test]
fn unschedulable_quotes_the_scheduler_and_names_the_class() {
    let mut f = facts(cond("Ready", "False", "Unschedulable", UNSCHEDULABLE));
    f.accelerator_class = Some("l4".to_owned());
    let found = explain(&f);
    assert_eq!(found.len(), 1, "{found:?}");
    let u = &found[0];
    assert_eq!(u.reason, "Unschedulable");
    assert_eq!(u.severity, Severity::Blocking);
    assert_eq!(u.track.as_deref(), Some("primary"));
    assert!(u.sentence.contains("AcceleratorClass l4"), "{}", u.sentence);
    assert!(
        u.sentence.contains("(0/1 replicas ready)"),
        "{}",
        u.sentence
    );
    assert!(
        u.sentence
            .contains("\"0/3 nodes are available: 1 Insufficient nvidia.com/gpu"),
        "the scheduler's words, quoted: {}",
        u.sentence
    );
    assert_eq!(
        u.next.as_deref(),
        Some("kubectl get acceleratorclass l4 -o yaml")
    );
    assert!(!explanation(&f).ready);

    // Without a class: the pods' events.
    f.accelerator_class = None;
    assert_eq!(
        explain(&f)[0].next.as_deref(),
        Some(
            "kubectl describe pod -l infergate.dev/service=chat,infergate.dev/track=primary -n team-a"
        )
    );
}

#[test]
fn image_pull_failures_name_the_image() {
    let f = facts(cond(
        "Ready",
        "False",
        "ImagePullFailed",
        "primary: 0/1 replicas ready: image \"registry.example.com/vllm:gone\" cannot be pulled: Back-off pulling image",
    ));
    let found = explain(&f);
    assert_eq!(found.len(), 1);
    assert!(
        found[0]
            .sentence
            .starts_with("The primary track's pods cannot pull their image (0/1 replicas ready): \"image \"registry"),
        "{}",
        found[0].sentence
    );
    assert!(found[0].sentence.contains("registry.example.com/vllm:gone"));
    assert_eq!(
        found[0].next.as_deref(),
        Some("kubectl describe pod -l infergate.dev/service=chat -n team-a")
    );
}

#[test]
fn crash_loops_give_the_last_exit_code_and_the_previous_logs() {
    let f = facts(cond(
        "Ready",
        "False",
        "CrashLooping",
        "canary: 0/1 replicas ready: container \"engine\" is crash-looping (last exit code 137, OOMKilled)",
    ));
    let found = explain(&f);
    assert_eq!(found.len(), 1);
    let c = &found[0];
    assert_eq!(c.track.as_deref(), Some("canary"));
    assert!(
        c.sentence.starts_with(
            "The canary track's engine keeps crashing (0/1 replicas ready); it last exited with code 137: "
        ),
        "{}",
        c.sentence
    );
    assert!(c.sentence.contains("OOMKilled"));
    assert_eq!(
        c.next.as_deref(),
        Some(
            "kubectl logs -l infergate.dev/service=chat,infergate.dev/track=canary --previous -n team-a"
        )
    );
}

#[test]
fn policy_denial_and_budget_come_first() {
    let mut f = facts(cond(
        "Ready",
        "False",
        "CrashLooping",
        "primary: 0/1 replicas ready: container \"engine\" is crash-looping (last exit code 1)",
    ));
    set(
        &mut f,
        cond(
            "PolicyCompliant",
            "False",
            "PolicyViolation",
            "the service violates a policy adopted after it (left running as it is): gpus 8 > 4",
        ),
    );
    let found = explain(&f);
    assert_eq!(reasons(&f), ["PolicyViolation", "CrashLooping"]);
    assert!(
        found[0]
            .sentence
            .starts_with("A policy denies the service: \"the service violates")
    );
    assert_eq!(
        found[0].next.as_deref(),
        Some("kubectl get inferencepolicies,clusterinferencepolicies -n team-a")
    );

    set(
        &mut f,
        cond(
            "PolicyCompliant",
            "False",
            "OverBudget",
            "needs 8 GPUs, 2 left",
        ),
    );
    let found = explain(&f);
    assert_eq!(found[0].reason, "OverBudget");
    assert_eq!(
        found[0].next.as_deref(),
        Some("kubectl infergate budget -n team-a")
    );

    // A warning is worth knowing, last.
    set(
        &mut f,
        cond("PolicyCompliant", "False", "PolicyWarning", "no cost label"),
    );
    assert_eq!(reasons(&f), ["CrashLooping", "PolicyWarning"]);
    assert_eq!(explain(&f)[1].severity, Severity::Notice);
}

#[test]
fn an_invalid_spec_is_one_finding_before_the_graph() {
    let mut f = facts(cond(
        "Ready",
        "False",
        "InvalidSpec",
        "the spec is invalid; children are left as they are",
    ));
    set(
        &mut f,
        cond(
            "Reconciled",
            "False",
            "InvalidSpec",
            "spec.replicas: must be at least 0",
        ),
    );
    set(
        &mut f,
        cond(
            "GraphReady",
            "False",
            "HTTPStatus",
            "GET https://g.example/x: 404",
        ),
    );
    let found = explain(&f);
    assert_eq!(reasons(&f), ["InvalidSpec", "HTTPStatus"]);
    assert_eq!(
        found[0].next.as_deref(),
        Some("kubectl edit infsvc chat -n team-a")
    );
    assert!(
        found[0]
            .sentence
            .contains("\"spec.replicas: must be at least 0\"")
    );
}

#[test]
fn a_missing_class_is_told_once() {
    let msg = "AcceleratorClass \"h100\" does not exist; the children are left as they are until it does or spec.accelerator.class names another";
    let mut f = facts(cond("Ready", "False", "AcceleratorClassNotFound", msg));
    set(
        &mut f,
        cond("Reconciled", "False", "AcceleratorClassNotFound", msg),
    );
    f.accelerator_class = Some("h100".to_owned());
    let found = explain(&f);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        found[0].next.as_deref(),
        Some("kubectl get acceleratorclasses")
    );
}

#[test]
fn a_forbidden_secret_gives_the_command_its_message_carries() {
    let mut f = facts(cond(
        "Ready",
        "False",
        "RayServicePending",
        "KubeRay has not reported",
    ));
    f.backend = "RayService".to_owned();
    let cmd = "kubectl create rolebinding infergate-graph-token-reader --namespace team-a --clusterrole infergate-graph-token-reader --serviceaccount infergate-system:infergate";
    set(
        &mut f,
        cond(
            "GraphReady",
            "False",
            "SecretForbidden",
            &format!(
                "infergate may not read secret team-a/graph-token: the namespace has not allowed it; to allow it: {cmd}"
            ),
        ),
    );
    set(
        &mut f,
        cond(
            "RoutingReady",
            "False",
            "ServeServiceMissing",
            "waiting for KubeRay's serve Service chat-serve-svc",
        ),
    );
    let found = explain(&f);
    assert_eq!(
        reasons(&f),
        [
            "SecretForbidden",
            "ServeServiceMissing",
            "RayServicePending"
        ]
    );
    assert_eq!(found[0].next.as_deref(), Some(cmd));
    assert_eq!(found[1].severity, Severity::Waiting);

    set(
        &mut f,
        cond(
            "GraphReady",
            "False",
            "SecretNotAllowed",
            "secret team-a/graph-token does not allow its token to be sent to g.example:443: no hosts",
        ),
    );
    assert_eq!(
        explain(&f)[0].next.as_deref(),
        Some("kubectl describe secret graph-token -n team-a")
    );

    set(
        &mut f,
        cond(
            "GraphReady",
            "Unknown",
            "FetchQueued",
            "waiting in line, number 2",
        ),
    );
    assert_eq!(explain(&f)[0].reason, "FetchQueued");
    assert_eq!(explain(&f)[0].severity, Severity::Waiting);
}

#[test]
fn a_canary_held_by_its_gate_points_at_rollout_status() {
    let mut f = facts(cond(
        "Ready",
        "True",
        "Available",
        "1/1 primary replicas ready, 1/1 canary replicas ready",
    ));
    f.rollout = Some(RolloutFacts {
        phase: "Progressing".to_owned(),
        steps: vec![10, 50],
        step: Some(0),
        weight: Some(10),
        target: Some("llama3-8b-v2".to_owned()),
        verdict: Some(
            "AnalysisFailed: error rate 0.2 > 0.05 (1 of 3); holding at weight 10".to_owned(),
        ),
        ..RolloutFacts::default()
    });
    let e = explanation(&f);
    assert!(e.ready, "Ready=True: held, but serving");
    assert_eq!(e.findings.len(), 1);
    let g = &e.findings[0];
    assert_eq!(g.reason, "AnalysisFailed");
    assert_eq!(
        g.sentence,
        "The canary of llama3-8b-v2 is held at weight 10 by the rollout's gate: \"error rate 0.2 > 0.05 (1 of 3); holding at weight 10\""
    );
    assert_eq!(
        g.next.as_deref(),
        Some("kubectl infergate rollout status chat -n team-a")
    );

    // A step being soaked is no finding.
    f.rollout.as_mut().unwrap().verdict = Some("StepHeld: step 1 of 2: weight 10".to_owned());
    assert!(explain(&f).is_empty());

    // Rolled back: worth knowing.
    let r = f.rollout.as_mut().unwrap();
    r.phase = "RolledBack".to_owned();
    r.verdict = Some(
        "ProgressDeadlineExceeded: rolled back: the canary was not fully ready within 30m"
            .to_owned(),
    );
    assert_eq!(reasons(&f), ["ProgressDeadlineExceeded"]);
}

#[test]
fn the_order_is_policy_graph_scheduler_pull_crash_gate_route_waiting() {
    let mut f = facts(cond("Ready", "False", "Unschedulable", UNSCHEDULABLE));
    set(
        &mut f,
        cond("PolicyCompliant", "False", "OverBudget", "over"),
    );
    set(
        &mut f,
        cond(
            "GraphReady",
            "False",
            "StaleGraph",
            "the last good graph keeps serving",
        ),
    );
    set(
        &mut f,
        cond(
            "RoutingReady",
            "False",
            "RouteNotAccepted",
            "gateway infra/gw did not accept the HTTPRoute: no listener",
        ),
    );
    f.rollout = Some(RolloutFacts {
        phase: "Progressing".to_owned(),
        verdict: Some(
            "AnalysisNoData: the analysis query returned no sample; holding at weight 10"
                .to_owned(),
        ),
        ..RolloutFacts::default()
    });
    f.generation = Some(3);
    assert_eq!(
        reasons(&f),
        [
            "OverBudget",
            "StaleGraph",
            "Unschedulable",
            "AnalysisNoData",
            "RouteNotAccepted",
            "NotObserved"
        ]
    );
    let ranks: Vec<u8> = explain(&f).iter().map(|f| f.rank).collect();
    assert!(ranks.is_sorted(), "{ranks:?}");
    assert!(!is_ready(&f));
}

#[test]
fn no_gateway_is_a_choice_and_no_status_is_a_reconciler_not_running() {
    let mut f = facts(cond(
        "Ready",
        "False",
        "Starting",
        "primary: 0/1 replicas ready; pods are starting",
    ));
    set(
        &mut f,
        cond(
            "RoutingReady",
            "False",
            "NoGateway",
            "spec.routing.gateway is not set",
        ),
    );
    let found = explain(&f);
    assert_eq!(reasons(&f), ["Starting"]);
    assert_eq!(found[0].severity, Severity::Waiting);
    assert_eq!(
        found[0].next.as_deref(),
        Some(
            "kubectl get pods -l infergate.dev/service=chat,infergate.dev/track=primary -w -n team-a"
        )
    );

    f.conditions.clear();
    assert_eq!(reasons(&f), ["NoStatus"]);
}

#[test]
fn the_text_numbers_the_findings_with_their_next_command() {
    let mut f = facts(cond("Ready", "False", "Unschedulable", UNSCHEDULABLE));
    f.accelerator_class = Some("l4".to_owned());
    set(
        &mut f,
        cond("PolicyCompliant", "False", "PolicyWarning", "no cost label"),
    );
    let text = render(&explanation(&f), None);
    let want = format!(
        "InferenceService team-a/chat is not ready: 2 things to look at, most telling first:\n\
         \n\
         1. No node can take the primary track's pods on AcceleratorClass l4 (0/1 replicas ready). The scheduler says: \"{}\"\n   \
         next: kubectl get acceleratorclass l4 -o yaml\n\
         \n\
         2. A policy warns about the service: \"no cost label\"\n   \
         next: kubectl get inferencepolicies,clusterinferencepolicies -n team-a\n",
        UNSCHEDULABLE.split_once("ready: ").unwrap().1
    );
    assert_eq!(text, want);
}

#[test]
fn the_json_has_the_findings_in_order() {
    let f = facts(cond("Ready", "False", "Unschedulable", UNSCHEDULABLE));
    let v = serde_json::to_value(explanation(&f)).unwrap();
    assert_eq!(v["ready"], false);
    assert_eq!(v["namespace"], "team-a");
    assert_eq!(v["findings"][0]["reason"], "Unschedulable");
    assert_eq!(v["findings"][0]["severity"], "blocking");
    assert_eq!(v["findings"][0]["track"], "primary");
    assert!(v["findings"][0]["next"].is_string());
}

#[test]
fn a_change_or_a_canary_that_waits_for_room_says_so_with_the_numbers() {
    let numbers =
        "needs 8 nvidia.com/gpu in h100-80gb, 0 free: waiting for room (rollout.onFullPool: Wait)";
    let mut f = facts(cond(
        "Ready",
        "True",
        "Available",
        "2/2 primary replicas ready",
    ));
    f.accelerator_class = Some("h100-80gb".to_owned());
    set(
        &mut f,
        cond("RolloutCapacity", "False", "WaitingForCapacity", numbers),
    );
    set(
        &mut f,
        cond(
            "CanaryReady",
            "False",
            "CanaryCapacity",
            "needs 8 nvidia.com/gpu in h100-80gb, 0 free: the canary's 1 replica wait for room",
        ),
    );
    let found = explain(&f);
    let said: Vec<_> = found.iter().map(|x| x.reason.as_str()).collect();
    assert_eq!(said, ["WaitingForCapacity", "CanaryCapacity"], "{found:#?}");
    assert!(found[0].sentence.contains(numbers), "{found:#?}");
    assert_eq!(
        found[0].next.as_deref(),
        Some("kubectl get acceleratorclass h100-80gb -o yaml")
    );
    // Replaced in place, then done: said while it lasts, not after.
    set(
        &mut f,
        cond(
            "RolloutCapacity",
            "True",
            "RolledOut",
            "the rollout in place is done",
        ),
    );
    set(
        &mut f,
        cond(
            "CanaryReady",
            "True",
            "Available",
            "1/1 canary replicas ready",
        ),
    );
    assert!(explain(&f).is_empty(), "{:#?}", explain(&f));
}
