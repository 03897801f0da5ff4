//! Whether a model fits its GPUs: per replica, with t = tensor, p =
//! pipeline, M = memoryPerDevice and u = gpuMemoryUtilization,
//!
//! - weights per device `w = weightBytes / (t * p)`;
//! - overhead per device `2.3 GiB + 0.05 * w`;
//! - KV bytes per token per device: GQA/MHA `2 * ceil(layers / p) *
//!   ceil(kvHeads / t) * headDim * kvCacheBytesPerElement`; MLA
//!   `ceil(layers / p) * (kvLoraRank + qkRopeHeadDim) *
//!   kvCacheBytesPerElement` (the latent is not split by t);
//! - KV tokens per replica `floor((M * u - w - overhead) / kvBytesPerToken)`.
//!
//! The weights fit when `M * u - w - overhead` is positive; the model fits
//! when the KV tokens reach the effective context (`engine.maxModelLen`,
//! else the profile's `maxPositionEmbeddings`).

use crate::api::profile::{AttentionKind, ModelProfileSpec};

/// Bytes in a GiB.
pub const GIB: f64 = 1_073_741_824.0;
/// What a device holds besides weights and KV cache, fixed part.
pub const OVERHEAD_FIXED_BYTES: f64 = 2.3 * GIB;
/// What a device holds besides weights and KV cache, as a share of its weights.
pub const OVERHEAD_WEIGHT_SHARE: f64 = 0.05;

/// How one replica spreads over its devices.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shape {
    /// `parallelism.tensor` (at least 1).
    pub tensor: i64,
    /// `parallelism.pipeline` (at least 1).
    pub pipeline: i64,
    /// Bytes of one device (the class's `memoryPerDevice`).
    pub memory_per_device: f64,
    /// `engine.gpuMemoryUtilization`.
    pub utilization: f64,
    /// Bytes of one KV cache element when `--kv-cache-dtype` sets it
    /// (`None`: the profile's `kvCacheBytesPerElement`).
    pub kv_bytes_per_element: Option<i64>,
}

/// The numbers of one model on one shape.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fit {
    /// Bytes of weights on each device.
    pub weights_per_device: f64,
    /// Bytes of overhead on each device.
    pub overhead_per_device: f64,
    /// Bytes of KV cache one token takes on each device.
    pub kv_bytes_per_token: i64,
    /// Bytes left for KV cache on each device (negative: the weights do not fit).
    pub free_per_device: f64,
    /// Tokens of KV cache one replica holds (0 when the weights do not fit).
    pub kv_tokens: i64,
}

impl Fit {
    /// Whether the weights and overhead leave room on each device.
    #[must_use]
    pub fn weights_fit(&self) -> bool {
        self.free_per_device > 0.0
    }

    /// Whether a context of `context` tokens fits.
    #[must_use]
    pub fn holds(&self, context: i64) -> bool {
        self.weights_fit() && self.kv_tokens >= context
    }

    /// Requests of `context` tokens held at once, rounded down to a tenth.
    #[must_use]
    pub fn concurrency(&self, context: i64) -> f64 {
        if context <= 0 {
            return 0.0;
        }
        #[allow(clippy::cast_precision_loss)]
        let c = self.kv_tokens as f64 / context as f64;
        (c * 10.0).floor() / 10.0
    }
}

fn ceil_div(a: i64, b: i64) -> i64 {
    if b <= 0 { a } else { (a + b - 1) / b }
}

/// KV bytes per token on each device.
#[must_use]
pub fn kv_bytes_per_token(profile: &ModelProfileSpec, tensor: i64, pipeline: i64) -> i64 {
    kv_bytes_per_token_as(profile, tensor, pipeline, profile.kv_bytes_per_element())
}

/// [`kv_bytes_per_token`] with `bpe` bytes per element.
fn kv_bytes_per_token_as(profile: &ModelProfileSpec, tensor: i64, pipeline: i64, bpe: i64) -> i64 {
    let layers = ceil_div(i64::from(profile.layers.max(0)), pipeline.max(1));
    let a = &profile.attention;
    let per = match a.kind {
        AttentionKind::Gqa | AttentionKind::Mha => {
            let heads = ceil_div(i64::from(a.kv_heads.unwrap_or(0).max(0)), tensor.max(1));
            2 * layers * heads * i64::from(a.head_dim.unwrap_or(0).max(0))
        }
        AttentionKind::Mla => {
            layers
                * (i64::from(a.kv_lora_rank.unwrap_or(0).max(0))
                    + i64::from(a.qk_rope_head_dim.unwrap_or(0).max(0)))
        }
    };
    per.saturating_mul(bpe)
}

/// The fit of `profile` on `shape`.
#[must_use]
pub fn fit(profile: &ModelProfileSpec, shape: Shape) -> Fit {
    let devices = shape.tensor.max(1).saturating_mul(shape.pipeline.max(1));
    #[allow(clippy::cast_precision_loss)]
    let w = profile.weight_bytes as f64 / devices as f64;
    let overhead = OVERHEAD_FIXED_BYTES + OVERHEAD_WEIGHT_SHARE * w;
    let free = shape.memory_per_device * shape.utilization - w - overhead;
    let bpe = shape
        .kv_bytes_per_element
        .unwrap_or_else(|| profile.kv_bytes_per_element());
    let kv = kv_bytes_per_token_as(profile, shape.tensor, shape.pipeline, bpe);
    let kv_tokens = if free > 0.0 && kv > 0 {
        #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
        let t = (free / kv as f64).floor() as i64;
        t
    } else {
        0
    };
    Fit {
        weights_per_device: w,
        overhead_per_device: overhead,
        kv_bytes_per_token: kv,
        free_per_device: free,
        kv_tokens,
    }
}

/// Bytes as GiB with one decimal (`65.7 GiB`).
#[must_use]
pub fn gib(bytes: f64) -> String {
    format!("{:.1} GiB", bytes / GIB)
}
