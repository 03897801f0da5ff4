//! The one route index: which services claim which path on which gateway.
//!
//! Updated one service at a time from the watch's own events (rendering
//! only the template of the service that changed), so an event costs the
//! same whether the cluster holds ten services or ten thousand. The webhook,
//! the reconciler and `infergate check` all answer the collision rule from
//! it; they differ only in who counts as the owner of a path
//! ([`RouteTable`] itself: any other claimant; [`OlderClaims`]: an older one).

use std::collections::{BTreeSet, HashMap};

use crate::api::GatewayRef;
use crate::api::v1beta1::InferenceService;
use crate::engine::{self, RouteIndex};

/// `(gateway namespace, gateway name, rendered path)`.
type RouteKey = (String, String, String);
/// `(namespace, name)` of a service.
type ServiceKey = (String, String);

/// One service's claim on a route, ordered oldest first (creation time, then
/// namespace and name), so the first claimant of a route is its owner.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Claimant {
    created: Option<i64>,
    namespace: String,
    name: String,
    deleting: bool,
}

impl Claimant {
    fn of(svc: &InferenceService) -> Self {
        Claimant {
            created: svc
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.as_second()),
            namespace: svc.metadata.namespace.clone().unwrap_or_default(),
            name: svc.metadata.name.clone().unwrap_or_default(),
            deleting: svc.metadata.deletion_timestamp.is_some(),
        }
    }

    fn is(&self, (namespace, name): (&str, &str)) -> bool {
        self.namespace == namespace && self.name == name
    }

    fn key(&self) -> (String, String) {
        (self.namespace.clone(), self.name.clone())
    }

    fn age(&self) -> (Option<i64>, &str, &str) {
        (self.created, &self.namespace, &self.name)
    }
}

/// Rendered route claims of stored services.
#[derive(Debug, Default)]
pub struct RouteTable {
    by_route: HashMap<RouteKey, BTreeSet<Claimant>>,
    by_service: HashMap<ServiceKey, (RouteKey, Claimant)>,
}

impl RouteTable {
    /// A table holding the claims of `services`.
    pub fn build<'a>(services: impl IntoIterator<Item = &'a InferenceService>) -> Self {
        let mut table = RouteTable::default();
        for svc in services {
            table.upsert(svc);
        }
        table
    }

    /// Record `svc`'s claim, replacing the one it had before.
    pub fn upsert(&mut self, svc: &InferenceService) {
        let claimant = Claimant::of(svc);
        let key = (claimant.namespace.clone(), claimant.name.clone());
        self.remove(&key.0, &key.1);
        let Some((gateway, path)) = engine::route_claim(svc) else {
            return;
        };
        let route = (
            gateway
                .namespace
                .unwrap_or_else(|| claimant.namespace.clone()),
            gateway.name,
            path,
        );
        self.by_route
            .entry(route.clone())
            .or_default()
            .insert(claimant.clone());
        self.by_service.insert(key, (route, claimant));
    }

    /// Forget the claim of service `namespace/name`.
    pub fn remove(&mut self, namespace: &str, name: &str) {
        let Some((route, claimant)) = self
            .by_service
            .remove(&(namespace.to_owned(), name.to_owned()))
        else {
            return;
        };
        if let Some(claimants) = self.by_route.get_mut(&route) {
            claimants.remove(&claimant);
            if claimants.is_empty() {
                self.by_route.remove(&route);
            }
        }
    }

    /// Number of services with a claim.
    #[must_use]
    pub fn len(&self) -> usize {
        self.by_service.len()
    }

    /// Whether no service claims a route.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.by_service.is_empty()
    }

    fn claimants(&self, gateway: &GatewayRef, path: &str) -> Option<&BTreeSet<Claimant>> {
        // Lookups by borrowed parts would need a custom key type; a route
        // lookup is one per admission, so the owned key is cheap enough.
        let key = (
            gateway.namespace.clone().unwrap_or_default(),
            gateway.name.clone(),
            path.to_owned(),
        );
        self.by_route.get(&key)
    }
}

/// Any other service claiming the path is its owner (admission, `check`).
impl RouteIndex for RouteTable {
    fn owner(
        &self,
        gateway: &GatewayRef,
        path: &str,
        exclude: (&str, &str),
    ) -> Option<(String, String)> {
        self.claimants(gateway, path)?
            .iter()
            .find(|c| !c.is(exclude))
            .map(Claimant::key)
    }
}

/// The reconciler's view: only an older service that is not being deleted
/// owns a path, so two colliding services do not block each other and the
/// oldest keeps its route.
pub struct OlderClaims<'a> {
    /// The claims.
    pub table: &'a RouteTable,
    /// The service being reconciled.
    pub me: &'a InferenceService,
}

impl RouteIndex for OlderClaims<'_> {
    fn owner(
        &self,
        gateway: &GatewayRef,
        path: &str,
        exclude: (&str, &str),
    ) -> Option<(String, String)> {
        let me = Claimant::of(self.me);
        self.table
            .claimants(gateway, path)?
            .iter()
            .take_while(|c| c.age() < me.age())
            .find(|c| !c.is(exclude) && !c.deleting)
            .map(Claimant::key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn svc(ns: &str, name: &str, created: i64, path: &str) -> InferenceService {
        let mut s: InferenceService = serde_json::from_value(serde_json::json!({
            "apiVersion": "infergate.dev/v1beta1",
            "kind": "InferenceService",
            "metadata": {"namespace": ns, "name": name},
            "spec": {
                "model": {"ref": "m"},
                "routing": {"pathTemplate": path, "gateway": {"name": "gw", "namespace": "gws"}},
            },
        }))
        .expect("fixture decodes");
        s.metadata.creation_timestamp = Some(Time(
            jiff::Timestamp::from_second(created).expect("valid timestamp"),
        ));
        s
    }

    fn gw() -> GatewayRef {
        GatewayRef {
            name: "gw".to_owned(),
            namespace: Some("gws".to_owned()),
        }
    }

    #[test]
    fn updates_move_a_claim_and_deletes_drop_it() {
        let mut t = RouteTable::default();
        t.upsert(&svc("a", "one", 10, "/x"));
        assert_eq!(
            t.owner(&gw(), "/x", ("b", "two")),
            Some(("a".into(), "one".into()))
        );
        // The same service moves to another path: the old one is free.
        t.upsert(&svc("a", "one", 10, "/y"));
        assert_eq!(t.owner(&gw(), "/x", ("b", "two")), None);
        assert_eq!(
            t.owner(&gw(), "/y", ("b", "two")),
            Some(("a".into(), "one".into()))
        );
        assert_eq!(t.len(), 1);
        t.remove("a", "one");
        assert_eq!(t.owner(&gw(), "/y", ("b", "two")), None);
        assert!(t.is_empty());
        assert!(t.by_route.is_empty());
    }

    #[test]
    fn a_service_never_collides_with_itself() {
        let t = RouteTable::build([&svc("a", "one", 10, "/x")]);
        assert_eq!(t.owner(&gw(), "/x", ("a", "one")), None);
    }

    #[test]
    fn the_reconciler_yields_only_to_older_live_services() {
        let old = svc("a", "old", 10, "/x");
        let young = svc("b", "young", 20, "/x");
        let mut t = RouteTable::build([&old, &young]);
        let for_young = OlderClaims {
            table: &t,
            me: &young,
        };
        assert_eq!(
            for_young.owner(&gw(), "/x", ("b", "young")),
            Some(("a".into(), "old".into()))
        );
        let for_old = OlderClaims {
            table: &t,
            me: &old,
        };
        assert_eq!(for_old.owner(&gw(), "/x", ("a", "old")), None);
        // The older one is being deleted: the younger keeps the path.
        let mut deleting = old.clone();
        deleting.metadata.deletion_timestamp = deleting.metadata.creation_timestamp.clone();
        t.upsert(&deleting);
        let for_young = OlderClaims {
            table: &t,
            me: &young,
        };
        assert_eq!(for_young.owner(&gw(), "/x", ("b", "young")), None);
        // Admission still sees both claimants.
        assert_eq!(
            t.owner(&gw(), "/x", ("c", "new")),
            Some(("a".into(), "old".into()))
        );
    }
}
