//! Conversion between `InferenceService` v1alpha1 and v1beta1 (the field mapping is in `docs/api-reference.md`, v1alpha1),
//! as pure functions over whole objects.
//!
//! Each direction is a plain projection (`modelRef <-> model.ref`,
//! `minReplicas/maxReplicas` both > 0 `<-> autoscaling`, `status.ready` and
//! `status.message` `<->` the Ready condition, ...). Whatever the projection
//! loses is written to the `infergate.dev/conversion-data` annotation as a
//! set of JSON pointers into `spec`/`status` with their original values,
//! stamped with the version they belong to; converting back applies them
//! and removes the annotation. The stash holds only the leaves that differ,
//! each with the value the projection had when it was made: a leaf is
//! restored only while the projection still has that value, so a field
//! edited through the other version keeps the edit.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::common::CONVERSION_DATA_ANNOTATION;
use super::vocabulary::{CondStatus, ConditionType, Reason};
use super::{v1alpha1, v1beta1};

/// `infergate.dev/v1alpha1`.
pub const V1ALPHA1: &str = "infergate.dev/v1alpha1";
/// `infergate.dev/v1beta1`.
pub const V1BETA1: &str = "infergate.dev/v1beta1";
/// Reason of a Ready condition made from a v1alpha1 `status.ready: true`.
const READY_REASON: Reason = Reason::Ready;
/// Reason of a Ready condition made from a v1alpha1 `status.ready: false`.
const NOT_READY_REASON: Reason = Reason::NotReady;

/// Why an object could not be converted.
#[derive(Debug, thiserror::Error)]
pub enum ConversionError {
    /// The desired version is not one infergate serves.
    #[error("unsupported apiVersion {0:?}")]
    UnsupportedVersion(String),
    /// The object is not an InferenceService.
    #[error("unsupported kind {0:?}")]
    UnsupportedKind(String),
    /// The object does not decode as its version.
    #[error("invalid object: {0}")]
    Decode(String),
    /// The conversion-data annotation is malformed.
    #[error("invalid infergate.dev/conversion-data annotation: {0}")]
    Annotation(String),
}

/// What one version could not express, kept in the annotation.
#[derive(Serialize, Deserialize, Debug, Default, PartialEq)]
struct Stash {
    /// The version the data belongs to (restored only when converting to it).
    #[serde(rename = "apiVersion")]
    api_version: String,
    /// JSON pointer (from the object root, `/spec/...`, `/status/...`) -> original value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    set: BTreeMap<String, Value>,
    /// JSON pointers the original did not have.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    remove: Vec<String>,
    /// What the projection held at a pointer of `set`/`remove` when the
    /// stash was made (absent: nothing). An entry is restored only while
    /// the projection still holds that, so an edit made through the other
    /// version wins over the stashed value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    was: BTreeMap<String, Value>,
    /// The object had an empty `annotations` map before this annotation was added.
    #[serde(
        default,
        rename = "emptyAnnotations",
        skip_serializing_if = "std::ops::Not::not"
    )]
    empty_annotations: bool,
}

impl Stash {
    fn is_empty(&self) -> bool {
        self.set.is_empty() && self.remove.is_empty()
    }
}

/// Convert one InferenceService object (JSON) to `desired_api_version`
/// (`infergate.dev/v1alpha1` or `infergate.dev/v1beta1`), lossless via the
/// `infergate.dev/conversion-data` annotation. Same version in = same object out.
///
/// `metadata` is carried over as JSON, untouched but for that annotation.
pub fn convert(object: Value, desired_api_version: &str) -> Result<Value, ConversionError> {
    if desired_api_version != V1ALPHA1 && desired_api_version != V1BETA1 {
        return Err(ConversionError::UnsupportedVersion(
            desired_api_version.to_owned(),
        ));
    }
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
    if kind != "InferenceService" {
        return Err(ConversionError::UnsupportedKind(kind.to_owned()));
    }
    let from = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    if from == desired_api_version {
        return Ok(object);
    }
    // The typed conversion reads and writes only the conversion annotation
    // (and whether an annotations map exists); the result keeps the original
    // metadata. So the typed side gets a light copy: name, namespace and the
    // annotation keys, values blanked but for the conversion annotation.
    // Managed fields and `last-applied-configuration`, most of a kubectl
    // object's bytes, are moved once and never decoded.
    let mut object = object;
    let raw_meta = object.get_mut("metadata").map(Value::take);
    if let (Some(meta), Some(obj)) = (raw_meta.as_ref(), object.as_object_mut()) {
        obj.insert("metadata".to_owned(), light_metadata(meta));
    }
    let mut out = match from.as_str() {
        V1ALPHA1 => {
            let a: v1alpha1::InferenceService = serde_json::from_value(object)
                .map_err(|e| ConversionError::Decode(e.to_string()))?;
            serde_json::to_value(to_v1beta1(&a)?)
        }
        V1BETA1 => {
            let b: v1beta1::InferenceService = serde_json::from_value(object)
                .map_err(|e| ConversionError::Decode(e.to_string()))?;
            serde_json::to_value(to_v1alpha1(&b)?)
        }
        other => return Err(ConversionError::UnsupportedVersion(other.to_owned())),
    }
    .map_err(|e| ConversionError::Decode(e.to_string()))?;
    // Keep the original metadata JSON verbatim (fields this crate's types
    // may not know), with only the conversion annotation replaced; whether
    // an `annotations` map exists follows the typed conversion.
    if let (Some(mut meta), Some(obj)) = (raw_meta, out.as_object_mut()) {
        let typed = obj
            .get("metadata")
            .and_then(|m| m.get("annotations"))
            .cloned();
        if let Some(m) = meta.as_object_mut() {
            match typed {
                None => {
                    m.remove("annotations");
                }
                Some(typed) => {
                    let anns = m
                        .entry("annotations")
                        .or_insert_with(|| Value::Object(Map::new()));
                    if let Some(a) = anns.as_object_mut() {
                        match typed.get(CONVERSION_DATA_ANNOTATION) {
                            Some(v) => {
                                a.insert(CONVERSION_DATA_ANNOTATION.to_owned(), v.clone());
                            }
                            None => {
                                a.remove(CONVERSION_DATA_ANNOTATION);
                            }
                        }
                    }
                }
            }
        }
        obj.insert("metadata".to_owned(), meta);
    }
    Ok(out)
}

/// `metadata` reduced to what the typed conversion reads (see [`convert`]).
fn light_metadata(meta: &Value) -> Value {
    let mut light = Map::new();
    for key in ["name", "namespace"] {
        if let Some(v) = meta.get(key) {
            light.insert(key.to_owned(), v.clone());
        }
    }
    if let Some(Value::Object(annotations)) = meta.get("annotations") {
        let blanked = annotations
            .iter()
            .map(|(k, v)| {
                let v = if k == CONVERSION_DATA_ANNOTATION {
                    v.clone()
                } else {
                    Value::String(String::new())
                };
                (k.clone(), v)
            })
            .collect();
        light.insert("annotations".to_owned(), Value::Object(blanked));
    }
    Value::Object(light)
}

/// v1alpha1 -> v1beta1.
pub fn to_v1beta1(
    obj: &v1alpha1::InferenceService,
) -> Result<v1beta1::InferenceService, ConversionError> {
    into_v1beta1(obj.clone())
}

/// v1alpha1 -> v1beta1, taking the object (nothing of it is copied twice).
pub fn into_v1beta1(
    obj: v1alpha1::InferenceService,
) -> Result<v1beta1::InferenceService, ConversionError> {
    let v1alpha1::InferenceService {
        metadata,
        spec,
        status,
    } = obj;
    let (meta, stash) = take_stash(metadata, V1BETA1)?;
    // Metadata is not converted: the projections work without it.
    let clean = v1alpha1::InferenceService {
        metadata: ObjectMeta::default(),
        spec,
        status,
    };
    if stash.is_none() && up_is_exact(&clean) {
        // v1beta1 says all of it (most often): the object is moved across,
        // without the way back or the JSON diff.
        let mut out = up_owned(clean);
        out.metadata = meta;
        return Ok(out);
    }
    let mut out = apply_stash(up(&clean), stash.as_ref())?;
    out.metadata = meta;
    // What v1beta1 cannot say about this v1alpha1 object.
    let back = down(&out);
    if back.spec != clean.spec || back.status != clean.status {
        let lost = diff_objects(&to_json(&clean)?, &to_json(&back)?, V1ALPHA1);
        put_stash(&mut out.metadata, lost)?;
    }
    Ok(out)
}

/// v1beta1 -> v1alpha1.
pub fn to_v1alpha1(
    obj: &v1beta1::InferenceService,
) -> Result<v1alpha1::InferenceService, ConversionError> {
    into_v1alpha1(obj.clone())
}

/// v1beta1 -> v1alpha1, taking the object (nothing of it is copied twice).
pub fn into_v1alpha1(
    obj: v1beta1::InferenceService,
) -> Result<v1alpha1::InferenceService, ConversionError> {
    let v1beta1::InferenceService {
        metadata,
        spec,
        status,
    } = obj;
    let (meta, stash) = take_stash(metadata, V1ALPHA1)?;
    let clean = v1beta1::InferenceService {
        metadata: ObjectMeta::default(),
        spec,
        status,
    };
    let mut out = apply_stash(down(&clean), stash.as_ref())?;
    out.metadata = meta;
    let back = up(&out);
    if back.spec != clean.spec || back.status != clean.status {
        let lost = diff_objects(&to_json(&clean)?, &to_json(&back)?, V1BETA1);
        put_stash(&mut out.metadata, lost)?;
    }
    Ok(out)
}

fn to_json<T: Serialize>(v: &T) -> Result<Value, ConversionError> {
    serde_json::to_value(v).map_err(|e| ConversionError::Decode(e.to_string()))
}

/// Remove the conversion annotation from `meta`; return its stash
/// when it belongs to `target`. A stash for the other version is dropped:
/// it describes an object that no longer exists in this form.
fn take_stash(
    mut meta: ObjectMeta,
    target: &str,
) -> Result<(ObjectMeta, Option<Stash>), ConversionError> {
    let Some(raw) = meta
        .annotations
        .as_mut()
        .and_then(|a| a.remove(CONVERSION_DATA_ANNOTATION))
    else {
        return Ok((meta, None));
    };
    let stash: Stash =
        serde_json::from_str(&raw).map_err(|e| ConversionError::Annotation(e.to_string()))?;
    if meta.annotations.as_ref().is_some_and(BTreeMap::is_empty) && !stash.empty_annotations {
        meta.annotations = None;
    }
    if stash.api_version == target {
        Ok((meta, Some(stash)))
    } else {
        Ok((meta, None))
    }
}

fn put_stash(meta: &mut ObjectMeta, mut stash: Stash) -> Result<(), ConversionError> {
    if stash.is_empty() {
        return Ok(());
    }
    stash.empty_annotations = meta.annotations.as_ref().is_some_and(BTreeMap::is_empty);
    let s =
        serde_json::to_string(&stash).map_err(|e| ConversionError::Annotation(e.to_string()))?;
    meta.annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(CONVERSION_DATA_ANNOTATION.to_owned(), s);
    Ok(())
}

/// Apply a stash to the JSON of `obj` and decode it back.
fn apply_stash<T>(obj: T, stash: Option<&Stash>) -> Result<T, ConversionError>
where
    T: Serialize + for<'de> Deserialize<'de>,
{
    let Some(stash) = stash else {
        return Ok(obj);
    };
    let mut json = to_json(&obj)?;
    // Decide every entry against the untouched projection first.
    let unchanged = |ptr: &str| json.pointer(ptr) == stash.was.get(ptr);
    let set: Vec<(&String, &Value)> = stash.set.iter().filter(|(p, _)| unchanged(p)).collect();
    let remove: Vec<&String> = stash.remove.iter().filter(|p| unchanged(p)).collect();
    for (ptr, value) in set {
        set_pointer(&mut json, ptr, Some(value.clone()))?;
    }
    for ptr in remove {
        set_pointer(&mut json, ptr, None)?;
    }
    serde_json::from_value(json).map_err(|e| ConversionError::Annotation(e.to_string()))
}

/// Set (or with `None` remove) the value at `ptr` when its parent objects
/// exist; a pointer whose parent is gone (removed through the other
/// version) is skipped.
fn set_pointer(root: &mut Value, ptr: &str, value: Option<Value>) -> Result<(), ConversionError> {
    let Some(rest) = ptr.strip_prefix('/') else {
        return Err(ConversionError::Annotation(format!("bad pointer {ptr:?}")));
    };
    let parts: Vec<String> = rest
        .split('/')
        .map(|p| p.replace("~1", "/").replace("~0", "~"))
        .collect();
    if !matches!(parts.first().map(String::as_str), Some("spec" | "status")) {
        return Err(ConversionError::Annotation(format!(
            "pointer {ptr:?} is outside spec and status"
        )));
    }
    let Some((last, parents)) = parts.split_last() else {
        return Ok(());
    };
    let mut cur = root;
    for p in parents {
        let Some(obj) = cur.as_object_mut() else {
            return Ok(());
        };
        match obj.get_mut(p) {
            Some(next) => cur = next,
            None => return Ok(()),
        }
    }
    if let Some(obj) = cur.as_object_mut() {
        match value {
            Some(v) => {
                obj.insert(last.clone(), v);
            }
            None => {
                obj.remove(last);
            }
        }
    }
    Ok(())
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// The leaves of `original` (spec and status) that `projected` lacks or differs in.
fn diff_objects(original: &Value, projected: &Value, version: &str) -> Stash {
    let mut stash = Stash {
        api_version: version.to_owned(),
        ..Default::default()
    };
    for top in ["spec", "status"] {
        diff_value(
            original.get(top),
            projected.get(top),
            &format!("/{top}"),
            &mut stash,
        );
    }
    stash
}

fn diff_value(a: Option<&Value>, b: Option<&Value>, path: &str, stash: &mut Stash) {
    match (a, b) {
        (Some(Value::Object(ma)), Some(Value::Object(mb))) => {
            for (k, va) in ma {
                diff_value(Some(va), mb.get(k), &format!("{path}/{}", escape(k)), stash);
            }
            for k in mb.keys() {
                if let (false, Some(vb)) = (ma.contains_key(k), mb.get(k)) {
                    let p = format!("{path}/{}", escape(k));
                    stash.was.insert(p.clone(), vb.clone());
                    stash.remove.push(p);
                }
            }
        }
        (Some(va), Some(vb)) if va == vb => {}
        (Some(va), vb) => {
            if let Some(vb) = vb {
                stash.was.insert(path.to_owned(), vb.clone());
            }
            stash.set.insert(path.to_owned(), va.clone());
        }
        (None, Some(vb)) => {
            stash.was.insert(path.to_owned(), vb.clone());
            stash.remove.push(path.to_owned());
        }
        (None, None) => {}
    }
}

/// Whether `down(up(a))` is `a`, decided without building either: the
/// autoscaling bounds come back only as a pair of positive numbers, a status
/// message only next to a readiness and not empty; every other field maps
/// one to one. (The fields are named one by one: a new one does not compile
/// until it is placed here; `alpha_round_trips` in `tests/suite/engine/properties.rs` checks
/// the rule against the projections.)
#[must_use]
pub fn up_is_exact(a: &v1alpha1::InferenceService) -> bool {
    let v1alpha1::InferenceServiceSpec {
        model_ref: _,
        replicas: _,
        min_replicas,
        max_replicas,
        resources: _,
        canary: _,
        health_check: _,
    } = &a.spec;
    let bounds = match (min_replicas, max_replicas) {
        (None, None) => true,
        (Some(min), Some(max)) => *min > 0 && *max > 0,
        _ => false,
    };
    let status = a.status.as_ref().is_none_or(|st| {
        let v1alpha1::InferenceServiceStatus {
            ready,
            replicas: _,
            message,
        } = st;
        match ready {
            None => message.is_none(),
            Some(_) => message.as_deref() != Some(""),
        }
    });
    bounds && status
}

/// The plain projection v1alpha1 -> v1beta1 (no annotation handling).
fn up(a: &v1alpha1::InferenceService) -> v1beta1::InferenceService {
    up_owned(a.clone())
}

/// [`up`], taking the object.
fn up_owned(a: v1alpha1::InferenceService) -> v1beta1::InferenceService {
    let s = a.spec;
    let autoscaling = match (s.min_replicas, s.max_replicas) {
        (Some(min), Some(max)) if min > 0 && max > 0 => Some(v1beta1::AutoscalingSpec {
            min_replicas: min,
            max_replicas: max,
            target_cpu_utilization_percent: None,
        }),
        _ => None,
    };
    let spec = v1beta1::InferenceServiceSpec {
        model: v1beta1::ModelSpec {
            r#ref: s.model_ref,
            image: None,
            ..Default::default()
        },
        replicas: s.replicas,
        autoscaling,
        resources: s.resources,
        canary: s.canary.map(|c| v1beta1::CanarySpec {
            model: v1beta1::ModelSpec {
                r#ref: c.model_ref,
                image: None,
                ..Default::default()
            },
            engine_image: None,
            weight: c.weight,
            replicas: None,
            on_full_pool: None,
        }),
        health_check: s.health_check,
        ..Default::default()
    };
    let status = a.status.map(|st| v1beta1::InferenceServiceStatus {
        conditions: st
            .ready
            .map(|ready| Condition {
                type_: ConditionType::Ready.as_str().to_owned(),
                status: CondStatus::from(ready).as_str().to_owned(),
                reason: if ready {
                    READY_REASON
                } else {
                    NOT_READY_REASON
                }
                .as_str()
                .to_owned(),
                message: st.message.unwrap_or_default(),
                observed_generation: None,
                last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
            })
            .into_iter()
            .collect(),
        replicas: st.replicas,
        ..Default::default()
    });
    v1beta1::InferenceService {
        metadata: a.metadata,
        spec,
        status,
    }
}

/// The plain projection v1beta1 -> v1alpha1 (no annotation handling).
fn down(b: &v1beta1::InferenceService) -> v1alpha1::InferenceService {
    let s = &b.spec;
    let spec = v1alpha1::InferenceServiceSpec {
        model_ref: s.model.r#ref.clone(),
        replicas: s.replicas,
        min_replicas: s.autoscaling.as_ref().map(|a| a.min_replicas),
        max_replicas: s.autoscaling.as_ref().map(|a| a.max_replicas),
        resources: s.resources.clone(),
        canary: s.canary.as_ref().map(|c| v1alpha1::CanarySpec {
            model_ref: c.model.r#ref.clone(),
            weight: c.weight,
        }),
        health_check: s.health_check.clone(),
    };
    let status = b.status.as_ref().map(|st| {
        let ready = st
            .conditions
            .iter()
            .find(|c| c.type_ == ConditionType::Ready);
        v1alpha1::InferenceServiceStatus {
            ready: ready.and_then(|c| match c.status.parse() {
                Ok(CondStatus::True) => Some(true),
                Ok(CondStatus::False) => Some(false),
                _ => None,
            }),
            replicas: st.replicas,
            message: ready.map(|c| c.message.clone()).filter(|m| !m.is_empty()),
        }
    });
    v1alpha1::InferenceService {
        metadata: b.metadata.clone(),
        spec,
        status,
    }
}
