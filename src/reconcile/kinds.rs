//! The kinds of children the reconciler owns, one entry each: its name,
//! whether its CRD is optional, how a change by someone else shows, and (at
//! run time) its cache. The controller watches every kind of [`each_kind`],
//! the writer asks a kind for its name and change signal.
//!
//! A new kind is a builder in [`super::children`], an entry here (its
//! [`ChildKind`] and its line in [`each_kind`]) and its tests.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::PartialObjectMeta;
use kube::runtime::reflector::Store;
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::children::httproute::{self, HTTPRoute};
use super::children::inferencepool::{self, InferencePool};
use super::children::podmonitor::{self, PodMonitor};
use super::children::rayservice::{self, RayService};
use super::discovery::ApiDiscovery;

/// A namespaced Kubernetes object the reconciler can watch, apply and
/// delete: the bound every child kind meets, written once.
pub trait Child:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl<K> Child for K where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

/// How a change someone else made to a child shows in its metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// A new revision: the generation where the kind keeps one (a spec
    /// change), otherwise the resourceVersion (Service, ConfigMap, RBAC).
    Revision,
    /// A new object (uid) only: the kind's resourceVersion moves on its own
    /// (the autoscaler rewrites an HPA's status all the time).
    Uid,
}

/// An optional CRD: the child is made only where the cluster serves it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptionalApi {
    /// The group version infergate writes.
    pub api_version: &'static str,
    /// The resource name discovery lists.
    pub plural: &'static str,
    /// When the CRD appears, reconcile every service once (kinds most
    /// services have; services waiting for the others requeue themselves).
    pub reconcile_all_on_arrival: bool,
}

/// A kind of child the reconciler owns.
pub trait ChildKind: Child {
    /// The kind's name in keys, errors and events.
    const KIND: &'static str;
    /// How a change by someone else shows.
    const CHANGE: Change = Change::Revision;
    /// The CRD, when the cluster may not serve it.
    const OPTIONAL: Option<OptionalApi> = None;
}

impl ChildKind for Deployment {
    const KIND: &'static str = "Deployment";
}

impl ChildKind for Service {
    const KIND: &'static str = "Service";
}

impl ChildKind for HorizontalPodAutoscaler {
    const KIND: &'static str = "HorizontalPodAutoscaler";
    const CHANGE: Change = Change::Uid;
}

impl ChildKind for HTTPRoute {
    const KIND: &'static str = "HTTPRoute";
    const OPTIONAL: Option<OptionalApi> = Some(OptionalApi {
        api_version: httproute::API_VERSION,
        plural: httproute::PLURAL,
        reconcile_all_on_arrival: false,
    });
}

impl ChildKind for RayService {
    const KIND: &'static str = "RayService";
    const OPTIONAL: Option<OptionalApi> = Some(OptionalApi {
        api_version: rayservice::API_VERSION,
        plural: rayservice::PLURAL,
        reconcile_all_on_arrival: false,
    });
}

impl ChildKind for PodMonitor {
    const KIND: &'static str = "PodMonitor";
    const OPTIONAL: Option<OptionalApi> = Some(OptionalApi {
        api_version: podmonitor::API_VERSION,
        plural: podmonitor::PLURAL,
        reconcile_all_on_arrival: true,
    });
}

impl ChildKind for InferencePool {
    const KIND: &'static str = "InferencePool";
    const OPTIONAL: Option<OptionalApi> = Some(OptionalApi {
        api_version: inferencepool::API_VERSION,
        plural: inferencepool::PLURAL,
        reconcile_all_on_arrival: true,
    });
}

impl ChildKind for ServiceAccount {
    const KIND: &'static str = "ServiceAccount";
}

impl ChildKind for Role {
    const KIND: &'static str = "Role";
}

impl ChildKind for RoleBinding {
    const KIND: &'static str = "RoleBinding";
}

impl ChildKind for ConfigMap {
    const KIND: &'static str = "ConfigMap";
}

/// Something done once per child kind.
pub trait KindVisitor {
    /// Do it for `K`.
    fn visit<K: ChildKind>(&mut self);
}

/// Every kind the reconciler owns, in the order they are watched: the
/// engine's Deployments, Services and HPA, the optional HTTPRoute,
/// RayService, PodMonitor and InferencePool, and the endpoint pickers' own
/// objects.
pub fn each_kind(visitor: &mut impl KindVisitor) {
    visitor.visit::<Deployment>();
    visitor.visit::<Service>();
    visitor.visit::<HorizontalPodAutoscaler>();
    visitor.visit::<HTTPRoute>();
    visitor.visit::<RayService>();
    visitor.visit::<PodMonitor>();
    visitor.visit::<InferencePool>();
    visitor.visit::<ServiceAccount>();
    visitor.visit::<Role>();
    visitor.visit::<RoleBinding>();
    visitor.visit::<ConfigMap>();
}

/// One kind's cache (its children's metadata, by infergate's label) and,
/// for an optional CRD, whether the cluster serves it.
struct Cache<K: ChildKind> {
    store: Store<PartialObjectMeta<K>>,
    api: Option<Arc<ApiDiscovery>>,
}

/// The caches of every child kind, by kind.
#[derive(Default)]
pub struct ChildCaches {
    by_kind: HashMap<TypeId, Box<dyn Any + Send + Sync>>,
}

impl ChildCaches {
    /// Keep `K`'s cache and, for an optional CRD, its discovery.
    pub fn insert<K: ChildKind>(
        &mut self,
        store: Store<PartialObjectMeta<K>>,
        api: Option<Arc<ApiDiscovery>>,
    ) {
        self.by_kind
            .insert(TypeId::of::<K>(), Box::new(Cache { store, api }));
    }

    fn cache<K: ChildKind>(&self) -> &Cache<K> {
        self.by_kind
            .get(&TypeId::of::<K>())
            .and_then(|c| c.downcast_ref::<Cache<K>>())
            .unwrap_or_else(|| panic!("{} is not an entry of each_kind", K::KIND))
    }

    /// The cache of `K`'s children.
    #[must_use]
    pub fn store<K: ChildKind>(&self) -> &Store<PartialObjectMeta<K>> {
        &self.cache::<K>().store
    }

    /// Whether the cluster serves `K` (always, for a kind without an
    /// optional CRD; cached discovery otherwise).
    pub async fn installed<K: ChildKind>(&self, client: &Client) -> Result<bool, kube::Error> {
        match &self.cache::<K>().api {
            Some(api) => api.installed(client).await,
            None => Ok(true),
        }
    }

    /// Forget what discovery said of `K` (an apply found its CRD gone).
    pub fn forget<K: ChildKind>(&self) {
        if let Some(api) = &self.cache::<K>().api {
            api.forget();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fills a [`ChildCaches`] with an empty store per kind, as the
    /// controller does with its watches.
    #[derive(Default)]
    struct Fill {
        caches: ChildCaches,
        kinds: Vec<&'static str>,
    }

    impl KindVisitor for Fill {
        fn visit<K: ChildKind>(&mut self) {
            let (store, _writer) = kube::runtime::reflector::store::<PartialObjectMeta<K>>();
            let api = K::OPTIONAL.map(|o| Arc::new(ApiDiscovery::new(o.api_version, o.plural)));
            self.caches.insert::<K>(store, api);
            self.kinds.push(K::KIND);
        }
    }

    #[test]
    fn every_kind_is_an_entry_once_and_names_itself_as_its_api_does() {
        let mut fill = Fill::default();
        each_kind(&mut fill);
        assert_eq!(
            fill.kinds,
            [
                "Deployment",
                "Service",
                "HorizontalPodAutoscaler",
                "HTTPRoute",
                "RayService",
                "PodMonitor",
                "InferencePool",
                "ServiceAccount",
                "Role",
                "RoleBinding",
                "ConfigMap",
            ]
        );
        assert_eq!(fill.caches.by_kind.len(), fill.kinds.len());
        struct Names;
        impl KindVisitor for Names {
            fn visit<K: ChildKind>(&mut self) {
                assert_eq!(K::KIND, K::kind(&()));
            }
        }
        each_kind(&mut Names);
        // Every cache is there to be asked for.
        assert!(fill.caches.store::<Deployment>().is_empty());
        assert!(fill.caches.store::<ConfigMap>().is_empty());
    }

    #[test]
    fn optional_kinds_and_change_signals() {
        #[derive(Default)]
        struct Table(Vec<(&'static str, Option<bool>, Change)>);
        impl KindVisitor for Table {
            fn visit<K: ChildKind>(&mut self) {
                self.0.push((
                    K::KIND,
                    K::OPTIONAL.map(|o| o.reconcile_all_on_arrival),
                    K::CHANGE,
                ));
            }
        }
        let mut table = Table::default();
        each_kind(&mut table);
        let optional: Vec<_> = table
            .0
            .iter()
            .filter_map(|(k, o, _)| o.map(|all| (*k, all)))
            .collect();
        assert_eq!(
            optional,
            [
                ("HTTPRoute", false),
                ("RayService", false),
                ("PodMonitor", true),
                ("InferencePool", true),
            ]
        );
        let uid_only: Vec<_> = table
            .0
            .iter()
            .filter(|(_, _, c)| *c == Change::Uid)
            .map(|(k, _, _)| *k)
            .collect();
        assert_eq!(uid_only, ["HorizontalPodAutoscaler"]);
    }
}
