//! One object converted to the desired version: the version it is in
//! chosen, `spec` and `status` typed in it, the typed conversion run, and
//! the result written ([`super::write`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

use super::metadata::{decode, light_metadata, may_hold_stash, read_metadata};
use super::object::{ObjectIn, Part, Spec, Status, read_object, served};
use super::scan::Cursor;
use super::write::{Converted, write_unchanged};
use crate::api::conversion::{self, ConversionError, V1ALPHA1, V1BETA1};
use crate::api::{v1alpha1, v1beta1};

/// Convert one InferenceService object (JSON) to `desired` and return its
/// JSON: what [`convert_review`](super::convert_review) writes for each
/// object.
pub fn convert_object(object: &str, desired: &str) -> Result<Vec<u8>, ConversionError> {
    let mut cursor = Cursor::new(object);
    let parsed = read_object(&mut cursor, "", &mut None)
        .and_then(|parsed| cursor.end().map(|()| parsed))
        .map_err(ConversionError::Decode)?;
    let mut out = Vec::with_capacity(object.len() + 64);
    write_converted(parsed, desired, &mut out)?;
    Ok(out)
}

/// Convert one object to `desired`, appending its JSON to `out`; the
/// version it was in.
pub(super) fn write_converted(
    object: ObjectIn<'_>,
    desired: &str,
    out: &mut Vec<u8>,
) -> Result<&'static str, ConversionError> {
    if desired != V1ALPHA1 && desired != V1BETA1 {
        return Err(ConversionError::UnsupportedVersion(desired.to_owned()));
    }
    if object.kind != "InferenceService" {
        return Err(ConversionError::UnsupportedKind(object.kind.to_string()));
    }
    let from = served(&object.api_version);
    if from.is_empty() {
        return Err(ConversionError::UnsupportedVersion(
            object.api_version.to_string(),
        ));
    }
    if from == desired {
        write_unchanged(&object, out)?;
        return Ok(from);
    }
    let ObjectIn {
        metadata,
        metadata_unicode,
        spec,
        status,
        ..
    } = object;
    let Some(spec) = spec else {
        return Err(ConversionError::Decode("missing field `spec`".to_owned()));
    };
    // Most objects hold no stash: their metadata is not even read, and is
    // copied as it is unless the conversion has something to stash.
    let parsed = match metadata {
        Some(raw) if may_hold_stash(raw, metadata_unicode) => Some(read_metadata(raw)?),
        _ => None,
    };
    let light = light_metadata(parsed.as_ref().and_then(|m| m.annotations.as_ref()))?;
    let typed = Typed::decode(from, spec, status, light)?;
    // A stash the conversion adds may need the object converted again
    // (below): kept only when the conversion can add one.
    let again = match (metadata, &parsed) {
        (Some(_), None) if typed.may_stash() => Some(typed.clone()),
        _ => None,
    };
    let converted = typed.convert()?;
    match (metadata, parsed) {
        (Some(raw), None) if converted.metadata().annotations.is_some() => {
            // A stash to add: the annotations it joins are read after all.
            // The stash records an empty map it was added to, which the
            // conversion could not see: made again when there is one.
            let parsed = read_metadata(raw)?;
            if parsed.annotations.as_ref().is_some_and(Vec::is_empty) {
                let light = light_metadata(parsed.annotations.as_ref())?;
                let Some(mut again) = again else {
                    return Err(ConversionError::Decode(
                        "internal: a conversion that cannot stash stashed".to_owned(),
                    ));
                };
                again.set_metadata(light);
                again.convert()?.write(out, Some(&parsed))
            } else {
                converted.write(out, Some(&parsed))
            }
        }
        (Some(raw), None) => converted.write_with_raw_metadata(out, raw),
        (_, parsed) => converted.write(out, parsed.as_ref()),
    }?;
    Ok(from)
}

/// `spec` or `status` (`what`) in version `from`: decoded now when read as
/// a slice, taken when `typed` finds it decoded in that version.
fn in_version<'a, P, T: Deserialize<'a>>(
    part: Part<'a, P>,
    what: &str,
    from: &str,
    typed: impl FnOnce(P) -> Option<T>,
) -> Result<T, ConversionError> {
    match part {
        Part::Raw(raw) => decode(raw, what),
        Part::Typed(p) => typed(p).ok_or_else(|| {
            ConversionError::Decode(format!("{what} does not match apiVersion {from}"))
        }),
    }
}

/// `spec` and `status` in version `from` (`status` `null` reads as none),
/// each taken by `spec_in` or `status_in` when decoded as it was read.
fn parts<'a, S: Deserialize<'a>, St: Deserialize<'a>>(
    from: &str,
    spec: Part<'a, Spec>,
    status: Option<Part<'a, Status>>,
    spec_in: impl FnOnce(Spec) -> Option<S>,
    status_in: impl FnOnce(Status) -> Option<Option<St>>,
) -> Result<(S, Option<St>), ConversionError> {
    let spec = in_version(spec, "spec", from, spec_in)?;
    let status = status.map(|p| in_version(p, "status", from, status_in));
    Ok((spec, status.transpose()?.flatten()))
}

/// An object to convert, typed in its version, with light metadata.
#[derive(Clone)]
#[allow(clippy::large_enum_variant)]
enum Typed {
    V1alpha1(v1alpha1::InferenceService),
    V1beta1(v1beta1::InferenceService),
}

impl Typed {
    /// `spec` and `status` in version `from` (decoded now when read as
    /// slices), with `light` metadata.
    fn decode(
        from: &str,
        spec: Part<'_, Spec>,
        status: Option<Part<'_, Status>>,
        light: ObjectMeta,
    ) -> Result<Self, ConversionError> {
        if from == V1ALPHA1 {
            let (spec, status) = parts(from, spec, status, Spec::v1alpha1, Status::v1alpha1)?;
            Ok(Self::V1alpha1(v1alpha1::InferenceService {
                metadata: light,
                spec,
                status,
            }))
        } else {
            let (spec, status) = parts(from, spec, status, Spec::v1beta1, Status::v1beta1)?;
            Ok(Self::V1beta1(v1beta1::InferenceService {
                metadata: light,
                spec,
                status,
            }))
        }
    }

    /// Whether converting it can add a stash: v1beta1 says everything a
    /// v1alpha1 object that converts exactly says; a v1beta1 object most
    /// often says more than v1alpha1 can.
    fn may_stash(&self) -> bool {
        match self {
            Self::V1alpha1(a) => !conversion::up_is_exact(a),
            Self::V1beta1(_) => true,
        }
    }

    fn set_metadata(&mut self, light: ObjectMeta) {
        match self {
            Self::V1alpha1(a) => a.metadata = light,
            Self::V1beta1(b) => b.metadata = light,
        }
    }

    /// Convert it to the other version.
    fn convert(self) -> Result<Converted, ConversionError> {
        match self {
            Self::V1alpha1(a) => Ok(Converted::V1beta1(conversion::into_v1beta1(a)?)),
            Self::V1beta1(b) => Ok(Converted::V1alpha1(conversion::into_v1alpha1(b)?)),
        }
    }
}
