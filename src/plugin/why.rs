//! `kubectl infergate why NAME`: why a service is not ready, in sentences,
//! most telling first, each with the next command to run.
//!
//! [`explain`] reads only the [`ServiceFacts`] `status` shows, above all
//! the conditions the reconciler writes (their messages carry the
//! scheduler's and the kubelet's words), so what `why` says is what the
//! service's status says, in order of what to look at first.

use std::fmt::Write as _;
use std::process::ExitCode;

use serde::Serialize;

use super::client::{Connection, PluginError};
use super::facts::{ConditionFacts, ServiceFacts, gather};
use super::term::Output;

/// `why` options.
#[derive(Clone, Debug)]
pub struct Options {
    /// Where to connect.
    pub connection: Connection,
    /// The service.
    pub name: String,
    /// How to print.
    pub output: Output,
}

/// How much a finding stands in the way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Severity {
    /// Someone must change something before the service serves.
    Blocking,
    /// It should pass by itself; the next command shows it moving.
    Waiting,
    /// Worth knowing; it does not stop the service serving.
    Notice,
}

/// One thing that explains why the service is not ready.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    /// Lower is more telling; findings are printed in this order.
    pub rank: u8,
    /// How much it stands in the way.
    pub severity: Severity,
    /// The reason the status gives (`Unschedulable`, `PolicyViolation`...).
    pub reason: String,
    /// The track it concerns (`primary`, `canary`), when one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub track: Option<String>,
    /// What is wrong, in plain words, quoting the status.
    pub sentence: String,
    /// The command to run next.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// What `why` says about a service: whether it is ready, and the findings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// `Ready=True` for the current generation.
    pub ready: bool,
    /// The findings, most telling first.
    pub findings: Vec<Finding>,
}

/// Ranks: policy and spec first, then the graph and its secret, then the
/// pods in the order a pod goes through (placed, pulled, run), then the
/// rollout's gate, routing, and what only waits.
mod rank {
    pub const POLICY_DENIED: u8 = 10;
    pub const OVER_BUDGET: u8 = 11;
    pub const INVALID_SPEC: u8 = 12;
    pub const NO_CLASS: u8 = 13;
    pub const NO_KUBERAY: u8 = 14;
    pub const APPLY_FAILED: u8 = 15;
    pub const SECRET: u8 = 20;
    pub const GRAPH: u8 = 21;
    pub const STALE_GRAPH: u8 = 22;
    pub const GRAPH_QUEUED: u8 = 23;
    pub const UNSCHEDULABLE: u8 = 30;
    pub const IMAGE_PULL: u8 = 40;
    pub const CRASH_LOOP: u8 = 50;
    pub const GATE: u8 = 60;
    pub const ROLLED_BACK: u8 = 61;
    pub const PAUSED: u8 = 62;
    pub const ROUTE: u8 = 70;
    pub const SERVE_SERVICE: u8 = 71;
    pub const STARTING: u8 = 80;
    pub const NOT_OBSERVED: u8 = 85;
    pub const POLICY_WARNING: u8 = 90;
    pub const NO_STATUS: u8 = 99;
}

/// Reasons of a rollout the gate holds at its step.
const GATE_HOLDS: [&str; 3] = ["AnalysisFailed", "AnalysisNoData", "NoPrometheusAddress"];

/// Whether the service is ready: `Ready=True`, and the reconciler has seen
/// its current generation.
#[must_use]
pub fn is_ready(f: &ServiceFacts) -> bool {
    let seen = match (f.observed_generation, f.generation) {
        (Some(seen), Some(current)) => seen >= current,
        _ => true,
    };
    seen && f.condition("Ready").is_some_and(|c| c.status == "True")
}

/// What explains the state of the service, most telling first (a ready
/// service may still have findings: a held canary, a policy warning).
#[must_use]
pub fn explain(f: &ServiceFacts) -> Vec<Finding> {
    let cmd = Commands::of(f);
    let mut out = Vec::new();
    if f.conditions.is_empty() {
        out.push(finding(
            rank::NO_STATUS,
            Severity::Waiting,
            "NoStatus",
            None,
            "infergate has not reported on the service yet: is its reconciler running?".to_owned(),
            Some(cmd.events()),
        ));
        return out;
    }
    if let Some(c) = false_condition(f, "PolicyCompliant") {
        out.push(policy(c, &cmd));
    }
    if let Some(c) = false_condition(f, "Reconciled") {
        out.extend(reconciled(c, &cmd, f.accelerator_class.as_deref()));
    }
    if let Some(c) = f
        .condition("GraphReady")
        .filter(|c| c.status != "True" && !c.reason.is_empty())
    {
        out.push(graph(c, &cmd));
    }
    if let Some(c) = false_condition(f, "Ready") {
        out.extend(ready(c, &cmd, f.accelerator_class.as_deref()));
    }
    out.extend(rollout(f, &cmd));
    if let Some(c) = false_condition(f, "RoutingReady") {
        out.extend(routing(c, &cmd));
    }
    if let (Some(seen), Some(current)) = (f.observed_generation, f.generation)
        && seen < current
    {
        out.push(finding(
            rank::NOT_OBSERVED,
            Severity::Waiting,
            "NotObserved",
            None,
            format!(
                "infergate has not acted on the latest change yet (generation {current}, last seen {seen}): the conditions describe the previous spec."
            ),
            Some(cmd.watch()),
        ));
    }
    // The same reason on two conditions (Reconciled and Ready both say
    // AcceleratorClassNotFound or InvalidSpec) is one finding.
    let mut seen = std::collections::BTreeSet::new();
    out.retain(|f| seen.insert((f.reason.clone(), f.track.clone())));
    out.sort_by_key(|f| f.rank);
    out
}

/// The condition `type_` when it is `False`.
fn false_condition<'a>(f: &'a ServiceFacts, type_: &str) -> Option<&'a ConditionFacts> {
    f.condition(type_).filter(|c| c.status == "False")
}

fn finding(
    rank: u8,
    severity: Severity,
    reason: &str,
    track: Option<&str>,
    sentence: String,
    next: Option<String>,
) -> Finding {
    Finding {
        rank,
        severity,
        reason: reason.to_owned(),
        track: track.map(str::to_owned),
        sentence,
        next,
    }
}

/// The next commands, with the service's real namespace and name.
struct Commands {
    ns: String,
    name: String,
}

impl Commands {
    fn of(f: &ServiceFacts) -> Self {
        Self {
            ns: f.namespace.clone(),
            name: f.name.clone(),
        }
    }

    /// `kubectl ARGS -n NS`.
    fn kubectl(&self, args: &str) -> String {
        format!("kubectl {args} -n {}", self.ns)
    }

    /// The service's pods, of one track when given.
    fn selector(&self, track: Option<&str>) -> String {
        match track {
            Some(t) => format!(
                "infergate.dev/service={},infergate.dev/track={t}",
                self.name
            ),
            None => format!("infergate.dev/service={}", self.name),
        }
    }

    fn describe_pods(&self, track: Option<&str>) -> String {
        self.kubectl(&format!("describe pod -l {}", self.selector(track)))
    }

    fn previous_logs(&self, track: Option<&str>) -> String {
        self.kubectl(&format!("logs -l {} --previous", self.selector(track)))
    }

    fn watch_pods(&self, track: Option<&str>) -> String {
        self.kubectl(&format!("get pods -l {} -w", self.selector(track)))
    }

    fn events(&self) -> String {
        self.kubectl(&format!(
            "get events --field-selector involvedObject.name={}",
            self.name
        ))
    }

    fn watch(&self) -> String {
        format!("kubectl infergate status {} -n {} -w", self.name, self.ns)
    }

    fn rollout_status(&self) -> String {
        format!(
            "kubectl infergate rollout status {} -n {}",
            self.name, self.ns
        )
    }

    fn edit(&self) -> String {
        self.kubectl(&format!("edit infsvc {}", self.name))
    }
}

/// `PolicyCompliant=False`.
fn policy(c: &ConditionFacts, cmd: &Commands) -> Finding {
    let policies = cmd.kubectl("get inferencepolicies,clusterinferencepolicies");
    match c.reason.as_str() {
        "OverBudget" => finding(
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
        "PolicyWarning" => finding(
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
fn reconciled(c: &ConditionFacts, cmd: &Commands, class: Option<&str>) -> Option<Finding> {
    let (rank, sentence, next) = match c.reason.as_str() {
        "InvalidSpec" => (
            rank::INVALID_SPEC,
            format!(
                "The spec is invalid, so nothing was applied: {}",
                quote(&c.message)
            ),
            cmd.edit(),
        ),
        "AcceleratorClassNotFound" => (
            rank::NO_CLASS,
            format!(
                "The AcceleratorClass{} the service names does not exist: {}",
                class.map(|c| format!(" {c}")).unwrap_or_default(),
                quote(&c.message)
            ),
            "kubectl get acceleratorclasses".to_owned(),
        ),
        "RayServiceNotInstalled" => (
            rank::NO_KUBERAY,
            format!("KubeRay is not installed: {}", quote(&c.message)),
            "kubectl get crd rayservices.ray.io".to_owned(),
        ),
        "ApplyFailed" => (
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
fn graph(c: &ConditionFacts, cmd: &Commands) -> Finding {
    let describe_secret = || {
        secret_in(&c.message).map(|(ns, name)| format!("kubectl describe secret {name} -n {ns}"))
    };
    let (rank, severity, sentence, next) = match c.reason.as_str() {
        "SecretForbidden" => (
            rank::SECRET,
            Severity::Blocking,
            format!(
                "infergate may not read the Secret holding the graph's token: {}",
                quote(&c.message)
            ),
            c.message
                .find("kubectl ")
                .map(|i| c.message[i..].trim_end_matches('.').to_owned()),
        ),
        "SecretNotFound" | "SecretNotAllowed" => (
            rank::SECRET,
            Severity::Blocking,
            format!(
                "The Secret holding the graph's token cannot be used: {}",
                quote(&c.message)
            ),
            describe_secret(),
        ),
        "StaleGraph" => (
            rank::STALE_GRAPH,
            Severity::Blocking,
            format!(
                "The latest serving graph could not be fetched; the last good one keeps serving: {}",
                quote(&c.message)
            ),
            Some(cmd.events()),
        ),
        "FetchQueued" | "Unknown" | "" => (
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

/// `namespace/name` of the first `secret NS/NAME` a message names.
fn secret_in(message: &str) -> Option<(&str, &str)> {
    let rest = &message[message.find("secret ")? + "secret ".len()..];
    let word = rest.split([' ', ':', ',', ';']).next()?;
    word.split_once('/')
}

/// `Ready=False`: the pods' own reasons, in the reconciler's words.
fn ready(c: &ConditionFacts, cmd: &Commands, class: Option<&str>) -> Option<Finding> {
    let (track, counts, detail) = split_ready(&c.message);
    let who = track.map_or_else(
        || "the service's".to_owned(),
        |t| format!("the {t} track's"),
    );
    let counts = counts.map(|c| format!(" ({c})")).unwrap_or_default();
    let (rank, severity, sentence, next) = match c.reason.as_str() {
        "Unschedulable" => {
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
        "ImagePullFailed" => (
            rank::IMAGE_PULL,
            Severity::Blocking,
            format!(
                "{} pods cannot pull their image{counts}: {}",
                capitalise(&who),
                quote(detail)
            ),
            Some(cmd.describe_pods(None)),
        ),
        "CrashLooping" => {
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
        "Starting" | "Progressing" => (
            rank::STARTING,
            Severity::Waiting,
            format!(
                "{} pods are not all ready yet: {}",
                capitalise(&who),
                quote(&c.message)
            ),
            Some(cmd.watch_pods(track)),
        ),
        "RayServicePending" | "RayServiceNotReady" => (
            rank::STARTING,
            Severity::Waiting,
            format!("KubeRay's RayService is not ready: {}", quote(&c.message)),
            Some(cmd.kubectl(&format!("describe rayservice {}", cmd.name))),
        ),
        // Told by Reconciled.
        "InvalidSpec" | "AcceleratorClassNotFound" => return None,
        _ => (
            rank::STARTING,
            Severity::Waiting,
            format!("The service is not ready: {}", quote(&c.message)),
            Some(cmd.watch()),
        ),
    };
    Some(finding(rank, severity, &c.reason, track, sentence, next))
}

/// `primary: 0/1 replicas ready: DETAIL` as (track, counts, detail);
/// a message of another shape is all detail.
fn split_ready(message: &str) -> (Option<&str>, Option<&str>, &str) {
    let Some((track, rest)) = message.split_once(": ") else {
        return (None, None, message);
    };
    if track != "primary" && track != "canary" {
        return (None, None, message);
    }
    let (counts, detail) = match rest.split_once(": ") {
        Some((counts, detail)) if counts.ends_with("replicas ready") => (Some(counts), detail),
        _ => match rest.split_once("; ") {
            Some((counts, detail)) if counts.ends_with("replicas ready") => (Some(counts), detail),
            _ => (None, rest),
        },
    };
    (Some(track), counts, detail)
}

/// The number after `last exit code `.
fn exit_code(detail: &str) -> Option<i64> {
    let rest = &detail[detail.find("last exit code ")? + "last exit code ".len()..];
    let digits: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '-')
        .collect();
    digits.parse().ok()
}

/// The rollout: held by its gate, paused, or rolled back.
fn rollout(f: &ServiceFacts, cmd: &Commands) -> Option<Finding> {
    let r = f.rollout.as_ref()?;
    let (reason, message) = split_verdict(r.verdict.as_deref()?);
    let target = r
        .target
        .as_deref()
        .map(|t| format!(" of {t}"))
        .unwrap_or_default();
    let (rank, severity, sentence, next) = match (r.phase.as_str(), reason) {
        ("Progressing", Some(reason)) if GATE_HOLDS.contains(&reason) => (
            rank::GATE,
            Severity::Blocking,
            format!(
                "The canary{target} is held at weight {} by the rollout's gate: {}",
                r.weight.unwrap_or(0),
                quote(message)
            ),
            cmd.rollout_status(),
        ),
        ("Paused", _) => (
            rank::PAUSED,
            Severity::Notice,
            format!(
                "The rollout{target} is paused at weight {}; it goes on when resumed.",
                r.weight.unwrap_or(0)
            ),
            format!(
                "kubectl infergate rollout resume {} -n {}",
                cmd.name, cmd.ns
            ),
        ),
        ("RolledBack", _) => (
            rank::ROLLED_BACK,
            Severity::Notice,
            format!(
                "The rollout{target} was rolled back; the primary keeps the stable version until the spec changes: {}",
                quote(message)
            ),
            cmd.rollout_status(),
        ),
        _ => return None,
    };
    Some(finding(
        rank,
        severity,
        reason.unwrap_or(&r.phase),
        Some("canary"),
        sentence,
        Some(next),
    ))
}

/// `Reason: message` (as facts joins them) into its parts.
fn split_verdict(verdict: &str) -> (Option<&str>, &str) {
    match verdict.split_once(": ") {
        Some((reason, message))
            if !reason.is_empty() && reason.chars().all(|c| c.is_ascii_alphanumeric()) =>
        {
            (Some(reason), message)
        }
        _ if !verdict.contains(' ') => (Some(verdict), verdict),
        _ => (None, verdict),
    }
}

/// `RoutingReady=False` (no gateway is a choice, not a problem).
fn routing(c: &ConditionFacts, cmd: &Commands) -> Option<Finding> {
    let (rank, severity, sentence, next) = match c.reason.as_str() {
        "NoGateway" => return None,
        "ServeServiceMissing" => (
            rank::SERVE_SERVICE,
            Severity::Waiting,
            format!(
                "The route waits for KubeRay's serve Service: {}",
                quote(&c.message)
            ),
            cmd.kubectl(&format!("describe rayservice {}", cmd.name)),
        ),
        "RouteNotAccepted" => (
            rank::ROUTE,
            Severity::Blocking,
            format!("The gateway refused the route: {}", quote(&c.message)),
            cmd.kubectl(&format!("describe httproute {}", cmd.name)),
        ),
        "InferencePoolNotAccepted" => (
            rank::ROUTE,
            Severity::Blocking,
            format!(
                "The gateway reports a problem with the InferencePool: {}",
                quote(&c.message)
            ),
            cmd.kubectl("get inferencepools -o yaml"),
        ),
        "GatewayAPINotInstalled" => (
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

/// A status message as it is, in quotes, ending the sentence.
fn quote(message: &str) -> String {
    format!("\"{}\"", message.trim())
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|first| first.to_uppercase().collect::<String>() + c.as_str())
        .unwrap_or_default()
}

/// What `why` prints about `f`.
#[must_use]
pub fn explanation(f: &ServiceFacts) -> Explanation {
    Explanation {
        namespace: f.namespace.clone(),
        name: f.name.clone(),
        ready: is_ready(f),
        findings: explain(f),
    }
}

/// The human text: one sentence for a ready service with nothing to
/// say, else a numbered list with each finding's next command.
#[must_use]
pub fn render(e: &Explanation, ready_message: Option<&str>) -> String {
    let mut out = String::new();
    let who = format!("InferenceService {}/{}", e.namespace, e.name);
    let things = match e.findings.len() {
        1 => "one thing to look at".to_owned(),
        n => format!("{n} things to look at, most telling first"),
    };
    match (e.ready, e.findings.is_empty()) {
        (true, true) => {
            let _ = writeln!(
                out,
                "{who} is ready{}.",
                ready_message.map(|m| format!(": {m}")).unwrap_or_default()
            );
            return out;
        }
        (true, false) => {
            let _ = writeln!(out, "{who} is ready, with {things}:");
        }
        (false, true) => {
            let _ = writeln!(
                out,
                "{who} is not ready, and its status does not say why yet{}.",
                ready_message.map(|m| format!(": {m}")).unwrap_or_default()
            );
            let _ = writeln!(
                out,
                "   next: kubectl infergate status {} -n {} -w",
                e.name, e.namespace
            );
            return out;
        }
        (false, false) => {
            let _ = writeln!(out, "{who} is not ready: {things}:");
        }
    }
    for (i, f) in e.findings.iter().enumerate() {
        let _ = writeln!(out, "\n{}. {}", i + 1, f.sentence);
        if let Some(next) = &f.next {
            let _ = writeln!(out, "   next: {next}");
        }
    }
    out
}

/// Run `why`: 0 when the service is ready, 1 when it is not (the findings
/// printed), 2 when it cannot be told (no such service, no API server).
pub async fn run(opts: Options) -> ExitCode {
    match why(&opts).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

async fn why(opts: &Options) -> Result<bool, PluginError> {
    let target = opts.connection.connect().await?;
    let facts = gather(&target, &opts.name).await?;
    let e = explanation(&facts);
    let ready = facts.condition("Ready").map(|c| c.message.as_str());
    let text = opts
        .output
        .format(&e, |e| render(e, ready))
        .map_err(PluginError::Other)?;
    print!("{text}");
    Ok(e.ready)
}

#[cfg(test)]
mod tests;
