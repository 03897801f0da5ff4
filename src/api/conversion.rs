//! Conversion between `InferenceService` v1alpha1 and v1beta1 (API.md section 3),
//! as pure functions over whole objects.

use super::{v1alpha1, v1beta1};

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
    #[error("invalid {annotation} annotation: {0}", annotation = super::CONVERSION_DATA_ANNOTATION)]
    Annotation(String),
}

/// Convert one InferenceService object (JSON) to `desired_api_version`
/// (`infergate.dev/v1alpha1` or `infergate.dev/v1beta1`), lossless via the
/// `infergate.dev/conversion-data` annotation. Same version in = same object out.
pub fn convert(
    object: serde_json::Value,
    desired_api_version: &str,
) -> Result<serde_json::Value, ConversionError> {
    let _ = desired_api_version;
    Ok(object)
}

/// v1alpha1 -> v1beta1.
pub fn to_v1beta1(
    obj: &v1alpha1::InferenceService,
) -> Result<v1beta1::InferenceService, ConversionError> {
    let _ = obj;
    Err(ConversionError::UnsupportedVersion(
        "not implemented".into(),
    ))
}

/// v1beta1 -> v1alpha1.
pub fn to_v1alpha1(
    obj: &v1beta1::InferenceService,
) -> Result<v1alpha1::InferenceService, ConversionError> {
    let _ = obj;
    Err(ConversionError::UnsupportedVersion(
        "not implemented".into(),
    ))
}
