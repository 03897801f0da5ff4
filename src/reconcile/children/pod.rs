//! What every engine pod carries besides its container's command: the
//! AcceleratorClass's scheduling constraints, then `spec.placement`, the
//! ServiceAccount, pull secrets, env and the in-memory `/dev/shm`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Container, EmptyDirVolumeSource, EnvFromSource, EnvVar, PodSpec,
    TopologySpreadConstraint, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::api::AcceleratorClassSpec;
use crate::api::v1beta1::{InferenceService, SpreadAcross};

/// Name of the in-memory volume mounted at [`SHM_MOUNT_PATH`].
pub const SHM_VOLUME: &str = "dshm";
/// Where tensor- and pipeline-parallel engines share tensors.
pub const SHM_MOUNT_PATH: &str = "/dev/shm";

/// Which pod of a service: an engine pod that holds GPUs (a Deployment's,
/// a Ray worker's) or the Ray head (no GPU: placement only, not the class).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Holds the accelerator: the class's constraints apply.
    Accelerated,
    /// The Ray head: `spec.placement` only.
    Head,
}

/// The engine container's env (`spec.engine.env` after `first`) and
/// `envFrom`, each `None` when empty.
#[must_use]
pub fn engine_env(
    svc: &InferenceService,
    first: Vec<EnvVar>,
) -> (Option<Vec<EnvVar>>, Option<Vec<EnvFromSource>>) {
    let engine = svc.spec.engine.as_ref();
    let mut env = first;
    if let Some(e) = engine {
        env.extend(e.env.iter().cloned());
    }
    let env_from: Vec<EnvFromSource> = engine.map(|e| e.env_from.clone()).unwrap_or_default();
    (
        (!env.is_empty()).then_some(env),
        (!env_from.is_empty()).then_some(env_from),
    )
}

/// Give `pod` (whose first container is the engine) what the service's
/// pods carry: scheduling constraints (the class's for an accelerated pod,
/// then `spec.placement` merged after them), the spread of the track's
/// pods (`spread_labels`), the ServiceAccount, pull secrets, and the
/// `/dev/shm` volume.
pub fn dress(
    pod: &mut PodSpec,
    svc: &InferenceService,
    class: Option<&AcceleratorClassSpec>,
    role: Role,
    spread_labels: &BTreeMap<String, String>,
) {
    let class = class.filter(|_| role == Role::Accelerated);
    let placement = svc.spec.placement.as_ref();

    let mut selector: BTreeMap<String, String> = BTreeMap::new();
    if let Some(c) = class.and_then(|c| c.node_selector.as_ref()) {
        selector.extend(c.clone());
    }
    if let Some(p) = placement.and_then(|p| p.node_selector.as_ref()) {
        // A key the class sets to another value is denied at admission; a
        // stored object that predates the class keeps the class's value.
        for (k, v) in p {
            selector.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    pod.node_selector = (!selector.is_empty()).then_some(selector);

    let mut tolerations = Vec::new();
    if let Some(t) = class.and_then(|c| c.tolerations.as_ref()) {
        tolerations.extend(t.iter().cloned());
    }
    if let Some(t) = placement.and_then(|p| p.tolerations.as_ref()) {
        for tol in t {
            if !tolerations.contains(tol) {
                tolerations.push(tol.clone());
            }
        }
    }
    pod.tolerations = (!tolerations.is_empty()).then_some(tolerations);

    if let Some(na) = class.and_then(|c| c.node_affinity.clone()) {
        pod.affinity = Some(Affinity {
            node_affinity: Some(na),
            ..Affinity::default()
        });
    }
    pod.runtime_class_name = class.and_then(|c| c.runtime_class_name.clone());
    pod.priority_class_name = placement.and_then(|p| p.priority_class_name.clone());
    // Unset counts as `node`: defaulting writes `node` only once a track
    // can have more than one replica, and a pod template that gained the
    // constraint then would roll every pod (for a RayService, build a whole
    // new Ray cluster) the first time a service scales past one replica.
    // Over one pod the constraint changes nothing.
    pod.topology_spread_constraints = placement
        .and_then(|p| p.spread_across)
        .unwrap_or(SpreadAcross::Node)
        .topology_key()
        .map(|key| {
            vec![TopologySpreadConstraint {
                max_skew: 1,
                topology_key: key.to_owned(),
                when_unsatisfiable: "ScheduleAnyway".to_owned(),
                label_selector: Some(LabelSelector {
                    match_labels: Some(spread_labels.clone()),
                    ..LabelSelector::default()
                }),
                ..TopologySpreadConstraint::default()
            }]
        });

    pod.service_account_name = svc.spec.service_account_name.clone();
    pod.image_pull_secrets =
        (!svc.spec.image_pull_secrets.is_empty()).then(|| svc.spec.image_pull_secrets.clone());

    if let Some(size) = svc.spec.engine.as_ref().and_then(|e| e.shm_size.clone()) {
        pod.volumes.get_or_insert_with(Vec::new).push(Volume {
            name: SHM_VOLUME.to_owned(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: Some("Memory".to_owned()),
                size_limit: Some(size),
            }),
            ..Volume::default()
        });
        if let Some(engine) = pod.containers.first_mut() {
            mount_shm(engine);
        }
    }
}

fn mount_shm(container: &mut Container) {
    container
        .volume_mounts
        .get_or_insert_with(Vec::new)
        .push(VolumeMount {
            name: SHM_VOLUME.to_owned(),
            mount_path: SHM_MOUNT_PATH.to_owned(),
            ..VolumeMount::default()
        });
}
