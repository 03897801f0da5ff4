//! HTTPRoutes infergate does not own (no InferenceService controls them)
//! that match a header exactly on a Gateway: which route would take the
//! requests of a served name besides the service that serves it.
//! Admission warns about them ([`crate::webhook::naming`]); nothing is
//! denied for them.
//!
//! Kept from a watch of HTTPRoutes, started once discovery says the
//! cluster serves them (asked every [`POLL`] until it does), and updated
//! one route at a time from the watch's own events: only each route's
//! exact header matches are kept, not the route.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::api::upstream::gateway_api::{self, GATEWAY_GROUP, HTTPRoute};
use crate::engine::model_names::Claim;

use super::scope::{self, Scope};

/// How often discovery is asked whether HTTPRoutes are served, until they are.
pub const POLL: Duration = Duration::from_secs(15);

/// `(gateway namespace, gateway name, header name lowercased, value)`.
type MatchKey = (String, String, String, String);
/// `(namespace, name)` of a route.
type RouteKey = (String, String);

/// The exact header matches of the HTTPRoutes infergate does not own.
#[derive(Debug, Default)]
pub struct ForeignRoutes {
    index: RwLock<Index>,
    started: AtomicBool,
}

#[derive(Debug, Default)]
struct Index {
    /// By match: each route that has it, with the route's hostnames.
    by_match: HashMap<MatchKey, BTreeMap<RouteKey, Vec<String>>>,
    /// By route: its matches (to forget them).
    by_route: HashMap<RouteKey, BTreeSet<MatchKey>>,
}

impl Index {
    fn upsert(&mut self, route: &HTTPRoute) {
        let key = (route.namespace().unwrap_or_default(), route.name_any());
        self.remove(&key);
        if owned(route) {
            return;
        }
        let matches = matches_of(route);
        if matches.is_empty() {
            return;
        }
        for m in &matches {
            self.by_match
                .entry(m.clone())
                .or_default()
                .insert(key.clone(), route.spec.hostnames.clone());
        }
        self.by_route.insert(key, matches);
    }

    fn remove(&mut self, key: &RouteKey) {
        for m in self.by_route.remove(key).into_iter().flatten() {
            if let Some(routes) = self.by_match.get_mut(&m) {
                routes.remove(key);
                if routes.is_empty() {
                    self.by_match.remove(&m);
                }
            }
        }
    }
}

/// Whether an InferenceService controls `route`.
fn owned(route: &HTTPRoute) -> bool {
    route.owner_references().iter().any(|o| {
        o.controller == Some(true)
            && o.kind == "InferenceService"
            && o.api_version.split('/').next() == Some(crate::api::GROUP)
    })
}

/// The exact header matches of `route` on each Gateway it attaches to.
fn matches_of(route: &HTTPRoute) -> BTreeSet<MatchKey> {
    let ns = route.namespace().unwrap_or_default();
    let gateways: Vec<(String, String)> = route
        .spec
        .parent_refs
        .iter()
        .filter(|p| p.group.as_deref().is_none_or(|g| g == GATEWAY_GROUP))
        .filter(|p| p.kind.as_deref().is_none_or(|k| k == "Gateway"))
        .map(|p| {
            (
                p.namespace.clone().unwrap_or_else(|| ns.clone()),
                p.name.clone(),
            )
        })
        .collect();
    let mut out = BTreeSet::new();
    for rule in &route.spec.rules {
        for m in &rule.matches {
            for h in &m.headers {
                if h.r#type.as_deref().is_some_and(|t| t != "Exact") {
                    continue;
                }
                for (gns, gname) in &gateways {
                    out.insert((
                        gns.clone(),
                        gname.clone(),
                        h.name.to_ascii_lowercase(),
                        h.value.clone(),
                    ));
                }
            }
        }
    }
    out
}

impl ForeignRoutes {
    /// The routes (`namespace/name`) that match `header` (any case) with
    /// the name of a claim of `mine` on its Gateway, for a hostname both
    /// reach, each once, in order.
    #[must_use]
    pub fn matching(&self, mine: &[Claim], header: &str) -> Vec<String> {
        let index = match self.index.read() {
            Ok(i) => i,
            Err(poisoned) => poisoned.into_inner(),
        };
        if index.by_match.is_empty() {
            return Vec::new();
        }
        let header = header.to_ascii_lowercase();
        let mut out = BTreeSet::new();
        for c in mine {
            let key = (
                c.gateway_namespace.clone(),
                c.gateway.clone(),
                header.clone(),
                c.name.clone(),
            );
            for ((ns, name), hostnames) in index.by_match.get(&key).into_iter().flatten() {
                let meets = match &c.hostname {
                    None => true,
                    Some(h) => {
                        hostnames.is_empty() || hostnames.iter().any(|r| r.eq_ignore_ascii_case(h))
                    }
                };
                if meets {
                    out.insert(format!("{ns}/{name}"));
                }
            }
        }
        out.into_iter().collect()
    }

    /// Record `route` as if the watch had delivered it (tests).
    pub fn apply(&self, route: &HTTPRoute) {
        self.update(|i| i.upsert(route));
    }

    fn update(&self, f: impl FnOnce(&mut Index)) {
        match self.index.write() {
            Ok(mut i) => f(&mut i),
            Err(poisoned) => f(&mut poisoned.into_inner()),
        }
    }

    /// Ask discovery every [`POLL`] until the cluster serves HTTPRoutes,
    /// then watch them in `scope` until `shutdown`. Once per process.
    pub fn spawn(
        self: &std::sync::Arc<Self>,
        client: Client,
        scope: Scope,
        shutdown: CancellationToken,
    ) {
        if self.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let routes = std::sync::Arc::clone(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(POLL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    _ = tick.tick() => {}
                }
                if let Ok(list) = client
                    .list_api_group_resources(gateway_api::API_VERSION)
                    .await
                    && list.resources.iter().any(|r| r.name == gateway_api::PLURAL)
                {
                    break;
                }
            }
            routes.watch(client, &scope, shutdown).await;
        });
    }

    async fn watch(&self, client: Client, scope: &Scope, shutdown: CancellationToken) {
        let stream = scope
            .watch::<HTTPRoute>(&client, scope::list_in_pages())
            .default_backoff();
        futures::pin_mut!(stream);
        let mut staging = Index::default();
        while let Some(event) = super::watching::next_until(&mut stream, &shutdown).await {
            match event {
                Ok(watcher::Event::Apply(r)) => self.update(|i| i.upsert(&r)),
                Ok(watcher::Event::Delete(r)) => {
                    let key = (r.namespace().unwrap_or_default(), r.name_any());
                    self.update(|i| i.remove(&key));
                }
                Ok(watcher::Event::Init) => staging = Index::default(),
                Ok(watcher::Event::InitApply(r)) => staging.upsert(&r),
                Ok(watcher::Event::InitDone) => {
                    let next = std::mem::take(&mut staging);
                    self.update(|i| *i = next);
                }
                Err(e) => super::watching::log_watch_error("HTTPRoute", &e, "foreign route watch"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(ns: &str, name: &str, value: &str, owned: bool) -> HTTPRoute {
        let mut r: HTTPRoute = serde_json::from_value(serde_json::json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"namespace": ns, "name": name},
            "spec": {
                "parentRefs": [{"name": "inference-gw", "namespace": "gateways"}],
                "rules": [{"matches": [{"headers": [
                    {"name": "x-gateway-model-name", "value": value}
                ]}]}]
            }
        }))
        .expect("fixture decodes");
        if owned {
            r.metadata.owner_references = Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                    api_version: "infergate.dev/v1beta1".to_owned(),
                    kind: "InferenceService".to_owned(),
                    name: "chat".to_owned(),
                    uid: "u".to_owned(),
                    controller: Some(true),
                    block_owner_deletion: None,
                },
            ]);
        }
        r
    }

    fn claim(name: &str, hostname: Option<&str>) -> Claim {
        Claim {
            gateway_namespace: "gateways".to_owned(),
            gateway: "inference-gw".to_owned(),
            hostname: hostname.map(str::to_owned),
            name: name.to_owned(),
            field: "spec.model.servedName".to_owned(),
        }
    }

    #[test]
    fn a_foreign_route_matching_the_header_value_is_named_and_an_owned_one_is_not() {
        let routes = ForeignRoutes::default();
        routes.apply(&route("team-b", "by-hand", "llama-3-70b", false));
        routes.apply(&route("team-a", "chat", "llama-3-70b", true));
        let mine = [claim("llama-3-70b", None)];
        assert_eq!(
            routes.matching(&mine, "X-Gateway-Model-Name"),
            ["team-b/by-hand"]
        );
        assert!(routes.matching(&mine, "X-Other").is_empty());
        assert!(
            routes
                .matching(&[claim("other", None)], "X-Gateway-Model-Name")
                .is_empty()
        );
        // Changed to another value, then deleted: forgotten.
        routes.apply(&route("team-b", "by-hand", "mistral", false));
        assert!(routes.matching(&mine, "X-Gateway-Model-Name").is_empty());
        let mut with_host = route("team-b", "hosted", "llama-3-70b", false);
        with_host.spec.hostnames = vec!["a.example.com".to_owned()];
        routes.apply(&with_host);
        assert!(
            routes
                .matching(
                    &[claim("llama-3-70b", Some("b.example.com"))],
                    "x-gateway-model-name"
                )
                .is_empty()
        );
        assert_eq!(
            routes.matching(
                &[claim("llama-3-70b", Some("A.example.com"))],
                "x-gateway-model-name"
            ),
            ["team-b/hosted"]
        );
        routes.update(|i| i.remove(&("team-b".to_owned(), "hosted".to_owned())));
        assert!(routes.index.read().unwrap().by_match.len() == 1);
    }
}
