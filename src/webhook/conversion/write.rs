//! Writing one converted object: its metadata as it came (copied as one
//! slice, or key by key with the conversion annotation as the typed
//! conversion left it), then `spec` and `status` in the desired version.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::metadata::{Metadata, RawMap};
use super::object::{ObjectIn, Part};
use crate::api::conversion::{ConversionError, V1ALPHA1, V1BETA1};
use crate::api::{CONVERSION_DATA_ANNOTATION, v1alpha1, v1beta1};

/// An object converted, typed, with the light metadata the conversion saw.
// One at a time, on the stack for the length of one object's write: a box
// would cost an allocation per object.
#[allow(clippy::large_enum_variant)]
pub(super) enum Converted {
    V1beta1(v1beta1::InferenceService),
    V1alpha1(v1alpha1::InferenceService),
}

impl Converted {
    pub(super) fn metadata(&self) -> &ObjectMeta {
        match self {
            Self::V1beta1(b) => &b.metadata,
            Self::V1alpha1(a) => &a.metadata,
        }
    }

    /// Write the object with its original metadata (as read, or absent),
    /// the conversion annotation as the conversion left it.
    pub(super) fn write(
        &self,
        out: &mut Vec<u8>,
        metadata: Option<&Metadata<'_>>,
    ) -> Result<(), ConversionError> {
        let original = Original {
            metadata: metadata.map(|m| &m.entries),
            annotations: metadata.and_then(|m| m.annotations.as_ref()),
        };
        match self {
            Self::V1beta1(b) => write_object(
                out,
                V1BETA1,
                &b.metadata,
                original,
                &b.spec,
                b.status.as_ref(),
            ),
            Self::V1alpha1(a) => write_object(
                out,
                V1ALPHA1,
                &a.metadata,
                original,
                &a.spec,
                a.status.as_ref(),
            ),
        }
    }

    /// Write the object with `metadata` copied as it is (nothing to stash).
    pub(super) fn write_with_raw_metadata(
        &self,
        out: &mut Vec<u8>,
        metadata: &str,
    ) -> Result<(), ConversionError> {
        match self {
            Self::V1beta1(b) => write_head(out, V1BETA1, metadata, &b.spec, b.status.as_ref()),
            Self::V1alpha1(a) => write_head(out, V1ALPHA1, metadata, &a.spec, a.status.as_ref()),
        }
    }
}

/// A converted object whose metadata is copied as read.
fn write_head<S: serde::Serialize, St: serde::Serialize>(
    out: &mut Vec<u8>,
    api_version: &str,
    metadata: &str,
    spec: &S,
    status: Option<&St>,
) -> Result<(), ConversionError> {
    out.extend_from_slice(br#"{"apiVersion":"#);
    json(out, api_version)?;
    out.extend_from_slice(br#","kind":"InferenceService","metadata":"#);
    out.extend_from_slice(metadata.as_bytes());
    write_body(out, spec, status)
}

/// The object's own metadata, as read.
#[derive(Clone, Copy)]
struct Original<'r, 'a> {
    metadata: Option<&'r RawMap<'a>>,
    annotations: Option<&'r RawMap<'a>>,
}

/// A part of an object already in the desired version: read as a slice.
fn slice_of<'a, T>(part: Option<&Part<'a, T>>) -> Result<Option<&'a str>, ConversionError> {
    match part {
        None => Ok(None),
        Some(Part::Raw(raw)) => Ok(Some(*raw)),
        Some(Part::Typed(_)) => Err(ConversionError::Decode(
            "internal: an object in the desired version was decoded".to_owned(),
        )),
    }
}

/// An object already in the desired version, written back as read.
pub(super) fn write_unchanged(
    object: &ObjectIn<'_>,
    out: &mut Vec<u8>,
) -> Result<(), ConversionError> {
    out.extend_from_slice(br#"{"apiVersion":"#);
    json(out, object.api_version.as_ref())?;
    out.extend_from_slice(br#","kind":"#);
    json(out, object.kind.as_ref())?;
    if let Some(metadata) = object.metadata {
        out.extend_from_slice(br#","metadata":"#);
        out.extend_from_slice(metadata.as_bytes());
    }
    let fields = [
        ("spec", slice_of(object.spec.as_ref())?),
        ("status", slice_of(object.status.as_ref())?),
    ];
    let present = fields.iter().filter_map(|(k, v)| v.map(|v| (*k, v)));
    let rest = object.rest.iter().map(|(k, v)| (k.as_ref(), *v));
    for (key, value) in present.chain(rest) {
        out.push(b',');
        json(out, key)?;
        out.push(b':');
        out.extend_from_slice(value.as_bytes());
    }
    out.push(b'}');
    Ok(())
}

/// A JSON string of `key`, copied as is when it needs no escaping (metadata
/// keys and annotation names almost never do).
fn write_key(out: &mut Vec<u8>, key: &str) {
    if key.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push(b'"');
        out.extend_from_slice(key.as_bytes());
        out.push(b'"');
    } else {
        // Writing a string into a Vec cannot fail.
        let _ = serde_json::to_writer(out, key);
    }
}

fn json<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) -> Result<(), ConversionError> {
    serde_json::to_writer(out, value).map_err(|e| ConversionError::Decode(e.to_string()))
}

/// Write a converted object: the original metadata with the conversion
/// annotation as the typed conversion left it.
fn write_object<S: serde::Serialize, St: serde::Serialize>(
    out: &mut Vec<u8>,
    api_version: &str,
    typed: &ObjectMeta,
    original: Original<'_, '_>,
    spec: &S,
    status: Option<&St>,
) -> Result<(), ConversionError> {
    let Original {
        metadata,
        annotations,
    } = original;
    out.extend_from_slice(br#"{"apiVersion":"#);
    json(out, api_version)?;
    out.extend_from_slice(br#","kind":"InferenceService""#);
    let stash = typed
        .annotations
        .as_ref()
        .and_then(|a| a.get(CONVERSION_DATA_ANNOTATION));
    let keep_annotations = typed.annotations.is_some();
    match metadata {
        Some(entries) => {
            out.extend_from_slice(br#","metadata":{"#);
            let mut first = true;
            let mut sep = |out: &mut Vec<u8>| {
                if !std::mem::take(&mut first) {
                    out.push(b',');
                }
            };
            let mut wrote_annotations = false;
            for (key, value) in entries {
                if key == "annotations" {
                    if !keep_annotations || wrote_annotations {
                        continue;
                    }
                    wrote_annotations = true;
                    sep(out);
                    json(out, "annotations")?;
                    out.push(b':');
                    write_annotations(out, annotations, stash)?;
                } else {
                    sep(out);
                    write_key(out, key);
                    out.push(b':');
                    out.extend_from_slice(value.as_bytes());
                }
            }
            if keep_annotations && !wrote_annotations {
                sep(out);
                json(out, "annotations")?;
                out.push(b':');
                write_annotations(out, None, stash)?;
            }
            out.push(b'}');
        }
        None if keep_annotations => {
            out.extend_from_slice(br#","metadata":{"annotations":"#);
            write_annotations(out, None, stash)?;
            out.push(b'}');
        }
        None => {}
    }
    write_body(out, spec, status)
}

/// `spec`, `status` and the object's end.
fn write_body<S: serde::Serialize, St: serde::Serialize>(
    out: &mut Vec<u8>,
    spec: &S,
    status: Option<&St>,
) -> Result<(), ConversionError> {
    out.extend_from_slice(br#","spec":"#);
    json(out, spec)?;
    if let Some(status) = status {
        out.extend_from_slice(br#","status":"#);
        json(out, status)?;
    }
    out.push(b'}');
    Ok(())
}

/// The annotations map: every original entry but the conversion
/// annotation, which is `stash` when there is one.
fn write_annotations(
    out: &mut Vec<u8>,
    original: Option<&RawMap<'_>>,
    stash: Option<&String>,
) -> Result<(), ConversionError> {
    out.push(b'{');
    let mut first = true;
    for (key, value) in original.into_iter().flatten() {
        if key == CONVERSION_DATA_ANNOTATION {
            continue;
        }
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
        write_key(out, key);
        out.push(b':');
        out.extend_from_slice(value.as_bytes());
    }
    if let Some(stash) = stash {
        if !first {
            out.push(b',');
        }
        json(out, CONVERSION_DATA_ANNOTATION)?;
        out.push(b':');
        json(out, stash)?;
    }
    out.push(b'}');
    Ok(())
}
