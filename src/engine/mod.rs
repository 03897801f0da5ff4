//! Pure logic: policy resolution, defaulting with provenance, validation
//! with field errors, route templates, durations and derived names.
//! No I/O, no async, no `kube::Client`.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use crate::api::{ClusterInferencePolicy, GatewayRef, InferencePolicy, v1beta1::InferenceService};

pub mod builtin;
pub mod default;
pub mod duration;
pub mod graph_source;
pub mod hosts;
pub mod names;
pub mod policy;
pub mod resources;
pub mod rollout;
pub mod route;
pub mod selector;
pub mod validate;

pub use default::default_service;
pub use duration::{
    canonical_gateway_duration, format_gateway_duration, parse_gateway_duration, parse_go_duration,
};
pub use names::{canary_name, primary_name};
pub use resources::{canary_replicas, gpus_per_replica};
pub use route::{render_route_path, route_claim};
pub use validate::{validate_cluster_policy, validate_namespaced_policy, validate_service};

/// Values from server flags (`--default-engine-image`, `--default-replicas`).
#[derive(Clone, Debug, Default)]
pub struct ServerDefaults {
    /// `--default-engine-image`.
    pub engine_image: Option<String>,
    /// `--default-replicas`.
    pub replicas: Option<i32>,
}

/// All policies known (every namespace); the engine picks the applicable ones.
#[derive(Clone, Debug, Default)]
pub struct PolicySnapshot {
    /// Every ClusterInferencePolicy.
    pub cluster: Vec<ClusterInferencePolicy>,
    /// Every InferencePolicy of every namespace.
    pub namespaced: Vec<InferencePolicy>,
}

/// Answers the cross-object route-collision question from a cache.
pub trait RouteIndex {
    /// Another service `(namespace, name)` (not `exclude`) whose rendered path on `gateway`
    /// (namespace already resolved) equals `path`.
    fn owner(
        &self,
        gateway: &GatewayRef,
        path: &str,
        exclude: (&str, &str),
    ) -> Option<(String, String)>;
}

/// A RouteIndex with no routes (offline `check`, tests).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoRoutes;

impl RouteIndex for NoRoutes {
    fn owner(&self, _: &GatewayRef, _: &str, _: (&str, &str)) -> Option<(String, String)> {
        None
    }
}

/// Everything the engine sees besides the object itself.
#[derive(Clone, Copy)]
pub struct Context<'a> {
    /// Namespace of the object under review.
    pub namespace: &'a str,
    /// Labels of that namespace (for `namespaceSelector`).
    pub namespace_labels: &'a BTreeMap<String, String>,
    /// Every policy known.
    pub policies: &'a PolicySnapshot,
    /// Server flag defaults.
    pub server: &'a ServerDefaults,
    /// Rendered routes of other services.
    pub routes: &'a dyn RouteIndex,
}

impl fmt::Debug for Context<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("namespace", &self.namespace)
            .field("namespace_labels", &self.namespace_labels)
            .field("policies", &self.policies)
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

/// One defaulted field and where its value came from
/// (`"InferencePolicy/team-a/defaults"`, `"ClusterInferencePolicy/platform"`, `"flag"`, `"built-in"`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Provenance {
    /// Field path such as `spec.engine.image`.
    pub field: &'static str,
    /// Where the value came from.
    pub source: Cow<'static, str>,
    /// The value filled in, as JSON text (`None` only if it failed to serialise).
    pub value: Option<String>,
}

/// The defaulted object and the fields filled in now.
#[derive(Clone, Debug)]
pub struct Defaulted {
    /// The object with every default applied and the annotation updated.
    pub object: InferenceService,
    /// Fields filled in by this call (empty for an already defaulted object).
    pub filled: Vec<Provenance>,
}

/// Kubernetes StatusCause reasons.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldErrorReason {
    /// `FieldValueRequired`
    Required,
    /// `FieldValueInvalid`
    Invalid,
    /// `FieldValueForbidden`
    Forbidden,
    /// `FieldValueTooLong`
    TooLong,
    /// `FieldValueNotSupported`
    NotSupported,
    /// `FieldValueDuplicate`
    Duplicate,
}

impl FieldErrorReason {
    /// The `StatusCause.reason` string.
    #[must_use]
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Required => "FieldValueRequired",
            Self::Invalid => "FieldValueInvalid",
            Self::Forbidden => "FieldValueForbidden",
            Self::TooLong => "FieldValueTooLong",
            Self::NotSupported => "FieldValueNotSupported",
            Self::Duplicate => "FieldValueDuplicate",
        }
    }
}

/// One field error in the Kubernetes style.
///
/// `Display` = `spec.canary.weight: Invalid value: 120: must be at most 50 (ClusterInferencePolicy "platform")`;
/// `message` holds everything after `field: `.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// Field path such as `spec.canary.weight`.
    pub field: String,
    /// The StatusCause reason.
    pub reason: FieldErrorReason,
    /// The message after the field path (`Invalid value: 120: must be at most 50`).
    pub message: String,
}

impl FieldError {
    /// `field: Invalid value: <value>: detail`.
    #[must_use]
    pub fn invalid(field: impl Into<String>, value: impl fmt::Display, detail: &str) -> Self {
        Self {
            field: field.into(),
            reason: FieldErrorReason::Invalid,
            message: format!("Invalid value: {value}: {detail}"),
        }
    }

    /// `field: Required value: detail`.
    #[must_use]
    pub fn required(field: impl Into<String>, detail: &str) -> Self {
        Self {
            field: field.into(),
            reason: FieldErrorReason::Required,
            message: if detail.is_empty() {
                "Required value".to_owned()
            } else {
                format!("Required value: {detail}")
            },
        }
    }

    /// `field: Forbidden: detail`.
    #[must_use]
    pub fn forbidden(field: impl Into<String>, detail: &str) -> Self {
        Self {
            field: field.into(),
            reason: FieldErrorReason::Forbidden,
            message: format!("Forbidden: {detail}"),
        }
    }

    /// `field: Too long: detail`.
    #[must_use]
    pub fn too_long(field: impl Into<String>, detail: &str) -> Self {
        Self {
            field: field.into(),
            reason: FieldErrorReason::TooLong,
            message: format!("Too long: {detail}"),
        }
    }

    /// `field: Unsupported value: <value>: supported values: ...`.
    #[must_use]
    pub fn not_supported(
        field: impl Into<String>,
        value: impl fmt::Display,
        supported: &[&str],
        suffix: &str,
    ) -> Self {
        let list = supported
            .iter()
            .map(|s| format!("\"{s}\""))
            .collect::<Vec<_>>()
            .join(", ");
        Self {
            field: field.into(),
            reason: FieldErrorReason::NotSupported,
            message: format!("Unsupported value: \"{value}\": supported values: {list}{suffix}"),
        }
    }

    /// `field: Duplicate value: <value>: detail`.
    #[must_use]
    pub fn duplicate(field: impl Into<String>, value: impl fmt::Display, detail: &str) -> Self {
        Self {
            field: field.into(),
            reason: FieldErrorReason::Duplicate,
            message: format!("Duplicate value: {value}: {detail}"),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl std::error::Error for FieldError {}

/// Outcome of validation: `errors` deny, `warnings` admit with warnings
/// (Warn-enforcement policy violations, identical canary, ...).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Violations that deny admission.
    pub errors: Vec<FieldError>,
    /// Messages admitted as warnings.
    pub warnings: Vec<String>,
}

impl Verdict {
    /// True when there is no error (warnings do not deny).
    #[must_use]
    pub fn allowed(&self) -> bool {
        self.errors.is_empty()
    }

    /// All errors joined, Kubernetes style: `[a: ..., b: ...]` for several, the error alone for one.
    #[must_use]
    pub fn message(&self) -> String {
        match self.errors.as_slice() {
            [] => String::new(),
            [one] => one.to_string(),
            many => format!(
                "[{}]",
                many.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}
