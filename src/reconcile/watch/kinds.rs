//! The kinds of children the reconciler owns, one entry each: its name,
//! whether its CRD is optional, how a change by someone else shows, and (at
//! run time) its cache. The controller watches every kind of [`each_kind`],
//! the writer asks a kind for its name and change signal.
//!
//! A new kind is a builder in [`crate::reconcile::children`], a row of the table here
//! and its tests.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::runtime::reflector::Store;
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::discovery::ApiDiscovery;
use super::owned::OwnedIndex;
use super::watched::{WatchedChild, WatchedDeployment, WatchedLeaderWorkerSet, WatchedMeta};
use crate::reconcile::children::httproute::HTTPRoute;
use crate::reconcile::children::inferencepool::InferencePool;
use crate::reconcile::children::lws::LeaderWorkerSet;
use crate::reconcile::children::podmonitor::PodMonitor;
use crate::reconcile::children::rayservice::RayService;

/// A trait that stands for its bounds: `$name` with `$bounds` as its
/// supertraits, implemented for every type that meets them, so the bounds
/// are written once.
macro_rules! bounds_alias {
    ($(#[$doc:meta])* $vis:vis trait $name:ident = $($bounds:tt)+) => {
        $(#[$doc])*
        $vis trait $name: $($bounds)+ {}

        impl<K> $name for K where K: $($bounds)+ {}
    };
}

bounds_alias! {
    /// A namespaced Kubernetes object the reconciler can watch, apply and
    /// delete: the bound every child kind meets, written once.
    pub trait Child = Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
        + Send
        + Sync
        + 'static
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

/// Whether the cluster serves a kind's API for certain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Crd {
    /// A built-in kind: always served.
    BuiltIn,
    /// An optional CRD: the child is made only where the cluster serves
    /// it. `reconcile_all_on_arrival`: when the CRD appears (also again,
    /// after a removal), every service is reconciled once (kinds most
    /// services have); for the others, the services whose status says
    /// they wait for an optional CRD are.
    Optional {
        /// Reconcile every service once when the CRD appears.
        reconcile_all_on_arrival: bool,
    },
}

/// A kind of child the reconciler owns: an entry of [`each_kind`].
pub trait ChildKind: Child {
    /// The kind's name in keys, errors and events.
    const KIND: &'static str;
    /// How a change by someone else shows.
    const CHANGE: Change;
    /// Whether its API may be missing.
    const CRD: Crd;
    /// What its watch keeps of a child.
    type Watched: WatchedChild;
}

/// Something done once per child kind.
pub trait KindVisitor {
    /// Do it for `K`.
    fn visit<K: ChildKind>(&mut self);
}

/// The table of child kinds: each row makes its type a [`ChildKind`] and
/// a kind of [`each_kind`].
macro_rules! child_kinds {
    ($($kind:ident: $change:expr, $crd:expr, $watched:ty;)*) => {
        $(
            impl ChildKind for $kind {
                const KIND: &'static str = stringify!($kind);
                const CHANGE: Change = $change;
                const CRD: Crd = $crd;
                type Watched = $watched;
            }
        )*

        /// Every kind the reconciler owns, in the order they are watched:
        /// the engine's Deployments, Services and HPA, the optional
        /// HTTPRoute, RayService, LeaderWorkerSet, PodMonitor and InferencePool, and the
        /// endpoint pickers' own objects.
        pub fn each_kind(visitor: &mut impl KindVisitor) {
            $(visitor.visit::<$kind>();)*
        }
    };
}

child_kinds! {
    Deployment: Change::Revision, Crd::BuiltIn, WatchedDeployment;
    Service: Change::Revision, Crd::BuiltIn, WatchedMeta<Service>;
    HorizontalPodAutoscaler: Change::Uid, Crd::BuiltIn, WatchedMeta<HorizontalPodAutoscaler>;
    HTTPRoute: Change::Revision, Crd::Optional { reconcile_all_on_arrival: false }, HTTPRoute;
    RayService: Change::Revision, Crd::Optional { reconcile_all_on_arrival: false }, RayService;
    LeaderWorkerSet: Change::Revision, Crd::Optional { reconcile_all_on_arrival: false }, WatchedLeaderWorkerSet;
    PodMonitor: Change::Revision, Crd::Optional { reconcile_all_on_arrival: true }, WatchedMeta<PodMonitor>;
    InferencePool: Change::Revision, Crd::Optional { reconcile_all_on_arrival: true }, InferencePool;
    ServiceAccount: Change::Revision, Crd::BuiltIn, WatchedMeta<ServiceAccount>;
    Role: Change::Revision, Crd::BuiltIn, WatchedMeta<Role>;
    RoleBinding: Change::Revision, Crd::BuiltIn, WatchedMeta<RoleBinding>;
    ConfigMap: Change::Revision, Crd::BuiltIn, WatchedMeta<ConfigMap>;
}

/// Discovery of whether the cluster serves `K`'s API.
#[must_use]
pub fn discovery<K: ChildKind>() -> ApiDiscovery {
    ApiDiscovery::new(K::api_version(&()), K::plural(&()))
}

/// One kind's cache (its children as [`ChildKind::Watched`] keeps them,
/// by infergate's label) and, for an optional CRD, whether the cluster
/// serves it.
struct Cache<K: ChildKind> {
    store: Store<K::Watched>,
    owned: Arc<OwnedIndex>,
    api: Option<Arc<ApiDiscovery>>,
}

/// The caches of every child kind, by kind.
#[derive(Default)]
pub struct ChildCaches {
    by_kind: HashMap<TypeId, Box<dyn Any + Send + Sync>>,
}

impl ChildCaches {
    /// Keep `K`'s cache, what infergate's field manager holds of its
    /// children and, for an optional CRD, its discovery.
    pub fn insert<K: ChildKind>(
        &mut self,
        store: Store<K::Watched>,
        owned: Arc<OwnedIndex>,
        api: Option<Arc<ApiDiscovery>>,
    ) {
        self.by_kind.insert(
            TypeId::of::<K>(),
            Box::new(Cache::<K> { store, owned, api }),
        );
    }

    fn cache<K: ChildKind>(&self) -> &Cache<K> {
        self.by_kind
            .get(&TypeId::of::<K>())
            .and_then(|c| c.downcast_ref::<Cache<K>>())
            .unwrap_or_else(|| panic!("no cache of {}: caches are filled over each_kind", K::KIND))
    }

    /// The cache of `K`'s children.
    #[must_use]
    pub fn store<K: ChildKind>(&self) -> &Store<K::Watched> {
        &self.cache::<K>().store
    }

    /// What infergate's field manager holds of each of `K`'s children.
    #[must_use]
    pub fn owned<K: ChildKind>(&self) -> &OwnedIndex {
        &self.cache::<K>().owned
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
    use crate::reconcile::children::{httproute, inferencepool, podmonitor, rayservice};

    /// Fills a [`ChildCaches`] with an empty store per kind, as the
    /// controller does with its watches.
    #[derive(Default)]
    struct Fill {
        caches: ChildCaches,
        kinds: Vec<(&'static str, Change, Crd)>,
    }

    impl KindVisitor for Fill {
        fn visit<K: ChildKind>(&mut self) {
            let (store, _writer) = kube::runtime::reflector::store::<K::Watched>();
            let api = matches!(K::CRD, Crd::Optional { .. }).then(|| Arc::new(discovery::<K>()));
            self.caches
                .insert::<K>(store, Arc::new(OwnedIndex::default()), api);
            self.kinds.push((K::KIND, K::CHANGE, K::CRD));
            // The name the API gives the kind.
            assert_eq!(K::KIND, K::kind(&()));
        }
    }

    #[test]
    fn every_kind_is_a_row_once_with_its_change_signal_and_crd() {
        let mut fill = Fill::default();
        each_kind(&mut fill);
        let optional = |all| Crd::Optional {
            reconcile_all_on_arrival: all,
        };
        assert_eq!(
            fill.kinds,
            [
                ("Deployment", Change::Revision, Crd::BuiltIn),
                ("Service", Change::Revision, Crd::BuiltIn),
                ("HorizontalPodAutoscaler", Change::Uid, Crd::BuiltIn),
                ("HTTPRoute", Change::Revision, optional(false)),
                ("RayService", Change::Revision, optional(false)),
                ("LeaderWorkerSet", Change::Revision, optional(false)),
                ("PodMonitor", Change::Revision, optional(true)),
                ("InferencePool", Change::Revision, optional(true)),
                ("ServiceAccount", Change::Revision, Crd::BuiltIn),
                ("Role", Change::Revision, Crd::BuiltIn),
                ("RoleBinding", Change::Revision, Crd::BuiltIn),
                ("ConfigMap", Change::Revision, Crd::BuiltIn),
            ]
        );
        assert_eq!(fill.caches.by_kind.len(), fill.kinds.len());
        // Every cache is there to be asked for.
        assert!(fill.caches.store::<Deployment>().is_empty());
        assert!(fill.caches.store::<ConfigMap>().is_empty());
    }

    #[test]
    fn an_optional_kind_is_discovered_at_the_version_infergate_writes() {
        let discovered = [
            discovery::<HTTPRoute>(),
            discovery::<RayService>(),
            discovery::<LeaderWorkerSet>(),
            discovery::<PodMonitor>(),
            discovery::<InferencePool>(),
        ];
        let written = [
            (httproute::API_VERSION, httproute::PLURAL),
            (rayservice::API_VERSION, rayservice::PLURAL),
            (
                crate::api::upstream::lws::API_VERSION,
                crate::api::upstream::lws::PLURAL,
            ),
            (podmonitor::API_VERSION, podmonitor::PLURAL),
            (inferencepool::API_VERSION, inferencepool::PLURAL),
        ];
        let discovered: Vec<_> = discovered
            .iter()
            .map(|d| (d.api_version(), d.plural()))
            .collect();
        assert_eq!(discovered, written);
    }
}
