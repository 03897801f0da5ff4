//! The custom resource types, one module per version, and conversion
//! between the `InferenceService` versions as pure functions; the words of
//! the API (`vocabulary`) and the wire types of the upstream projects
//! infergate writes to (`upstream`).

pub mod accelerator;
pub mod common;
pub mod conditions;
pub mod conversion;
pub mod policy;
pub mod profile;
pub mod rollout;
pub mod upstream;
pub mod v1alpha1;
pub mod v1beta1;
pub mod vocabulary;

pub use accelerator::{AcceleratorClass, AcceleratorClassSpec};
pub use common::*;
pub use policy::{ClusterInferencePolicy, InferencePolicy};
pub use profile::{ModelProfile, ModelProfileSpec};
