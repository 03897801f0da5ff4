//! What every child carries: its name, labels, track and controller
//! owner reference.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};

use super::error::BuildError;
use crate::api::MANAGER;
use crate::api::v1beta1::InferenceService;
use crate::engine;

/// `app.kubernetes.io/name: S` on every child.
pub const LABEL_NAME: &str = "app.kubernetes.io/name";
/// `app.kubernetes.io/managed-by: infergate` on every child.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub use crate::api::vocabulary::Track;
pub use crate::api::vocabulary::names::{
    ANNOTATION_APPLIED, ANNOTATION_LENT, ANNOTATION_ROLL_PLAN, ANNOTATION_TEMPLATE,
    LABEL_GPU_MEMORY, LABEL_SERVICE, LABEL_TRACK,
};

/// SHA-256 of `obj`'s JSON, first 16 bytes, hex: what
/// [`ANNOTATION_APPLIED`] and [`ANNOTATION_TEMPLATE`] record.
///
/// # Errors
///
/// When `obj` cannot be serialized.
pub fn digest_of<K: serde::Serialize>(obj: &K) -> Result<String, serde_json::Error> {
    let bytes = serde_json::to_vec(obj)?;
    let sum = ring::digest::digest(&ring::digest::SHA256, &bytes);
    Ok(sum.as_ref()[..16]
        .iter()
        .fold(String::with_capacity(32), |mut s, b| {
            use std::fmt::Write as _;
            let _ = write!(s, "{b:02x}");
            s
        }))
}

/// The name of a track's Deployment and Service.
#[must_use]
pub fn child_name(svc: &InferenceService, track: Track) -> String {
    match track {
        Track::Primary => engine::primary_name(svc),
        Track::Canary => engine::canary_name(svc),
    }
}

/// The four labels every child carries.
#[must_use]
pub fn labels(svc: &InferenceService, track: Track) -> BTreeMap<String, String> {
    let name = svc.name_any();
    BTreeMap::from([
        (LABEL_NAME.to_owned(), name.clone()),
        (LABEL_MANAGED_BY.to_owned(), MANAGER.to_owned()),
        (LABEL_SERVICE.to_owned(), name),
        (LABEL_TRACK.to_owned(), track.as_str().to_owned()),
    ])
}

/// The pod selector of a track (a stable subset of [`labels`]).
#[must_use]
pub fn selector_labels(svc: &InferenceService, track: Track) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_SERVICE.to_owned(), svc.name_any()),
        (LABEL_TRACK.to_owned(), track.as_str().to_owned()),
    ])
}

/// The controller owner reference to the service.
pub fn owner_reference(svc: &InferenceService) -> Result<OwnerReference, BuildError> {
    let mut owner = svc.controller_owner_ref(&()).ok_or(BuildError::NoOwner)?;
    // Foreground deletion of the service waits for its children.
    owner.block_owner_deletion = Some(true);
    Ok(owner)
}

pub(super) fn child_meta(
    svc: &InferenceService,
    name: String,
    track: Track,
) -> Result<ObjectMeta, BuildError> {
    Ok(ObjectMeta {
        name: Some(name),
        namespace: svc.namespace(),
        labels: Some(labels(svc, track)),
        owner_references: Some(vec![owner_reference(svc)?]),
        ..ObjectMeta::default()
    })
}

/// Label pods with `spec.resources.gpuMemory` (sanitised) for scheduling
/// policies, when it is set.
pub(super) fn label_gpu_memory(svc: &InferenceService, labels: &mut BTreeMap<String, String>) {
    if let Some(gm) = svc
        .spec
        .resources
        .as_ref()
        .and_then(|r| r.gpu_memory.as_ref())
    {
        let value = sanitize_label_value(&gm.0);
        if !value.is_empty() {
            labels.insert(LABEL_GPU_MEMORY.to_owned(), value);
        }
    }
}

/// Turn a quantity into a label value: characters outside `[A-Za-z0-9._-]`
/// become `-`, the ends are alphanumeric, at most 63 characters.
#[must_use]
pub fn sanitize_label_value(raw: &str) -> String {
    let mapped: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .take(63)
        .collect();
    mapped
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_owned()
}
