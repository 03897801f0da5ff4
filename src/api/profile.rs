//! `ModelProfile` at `infergate.dev/v1beta1`: the numbers of one model that
//! decide whether it fits its GPUs (weights, layers, attention, context);
//! services whose `spec.model.ref` a profile lists are fitted at admission.
// kube-derive's repeated `printcolumn(...)` lists look like duplicated
// attributes to clippy; they are distinct columns.
#![allow(clippy::duplicated_attributes)]

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `kvCacheBytesPerElement` when unset (fp16/bf16 KV cache).
pub const DEFAULT_KV_CACHE_BYTES_PER_ELEMENT: i32 = 2;

/// The numbers of one model as served.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[kube(
    group = "infergate.dev",
    version = "v1beta1",
    kind = "ModelProfile",
    category = "infergate",
    status = "ModelProfileStatus",
    derive = "PartialEq",
    derive = "Default",
    printcolumn(
        name = "Models",
        type_ = "string",
        json_path = ".spec.modelRefs",
        description = "The spec.model.ref values the profile describes"
    ),
    printcolumn(
        name = "Weights",
        type_ = "integer",
        json_path = ".spec.weightBytes",
        description = "Bytes of the weights as served"
    ),
    printcolumn(name = "Layers", type_ = "integer", json_path = ".spec.layers"),
    printcolumn(
        name = "Attention",
        type_ = "string",
        json_path = ".spec.attention.kind"
    ),
    printcolumn(
        name = "Context",
        type_ = "integer",
        json_path = ".spec.maxPositionEmbeddings",
        description = "The model's full context (tokens)"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ModelProfileSpec {
    /// The `spec.model.ref` values this profile describes.
    #[schemars(length(min = 1, max = 64))]
    #[x_kube(validation = Rule::new("self.all(r, size(r) >= 1 && size(r) <= 253)").message("spec.modelRefs entries must be 1 to 253 characters"))]
    pub model_refs: Vec<String>,
    /// Bytes of the weights as served (`metadata.total_size` of the
    /// safetensors index).
    #[x_kube(validation = Rule::new("self >= 1").message("spec.weightBytes must be at least 1"))]
    pub weight_bytes: i64,
    /// Hidden layers (`num_hidden_layers`).
    #[x_kube(validation = Rule::new("self >= 1").message("spec.layers must be at least 1"))]
    pub layers: i32,
    /// How the model's attention stores its KV cache.
    pub attention: AttentionSpec,
    /// The model's full context (`max_position_embeddings`).
    #[x_kube(validation = Rule::new("self >= 1").message("spec.maxPositionEmbeddings must be at least 1"))]
    pub max_position_embeddings: i64,
    /// Bytes of one KV cache element (default 2: fp16/bf16; 1 for fp8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 8").message("spec.kvCacheBytesPerElement must be between 1 and 8"))]
    pub kv_cache_bytes_per_element: Option<i32>,
}

/// The attention's KV cache: `{kind: GQA|MHA, kvHeads, headDim}` or
/// `{kind: MLA, kvLoraRank, qkRopeHeadDim}`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[x_kube(
    validation = Rule::new("self.kind == 'MLA' || (has(self.kvHeads) && has(self.headDim))").message("spec.attention.kvHeads and headDim are required for GQA and MHA"),
    validation = Rule::new("self.kind != 'MLA' || (has(self.kvLoraRank) && has(self.qkRopeHeadDim))").message("spec.attention.kvLoraRank and qkRopeHeadDim are required for MLA")
)]
#[serde(rename_all = "camelCase")]
pub struct AttentionSpec {
    /// `GQA`, `MHA` or `MLA`.
    pub kind: AttentionKind,
    /// Key/value heads (GQA, MHA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1").message("spec.attention.kvHeads must be at least 1"))]
    pub kv_heads: Option<i32>,
    /// Dimension of one head (GQA, MHA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1").message("spec.attention.headDim must be at least 1"))]
    pub head_dim: Option<i32>,
    /// Rank of the compressed KV latent (MLA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1").message("spec.attention.kvLoraRank must be at least 1"))]
    pub kv_lora_rank: Option<i32>,
    /// Dimension of the decoupled RoPE key (MLA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0").message("spec.attention.qkRopeHeadDim must not be negative"))]
    pub qk_rope_head_dim: Option<i32>,
}

/// The attention family.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum AttentionKind {
    /// Grouped-query attention (`kvHeads < heads`).
    #[default]
    #[serde(rename = "GQA")]
    Gqa,
    /// Multi-head attention (`kvHeads == heads`).
    #[serde(rename = "MHA")]
    Mha,
    /// Multi-head latent attention (DeepSeek V2/V3).
    #[serde(rename = "MLA")]
    Mla,
}

/// Status of a model profile.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelProfileStatus {
    /// The generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

impl ModelProfileSpec {
    /// `kvCacheBytesPerElement` or its default.
    #[must_use]
    pub fn kv_bytes_per_element(&self) -> i64 {
        i64::from(
            self.kv_cache_bytes_per_element
                .unwrap_or(DEFAULT_KV_CACHE_BYTES_PER_ELEMENT),
        )
    }
}
