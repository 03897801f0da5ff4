//! Pure logic: policy resolution, defaulting with provenance, validation
//! with field errors, route templates, durations and derived names.
//! No I/O, no async, no `kube::Client`.

pub mod builtin;
pub mod capacity;
pub mod context;
pub mod default;
pub mod defaulted;
pub mod duration;
pub mod field_error;
pub mod field_path;
pub mod full_pool;
pub mod graph_source;
pub mod hosts;
pub mod json_text;
pub mod model_names;
#[cfg(test)]
mod model_names_tests;
pub mod multi_node;
#[cfg(test)]
mod multi_node_tests;
pub mod names;
pub mod policy;
pub mod promql;
pub mod references;
pub mod resources;
pub mod rollout;
pub mod route;
pub mod selector;
pub mod validate;
pub mod verdict;

pub use context::{
    AcceleratorClasses, Context, ModelProfiles, NoRoutes, PolicySnapshot, RouteIndex,
    ServerDefaults,
};
pub use default::{default_service, default_spec};
pub use defaulted::{Defaulted, DefaultedFrom, DefaultedSpec, Provenance, Source};
pub use duration::{
    canonical_gateway_duration, format_gateway_duration, parse_gateway_duration, parse_go_duration,
};
pub use field_error::{FieldError, FieldErrorReason};
pub use names::{canary_name, primary_name};
pub use resources::{canary_replicas, gpus_per_replica};
pub use route::{render_route_path, route_claim};
pub use validate::{
    misfits, validate_accelerator_class, validate_cluster_policy, validate_model_profile,
    validate_namespaced_policy, validate_running, validate_service,
};
pub use verdict::Verdict;
