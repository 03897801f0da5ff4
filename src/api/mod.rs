//! The custom resource types, one module per version, and conversion
//! between the `InferenceService` versions as pure functions.

pub mod accelerator;
pub mod common;
pub mod conditions;
pub mod conversion;
pub mod policy;
pub mod profile;
pub mod rollout;
pub mod v1alpha1;
pub mod v1beta1;

pub use accelerator::{AcceleratorClass, AcceleratorClassSpec};
pub use common::*;
pub use policy::{ClusterInferencePolicy, InferencePolicy};
pub use profile::{ModelProfile, ModelProfileSpec};
