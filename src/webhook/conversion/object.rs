//! One object of a review as read, in one pass over its bytes.

use std::borrow::Cow;

use serde::Deserialize;

use super::metadata::{Metadata, RawMap, name_of};
use super::scan::Cursor;
use super::seen::SeenFields;
use crate::api::conversion::{V1ALPHA1, V1BETA1};
use crate::api::{v1alpha1, v1beta1};

/// One object as read, in one pass over its bytes: `apiVersion` and
/// `kind`, `metadata` as a slice, and `spec` and `status` decoded typed
/// when the object is to be converted and its version is known by the
/// time they come (the API server writes `apiVersion` and `kind` first),
/// else as slices, decoded when converted. `metadata` is an object
/// (checked) or absent (also when `null`). Every slice is JSON checked by
/// the [`Cursor`]'s scanner.
pub(super) struct ObjectIn<'a> {
    pub(super) api_version: Cow<'a, str>,
    pub(super) kind: Cow<'a, str>,
    pub(super) metadata: Option<&'a str>,
    /// Whether a string in `metadata` holds a `\u` escape (which could
    /// spell the conversion annotation's name).
    pub(super) metadata_unicode: bool,
    pub(super) spec: Option<Part<'a, Spec>>,
    pub(super) status: Option<Part<'a, Status>>,
    /// Any other top-level field, kept for a same-version answer.
    pub(super) rest: RawMap<'a>,
}

/// `spec` or `status`: as a slice, or already decoded.
pub(super) enum Part<'a, T> {
    Raw(&'a str),
    Typed(T),
}

/// A `spec` decoded in its version.
// One object at a time, moved along its conversion: a box would cost an
// allocation per object.
#[allow(clippy::large_enum_variant)]
pub(super) enum Spec {
    V1alpha1(v1alpha1::InferenceServiceSpec),
    V1beta1(v1beta1::InferenceServiceSpec),
}

/// A `status` decoded in its version (`null` reads as none).
#[allow(clippy::large_enum_variant)]
pub(super) enum Status {
    V1alpha1(Option<v1alpha1::InferenceServiceStatus>),
    V1beta1(Option<v1beta1::InferenceServiceStatus>),
}

impl Spec {
    /// The spec, if decoded in v1alpha1.
    pub(super) fn v1alpha1(self) -> Option<v1alpha1::InferenceServiceSpec> {
        match self {
            Self::V1alpha1(s) => Some(s),
            Self::V1beta1(_) => None,
        }
    }

    /// The spec, if decoded in v1beta1.
    pub(super) fn v1beta1(self) -> Option<v1beta1::InferenceServiceSpec> {
        match self {
            Self::V1beta1(s) => Some(s),
            Self::V1alpha1(_) => None,
        }
    }
}

impl Status {
    /// The status, if decoded in v1alpha1.
    pub(super) fn v1alpha1(self) -> Option<Option<v1alpha1::InferenceServiceStatus>> {
        match self {
            Self::V1alpha1(s) => Some(s),
            Self::V1beta1(_) => None,
        }
    }

    /// The status, if decoded in v1beta1.
    pub(super) fn v1beta1(self) -> Option<Option<v1beta1::InferenceServiceStatus>> {
        match self {
            Self::V1beta1(s) => Some(s),
            Self::V1alpha1(_) => None,
        }
    }
}

impl ObjectIn<'_> {
    /// `metadata.name`, for messages.
    fn name(&self) -> String {
        name_of(self.metadata)
    }

    /// The version `spec` and `status` are decoded in as they are read:
    /// known, served, an InferenceService, and not the desired version.
    fn decode_as(&self, desired: &str) -> Option<&'static str> {
        let from = served(&self.api_version);
        let converts = !from.is_empty()
            && from != desired
            && self.kind == "InferenceService"
            && matches!(desired, V1ALPHA1 | V1BETA1);
        converts.then_some(from)
    }
}

/// A served version, or "" (the metrics label it `unknown`).
pub(super) fn served(api_version: &str) -> &'static str {
    match api_version {
        V1ALPHA1 => V1ALPHA1,
        V1BETA1 => V1BETA1,
        _ => "",
    }
}

/// Where an object whose `spec` or `status` failed to decode came from,
/// for the failure's message.
pub(super) struct DecodeFailure {
    pub(super) name: String,
    pub(super) from: &'static str,
}

/// Read one object of a review converted to `desired` (`""`: every part
/// as a slice). `failed` is set when a typed `spec` or `status` failed to
/// decode (the read of the review stops there).
pub(super) fn read_object<'a>(
    cursor: &mut Cursor<'a>,
    desired: &str,
    failed: &mut Option<DecodeFailure>,
) -> Result<ObjectIn<'a>, String> {
    let mut object = ObjectIn {
        api_version: Cow::Borrowed(""),
        kind: Cow::Borrowed(""),
        metadata: None,
        metadata_unicode: false,
        spec: None,
        status: None,
        rest: Vec::new(),
    };
    // An object that repeats one of these is refused: readers disagree
    // on which copy counts, and a typed part must match the version.
    let mut seen = SeenFields::default();
    let fields = ["apiVersion", "kind", "metadata", "spec", "status"];
    cursor.object(|cursor, key| {
        seen.check(&key, &fields)?;
        match key.as_ref() {
            "apiVersion" => object.api_version = cursor.string()?,
            "kind" => object.kind = cursor.string()?,
            "metadata" => {
                object.metadata = object_or_null(slice(cursor)?)?;
                object.metadata_unicode = cursor.saw_unicode_escape();
            }
            "spec" => {
                object.spec = Some(match object.decode_as(desired) {
                    Some(V1ALPHA1) => Part::Typed(Spec::V1alpha1(typed_value(
                        cursor, &object, V1ALPHA1, "spec", failed,
                    )?)),
                    Some(from) => Part::Typed(Spec::V1beta1(typed_value(
                        cursor, &object, from, "spec", failed,
                    )?)),
                    None => Part::Raw(slice(cursor)?),
                });
            }
            "status" => {
                object.status = Some(match object.decode_as(desired) {
                    Some(V1ALPHA1) => Part::Typed(Status::V1alpha1(typed_value(
                        cursor, &object, V1ALPHA1, "status", failed,
                    )?)),
                    Some(from) => Part::Typed(Status::V1beta1(typed_value(
                        cursor, &object, from, "status", failed,
                    )?)),
                    None => Part::Raw(slice(cursor)?),
                });
            }
            _ => object.rest.push((key, slice(cursor)?)),
        }
        Ok(())
    })?;
    Ok(object)
}

/// The next value as a slice, checked as JSON.
fn slice<'a>(cursor: &mut Cursor<'a>) -> Result<&'a str, String> {
    cursor.value().map_err(|e| e.to_string())
}

/// The next value decoded as `T`; a failure names the part and records
/// which object it was.
fn typed_value<'a, T: Deserialize<'a>>(
    cursor: &mut Cursor<'a>,
    object: &ObjectIn<'a>,
    from: &'static str,
    part: &str,
    failed: &mut Option<DecodeFailure>,
) -> Result<T, String> {
    cursor.typed().map_err(|e| {
        *failed = Some(DecodeFailure {
            name: object.name(),
            from,
        });
        format!("{part}: {e}")
    })
}

/// `metadata` as read: an object, or `null` (as if absent); anything else
/// is refused as the typed reading would.
fn object_or_null(raw: &str) -> Result<Option<&str>, String> {
    match raw.as_bytes().first() {
        Some(b'{') => Ok(Some(raw)),
        _ if raw == "null" => Ok(None),
        _ => serde_json::from_str::<Metadata<'_>>(raw)
            .map(|_| None)
            .map_err(|e| format!("metadata: {e}")),
    }
}
