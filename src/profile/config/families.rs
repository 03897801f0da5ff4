//! The model families (`model_type`s) this command reads, by the kind of
//! attention they are read as.

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

/// The known `model_type`s, comma-separated.
pub(super) fn known_model_types() -> String {
    let mut all: Vec<&str> = GQA_MODEL_TYPES
        .iter()
        .chain(MLA_MODEL_TYPES)
        .copied()
        .collect();
    all.sort_unstable();
    all.join(", ")
}
