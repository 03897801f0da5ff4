//! The weights' size from a parsed `model.safetensors.index.json`
//! ([`total_size`]).

use serde_json::Value;

use super::error::ConfigError;
use super::fields::Fields;

/// `metadata.total_size` of a parsed `model.safetensors.index.json`: the
/// bytes of all the weights.
///
/// # Errors
/// [`ConfigError`] naming `metadata` or `metadata.total_size` when missing,
/// mistyped or below 1.
pub fn total_size(index: &Value) -> Result<i64, ConfigError> {
    let root = Fields {
        object: index.as_object().ok_or(ConfigError::NotAnObject)?,
        prefix: "",
    };
    let metadata = match root.get("metadata") {
        None => return Err(ConfigError::Missing("metadata.total_size".to_owned())),
        Some(Value::Object(object)) => Fields {
            object,
            prefix: "metadata.",
        },
        Some(v) => return Err(root.wrong_type("metadata", "an object", v)),
    };
    metadata.required_int("total_size", 1, i64::MAX)
}
