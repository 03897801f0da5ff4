//! Replicas larger than a node: a `backend: Deployment` service whose
//! `tensor x pipeline` exceeds its AcceleratorClass's `devicesPerNode`
//! runs each replica as a group of pods, one node each, when the policies
//! let a replica span that many nodes (`limits.maxNodesPerReplica`).
//!
//! Tensor parallelism stays inside a node, pipeline stages span nodes:
//! `tensor <= devicesPerNode`, and `tensor x pipeline` is a whole number
//! of nodes. Each pod of a group requests `devicesPerNode` devices.
//!
//! Only ClusterInferencePolicies open the door: with none of them setting
//! `maxNodesPerReplica`, a replica stays on one node (the rule before
//! multi-node replicas), and a namespace's InferencePolicy may only lower
//! what the cluster's allow.

use crate::api::AcceleratorClassSpec;
use crate::api::policy::Enforcement;
use crate::api::v1beta1::{Backend, InferenceService};

use super::builtin::DEFAULT_PARALLELISM;
use super::field_error::FieldError;
use super::field_path::Path;
use super::names;
use super::policy::{Layer, strictest};

/// The group a replica runs as when it spans nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Group {
    /// Pods (nodes) per replica: `tensor x pipeline / devicesPerNode`.
    pub nodes: i32,
    /// Devices each pod requests: the class's `devicesPerNode`.
    pub devices_per_pod: i32,
    /// `spec.parallelism.tensor` (as defaulted).
    pub tensor: i32,
    /// `spec.parallelism.pipeline` (as defaulted).
    pub pipeline: i32,
}

/// `tensor` and `pipeline` of `svc` (their built-in value when unset).
#[must_use]
pub fn parallelism(svc: &InferenceService) -> (i32, i32) {
    let p = svc.spec.parallelism.as_ref();
    (
        p.and_then(|p| p.tensor).unwrap_or(DEFAULT_PARALLELISM),
        p.and_then(|p| p.pipeline).unwrap_or(DEFAULT_PARALLELISM),
    )
}

/// The group each replica of `svc` runs as on `class`: `Some` when its
/// replica needs more devices than one node of the class has (a
/// `backend: Deployment` service; admission let it span the nodes),
/// `None` when one node holds it.
#[must_use]
pub fn group_of(svc: &InferenceService, class: Option<&AcceleratorClassSpec>) -> Option<Group> {
    let class = class?;
    if svc.spec.backend.unwrap_or_default() != Backend::Deployment
        || super::resources::gpus_per_replica(svc) <= 0
    {
        return None;
    }
    let (tensor, pipeline) = parallelism(svc);
    let devices = i64::from(tensor) * i64::from(pipeline);
    let per_node = i64::from(class.devices_per_node.max(1));
    if devices <= per_node {
        return None;
    }
    Some(Group {
        nodes: i32::try_from((devices + per_node - 1) / per_node).unwrap_or(i32::MAX),
        devices_per_pod: class.devices_per_node.max(1),
        tensor,
        pipeline,
    })
}

/// The strictest Deny and Warn bounds of a limit.
type Bounds<'a> = (
    Option<super::policy::Bound<'a, i32>>,
    Option<super::policy::Bound<'a, i32>>,
);

/// How many nodes the policies of `layers` let one replica span: the
/// strictest Deny bound and the strictest Warn bound, `None` each where
/// no policy of that enforcement sets one; `None` as a whole when no
/// ClusterInferencePolicy sets `maxNodesPerReplica` (one node).
fn nodes_allowed<'a>(layers: &[Layer<'a>]) -> Option<Bounds<'a>> {
    let opened = layers
        .iter()
        .any(|l| l.namespace.is_none() && l.limits.and_then(|l| l.max_nodes_per_replica).is_some());
    opened.then(|| strictest(layers, |l| l.max_nodes_per_replica))
}

/// A replica of `svc` (tensor `t` x pipeline `p` devices) on
/// AcceleratorClass `name`: errors when it cannot run there, warnings
/// under a Warn policy's bound. `at` is `spec.parallelism`. With
/// `ratchet` (the reconciler's judgement of a running service, or an
/// update that leaves the shape as it was), a shape that can run across
/// nodes but that the policies no longer let span that many is a warning:
/// a later policy freezes no running service.
pub fn check_shape(
    (errors, warnings): (&mut Vec<FieldError>, &mut Vec<String>),
    at: &Path<'_>,
    svc: &InferenceService,
    (name, class): (&str, &AcceleratorClassSpec),
    (layers, ratchet): (&[Layer<'_>], bool),
) {
    let (tensor, pipeline) = parallelism(svc);
    let devices = i64::from(tensor) * i64::from(pipeline);
    let per_node = i64::from(class.devices_per_node);
    if devices <= per_node {
        return;
    }
    let deployment = svc.spec.backend.unwrap_or_default() == Backend::Deployment;
    // Whether a group of whole nodes can hold the replica at all.
    let spans = deployment && i64::from(tensor) <= per_node && devices % per_node == 0;
    if spans && nodes_allowed(layers).is_some() {
        check_names(errors, svc);
    }
    let mut bounded = |e: FieldError, enforcement: Enforcement| match enforcement {
        Enforcement::Deny if !(ratchet && spans) => errors.push(e),
        _ => warnings.push(e.to_string()),
    };
    let allowed = nodes_allowed(layers).filter(|_| deployment);
    let Some((deny, warn)) = allowed else {
        bounded(
            FieldError::invalid(
                at,
                devices,
                &format!(
                    "tensor {tensor} x pipeline {pipeline} devices per replica must be at most the {per_node} devices per node of AcceleratorClass {name:?}"
                ),
            ),
            Enforcement::Deny,
        );
        return;
    };
    if i64::from(tensor) > per_node {
        bounded(
            FieldError::invalid(
                &at.child("tensor"),
                tensor,
                &format!(
                    "must be at most the {per_node} devices per node of AcceleratorClass {name:?} (tensor parallelism stays within a node; pipeline stages span nodes)"
                ),
            ),
            Enforcement::Deny,
        );
        return;
    }
    if devices % per_node != 0 {
        bounded(
            FieldError::invalid(
                at,
                devices,
                &format!(
                    "tensor {tensor} x pipeline {pipeline} devices per replica must be a multiple of the {per_node} devices per node of AcceleratorClass {name:?} (each node of a replica holds {per_node})"
                ),
            ),
            Enforcement::Deny,
        );
        return;
    }
    let nodes = devices / per_node;
    for (bound, enforcement) in [(deny, Enforcement::Deny), (warn, Enforcement::Warn)] {
        if let Some(b) = bound
            && nodes > i64::from(b.value)
        {
            let e = FieldError::invalid(
                at,
                devices,
                &format!(
                    "tensor {tensor} x pipeline {pipeline} devices per replica span {nodes} nodes of AcceleratorClass {name:?} ({per_node} devices each); must be at most {} (limits.maxNodesPerReplica of {})",
                    b.value,
                    b.layer.display()
                ),
            );
            bounded(e, enforcement);
            return;
        }
    }
}

/// The LeaderWorkerSets' names (section "Derived names" counts the
/// suffix): each track's, with the most groups it may run.
fn check_names(errors: &mut Vec<FieldError>, svc: &InferenceService) {
    let most = svc
        .spec
        .autoscaling
        .as_ref()
        .map(|a| a.max_replicas)
        .or(svc.spec.replicas)
        .unwrap_or(super::builtin::DEFAULT_REPLICAS)
        .max(super::resources::canary_replicas(svc));
    let mut tracks = vec![names::primary_name(svc)];
    if svc.spec.canary.is_some() {
        tracks.push(names::canary_name(svc));
    }
    let limit = names::max_lws_name(most);
    for track in tracks {
        let lws = names::lws_name(&track);
        if lws.len() > limit {
            errors.push(FieldError::too_long(
                &Path::new("metadata").child("name"),
                &format!(
                    "derived LeaderWorkerSet name {lws:?} is {} characters; the limit is {limit} (its worker StatefulSets' names and revision labels hold the group index and a hash)",
                    lws.len()
                ),
            ));
        }
    }
}
