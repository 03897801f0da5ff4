//! From `spec.graph` to the desired RayService: read the token, fetch,
//! decode, validate, build. The one call the reconciler makes.

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use tracing::Instrument;

use super::children::rayservice::{RayService, RayServiceError, desired_rayservice};
use crate::graph::GraphError;
use k8s_openapi::api::core::v1::Secret;

use crate::api::AcceleratorClassSpec;
use crate::api::v1beta1::InferenceService;
use crate::api::v1beta1::SecretKeyRef;
use crate::graph::fetch::{BearerToken, FetchRequest, GraphSource, check_url, token_from_secret};
use crate::graph::proto::ServingGraph;

/// The desired RayService and where its graph came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    /// The RayService to apply.
    pub rayservice: RayService,
    /// The graph it was generated from.
    pub graph: Arc<ServingGraph>,
    /// The graph's ETag, if the server sent one.
    pub etag: Option<String>,
    /// The server answered 304, or was not asked (the graph was fetched
    /// less than [`Access::max_age`] ago): the graph is the one last fetched.
    pub not_modified: bool,
    /// The server was asked (`false`: the graph fetched less than
    /// [`Access::max_age`] ago was reused).
    pub fetched: bool,
    /// `sha256:<hex>` of the graph's bytes as fetched.
    pub digest: String,
}

/// The graph each Ray service's RayService was last applied with: a
/// source that fails (or whose fetch waits its turn) keeps it, and the
/// rest of the spec is applied with it. One shared graph per service (the
/// fetcher's own, by reference); forgotten with the service.
#[derive(Debug, Default)]
pub struct LastGood(std::sync::Mutex<std::collections::HashMap<String, Kept>>);

/// A graph kept: what [`Resolved`] says of it, without the RayService.
#[derive(Clone, Debug)]
struct Kept {
    graph: Arc<ServingGraph>,
    etag: Option<String>,
    digest: String,
}

impl LastGood {
    /// Remember the graph of `resolved` as `key`'s last good one.
    pub fn keep(&self, key: &str, resolved: &Resolved) {
        let kept = Kept {
            graph: Arc::clone(&resolved.graph),
            etag: resolved.etag.clone(),
            digest: resolved.digest.clone(),
        };
        if let Ok(mut m) = self.0.lock() {
            m.insert(key.to_owned(), kept);
        }
    }

    /// The RayService `svc` wants with its last good graph, when one is
    /// kept: `None` without one, the builder's error when the spec no
    /// longer holds it (workers too small for it).
    pub fn rebuild(
        &self,
        svc: &InferenceService,
        route_prefix: &str,
        class: Option<&AcceleratorClassSpec>,
    ) -> Option<Result<Resolved, RayServiceError>> {
        let last = self.0.lock().ok()?.get(&cache_key(svc)).cloned()?;
        Some(
            desired_rayservice(svc, &last.graph, route_prefix, class).map(|rayservice| Resolved {
                rayservice,
                graph: last.graph,
                etag: last.etag,
                not_modified: true,
                fetched: false,
                digest: last.digest,
            }),
        )
    }

    /// Forget `key`'s graph (the service was deleted).
    pub fn forget(&self, key: &str) {
        if let Ok(mut m) = self.0.lock() {
            m.remove(key);
        }
    }

    /// Services with a graph kept.
    #[must_use]
    pub fn len(&self) -> usize {
        self.0.lock().map_or(0, |m| m.len())
    }

    /// Whether no graph is kept.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The ETag cache key of a service: `namespace/name`.
#[must_use]
pub fn cache_key(svc: &InferenceService) -> String {
    cache_key_of(&kube::runtime::reflector::ObjectRef::from_obj(svc))
}

/// [`cache_key`] of the service `key` names.
#[must_use]
pub fn cache_key_of(key: &kube::runtime::reflector::ObjectRef<InferenceService>) -> String {
    format!(
        "{}/{}",
        key.namespace.as_deref().unwrap_or_default(),
        key.name
    )
}

/// What the reconciler knows about a service's right to reach its graph.
#[derive(Clone, Copy, Debug)]
pub struct Access<'a> {
    /// An applicable policy lists the URL's host literally in
    /// `allowedGraphHosts`: the fetcher may reach internal addresses.
    pub internal_allowed: bool,
    /// infergate's ServiceAccount, `namespace:name`, for the RoleBinding
    /// command a `SecretForbidden` message gives.
    pub service_account: &'a str,
    /// The AcceleratorClass the workers run on.
    pub class: Option<&'a AcceleratorClassSpec>,
    /// A refresh (`infergate.dev/graph-refresh`) is due
    /// ([`GraphSource::refresh_in`] says it may fetch now): the server is
    /// asked even if the graph was fetched less than `max_age` ago.
    pub refresh: bool,
    /// A graph fetched (or confirmed by the server) less than this long ago
    /// is reused without asking the server again, unless a refresh is
    /// due: the graph resync.
    pub max_age: Duration,
}

/// Take a fetch slot (or a place in line: [`GraphError::Queued`]), read
/// the bearer token from the service's namespace (only if the Secret
/// allows the URL's host), fetch and validate the graph, and build the
/// RayService for `route_prefix` (the Serve application's prefix). On any error the
/// caller leaves the existing RayService as it is and sets a condition with
/// [`RayServiceError::reason`] and the message (which never contains the
/// token).
pub async fn resolve(
    client: &kube::Client,
    fetcher: &impl GraphSource,
    svc: &InferenceService,
    route_prefix: &str,
    access: Access<'_>,
) -> Result<Resolved, RayServiceError> {
    let spec = svc.spec.graph.as_ref().ok_or(GraphError::Missing)?;
    let key = cache_key(svc);
    let span = tracing::debug_span!("graph", service = %key, url = %spec.url);
    async {
        let namespace = svc.namespace().unwrap_or_default();
        let url = check_url(&spec.url)?;
        if !access.refresh
            && let Some(fresh) = fetcher.fresh(&key, &spec.url, access.max_age)
        {
            let rayservice = desired_rayservice(svc, &fresh.graph, route_prefix, access.class)?;
            tracing::debug!("graph fetched less than the resync ago; reused");
            return Ok(Resolved {
                rayservice,
                graph: fresh.graph,
                etag: fresh.etag,
                not_modified: true,
                fetched: false,
                digest: fresh.digest,
            });
        }
        // Waiting out a backoff (a refresh included), or in line for a
        // slot, reads no Secret either.
        if let Some(retry_in) = fetcher.retry_in(&key, &spec.url) {
            return Err(GraphError::BackingOff { retry_in }.into());
        }
        let slot = fetcher.slot(&key, &namespace)?;
        let token = match spec.bearer_token_secret_ref.as_ref() {
            Some(r) => Some(read_token(client, &namespace, r, &url, access.service_account).await?),
            None => None,
        };
        let fetched = fetcher
            .fetch_in(
                slot,
                FetchRequest {
                    cache_key: &key,
                    namespace: &namespace,
                    url: &spec.url,
                    token: token.as_ref(),
                    internal_allowed: access.internal_allowed,
                },
            )
            .await?;
        let rayservice = desired_rayservice(svc, &fetched.graph, route_prefix, access.class)?;
        tracing::debug!(
            not_modified = fetched.not_modified,
            nodes = fetched.graph.nodes.len(),
            "graph resolved"
        );
        Ok(Resolved {
            rayservice,
            graph: fetched.graph,
            etag: fetched.etag,
            not_modified: fetched.not_modified,
            fetched: true,
            digest: fetched.digest,
        })
    }
    .instrument(span)
    .await
}

/// Read the token of `spec.graph.bearerTokenSecretRef` from the service's
/// namespace, if the Secret allows `url`'s host.
pub async fn read_token(
    client: &kube::Client,
    namespace: &str,
    r: &SecretKeyRef,
    url: &url::Url,
    service_account: &str,
) -> Result<BearerToken, GraphError> {
    let api: kube::Api<Secret> = kube::Api::namespaced(client.clone(), namespace);
    match api.get_opt(&r.name).await {
        Ok(Some(secret)) => token_from_secret(&secret, namespace, r, url),
        Ok(None) => Err(GraphError::SecretNotFound {
            namespace: namespace.to_owned(),
            name: r.name.clone(),
            key: r.key.clone(),
        }),
        Err(kube::Error::Api(s)) if s.code == 403 => Err(GraphError::SecretForbidden {
            namespace: namespace.to_owned(),
            name: r.name.clone(),
            service_account: service_account.to_owned(),
        }),
        Err(e) => Err(GraphError::SecretUnreadable {
            namespace: namespace.to_owned(),
            name: r.name.clone(),
            message: e.to_string(),
        }),
    }
}
