//! Where the engine's [`Context`] comes from: the one place it is assembled.
//!
//! Three sources implement [`ContextSource`]: the watched cluster as
//! admission sees it and as the reconciler sees it for one service (both
//! [`Watched`]), and manifest files for `infergate check` ([`Files`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::cluster::ClusterState;
use super::namespace::add_name_label;
use super::routes::{OlderClaims, RouteTable};
use crate::api::v1beta1::InferenceService;
use crate::engine::{
    AcceleratorClasses, Context, ModelProfiles, PolicySnapshot, RouteIndex, ServerDefaults,
};

/// What the engine reads besides the object itself.
pub trait ContextSource {
    /// The policies known now.
    fn policies(&self) -> Arc<PolicySnapshot>;
    /// The AcceleratorClasses known now.
    fn classes(&self) -> Arc<AcceleratorClasses>;
    /// The ModelProfiles known now.
    fn profiles(&self) -> Arc<ModelProfiles>;
    /// Labels of `namespace`, including `kubernetes.io/metadata.name`.
    fn namespace_labels(&self, namespace: &str) -> Arc<BTreeMap<String, String>>;
    /// Defaults from server flags.
    fn server_defaults(&self) -> &ServerDefaults;
    /// Run `f` with the route index the collision rule consults.
    fn with_routes<R>(&self, f: impl FnOnce(&dyn RouteIndex) -> R) -> R;
}

/// Run `f` with the engine context for an object in `namespace`.
pub fn with_context<S: ContextSource + ?Sized, R>(
    source: &S,
    namespace: &str,
    f: impl FnOnce(&Context) -> R,
) -> R {
    let policies = source.policies();
    let classes = source.classes();
    let profiles = source.profiles();
    let labels = source.namespace_labels(namespace);
    source.with_routes(|routes| {
        f(&Context {
            namespace,
            namespace_labels: &labels,
            policies: &policies,
            classes: &classes,
            profiles: &profiles,
            server: source.server_defaults(),
            routes,
        })
    })
}

/// The watched cluster. As admission sees it (`reconciling: None`), any
/// other service's claim on a route is a collision; as the reconciler sees
/// it for one service, only an older service owns a path.
pub struct Watched<'a> {
    /// The watched state.
    pub state: &'a ClusterState,
    /// Defaults from server flags.
    pub server: &'a ServerDefaults,
    /// The service being reconciled, for the reconciler's view.
    pub reconciling: Option<&'a InferenceService>,
}

impl ContextSource for Watched<'_> {
    fn policies(&self) -> Arc<PolicySnapshot> {
        self.state.policies()
    }
    fn classes(&self) -> Arc<AcceleratorClasses> {
        self.state.classes()
    }
    fn profiles(&self) -> Arc<ModelProfiles> {
        self.state.profiles()
    }
    fn namespace_labels(&self, namespace: &str) -> Arc<BTreeMap<String, String>> {
        self.state.namespace_labels(namespace)
    }
    fn server_defaults(&self) -> &ServerDefaults {
        self.server
    }
    fn with_routes<R>(&self, f: impl FnOnce(&dyn RouteIndex) -> R) -> R {
        self.state.with_routes(|table| match self.reconciling {
            None => f(table),
            Some(me) => f(&OlderClaims { table, me }),
        })
    }
}

/// Manifest files (`infergate check`): policies read from files, the
/// namespace labels given on the command line, the routes of the services
/// under check.
#[derive(Debug, Default)]
pub struct Files {
    /// The policies read.
    pub policies: Arc<PolicySnapshot>,
    /// The AcceleratorClasses read.
    pub classes: Arc<AcceleratorClasses>,
    /// The ModelProfiles read.
    pub profiles: Arc<ModelProfiles>,
    /// Labels every namespace gets (`--namespace-labels`), besides its name label.
    pub namespace_labels: BTreeMap<String, String>,
    /// Defaults from flags.
    pub server: ServerDefaults,
    /// Claims of the services under check.
    pub routes: RouteTable,
}

impl ContextSource for Files {
    fn policies(&self) -> Arc<PolicySnapshot> {
        Arc::clone(&self.policies)
    }
    fn classes(&self) -> Arc<AcceleratorClasses> {
        Arc::clone(&self.classes)
    }
    fn profiles(&self) -> Arc<ModelProfiles> {
        Arc::clone(&self.profiles)
    }
    fn namespace_labels(&self, namespace: &str) -> Arc<BTreeMap<String, String>> {
        let mut labels = self.namespace_labels.clone();
        add_name_label(&mut labels, namespace);
        Arc::new(labels)
    }
    fn server_defaults(&self) -> &ServerDefaults {
        &self.server
    }
    fn with_routes<R>(&self, f: impl FnOnce(&dyn RouteIndex) -> R) -> R {
        f(&self.routes)
    }
}
