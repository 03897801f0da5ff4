//! The engine Deployment of a track: arguments, resources, probes, pod template.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, HTTPGetAction, ImageVolumeSource, PodSpec, PodTemplateSpec, Probe,
    ResourceRequirements, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::error::BuildError;
use super::meta::{
    ANNOTATION_TEMPLATE, Track, child_meta, child_name, digest_of, label_gpu_memory, labels,
    selector_labels,
};
use super::pod::{Role, dress, engine_env};
use crate::api::v1beta1::InferenceService;
use crate::api::{AcceleratorClassSpec, AcceleratorType};
use crate::engine;
use crate::engine::builtin::{
    DEFAULT_GPU_MEMORY_UTILIZATION, DEFAULT_HEALTH_INTERVAL, DEFAULT_HEALTH_PATH,
    DEFAULT_HEALTH_TIMEOUT, DEFAULT_PARALLELISM, DEFAULT_PORT, DEFAULT_REPLICAS,
};
use crate::engine::capacity::flags::{self, FlagField};
use crate::engine::model_names;

/// Name of the engine container.
pub const CONTAINER_NAME: &str = "engine";
/// Name of the engine's container and Service port.
pub const PORT_NAME: &str = "http";
/// Name of the image volume holding the model weights (`spec.model.image`).
pub const MODEL_VOLUME: &str = "model";
/// Where the model image volume is mounted in the engine container.
pub const MODEL_MOUNT_PATH: &str = "/model";
/// How long the startup probe lets an engine load its model before liveness applies.
pub const STARTUP_GRACE_SECONDS: i32 = 1800;

/// The engine port after defaulting.
#[must_use]
pub fn engine_port(svc: &InferenceService) -> i32 {
    svc.spec
        .engine
        .as_ref()
        .and_then(|e| e.port)
        .unwrap_or(DEFAULT_PORT)
}

/// Generated engine arguments followed by `spec.engine.args`.
#[must_use]
pub fn engine_args(svc: &InferenceService, track: Track) -> Vec<String> {
    engine_args_counted(svc, track).0
}

/// [`engine_args`], and how many of them (the last ones) come from
/// `spec.engine.args`.
#[must_use]
pub fn engine_args_counted(svc: &InferenceService, track: Track) -> (Vec<String>, usize) {
    let (model_ref, model_image) = match (track, svc.spec.canary.as_ref()) {
        (Track::Canary, Some(c)) => (c.model.r#ref.clone(), c.model.image.is_some()),
        _ => (svc.spec.model.r#ref.clone(), svc.spec.model.image.is_some()),
    };
    let model = if model_image {
        MODEL_MOUNT_PATH.to_owned()
    } else {
        model_ref.clone()
    };
    // A service that names its models serves spec.model's names on both
    // tracks; otherwise each track serves its model's ref, as before names.
    let served = if model_names::names_its_models(svc) {
        model_names::served_name(svc).to_owned()
    } else {
        model_ref
    };
    let mut args = vec![
        "--model".to_owned(),
        model,
        "--served-model-name".to_owned(),
        served,
        "--port".to_owned(),
        engine_port(svc).to_string(),
    ];
    let p = svc.spec.parallelism.as_ref();
    let tensor = p.and_then(|p| p.tensor).unwrap_or(DEFAULT_PARALLELISM);
    let pipeline = p.and_then(|p| p.pipeline).unwrap_or(DEFAULT_PARALLELISM);
    if tensor > 1 {
        args.push("--tensor-parallel-size".to_owned());
        args.push(tensor.to_string());
    }
    if pipeline > 1 {
        args.push("--pipeline-parallel-size".to_owned());
        args.push(pipeline.to_string());
    }
    args.extend(model_names::lora_args(svc));
    if let Some(engine) = svc.spec.engine.as_ref() {
        let mut own = std::borrow::Cow::Borrowed(engine.args.as_slice());
        if let Some(n) = engine.max_model_len {
            args.push("--max-model-len".to_owned());
            args.push(n.to_string());
            // The field wins over the same flag in engine.args.
            if flags::gives(&own, FlagField::MaxModelLen) {
                own = flags::without(&own, FlagField::MaxModelLen).into();
            }
        }
        // At the engine's own default the flag is left out, so defaulting
        // the field changes no running pod template; unless engine.args
        // gives the flag too, which the field overrides.
        if let Some(u) = engine.gpu_memory_utilization {
            let given = flags::gives(&own, FlagField::GpuMemoryUtilization);
            if given {
                own = flags::without(&own, FlagField::GpuMemoryUtilization).into();
            }
            if given || (u - DEFAULT_GPU_MEMORY_UTILIZATION).abs() > f64::EPSILON {
                args.push("--gpu-memory-utilization".to_owned());
                args.push(u.to_string());
            }
        }
        args.extend(own.iter().cloned());
        return (args, own.len());
    }
    (args, 0)
}

/// Requests and limits: cpu, memory, and the accelerator's resource (the
/// class's, else the type's) = tensor x pipeline.
#[must_use]
pub fn resources(
    svc: &InferenceService,
    class: Option<&AcceleratorClassSpec>,
) -> Option<ResourceRequirements> {
    let mut amounts = BTreeMap::new();
    if let Some(r) = svc.spec.resources.as_ref() {
        if let Some(cpu) = r.cpu.as_ref() {
            amounts.insert("cpu".to_owned(), cpu.clone());
        }
        if let Some(memory) = r.memory.as_ref() {
            amounts.insert("memory".to_owned(), memory.clone());
        }
    }
    let accelerator = svc
        .spec
        .accelerator
        .as_ref()
        .and_then(|a| a.r#type)
        .unwrap_or(AcceleratorType::None);
    let gpus = engine::gpus_per_replica(svc);
    let resource = match class {
        Some(c) if c.vendor == accelerator => Some(c.resource()),
        _ => accelerator.resource_name(),
    };
    if let Some(resource) = resource
        && gpus > 0
    {
        amounts.insert(resource.to_owned(), Quantity(gpus.to_string()));
    }
    if amounts.is_empty() {
        return None;
    }
    Some(ResourceRequirements {
        requests: Some(amounts.clone()),
        limits: Some(amounts),
        ..ResourceRequirements::default()
    })
}

/// Whole seconds for a probe field, rounded up, at least 1.
fn probe_seconds(field: &'static str, value: &str) -> Result<i32, BuildError> {
    let d = engine::parse_go_duration(value)
        .map_err(|message| BuildError::Duration { field, message })?;
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    Ok(i32::try_from(secs.max(1)).unwrap_or(i32::MAX))
}

/// Liveness, readiness and startup probes from `spec.healthCheck`.
pub fn probes(svc: &InferenceService) -> Result<(Probe, Probe, Probe), BuildError> {
    let hc = svc.spec.health_check.clone().unwrap_or_default();
    let path = hc.path.unwrap_or_else(|| DEFAULT_HEALTH_PATH.to_owned());
    let period = probe_seconds(
        "spec.healthCheck.interval",
        hc.interval.as_deref().unwrap_or(DEFAULT_HEALTH_INTERVAL),
    )?;
    let timeout = probe_seconds(
        "spec.healthCheck.timeout",
        hc.timeout.as_deref().unwrap_or(DEFAULT_HEALTH_TIMEOUT),
    )?;
    let probe = Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path),
            port: IntOrString::String(PORT_NAME.to_owned()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period),
        timeout_seconds: Some(timeout),
        ..Probe::default()
    };
    // Engines load weights for minutes: liveness applies only once the
    // startup probe has succeeded.
    let startup = Probe {
        failure_threshold: Some((STARTUP_GRACE_SECONDS / period).max(1)),
        ..probe.clone()
    };
    Ok((probe.clone(), probe, startup))
}

/// The image volume holding the model weights (`spec.model.image`, or the
/// canary's) and its read-only mount at [`MODEL_MOUNT_PATH`]; none without
/// an image.
#[must_use]
pub(super) fn model_volume(
    image: Option<String>,
) -> (Option<Vec<Volume>>, Option<Vec<VolumeMount>>) {
    match image {
        Some(reference) => (
            Some(vec![Volume {
                name: MODEL_VOLUME.to_owned(),
                image: Some(ImageVolumeSource {
                    reference: Some(reference),
                    pull_policy: None,
                }),
                ..Volume::default()
            }]),
            Some(vec![VolumeMount {
                name: MODEL_VOLUME.to_owned(),
                mount_path: MODEL_MOUNT_PATH.to_owned(),
                read_only: Some(true),
                ..VolumeMount::default()
            }]),
        ),
        None => (None, None),
    }
}

/// Deployment `S` or `S-canary` on the nodes of `class`. An autoscaled
/// primary leaves `replicas` to the HPA.
pub fn deployment(
    svc: &InferenceService,
    track: Track,
    class: Option<&AcceleratorClassSpec>,
) -> Result<Deployment, BuildError> {
    let engine_image = svc
        .spec
        .engine
        .as_ref()
        .and_then(|e| e.image.clone())
        .filter(|i| !i.is_empty());
    let (image, model_image, replicas) = match track {
        Track::Primary => (
            engine_image.ok_or(BuildError::MissingEngineImage)?,
            svc.spec.model.image.clone(),
            if svc.spec.autoscaling.is_some() {
                None
            } else {
                Some(svc.spec.replicas.unwrap_or(DEFAULT_REPLICAS))
            },
        ),
        Track::Canary => {
            let canary = svc.spec.canary.as_ref().ok_or(BuildError::NoCanary)?;
            (
                canary
                    .engine_image
                    .clone()
                    .filter(|i| !i.is_empty())
                    .or(engine_image)
                    .ok_or(BuildError::MissingEngineImage)?,
                canary.model.image.clone(),
                Some(engine::canary_replicas(svc)),
            )
        }
    };
    let (liveness, readiness, startup) = probes(svc)?;
    let (env, env_from) = engine_env(svc, Vec::new());
    let mut pod_labels = labels(svc, track);
    label_gpu_memory(svc, &mut pod_labels);
    let (volumes, mounts) = model_volume(model_image);
    let container = Container {
        name: CONTAINER_NAME.to_owned(),
        image: Some(image),
        args: Some(engine_args(svc, track)),
        env,
        env_from,
        ports: Some(vec![ContainerPort {
            name: Some(PORT_NAME.to_owned()),
            container_port: engine_port(svc),
            protocol: Some("TCP".to_owned()),
            ..ContainerPort::default()
        }]),
        resources: resources(svc, class),
        liveness_probe: Some(liveness),
        readiness_probe: Some(readiness),
        startup_probe: Some(startup),
        volume_mounts: mounts,
        ..Container::default()
    };
    let mut pod = PodSpec {
        containers: vec![container],
        volumes,
        ..PodSpec::default()
    };
    dress(
        &mut pod,
        svc,
        class,
        Role::Accelerated,
        &selector_labels(svc, track),
    );
    let template = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(pod_labels),
            ..ObjectMeta::default()
        }),
        spec: Some(pod),
    };
    let mut metadata = child_meta(svc, child_name(svc, track), track)?;
    metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(
            ANNOTATION_TEMPLATE.to_owned(),
            digest_of(&template).map_err(|e| BuildError::Serialize(e.to_string()))?,
        );
    Ok(Deployment {
        metadata,
        spec: Some(DeploymentSpec {
            replicas,
            selector: LabelSelector {
                match_labels: Some(selector_labels(svc, track)),
                ..LabelSelector::default()
            },
            template,
            ..DeploymentSpec::default()
        }),
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::engine_args;
    use crate::api::v1beta1::InferenceService;
    use crate::reconcile::children::Track;

    fn with_engine(engine: serde_json::Value) -> InferenceService {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "infergate.dev/v1beta1",
            "kind": "InferenceService",
            "metadata": {"name": "chat", "namespace": "team-a"},
            "spec": {"model": {"ref": "m"}, "engine": engine}
        }))
        .expect("service")
    }

    #[test]
    fn a_field_wins_over_the_same_flag_in_engine_args() {
        // Flags alone reach the engine as given.
        let only_args = with_engine(serde_json::json!({
            "args": ["--max-model-len", "8192", "--gpu-memory-utilization=0.8"]
        }));
        assert_eq!(
            &engine_args(&only_args, Track::Primary)[6..],
            &["--max-model-len", "8192", "--gpu-memory-utilization=0.8"]
        );
        // With the fields set, the fields' values are given and the flags
        // of engine.args left out (the share too at the engine's default).
        let both = with_engine(serde_json::json!({
            "maxModelLen": 4096,
            "gpuMemoryUtilization": 0.9,
            "args": ["--max-model-len", "8192", "--enable-prefix-caching", "--gpu_memory_utilization=0.8"]
        }));
        assert_eq!(
            &engine_args(&both, Track::Primary)[6..],
            &[
                "--max-model-len",
                "4096",
                "--gpu-memory-utilization",
                "0.9",
                "--enable-prefix-caching"
            ]
        );
    }
}
