//! What the engine sees besides the object under review: the namespace, its
//! labels, every policy, the server's flag defaults and other services' routes.

use std::collections::BTreeMap;
use std::fmt;

pub use super::capacity::profiles::ModelProfiles;
use crate::api::{AcceleratorClassSpec, ClusterInferencePolicy, GatewayRef, InferencePolicy};

/// Every AcceleratorClass known, by name.
pub type AcceleratorClasses = BTreeMap<String, AcceleratorClassSpec>;

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
    /// Every AcceleratorClass known.
    pub classes: &'a AcceleratorClasses,
    /// Every ModelProfile known.
    pub profiles: &'a ModelProfiles,
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
            .field("classes", &self.classes.keys())
            .field("profiles", &self.profiles.len())
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}
