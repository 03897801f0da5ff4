//! Progressive rollout: `spec.rollout` (also a policy's `defaults.rollout`)
//! and `status.rollout`; what a change does on a full GPU pool
//! (`onFullPool`, `maxUnavailable`, a canary's `onFullPool`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::ModelSpec;
use super::vocabulary::RolloutReason;

/// How a new model or engine version reaches the service.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RolloutStrategy {
    /// Every replica is replaced at once (the Deployment's rolling update).
    #[default]
    Immediate,
    /// A canary track runs the new version and the route weight walks `steps`.
    Canary,
}

/// The rollout plan.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutSpec {
    /// `Immediate` (default) or `Canary`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<RolloutStrategy>,
    /// Canary weights, increasing, each 1..99 and within the policies' `maxCanaryWeight`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub steps: Vec<i32>,
    /// Minimum soak at each step, a GEP-2257 duration (default `5m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub interval: Option<String>,
    /// How long the canary may take to be fully ready (default `30m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub progress_deadline: Option<String>,
    /// Canary container restarts tolerated during the rollout (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0").message("rollout.maxRestarts must be at least 0"))]
    pub max_restarts: Option<i32>,
    /// An optional gate evaluated once per interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis: Option<AnalysisSpec>,
    /// What a change that rolls the primary Deployment does when the
    /// service's AcceleratorClass has no room for one more replica:
    /// `Replace` (default) or `Wait`. Applies to both strategies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_full_pool: Option<RolloutOnFullPool>,
    /// Replicas a `Replace` may take down at once (default 1): at least 1
    /// and at most `replicas - 1` (`autoscaling.minReplicas - 1` with
    /// autoscaling), so one replica always serves; with 1 replica, 1 (a
    /// `Replace` then is a short outage); with 0, no upper bound. Within
    /// the policies' `limits.maxUnavailable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1").message("rollout.maxUnavailable must be at least 1"))]
    pub max_unavailable: Option<i32>,
    /// The canary track of a `Canary` rollout, where a manual canary has
    /// `spec.canary.onFullPool` (the two cannot be combined); defaulted,
    /// and read, only with strategy `Canary`. Not in a policy's
    /// `defaults.rollout`: `defaults.canary.onFullPool` defaults both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<RolloutCanarySpec>,
}

impl RolloutSpec {
    /// The plan alone: the rollout without its full-pool fields
    /// (`onFullPool`, `maxUnavailable`, `canary`), which are defaulted
    /// field by field rather than with the plan.
    #[must_use]
    pub fn plan(&self) -> Self {
        Self {
            on_full_pool: None,
            max_unavailable: None,
            canary: None,
            ..self.clone()
        }
    }

    /// Whether the rollout names any of the plan's fields.
    #[must_use]
    pub fn has_plan(&self) -> bool {
        self.plan() != Self::default()
    }
}

/// What a change that rolls the primary Deployment (engine, model, env,
/// placement) does when the service's AcceleratorClass has no room for one
/// more replica: `Replace` (default) rolls `maxUnavailable` replicas at a
/// time in place, `Wait` keeps the old template until one more replica
/// fits. Either strategy's primary rolls this way.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RolloutOnFullPool {
    /// Roll with `maxSurge: 0, maxUnavailable: N`: each replaced pod's
    /// devices go to its successor.
    #[default]
    Replace,
    /// Keep the old template until one more replica fits.
    Wait,
}

impl RolloutOnFullPool {
    /// The word as written in manifests.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Replace => "Replace",
            Self::Wait => "Wait",
        }
    }
}

/// What a canary whose pods do not fit the AcceleratorClass's free devices
/// does: `Wait` (default) creates no pod that cannot be placed and keeps the
/// route on the primary, `Borrow` takes the canary's replicas from the
/// primary, one at a time. A manual canary sets it in `spec.canary`, a
/// `Canary` rollout's track in `spec.rollout.canary` (the two cannot be
/// combined), and a policy in `defaults.canary`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum CanaryOnFullPool {
    /// Create no canary pod that cannot be placed; the route stays on the primary.
    #[default]
    Wait,
    /// Take the canary's replicas from the primary, one at a time (the
    /// primary keeps at least one ready replica).
    Borrow,
}

impl CanaryOnFullPool {
    /// The word as written in manifests.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Wait => "Wait",
            Self::Borrow => "Borrow",
        }
    }
}

/// The canary track of a `Canary` rollout.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutCanarySpec {
    /// `Wait` (default) or `Borrow`, as `spec.canary.onFullPool` for a manual canary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_full_pool: Option<CanaryOnFullPool>,
}

/// The rollout's gate.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct AnalysisSpec {
    /// A Prometheus query compared with a threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prometheus: Option<PrometheusGate>,
}

/// A Prometheus query that must return one sample within a threshold.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrometheusGate {
    /// The Prometheus base URL. Only a ClusterInferencePolicy's
    /// `defaults.rollout.analysis.prometheus.address` may set it (or
    /// `serve --prometheus-url`); denied in a service or an InferencePolicy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    pub address: Option<String>,
    /// PromQL; `{{namespace}}`, `{{service}}` and `{{canary}}` (the canary
    /// Deployment) are replaced before it runs, and every selector is
    /// confined to the service's namespace. Required, except in a
    /// ClusterInferencePolicy that names only the address.
    #[serde(default)]
    #[schemars(length(max = 4096))]
    pub query: String,
    /// The bound the sample must respect (required with a query).
    #[serde(default)]
    pub threshold: Threshold,
    /// Consecutive failed evaluations that fail the rollout (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_limit: Option<i32>,
    /// What an empty answer means (default `Hold`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_no_data: Option<OnNoData>,
}

/// `{max: ...}` or `{min: ...}`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct Threshold {
    /// The sample must be at most this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    /// The sample must be at least this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
}

/// What a query without a sample means.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum OnNoData {
    /// Wait (the progress deadline still runs).
    #[default]
    Hold,
    /// A failed evaluation.
    Fail,
    /// A passed evaluation.
    Pass,
}

/// Where a rollout stands.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RolloutPhase {
    /// The primary runs the stable version; no rollout.
    #[default]
    Stable,
    /// A canary runs the target and the weight walks the steps.
    Progressing,
    /// Frozen by a `pause` action.
    Paused,
    /// Failed or aborted: the canary is gone until the spec changes.
    RolledBack,
}

impl RolloutPhase {
    /// The phase as `status.rollout.phase` carries it.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Stable => "Stable",
            Self::Progressing => "Progressing",
            Self::Paused => "Paused",
            Self::RolledBack => "RolledBack",
        }
    }
}

impl std::str::FromStr for RolloutPhase {
    type Err = super::vocabulary::UnknownWord;

    fn from_str(word: &str) -> Result<Self, Self::Err> {
        [
            Self::Stable,
            Self::Progressing,
            Self::Paused,
            Self::RolledBack,
        ]
        .into_iter()
        .find(|p| p.as_str() == word)
        .ok_or_else(|| super::vocabulary::UnknownWord {
            kind: "rollout phase",
            word: word.to_owned(),
        })
    }
}

/// A model and engine version.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VersionRef {
    /// The model.
    pub model: ModelSpec,
    /// The engine image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_image: Option<String>,
}

/// The rollout's state, which alone drives it (with the spec).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// Stable, Progressing, Paused or RolledBack.
    pub phase: RolloutPhase,
    /// Index into `steps` while progressing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<i32>,
    /// The weight routed to the canary now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
    /// When the current step's soak started (its weight applied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_started_at: Option<Time>,
    /// When the canary track was created for this target (the progress
    /// deadline runs from here, and again whenever the canary stops being ready).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_started_at: Option<Time>,
    /// What the primary track runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable: Option<VersionRef>,
    /// The version being rolled out (or rolled back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<VersionRef>,
    /// Consecutive failed analysis evaluations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failures: Option<i32>,
    /// The last `infergate.dev/rollout-action` value acted on (over 128
    /// bytes, as `sha256:<hex>` of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_action: Option<String>,
    /// The last 16 `infergate.dev/rollout-action` values acted on, newest
    /// last (each as `lastAction` keeps it): a value among them is not
    /// acted on again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(max = 128)))]
    pub actions_seen: Vec<String>,
    /// Machine-readable reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What the rollout waits for, or why it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl RolloutStatus {
    /// Whether the rollout (of a plan of `steps` steps) is past its last
    /// step, rolling the primary to the target: `Progressing` with reason
    /// `Promoting` (the step stays at the last index), or a step past the
    /// last index as a status written before that rule holds it.
    #[must_use]
    pub fn promoting(&self, steps: usize) -> bool {
        self.phase == RolloutPhase::Progressing
            && (self.reason.as_deref() == Some(RolloutReason::Promoting.as_str())
                || self
                    .step
                    .and_then(|s| usize::try_from(s).ok())
                    .is_some_and(|s| s >= steps))
    }

    /// The last index into a plan of `steps` steps: where the step stays
    /// while the rollout promotes.
    #[must_use]
    pub fn last_step(steps: usize) -> i32 {
        i32::try_from(steps.saturating_sub(1)).unwrap_or(i32::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::{RolloutPhase, RolloutStatus};

    #[test]
    fn promoting_is_read_from_the_reason_and_from_a_step_past_the_last() {
        let st = |step: i32, reason: &str| RolloutStatus {
            phase: RolloutPhase::Progressing,
            step: Some(step),
            reason: Some(reason.to_owned()),
            ..RolloutStatus::default()
        };
        assert!(st(2, "Promoting").promoting(3));
        assert!(!st(2, "StepHeld").promoting(3));
        // A status an earlier version wrote while promoting.
        assert!(st(3, "StepHeld").promoting(3));
        let paused = RolloutStatus {
            phase: RolloutPhase::Paused,
            ..st(2, "Promoting")
        };
        assert!(!paused.promoting(3));
        assert_eq!(RolloutStatus::last_step(3), 2);
        assert_eq!(RolloutStatus::last_step(0), 0);
    }

    #[test]
    fn a_phase_reads_back_as_it_is_written() {
        for p in [
            RolloutPhase::Stable,
            RolloutPhase::Progressing,
            RolloutPhase::Paused,
            RolloutPhase::RolledBack,
        ] {
            assert_eq!(p.as_str().parse::<RolloutPhase>(), Ok(p));
            assert_eq!(serde_json::to_value(p).unwrap(), p.as_str());
            assert_eq!(format!("{p:?}"), p.as_str());
        }
        assert!("Done".parse::<RolloutPhase>().is_err());
    }
}
