//! Which optional APIs the cluster serves (Gateway API's HTTPRoute, KubeRay's
//! RayService, the Prometheus Operator's PodMonitor), asked of the API
//! server's discovery and cached, and the preflight that tells a user how to
//! install infergate's own CRDs.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{Api, ListParams};

use super::Error;
use super::children::httproute::{self};
use super::children::inferencepool;
use super::children::podmonitor;
use crate::api::v1beta1::InferenceService;
use crate::api::{ClusterInferencePolicy, InferencePolicy};
use crate::reconcile::children::rayservice::{self};

/// How long a "not installed" discovery answer is trusted.
pub(super) const DISCOVERY_TTL_MISSING: Duration = Duration::from_secs(30);
/// How long an "installed" discovery answer is trusted.
const DISCOVERY_TTL_PRESENT: Duration = Duration::from_secs(300);

/// Cached answer to "is this optional CRD (HTTPRoute, RayService) served?".
pub struct ApiDiscovery {
    api_version: &'static str,
    plural: &'static str,
    state: Mutex<Option<(bool, Instant)>>,
}

impl ApiDiscovery {
    /// Discovery of `gateway.networking.k8s.io/v1` `httproutes`.
    #[must_use]
    pub fn gateway() -> Self {
        Self::of(httproute::API_VERSION, httproute::PLURAL)
    }

    /// Discovery of `monitoring.coreos.com/v1` `podmonitors`.
    #[must_use]
    pub fn podmonitor() -> Self {
        Self::of(podmonitor::API_VERSION, podmonitor::PLURAL)
    }

    /// Discovery of `inference.networking.k8s.io/v1` `inferencepools`.
    #[must_use]
    pub fn inference_pool() -> Self {
        Self::of(inferencepool::API_VERSION, inferencepool::PLURAL)
    }

    /// Discovery of `ray.io/v1` `rayservices`.
    #[must_use]
    pub fn rayservice() -> Self {
        Self::of(rayservice::API_VERSION, rayservice::PLURAL)
    }

    fn of(api_version: &'static str, plural: &'static str) -> Self {
        Self {
            api_version,
            plural,
            state: Mutex::new(None),
        }
    }

    /// Whether the group version serves the resource (cached).
    pub async fn installed(&self, client: &Client) -> Result<bool, kube::Error> {
        if let Ok(state) = self.state.lock()
            && let Some((known, at)) = *state
        {
            let ttl = if known {
                DISCOVERY_TTL_PRESENT
            } else {
                DISCOVERY_TTL_MISSING
            };
            if at.elapsed() < ttl {
                return Ok(known);
            }
        }
        let known = match client.list_api_group_resources(self.api_version).await {
            Ok(list) => list.resources.iter().any(|r| r.name == self.plural),
            Err(kube::Error::Api(s)) if super::status_not_found(&s) => false,
            Err(e) => return Err(e),
        };
        if let Ok(mut state) = self.state.lock() {
            *state = Some((known, Instant::now()));
        }
        Ok(known)
    }

    /// Forget the cached answer (an apply said the resource is gone).
    pub fn forget(&self) {
        if let Ok(mut state) = self.state.lock() {
            *state = None;
        }
    }
}

/// Check that infergate's CRDs are served; tell the user how to install them if not.
pub async fn preflight(client: &Client, scope: &crate::state::Scope) -> Result<(), Error> {
    let lp = ListParams::default().limit(1);
    let checks = [
        (
            "inferenceservices.infergate.dev",
            scope
                .probe_api::<InferenceService>(client)
                .list_metadata(&lp)
                .await
                .map(|_| ()),
        ),
        (
            "clusterinferencepolicies.infergate.dev",
            Api::<ClusterInferencePolicy>::all(client.clone())
                .list_metadata(&lp)
                .await
                .map(|_| ()),
        ),
        (
            "inferencepolicies.infergate.dev",
            scope
                .probe_api::<InferencePolicy>(client)
                .list_metadata(&lp)
                .await
                .map(|_| ()),
        ),
    ];
    for (crd, result) in checks {
        match result {
            Ok(()) => {}
            Err(kube::Error::Api(s)) if super::status_not_found(&s) => {
                return Err(Error::CrdMissing(crd.to_owned()));
            }
            Err(e) => return Err(Error::Kube(e)),
        }
    }
    Ok(())
}
