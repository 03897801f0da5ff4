//! Validation of services (`service`, `placement`, `capacity`), of policies (`policy`) and of
//! AcceleratorClasses and ModelProfiles; every rule is listed in `docs/api-reference.md`.
//!
//! One validator, shared by admission and the reconciler. Every violation is
//! reported at once as a Kubernetes-style field error; violations of a
//! policy with `enforcement: Warn` become warnings instead.

mod capacity;
mod fields;
mod limits;
mod picker;
mod placement;
mod policy;
mod policy_defaults;
mod policy_outer;
mod service;

pub use capacity::{FitJudgement, misfits, validate_model_profile};
pub use placement::validate_accelerator_class;
pub use policy::{validate_cluster_policy, validate_namespaced_policy};
pub use service::{validate_running, validate_service};
