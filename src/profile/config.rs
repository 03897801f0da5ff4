//! A Hugging Face `config.json`, already parsed as JSON, read into the
//! numbers of a [`ModelProfileSpec`](crate::api::profile::ModelProfileSpec): layers, attention and context; and the
//! weights' size from a `model.safetensors.index.json`. No I/O.
//!
//! A multimodal config that nests its language model under `text_config` is
//! read from there (field names in errors then start with `text_config.`).
//!
//! - `families`: the `model_type`s read, by kind of attention;
//! - `model`: [`architecture`], and the attention specs it builds;
//! - `safetensors`: [`total_size`], the weights' size from the index;
//! - `fields`: the typed reading of a JSON object's fields;
//! - `error`: [`ConfigError`], naming the field.

mod error;
mod families;
mod fields;
mod model;
mod safetensors;

pub use error::ConfigError;
pub use families::{GQA_MODEL_TYPES, MLA_MODEL_TYPES};
pub use model::{Architecture, architecture, grouped_attention, latent_attention};
pub use safetensors::total_size;

#[cfg(test)]
mod tests;
