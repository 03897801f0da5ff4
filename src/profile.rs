//! `infergate profile DIR|config.json`: a ModelProfile from a Hugging Face
//! model's `config.json`, offline. [`config`] reads the parsed JSON into the
//! profile's numbers (pure); [`command`] reads the files, sizes the weights
//! (`model.safetensors.index.json`, `model.safetensors` or the flag) and
//! prints the YAML; [`names`] derives the model ref and the name when no
//! flag gives them.

pub mod command;
pub mod config;
pub mod names;

pub use command::{Options, ProfileError, Profiled, profile, render, run};
pub use config::{Architecture, ConfigError, architecture, total_size};
