//! What a `config.json` says about the model's KV cache and context
//! ([`architecture`] into an [`Architecture`]), and the attention specs
//! it builds.

use serde_json::Value;

use super::error::ConfigError;
use super::families::{GQA_MODEL_TYPES, MLA_MODEL_TYPES};
use super::fields::Fields;
use crate::api::profile::{AttentionKind, AttentionSpec, ModelProfileSpec};

/// What a `config.json` says about the model's KV cache and context.
#[derive(Debug, Clone, PartialEq)]
pub struct Architecture {
    /// The family (`model_type`) the numbers were read as.
    pub model_type: String,
    /// `num_hidden_layers`.
    pub layers: i32,
    /// The attention's KV cache.
    pub attention: AttentionSpec,
    /// `max_position_embeddings`.
    pub max_position_embeddings: i64,
}

impl Architecture {
    /// The profile's spec: these numbers with the refs, the weights' size and
    /// the KV cache element size (`None`: the default, 2).
    #[must_use]
    pub fn into_spec(
        self,
        model_refs: Vec<String>,
        weight_bytes: i64,
        kv_cache_bytes_per_element: Option<i32>,
    ) -> ModelProfileSpec {
        ModelProfileSpec {
            model_refs,
            weight_bytes,
            layers: self.layers,
            attention: self.attention,
            max_position_embeddings: self.max_position_embeddings,
            kv_cache_bytes_per_element,
        }
    }
}

/// A GQA or MHA KV cache: `kv_heads` key/value heads of `head_dim`.
#[must_use]
pub fn grouped_attention(kind: AttentionKind, kv_heads: i32, head_dim: i32) -> AttentionSpec {
    AttentionSpec {
        kind,
        kv_heads: Some(kv_heads),
        head_dim: Some(head_dim),
        ..AttentionSpec::default()
    }
}

/// An MLA KV cache: the latent of `kv_lora_rank` and the RoPE key of
/// `qk_rope_head_dim`.
#[must_use]
pub fn latent_attention(kv_lora_rank: i32, qk_rope_head_dim: i32) -> AttentionSpec {
    AttentionSpec {
        kind: AttentionKind::Mla,
        kv_lora_rank: Some(kv_lora_rank),
        qk_rope_head_dim: Some(qk_rope_head_dim),
        ..AttentionSpec::default()
    }
}

/// The object the language model's numbers are read from: `text_config`
/// when the config nests one, else the config itself.
fn language_model(config: &Value) -> Result<(Fields<'_>, Option<&str>), ConfigError> {
    let root = Fields {
        object: config.as_object().ok_or(ConfigError::NotAnObject)?,
        prefix: "",
    };
    let root_type = root.string("model_type")?;
    match root.get("text_config") {
        None => Ok((root, root_type)),
        Some(Value::Object(object)) => Ok((
            Fields {
                object,
                prefix: "text_config.",
            },
            root_type,
        )),
        Some(v) => Err(root.wrong_type("text_config", "an object", v)),
    }
}

/// Reads the layers, attention and context of a parsed `config.json`.
///
/// # Errors
/// [`ConfigError`] naming the field that is missing, mistyped or out of
/// range, or the unknown `model_type`.
pub fn architecture(config: &Value) -> Result<Architecture, ConfigError> {
    let (fields, root_type) = language_model(config)?;
    let (type_field, model_type) = match fields.string("model_type")? {
        Some(t) => (fields.path("model_type"), t),
        None => (
            "model_type".to_owned(),
            root_type.ok_or_else(|| ConfigError::Missing("model_type".to_owned()))?,
        ),
    };
    let mla = MLA_MODEL_TYPES.contains(&model_type);
    if !mla && !GQA_MODEL_TYPES.contains(&model_type) {
        return Err(ConfigError::UnknownModelType {
            field: type_field,
            value: model_type.to_owned(),
        });
    }
    let layers = fields.required_i32("num_hidden_layers", 1)?;
    let attention = if mla || fields.get("kv_lora_rank").is_some() {
        latent_attention(
            fields.required_i32("kv_lora_rank", 1)?,
            fields.required_i32("qk_rope_head_dim", 0)?,
        )
    } else {
        grouped_query(&fields)?
    };
    let max_position_embeddings = fields.required_int("max_position_embeddings", 1, i64::MAX)?;
    Ok(Architecture {
        model_type: model_type.to_owned(),
        layers,
        attention,
        max_position_embeddings,
    })
}

/// GQA or MHA: key/value heads and the dimension of one head.
fn grouped_query(fields: &Fields<'_>) -> Result<AttentionSpec, ConfigError> {
    let max = i64::from(i32::MAX);
    let heads = fields.required_int("num_attention_heads", 1, max)?;
    let kv_heads = fields.int("num_key_value_heads", 1, max)?.unwrap_or(heads);
    if kv_heads > heads {
        return Err(ConfigError::MoreKvHeadsThanHeads {
            kv_field: fields.path("num_key_value_heads"),
            kv: kv_heads,
            heads_field: fields.path("num_attention_heads"),
            heads,
        });
    }
    let head_dim = match fields.int("head_dim", 1, max)? {
        Some(d) => d,
        None => {
            let hidden = fields.required_int("hidden_size", 1, max)?;
            if hidden % heads != 0 {
                return Err(ConfigError::HeadDimNotWhole {
                    hidden_field: fields.path("hidden_size"),
                    hidden,
                    heads_field: fields.path("num_attention_heads"),
                    heads,
                });
            }
            hidden / heads
        }
    };
    let kind = if kv_heads == heads {
        AttentionKind::Mha
    } else {
        AttentionKind::Gqa
    };
    // Both were read as at most i32::MAX.
    let narrow = |v: i64| i32::try_from(v).unwrap_or(i32::MAX);
    Ok(grouped_attention(kind, narrow(kv_heads), narrow(head_dim)))
}
