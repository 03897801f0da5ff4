//! What the engine sees besides the object under review: the namespace, its
//! labels, every policy, the AcceleratorClasses and ModelProfiles, the
//! server's flag defaults and other services' routes.

use std::collections::BTreeMap;
use std::fmt;

use crate::api::{
    AcceleratorClassSpec, ClusterInferencePolicy, GatewayRef, InferencePolicy, ModelProfileSpec,
};

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

/// A unit test's context: namespace `team-a` without labels, `policies`
/// and `server`, no classes, profiles or other routes.
#[cfg(test)]
pub(crate) fn in_team_a<R>(
    policies: &PolicySnapshot,
    server: &ServerDefaults,
    f: impl FnOnce(&Context) -> R,
) -> R {
    let labels = BTreeMap::new();
    f(&Context {
        namespace: "team-a",
        namespace_labels: &labels,
        policies,
        classes: &AcceleratorClasses::new(),
        profiles: &ModelProfiles::default(),
        server,
        routes: &NoRoutes,
    })
}

/// A unit test's cluster policy `name` at `prio` defaulting the image to
/// `image`, the port to 9000 and the replicas to 3.
#[cfg(test)]
pub(crate) fn image_policy_cluster(
    name: &str,
    prio: i32,
    image: &str,
) -> crate::api::ClusterInferencePolicy {
    crate::api::ClusterInferencePolicy::new(
        name,
        crate::api::policy::ClusterInferencePolicySpec {
            priority: prio,
            defaults: Some(crate::api::policy::PolicyDefaults {
                engine: Some(crate::api::policy::EngineDefaults {
                    image: Some(image.to_owned()),
                    port: Some(9000),
                    shm_size: None,
                    gpu_memory_utilization: None,
                }),
                replicas: Some(3),
                ..Default::default()
            }),
            ..Default::default()
        },
    )
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

/// ModelProfiles by name, with the model refs they describe.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelProfiles {
    by_name: BTreeMap<String, ModelProfileSpec>,
    /// Model ref -> the first profile (by name) listing it.
    by_ref: BTreeMap<String, String>,
}

impl FromIterator<(String, ModelProfileSpec)> for ModelProfiles {
    /// Profiles from `(name, spec)` pairs.
    fn from_iter<I: IntoIterator<Item = (String, ModelProfileSpec)>>(items: I) -> Self {
        let mut out = Self {
            by_name: items.into_iter().collect(),
            by_ref: BTreeMap::new(),
        };
        out.reindex();
        out
    }
}

impl ModelProfiles {
    /// Add or replace the profile `name`.
    pub fn insert(&mut self, name: String, spec: ModelProfileSpec) {
        self.by_name.insert(name, spec);
        self.reindex();
    }

    /// Remove the profile `name`.
    pub fn remove(&mut self, name: &str) {
        if self.by_name.remove(name).is_some() {
            self.reindex();
        }
    }

    fn reindex(&mut self) {
        self.by_ref.clear();
        // Names in order: the first profile listing a ref describes it.
        for (name, spec) in &self.by_name {
            for r in &spec.model_refs {
                self.by_ref.entry(r.clone()).or_insert_with(|| name.clone());
            }
        }
    }

    /// The profile (name and spec) that lists `model_ref`.
    #[must_use]
    pub fn for_ref(&self, model_ref: &str) -> Option<(&str, &ModelProfileSpec)> {
        let name = self.by_ref.get(model_ref)?;
        self.by_name
            .get_key_value(name)
            .map(|(n, s)| (n.as_str(), s))
    }

    /// Number of profiles.
    #[must_use]
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    /// True when there is no profile.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}
