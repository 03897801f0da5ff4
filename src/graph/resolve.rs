//! From `spec.graph` to the desired RayService: read the token, fetch,
//! decode, validate, build. The one call the reconciler makes.

use std::sync::Arc;

use kube::ResourceExt;
use tracing::Instrument;

use super::GraphError;
use super::fetch::{GraphFetcher, read_token};
use super::proto::ServingGraph;
use super::rayservice::{RayService, RayServiceError, desired_rayservice};
use crate::api::v1beta1::InferenceService;

/// The desired RayService and where its graph came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    /// The RayService to apply.
    pub rayservice: RayService,
    /// The graph it was generated from.
    pub graph: Arc<ServingGraph>,
    /// The graph's ETag, if the server sent one.
    pub etag: Option<String>,
    /// The server answered 304: the graph did not change since the last fetch.
    pub not_modified: bool,
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

/// Read the bearer token from the service's namespace, fetch and validate
/// the graph, and build the RayService for `route_path` (the rendered route
/// path). On any error the caller leaves the existing RayService as it is
/// and sets a condition with [`RayServiceError::reason`] and the message
/// (which never contains the token).
pub async fn resolve(
    client: &kube::Client,
    fetcher: &GraphFetcher,
    svc: &InferenceService,
    route_path: &str,
) -> Result<Resolved, RayServiceError> {
    let spec = svc.spec.graph.as_ref().ok_or(GraphError::Missing)?;
    let key = cache_key(svc);
    let span = tracing::debug_span!("graph", service = %key, url = %spec.url);
    async {
        let namespace = svc.namespace().unwrap_or_default();
        let token = match spec.bearer_token_secret_ref.as_ref() {
            Some(r) => Some(read_token(client, &namespace, r).await?),
            None => None,
        };
        let fetched = fetcher.fetch(&key, &spec.url, token.as_ref()).await?;
        let rayservice = desired_rayservice(svc, &fetched.graph, route_path)?;
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
        })
    }
    .instrument(span)
    .await
}
