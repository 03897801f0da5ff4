//! What `why` says: a [`Finding`], how much it stands in the way
//! ([`Severity`]), where it ranks, and the [`Explanation`] of a service.

use serde::Serialize;

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
pub(super) mod rank {
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
    pub const FULL_POOL: u8 = 31;
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

pub(super) fn finding(
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

/// A status message as it is, in quotes, ending the sentence.
pub(super) fn quote(message: &str) -> String {
    format!("\"{}\"", message.trim())
}

pub(super) fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|first| first.to_uppercase().collect::<String>() + c.as_str())
        .unwrap_or_default()
}
