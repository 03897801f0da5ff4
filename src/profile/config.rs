//! A Hugging Face `config.json`, already parsed as JSON, read into the
//! numbers of a [`ModelProfileSpec`]: layers, attention and context; and the
//! weights' size from a `model.safetensors.index.json`. No I/O.
//!
//! A multimodal config that nests its language model under `text_config` is
//! read from there (field names in errors then start with `text_config.`).

use serde_json::{Map, Value};

use crate::api::profile::{AttentionKind, AttentionSpec, ModelProfileSpec};

/// `model_type`s read as grouped-query or multi-head attention:
/// `num_key_value_heads` (default `num_attention_heads`) heads of `head_dim`
/// (default `hidden_size / num_attention_heads`).
pub const GQA_MODEL_TYPES: &[&str] = &[
    "cohere",
    "cohere2",
    "gemma",
    "gemma2",
    "gemma3",
    "gemma3_text",
    "glm4",
    "glm4_moe",
    "gpt_oss",
    "granite",
    "granitemoe",
    "llama",
    "llama4",
    "llama4_text",
    "ministral",
    "mistral",
    "mistral3",
    "mixtral",
    "olmo2",
    "phi3",
    "phimoe",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "starcoder2",
];

/// `model_type`s read as multi-head latent attention (`kv_lora_rank`,
/// `qk_rope_head_dim`).
pub const MLA_MODEL_TYPES: &[&str] = &["deepseek_v2", "deepseek_v3", "kimi_k2"];

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

/// The known `model_type`s, comma-separated.
fn known_model_types() -> String {
    let mut all: Vec<&str> = GQA_MODEL_TYPES
        .iter()
        .chain(MLA_MODEL_TYPES)
        .copied()
        .collect();
    all.sort_unstable();
    all.join(", ")
}

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

/// The fields of one JSON object, named in errors with a prefix.
struct Fields<'a> {
    object: &'a Map<String, Value>,
    prefix: &'static str,
}

impl<'a> Fields<'a> {
    fn path(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// The field, or `None` when absent or null.
    fn get(&self, name: &str) -> Option<&'a Value> {
        self.object.get(name).filter(|v| !v.is_null())
    }

    fn string(&self, name: &str) -> Result<Option<&'a str>, ConfigError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(self.wrong_type(name, "a string", v)),
        }
    }

    /// An integer in `min..=max`, or `None` when absent or null.
    fn int(&self, name: &str, min: i64, max: i64) -> Result<Option<i64>, ConfigError> {
        let Some(v) = self.get(name) else {
            return Ok(None);
        };
        let Value::Number(n) = v else {
            return Err(self.wrong_type(name, "an integer", v));
        };
        let value = match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Some(i),
            // `4096.0`: whole, and small enough to be exact.
            (None, Some(f)) if f.fract() == 0.0 && f.abs() < 9.0e15 => Some(f as i64),
            _ => None,
        };
        match value {
            Some(i) if (min..=max).contains(&i) => Ok(Some(i)),
            Some(_) => Err(self.out_of_range(name, n.to_string(), min, max)),
            None if n.is_u64() => Err(self.out_of_range(name, n.to_string(), min, max)),
            None => Err(self.wrong_type(name, "an integer", v)),
        }
    }

    fn required_int(&self, name: &str, min: i64, max: i64) -> Result<i64, ConfigError> {
        self.int(name, min, max)?
            .ok_or_else(|| ConfigError::Missing(self.path(name)))
    }

    /// A required `i32` field of at least `min`.
    fn required_i32(&self, name: &str, min: i64) -> Result<i32, ConfigError> {
        let v = self.required_int(name, min, i64::from(i32::MAX))?;
        Ok(i32::try_from(v).unwrap_or(i32::MAX))
    }

    fn wrong_type(&self, name: &str, expected: &'static str, found: &Value) -> ConfigError {
        ConfigError::WrongType {
            field: self.path(name),
            expected,
            found: kind(found),
        }
    }

    fn out_of_range(&self, name: &str, value: String, min: i64, max: i64) -> ConfigError {
        ConfigError::OutOfRange {
            field: self.path(name),
            value,
            min,
            max,
        }
    }
}

/// How a JSON value is named in errors.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "an integer",
        Value::Number(_) => "a fractional number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
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

#[cfg(test)]
mod tests;
