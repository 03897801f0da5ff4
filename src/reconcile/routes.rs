//! The reconciler's answer to the route-collision question, from the
//! InferenceService reflector store.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::ResourceExt;
use kube::runtime::reflector::Store;

use crate::api::GatewayRef;
use crate::api::v1beta1::InferenceService;
use crate::engine::{self, RouteIndex};

type Claim = Option<(GatewayRef, String)>;

/// Rendered route claims cached per object uid and resourceVersion, so a
/// collision check costs one hash lookup per other service.
#[derive(Default)]
pub struct ClaimCache {
    inner: Mutex<HashMap<String, (String, Claim)>>,
}

impl ClaimCache {
    fn claim(&self, svc: &InferenceService) -> Claim {
        let (Some(uid), Some(rv)) = (svc.uid(), svc.resource_version()) else {
            return engine::route_claim(svc);
        };
        if let Ok(map) = self.inner.lock()
            && let Some((seen_rv, claim)) = map.get(&uid)
            && *seen_rv == rv
        {
            return claim.clone();
        }
        let claim = engine::route_claim(svc);
        if let Ok(mut map) = self.inner.lock() {
            map.insert(uid, (rv, claim.clone()));
        }
        claim
    }

    /// Drop entries of objects no longer in `store` once the cache has grown past it.
    pub fn prune(&self, store: &Store<InferenceService>) {
        if let Ok(mut map) = self.inner.lock()
            && map.len() > 2 * store.len() + 64
        {
            let live: std::collections::HashSet<String> =
                store.state().iter().filter_map(|s| s.uid()).collect();
            map.retain(|uid, _| live.contains(uid));
        }
    }
}

/// Other services' claims, where the oldest claimant (by creation time, then
/// namespace/name) keeps a path: only older services count as owners, so two
/// colliding services do not block each other.
pub struct StoreRoutes<'a> {
    /// Every InferenceService.
    pub store: &'a Store<InferenceService>,
    /// The service being reconciled.
    pub me: &'a InferenceService,
    /// Rendered claims.
    pub cache: &'a ClaimCache,
}

fn age_key(svc: &InferenceService) -> (Option<i64>, String, String) {
    (
        svc.creation_timestamp().map(|t| t.0.as_second()),
        svc.namespace().unwrap_or_default(),
        svc.name_any(),
    )
}

impl RouteIndex for StoreRoutes<'_> {
    fn owner(
        &self,
        gateway: &GatewayRef,
        path: &str,
        exclude: (&str, &str),
    ) -> Option<(String, String)> {
        let mine = age_key(self.me);
        self.store.state().into_iter().find_map(|other| {
            let ns = other.namespace().unwrap_or_default();
            let name = other.name_any();
            if (ns.as_str(), name.as_str()) == exclude
                || other.metadata.deletion_timestamp.is_some()
            {
                return None;
            }
            let (gw, p) = self.cache.claim(&other)?;
            let older = age_key(&other) < mine;
            (gw == *gateway && p == path && older).then_some((ns, name))
        })
    }
}
