//! From `spec.graph` to the desired RayService: read the token, fetch,
//! decode, validate, build. The one call the reconciler makes.

use std::sync::Arc;

use kube::ResourceExt;
use tracing::Instrument;

use super::children::rayservice::{RayService, RayServiceError, desired_rayservice};
use crate::graph::GraphError;
use k8s_openapi::api::core::v1::Secret;

use crate::api::v1beta1::InferenceService;
use crate::api::v1beta1::SecretKeyRef;
use crate::graph::fetch::{BearerToken, GraphSource, token_from_secret};
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
    fetcher: &impl GraphSource,
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

/// Read the token of `spec.graph.bearerTokenSecretRef` from the service's namespace.
pub async fn read_token(
    client: &kube::Client,
    namespace: &str,
    r: &SecretKeyRef,
) -> Result<BearerToken, GraphError> {
    let api: kube::Api<Secret> = kube::Api::namespaced(client.clone(), namespace);
    match api.get_opt(&r.name).await {
        Ok(Some(secret)) => token_from_secret(&secret, namespace, r),
        Ok(None) => Err(GraphError::SecretNotFound {
            namespace: namespace.to_owned(),
            name: r.name.clone(),
            key: r.key.clone(),
        }),
        Err(e) => Err(GraphError::SecretUnreadable {
            namespace: namespace.to_owned(),
            name: r.name.clone(),
            message: e.to_string(),
        }),
    }
}
