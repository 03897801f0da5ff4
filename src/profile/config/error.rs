//! [`ConfigError`]: why a config or a safetensors index cannot be read into
//! a profile, naming the field.

use super::families::known_model_types;

/// Why a config (or a safetensors index) cannot be read into a profile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The document is not a JSON object.
    #[error("not a JSON object")]
    NotAnObject,
    /// A required field is absent or null.
    #[error("{0} is missing")]
    Missing(String),
    /// A field holds the wrong kind of value.
    #[error("{field} must be {expected}, not {found}")]
    WrongType {
        /// The field.
        field: String,
        /// What it must hold.
        expected: &'static str,
        /// What it holds.
        found: &'static str,
    },
    /// An integer field is out of range.
    #[error("{field} must be between {min} and {max}, not {value}")]
    OutOfRange {
        /// The field.
        field: String,
        /// Its value.
        value: String,
        /// The least value allowed.
        min: i64,
        /// The greatest value allowed.
        max: i64,
    },
    /// `model_type` names no family this command knows.
    #[error(
        "{field} {value:?} is not a known model family (known: {})",
        known_model_types()
    )]
    UnknownModelType {
        /// The field (`model_type` or `text_config.model_type`).
        field: String,
        /// Its value.
        value: String,
    },
    /// `hidden_size / num_attention_heads` is not whole and `head_dim` is absent.
    #[error(
        "{hidden_field} {hidden} is not a multiple of {heads_field} {heads} and head_dim is missing"
    )]
    HeadDimNotWhole {
        /// `hidden_size` (with its prefix).
        hidden_field: String,
        /// Its value.
        hidden: i64,
        /// `num_attention_heads` (with its prefix).
        heads_field: String,
        /// Its value.
        heads: i64,
    },
    /// More key/value heads than attention heads.
    #[error("{kv_field} {kv} is more than {heads_field} {heads}")]
    MoreKvHeadsThanHeads {
        /// `num_key_value_heads` (with its prefix).
        kv_field: String,
        /// Its value.
        kv: i64,
        /// `num_attention_heads` (with its prefix).
        heads_field: String,
        /// Its value.
        heads: i64,
    },
}
