//! The LeaderWorkerSet of a track whose replicas span nodes: each replica
//! a group of `nodes` pods, one per node, each with `devicesPerNode`
//! devices, running vLLM's multi-node mode (no Ray): the leader (rank 0)
//! serves the API, the workers (`--headless`) hold the rest of the model.
//!
//! It is built from the track's Deployment (the same pod as a one-node
//! replica gets: image, env, Secrets, placement, `/dev/shm`, service
//! account), so both shapes of a service stay one definition.
//!
//! The leader carries the track's labels (its Service and InferencePool
//! select it, and only it); a worker carries [`LABEL_WORKER_OF`] in place
//! of [`LABEL_TRACK`], so no selector of the track's ever picks a pod that
//! serves nothing, also while a Deployment of the one-node shape still
//! runs beside it.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{Container, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::deployment::CONTAINER_NAME;
use super::error::BuildError;
use super::meta::{ANNOTATION_TEMPLATE, LABEL_TRACK, digest_of};
use crate::api::AcceleratorClassSpec;
use crate::api::upstream::lws::{
    ANNOTATION_EXCLUSIVE_TOPOLOGY, ENV_LEADER_ADDRESS, ENV_WORKER_INDEX, RESTART_RECREATE_GROUP,
    ROLLING_UPDATE, STARTUP_LEADER_CREATED,
};
pub use crate::api::upstream::lws::{
    LeaderWorkerSet, LeaderWorkerSetSpec, LeaderWorkerSetStatus, LeaderWorkerTemplate,
    RollingUpdateConfiguration, RolloutStrategy,
};
pub use crate::api::vocabulary::names::LABEL_WORKER_OF;
use crate::engine::multi_node::Group;

/// The port the group's pods meet on (torch.distributed's rendezvous).
pub const MASTER_PORT: i32 = 29500;

/// The flags every pod of a group adds to the engine's arguments: the
/// group's shape and where its leader listens (LWS's pod webhook gives
/// each pod the address; Kubernetes expands `$(VAR)` from the env).
#[must_use]
pub fn group_args(group: Group, leader: bool) -> Vec<String> {
    let mut args = vec![
        "--nnodes".to_owned(),
        group.nodes.to_string(),
        "--master-addr".to_owned(),
        format!("$({ENV_LEADER_ADDRESS})"),
        "--master-port".to_owned(),
        MASTER_PORT.to_string(),
        "--node-rank".to_owned(),
    ];
    if leader {
        args.push("0".to_owned());
    } else {
        args.push(format!("$({ENV_WORKER_INDEX})"));
        args.push("--headless".to_owned());
    }
    args
}

/// The engine container of `template`.
fn engine(template: &mut PodTemplateSpec) -> Option<&mut Container> {
    template
        .spec
        .as_mut()?
        .containers
        .iter_mut()
        .find(|c| c.name == CONTAINER_NAME)
}

/// The generated arguments of the engine (those before `spec.engine.args`,
/// which stay last so a service can still override a flag), then the
/// group's flags.
fn with_group_args(args: &[String], own: usize, group: Group, leader: bool) -> Vec<String> {
    let cut = args.len().saturating_sub(own);
    let mut out = args[..cut].to_vec();
    out.extend(group_args(group, leader));
    out.extend_from_slice(&args[cut..]);
    out
}

/// The pod of one member of a group, from the one-node pod `template`.
fn member(
    template: &PodTemplateSpec,
    group: Group,
    class: Option<&AcceleratorClassSpec>,
    own_args: usize,
    leader: bool,
) -> PodTemplateSpec {
    let mut pod = template.clone();
    if !leader
        && let Some(labels) = pod.metadata.as_mut().and_then(|m| m.labels.as_mut())
        && let Some(track) = labels.remove(LABEL_TRACK)
    {
        labels.insert(LABEL_WORKER_OF.to_owned(), track);
    }
    if let Some(c) = engine(&mut pod) {
        let args = c.args.take().unwrap_or_default();
        c.args = Some(with_group_args(&args, own_args, group, leader));
        // Each pod holds one node's devices.
        if let Some(resource) = class.map(AcceleratorClassSpec::resource)
            && let Some(r) = c.resources.as_mut()
        {
            for amounts in [r.requests.as_mut(), r.limits.as_mut()]
                .into_iter()
                .flatten()
            {
                if let Some(q) = amounts.get_mut(resource) {
                    *q = Quantity(group.devices_per_pod.to_string());
                }
            }
        }
        if !leader {
            // A worker serves no API: nothing to probe, no port to name.
            c.liveness_probe = None;
            c.readiness_probe = None;
            c.startup_probe = None;
            c.ports = None;
        }
    }
    pod
}

/// The rollout of a template change over the groups, from the one-node
/// Deployment's: a Replace on a full pool (`maxSurge: 0`) keeps its
/// `maxUnavailable`; otherwise one new group before an old one goes.
fn rollout_of(deployment: &Deployment) -> RolloutStrategy {
    let rolling = deployment
        .spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.rolling_update.as_ref());
    let replace = rolling
        .filter(|r| r.max_surge == Some(IntOrString::Int(0)))
        .and_then(|r| r.max_unavailable.clone());
    let (max_unavailable, max_surge) = match replace {
        Some(n) => (n, IntOrString::Int(0)),
        None => (IntOrString::Int(0), IntOrString::Int(1)),
    };
    RolloutStrategy {
        type_: ROLLING_UPDATE.to_owned(),
        rolling_update_configuration: RollingUpdateConfiguration {
            partition: Some(0),
            max_unavailable,
            max_surge,
        },
    }
}

/// LeaderWorkerSet `name` (`S-lws`, `S-canary-lws`) for the track whose
/// one-node Deployment is `deployment`: its replicas as groups of
/// `group.nodes` pods. `own_args` is how many of the engine's arguments
/// are `spec.engine.args` (they stay last).
pub fn leader_worker_set(
    deployment: &Deployment,
    name: String,
    group: Group,
    class: Option<&AcceleratorClassSpec>,
    own_args: usize,
) -> Result<LeaderWorkerSet, BuildError> {
    let none = DeploymentSpec::default();
    let spec = deployment.spec.as_ref().unwrap_or(&none);
    let template = &spec.template;
    let leader_worker_template = LeaderWorkerTemplate {
        size: group.nodes,
        leader_template: member(template, group, class, own_args, true),
        worker_template: member(template, group, class, own_args, false),
        restart_policy: RESTART_RECREATE_GROUP.to_owned(),
    };
    let mut metadata = deployment.metadata.clone();
    metadata.name = Some(name);
    let annotations = metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(
        ANNOTATION_TEMPLATE.to_owned(),
        digest_of(&leader_worker_template).map_err(|e| BuildError::Serialize(e.to_string()))?,
    );
    if let Some(key) = class.and_then(|c| c.topology_key.clone()) {
        annotations.insert(ANNOTATION_EXCLUSIVE_TOPOLOGY.to_owned(), key);
    }
    Ok(LeaderWorkerSet {
        metadata,
        spec: LeaderWorkerSetSpec {
            replicas: spec.replicas,
            leader_worker_template,
            rollout_strategy: rollout_of(deployment),
            startup_policy: STARTUP_LEADER_CREATED.to_owned(),
        },
        status: None,
    })
}
