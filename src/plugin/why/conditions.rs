//! Findings from the conditions the reconciler writes, by their typed
//! reasons: `PolicyCompliant`, `Reconciled`, `GraphReady`, `Ready`,
//! `RoutingReady`, and on a full GPU pool `RolloutCapacity` and
//! `CanaryReady`.

use super::commands::Commands;
use super::finding::{Finding, Severity, capitalise, finding, quote, rank};
use crate::api::vocabulary::message::{SecretRef, TrackMessage, command_in, exit_code};
use crate::api::vocabulary::{GraphReason, Reason};
use crate::plugin::facts::ConditionFacts;

/// The condition's reason, when it is one infergate writes.
fn reason(c: &ConditionFacts) -> Option<Reason> {
    c.reason.parse().ok()
}

/// `PolicyCompliant=False`.
pub(super) fn policy(c: &ConditionFacts, cmd: &Commands) -> Finding {
    let policies = cmd.kubectl("get inferencepolicies,clusterinferencepolicies");
    match reason(c) {
        Some(Reason::OverBudget) => finding(
            rank::OVER_BUDGET,
            Severity::Blocking,
            &c.reason,
            None,
            format!(
                "The service is over its namespace's GPU or cost budget: {}",
                quote(&c.message)
            ),
            Some(format!("kubectl infergate budget -n {}", cmd.ns)),
        ),
        Some(Reason::PolicyWarning) => finding(
            rank::POLICY_WARNING,
            Severity::Notice,
            &c.reason,
            None,
            format!("A policy warns about the service: {}", quote(&c.message)),
            Some(policies),
        ),
        _ => finding(
            rank::POLICY_DENIED,
            Severity::Blocking,
            &c.reason,
            None,
            format!("A policy denies the service: {}", quote(&c.message)),
            Some(policies),
        ),
    }
}

/// `Reconciled=False` (a graph failure is told by `GraphReady`).
pub(super) fn reconciled(
    c: &ConditionFacts,
    cmd: &Commands,
    class: Option<&str>,
) -> Option<Finding> {
    let (rank, sentence, next) = match reason(c)? {
        Reason::InvalidSpec => (
            rank::INVALID_SPEC,
            format!(
                "The spec is invalid, so nothing was applied: {}",
                quote(&c.message)
            ),
            cmd.edit(),
        ),
        Reason::AcceleratorClassNotFound => (
            rank::NO_CLASS,
            format!(
                "The AcceleratorClass{} the service names does not exist: {}",
                class.map(|c| format!(" {c}")).unwrap_or_default(),
                quote(&c.message)
            ),
            "kubectl get acceleratorclasses".to_owned(),
        ),
        Reason::RayServiceNotInstalled => (
            rank::NO_KUBERAY,
            format!("KubeRay is not installed: {}", quote(&c.message)),
            "kubectl get crd rayservices.ray.io".to_owned(),
        ),
        Reason::LeaderWorkerSetNotInstalled => (
            rank::NO_KUBERAY,
            format!("LeaderWorkerSet is not installed: {}", quote(&c.message)),
            "kubectl get crd leaderworkersets.leaderworkerset.x-k8s.io".to_owned(),
        ),
        Reason::ApplyFailed => (
            rank::APPLY_FAILED,
            format!(
                "infergate could not apply the service's objects: {}",
                quote(&c.message)
            ),
            cmd.events(),
        ),
        _ => return None,
    };
    Some(finding(
        rank,
        Severity::Blocking,
        &c.reason,
        None,
        sentence,
        Some(next),
    ))
}

/// `GraphReady` not `True`.
pub(super) fn graph(c: &ConditionFacts, cmd: &Commands) -> Finding {
    let describe_secret = || {
        SecretRef::find_in(&c.message)
            .map(|s| format!("kubectl describe secret {} -n {}", s.name, s.namespace))
    };
    let (rank, severity, sentence, next) = match c.reason.parse() {
        Ok(GraphReason::SecretForbidden) => (
            rank::SECRET,
            Severity::Blocking,
            format!(
                "infergate may not read the Secret holding the graph's token: {}",
                quote(&c.message)
            ),
            command_in(&c.message).map(str::to_owned),
        ),
        Ok(GraphReason::SecretNotFound | GraphReason::SecretNotAllowed) => (
            rank::SECRET,
            Severity::Blocking,
            format!(
                "The Secret holding the graph's token cannot be used: {}",
                quote(&c.message)
            ),
            describe_secret(),
        ),
        Ok(GraphReason::StaleGraph) => (
            rank::STALE_GRAPH,
            Severity::Blocking,
            format!(
                "The latest serving graph could not be fetched; the last good one keeps serving: {}",
                quote(&c.message)
            ),
            Some(cmd.events()),
        ),
        Ok(GraphReason::FetchQueued) => (
            rank::GRAPH_QUEUED,
            Severity::Waiting,
            format!(
                "The serving graph has not been fetched yet: {}",
                quote(&c.message)
            ),
            Some(cmd.watch()),
        ),
        _ => (
            rank::GRAPH,
            Severity::Blocking,
            format!(
                "The serving graph cannot be used ({}): {}",
                c.reason,
                quote(&c.message)
            ),
            Some(cmd.events()),
        ),
    };
    finding(rank, severity, &c.reason, None, sentence, next)
}

/// `Ready=False`: the pods' own reasons, in the reconciler's words.
pub(super) fn ready(c: &ConditionFacts, cmd: &Commands, class: Option<&str>) -> Option<Finding> {
    let said = TrackMessage::parse(&c.message);
    let track = said.map(|m| m.track);
    let detail = said.map_or(c.message.as_str(), |m| m.detail);
    let who = track.map_or_else(
        || "the service's".to_owned(),
        |t| format!("the {t} track's"),
    );
    let counts = said
        .and_then(|m| m.replicas)
        .map(|r| format!(" ({r})"))
        .unwrap_or_default();
    let (rank, severity, sentence, next) = match reason(c) {
        Some(Reason::Unschedulable) => {
            let on = class
                .map(|c| format!(" on AcceleratorClass {c}"))
                .unwrap_or_default();
            (
                rank::UNSCHEDULABLE,
                Severity::Blocking,
                format!(
                    "No node can take {who} pods{on}{counts}. The scheduler says: {}",
                    quote(detail)
                ),
                Some(match class {
                    Some(c) => format!("kubectl get acceleratorclass {c} -o yaml"),
                    None => cmd.describe_pods(track),
                }),
            )
        }
        Some(Reason::ImagePullFailed) => (
            rank::IMAGE_PULL,
            Severity::Blocking,
            format!(
                "{} pods cannot pull their image{counts}: {}",
                capitalise(&who),
                quote(detail)
            ),
            Some(cmd.describe_pods(None)),
        ),
        Some(Reason::CrashLooping) => {
            let code = exit_code(detail)
                .map(|c| format!(" with code {c}"))
                .unwrap_or_default();
            (
                rank::CRASH_LOOP,
                Severity::Blocking,
                format!(
                    "{} engine keeps crashing{counts}; it last exited{code}: {}",
                    capitalise(&who),
                    quote(detail)
                ),
                Some(cmd.previous_logs(track)),
            )
        }
        Some(Reason::Starting | Reason::Progressing) => (
            rank::STARTING,
            Severity::Waiting,
            format!(
                "{} pods are not all ready yet: {}",
                capitalise(&who),
                quote(&c.message)
            ),
            Some(cmd.watch_pods(track)),
        ),
        Some(Reason::RayServicePending | Reason::RayServiceNotReady) => (
            rank::STARTING,
            Severity::Waiting,
            format!("KubeRay's RayService is not ready: {}", quote(&c.message)),
            Some(cmd.describe("rayservice")),
        ),
        // Told by Reconciled.
        Some(Reason::InvalidSpec | Reason::AcceleratorClassNotFound) => return None,
        _ => (
            rank::STARTING,
            Severity::Waiting,
            format!("The service is not ready: {}", quote(&c.message)),
            Some(cmd.watch()),
        ),
    };
    let track = track.map(|t| t.as_str());
    Some(finding(rank, severity, &c.reason, track, sentence, next))
}

/// `RoutingReady=False` (no gateway is a choice, not a problem);
/// `refused_names` says which model names a refused route carries.
pub(super) fn routing(c: &ConditionFacts, cmd: &Commands, refused_names: &str) -> Option<Finding> {
    let (rank, severity, sentence, next) = match reason(c) {
        Some(Reason::NoGateway) => return None,
        Some(Reason::ServeServiceMissing) => (
            rank::SERVE_SERVICE,
            Severity::Waiting,
            format!(
                "The route waits for KubeRay's serve Service: {}",
                quote(&c.message)
            ),
            cmd.describe("rayservice"),
        ),
        Some(Reason::RouteNotAccepted) => (
            rank::ROUTE,
            Severity::Blocking,
            format!(
                "The gateway refused the route{refused_names}: {}",
                quote(&c.message)
            ),
            cmd.describe("httproute"),
        ),
        Some(Reason::InferencePoolNotAccepted) => (
            rank::ROUTE,
            Severity::Blocking,
            format!(
                "The gateway reports a problem with the InferencePool: {}",
                quote(&c.message)
            ),
            cmd.kubectl("get inferencepools -o yaml"),
        ),
        Some(Reason::GatewayApiNotInstalled) => (
            rank::ROUTE,
            Severity::Blocking,
            format!("No route can be made: {}", quote(&c.message)),
            "kubectl get crd httproutes.gateway.networking.k8s.io".to_owned(),
        ),
        _ => (
            rank::ROUTE,
            Severity::Blocking,
            format!(
                "Traffic is not routed to the service: {}",
                quote(&c.message)
            ),
            cmd.events(),
        ),
    };
    Some(finding(
        rank,
        severity,
        &c.reason,
        None,
        sentence,
        Some(next),
    ))
}

/// `RolloutCapacity=False` (a change of the primary with no room for one
/// more replica) or `CanaryReady=False` with `CanaryCapacity` (a canary
/// whose pods wait for room); other reasons of `CanaryReady` are the
/// canary's pods, which `Ready` tells.
pub(super) fn full_pool(c: &ConditionFacts, class: Option<&str>) -> Option<Finding> {
    // Both cluster-scoped: the pool's class, or its nodes.
    let nodes = match class {
        Some(class) => format!("kubectl get acceleratorclass {class} -o yaml"),
        None => "kubectl get nodes".to_owned(),
    };
    let sentence = match reason(c)? {
        Reason::ReplacingInPlace => format!(
            "The pool has no room for one more replica, so the primary is replaced in place (fewer replicas serve meanwhile): {}",
            quote(&c.message)
        ),
        Reason::WaitingForCapacity => format!(
            "The change waits for room on the pool; the primary keeps running the old version: {}",
            quote(&c.message)
        ),
        Reason::CanaryCapacity => format!(
            "The canary waits for room on the pool; no canary pod is made and the route stays on the primary: {}",
            quote(&c.message)
        ),
        _ => return None,
    };
    Some(finding(
        rank::FULL_POOL,
        Severity::Waiting,
        &c.reason,
        None,
        sentence,
        Some(nodes),
    ))
}
