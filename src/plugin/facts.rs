//! What one service is, as the plugin shows it: gathered from the API
//! server ([`gather`]) and shaped by a pure function ([`shape`]), so the
//! same facts feed the screen, `-o json|yaml` and `why`.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use serde::Serialize;

use super::client::{PluginError, Target};
use super::headroom::{NamespaceBudget, namespace_budget};
use super::names::{ModelNames, model_names};
use crate::api::rollout::{RolloutPhase, RolloutStatus, RolloutStrategy, VersionRef};
use crate::api::upstream::gateway_api::HTTPRoute;
use crate::api::v1beta1::{
    Backend, CapacityStatus, GraphStatus, InferenceService, InferenceServiceStatus,
};
use crate::api::vocabulary::Track;
use crate::engine;

/// One track (primary or canary) of a Deployment-backed service.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TrackFacts {
    /// `primary` or `canary`.
    pub track: String,
    /// The Deployment's name.
    pub deployment: String,
    /// The model it runs.
    pub model: String,
    /// The engine image it runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine_image: Option<String>,
    /// Ready replicas.
    pub ready: i32,
    /// Wanted replicas.
    pub desired: i32,
    /// Replicas of the current template.
    pub updated: i32,
    /// The Deployment exists.
    pub exists: bool,
}

/// One backend of the route and its weight.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendWeight {
    /// The Service or InferencePool.
    pub name: String,
    /// Its weight.
    pub weight: i32,
}

/// The service's HTTPRoute.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteFacts {
    /// `namespace/name` of the gateway.
    pub gateway: String,
    /// The path matched.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Backends and weights.
    pub backends: Vec<BackendWeight>,
}

/// The progressive rollout.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutFacts {
    /// `Stable`, `Progressing`, `Paused` or `RolledBack`.
    pub phase: String,
    /// The canary weights of the steps.
    pub steps: Vec<i32>,
    /// The current step (index into `steps`; `steps.len()`, the bar's
    /// 100, while the primary is being rolled to the target).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<i32>,
    /// The weight routed to the canary now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
    /// The soak of each step.
    pub interval: String,
    /// Seconds of the current step's soak left.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub soak_left_seconds: Option<i64>,
    /// What the primary runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stable: Option<String>,
    /// The version being rolled out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The last word on the rollout: `reason: message` (the gate's verdict,
    /// or why it waits or ended), as [`verdict`] writes it and
    /// [`split_verdict`] reads it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict: Option<String>,
    /// Consecutive failed gate evaluations.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failures: Option<i32>,
    /// The last `infergate.dev/rollout-action` acted on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_action: Option<String>,
}

/// One condition.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionFacts {
    /// Its type.
    #[serde(rename = "type")]
    pub type_: String,
    /// True, False or Unknown.
    pub status: String,
    /// Why.
    pub reason: String,
    /// In words.
    pub message: String,
}

/// Everything the plugin shows about one service.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceFacts {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// `Deployment` or `RayService`.
    pub backend: String,
    /// `metadata.generation`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// `status.observedGeneration`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The AcceleratorClass its pods run on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accelerator_class: Option<String>,
    /// Replicas ready and wanted per track (Deployment backend), or of the
    /// Ray workers (RayService backend, one `workers` track).
    pub tracks: Vec<TrackFacts>,
    /// The route, when one exists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub route: Option<RouteFacts>,
    /// The names the service serves and whether each is routed (none for
    /// a service that names nothing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_names: Option<ModelNames>,
    /// The progressive rollout, with `strategy: Canary`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutFacts>,
    /// The conditions, in status order.
    pub conditions: Vec<ConditionFacts>,
    /// GPUs, KV tokens, concurrency and cost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity: Option<CapacityStatus>,
    /// The namespace's budget and its use.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<NamespaceBudget>,
    /// Why the budget could not be read (policies or services this user
    /// may not list), instead of a budget.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_error: Option<String>,
    /// The live serving graph (RayService backend).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub graph: Option<GraphStatus>,
}

impl RolloutFacts {
    /// [`phase`](Self::phase) as the API's phase, when it is one.
    #[must_use]
    pub fn rollout_phase(&self) -> Option<RolloutPhase> {
        self.phase.parse().ok()
    }
}

impl ServiceFacts {
    /// The condition `type_`, if reported.
    #[must_use]
    pub fn condition(&self, type_: &str) -> Option<&ConditionFacts> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

/// What [`shape`] reads besides the service.
#[derive(Clone, Debug, Default)]
pub struct RelatedObjects {
    /// Deployment `S`.
    pub primary: Option<Deployment>,
    /// Deployment `S-canary`.
    pub canary: Option<Deployment>,
    /// HTTPRoute `S`.
    pub route: Option<HTTPRoute>,
    /// The namespace's budget, or why it could not be read.
    pub budget: Option<Result<NamespaceBudget, String>>,
}

/// Read the service `name` and what belongs to it.
pub async fn gather(target: &Target, name: &str) -> Result<ServiceFacts, PluginError> {
    let (client, ns) = (&target.client, target.namespace.as_str());
    let svc = Api::<InferenceService>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await?
        .ok_or_else(|| PluginError::NotFound {
            kind: "InferenceService",
            namespace: ns.to_owned(),
            name: name.to_owned(),
        })?;
    let deployments = Api::<Deployment>::namespaced(client.clone(), ns);
    let routes = Api::<HTTPRoute>::namespaced(client.clone(), ns);
    let deployment_backend = svc.spec.backend != Some(Backend::RayService);
    let observed = RelatedObjects {
        primary: if deployment_backend {
            optional(deployments.get_opt(&engine::primary_name(&svc)).await)?
        } else {
            None
        },
        canary: if deployment_backend {
            optional(deployments.get_opt(&engine::canary_name(&svc)).await)?
        } else {
            None
        },
        route: optional(routes.get_opt(&engine::primary_name(&svc)).await)?,
        budget: Some(
            namespace_budget(client, ns)
                .await
                .map_err(|e| e.to_string()),
        ),
    };
    Ok(shape(&svc, &observed, Timestamp::now()))
}

/// `Ok(None)` for an object the plugin may not read or whose kind is not
/// served (Gateway API not installed): the screen shows what it can.
fn optional<K>(r: Result<Option<K>, kube::Error>) -> Result<Option<K>, PluginError> {
    match r {
        Ok(o) => Ok(o),
        Err(kube::Error::Api(s)) if s.code == 403 || s.code == 404 => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The facts of `svc` and what was read with it, at `now`.
#[must_use]
pub fn shape(svc: &InferenceService, observed: &RelatedObjects, now: Timestamp) -> ServiceFacts {
    let status = svc.status.clone().unwrap_or_default();
    let ray = svc.spec.backend == Some(Backend::RayService);
    ServiceFacts {
        namespace: svc.metadata.namespace.clone().unwrap_or_default(),
        name: svc.metadata.name.clone().unwrap_or_default(),
        backend: if ray { "RayService" } else { "Deployment" }.to_owned(),
        generation: svc.metadata.generation,
        observed_generation: status.observed_generation,
        accelerator_class: svc.spec.accelerator.as_ref().and_then(|a| a.class.clone()),
        tracks: if ray {
            vec![ray_workers(svc, &status)]
        } else {
            deployment_tracks(svc, observed, status.rollout.as_ref())
        },
        route: observed.route.as_ref().map(|r| route_facts(svc, r)),
        model_names: model_names(svc, observed.route.as_ref()),
        rollout: rollout_facts(svc, status.rollout.as_ref(), now),
        conditions: status
            .conditions
            .iter()
            .map(|c| ConditionFacts {
                type_: c.type_.clone(),
                status: c.status.clone(),
                reason: c.reason.clone(),
                message: c.message.clone(),
            })
            .collect(),
        capacity: status.capacity.clone(),
        budget: observed.budget.clone().and_then(Result::ok),
        budget_error: observed.budget.clone().and_then(Result::err),
        graph: status.graph.clone(),
    }
}

/// The one `workers` track of a RayService-backed service.
fn ray_workers(svc: &InferenceService, status: &InferenceServiceStatus) -> TrackFacts {
    TrackFacts {
        track: "workers".to_owned(),
        deployment: engine::primary_name(svc),
        model: svc.spec.model.r#ref.clone(),
        engine_image: svc.spec.engine.as_ref().and_then(|e| e.image.clone()),
        ready: status.ready_replicas.unwrap_or(0),
        desired: status.replicas.unwrap_or(0),
        updated: status.ready_replicas.unwrap_or(0),
        exists: status.replicas.is_some(),
    }
}

/// A track's facts from its Deployment, when it exists.
fn track_facts(
    track: Track,
    d: Option<&Deployment>,
    deployment: String,
    (model, engine_image): (String, Option<String>),
) -> TrackFacts {
    let spec = d.and_then(|d| d.spec.as_ref());
    let st = d.and_then(|d| d.status.as_ref());
    TrackFacts {
        track: track.as_str().to_owned(),
        deployment,
        model,
        engine_image,
        ready: st.and_then(|s| s.ready_replicas).unwrap_or(0),
        desired: spec.and_then(|s| s.replicas).unwrap_or(0),
        updated: st.and_then(|s| s.updated_replicas).unwrap_or(0),
        exists: d.is_some(),
    }
}

/// The primary track, and the canary's when it exists or is asked for:
/// what each runs is the rollout's stable and target versions, else the
/// spec's.
fn deployment_tracks(
    svc: &InferenceService,
    observed: &RelatedObjects,
    rollout_status: Option<&RolloutStatus>,
) -> Vec<TrackFacts> {
    let engine_image = svc.spec.engine.as_ref().and_then(|e| e.image.clone());
    let version =
        |v: Option<&VersionRef>| v.map(|v| (v.model.r#ref.clone(), v.engine_image.clone()));
    let primary_version = version(rollout_status.and_then(|r| r.stable.as_ref()))
        .unwrap_or_else(|| (svc.spec.model.r#ref.clone(), engine_image.clone()));
    let canary_version = version(rollout_status.and_then(|r| r.target.as_ref())).or_else(|| {
        svc.spec.canary.as_ref().map(|c| {
            (
                c.model.r#ref.clone(),
                c.engine_image.clone().or_else(|| engine_image.clone()),
            )
        })
    });
    let mut tracks = vec![track_facts(
        Track::Primary,
        observed.primary.as_ref(),
        engine::primary_name(svc),
        primary_version,
    )];
    if let Some(version) = canary_version
        && (observed.canary.is_some() || svc.spec.canary.is_some())
    {
        tracks.push(track_facts(
            Track::Canary,
            observed.canary.as_ref(),
            engine::canary_name(svc),
            version,
        ));
    }
    tracks
}

/// The gateway, path and backends of the service's HTTPRoute.
fn route_facts(svc: &InferenceService, r: &HTTPRoute) -> RouteFacts {
    let parent = r.spec.parent_refs.first();
    let rule = r.spec.rules.first();
    RouteFacts {
        gateway: parent
            .map(|p| {
                format!(
                    "{}/{}",
                    p.namespace
                        .clone()
                        .or_else(|| svc.metadata.namespace.clone())
                        .unwrap_or_default(),
                    p.name
                )
            })
            .unwrap_or_default(),
        path: rule
            .and_then(|r| r.matches.first())
            .and_then(|m| m.path.as_ref())
            .and_then(|p| p.value.clone()),
        backends: rule
            .map(|r| {
                r.backend_refs
                    .iter()
                    .map(|b| BackendWeight {
                        name: b.name.clone(),
                        weight: b.weight.unwrap_or(1),
                    })
                    .collect()
            })
            .unwrap_or_default(),
    }
}

/// The progressive rollout of a `strategy: Canary` service, at `now`.
fn rollout_facts(
    svc: &InferenceService,
    rollout_status: Option<&RolloutStatus>,
    now: Timestamp,
) -> Option<RolloutFacts> {
    let spec = svc
        .spec
        .rollout
        .as_ref()
        .filter(|r| r.strategy == Some(RolloutStrategy::Canary))?;
    let st = rollout_status.cloned().unwrap_or_default();
    let interval = spec
        .interval
        .clone()
        .unwrap_or_else(|| engine::rollout::DEFAULT_INTERVAL.to_owned());
    let soak_left_seconds = match (st.phase, &st.step_started_at) {
        (RolloutPhase::Progressing, Some(started)) => {
            engine::parse_gateway_duration(&interval).ok().map(|d| {
                let d = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
                let elapsed = now.as_second() - started.0.as_second();
                (d - elapsed).max(0)
            })
        }
        _ => None,
    };
    Some(RolloutFacts {
        phase: st.phase.as_str().to_owned(),
        steps: spec.steps.clone(),
        // The bar's position: past the last step (its 100) while promoting.
        step: if st.promoting(spec.steps.len()) {
            i32::try_from(spec.steps.len()).ok()
        } else {
            st.step
        },
        weight: st.weight,
        interval,
        soak_left_seconds,
        stable: st.stable.as_ref().map(|v| v.model.r#ref.clone()),
        target: st.target.as_ref().map(|v| v.model.r#ref.clone()),
        verdict: verdict(st.reason.as_deref(), st.message.as_deref()),
        failures: st.failures,
        last_action: st.last_action.clone(),
    })
}

/// [`RolloutFacts::verdict`]: `reason: message`, or the one that is set.
#[must_use]
pub fn verdict(reason: Option<&str>, message: Option<&str>) -> Option<String> {
    match (reason, message) {
        (Some(r), Some(m)) => Some(format!("{r}: {m}")),
        (Some(r), None) => Some(r.to_owned()),
        (None, Some(m)) => Some(m.to_owned()),
        (None, None) => None,
    }
}

/// A [`verdict`] into its reason (a word without spaces) and message; a
/// lone word is both.
#[must_use]
pub fn split_verdict(verdict: &str) -> (Option<&str>, &str) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verdict_splits_back_into_its_reason_and_message() {
        let cases = [
            (
                Some("AnalysisFailed"),
                Some("error rate 0.2 > 0.05: 1 of 3"),
            ),
            (Some("StepHeld"), Some("step 1 of 2: weight 10")),
            (Some("Stable"), None),
            (None, Some("the primary is being rolled")),
        ];
        for (reason, message) in cases {
            let v = verdict(reason, message).expect("verdict");
            let (r, m) = split_verdict(&v);
            assert_eq!(r, reason, "{v}");
            assert_eq!(m, message.or(reason).expect("one"), "{v}");
        }
        assert_eq!(verdict(None, None), None);
    }
}
