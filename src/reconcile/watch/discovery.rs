//! Which optional APIs the cluster serves (Gateway API's HTTPRoute, KubeRay's
//! RayService, the Prometheus Operator's PodMonitor, the InferencePool), asked of the API
//! server's discovery and cached, and the preflight that tells a user how to
//! install infergate's own CRDs.

use std::borrow::Cow;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{Api, ListParams};

use crate::api::v1beta1::InferenceService;
use crate::api::{ClusterInferencePolicy, InferencePolicy};
use crate::reconcile::error::{Error, status_not_found};

/// How often discovery is asked again while an optional CRD's children
/// are followed (its arrival and its removal are seen within this time).
pub(super) const DISCOVERY_POLL: Duration = Duration::from_secs(10);
/// How long a "not installed" discovery answer is trusted.
const DISCOVERY_TTL_MISSING: Duration = Duration::from_secs(30);
/// How long an "installed" discovery answer is trusted.
const DISCOVERY_TTL_PRESENT: Duration = Duration::from_secs(300);

/// Cached answer to "is this optional CRD (HTTPRoute, RayService, ...) served?".
pub struct ApiDiscovery {
    api_version: Cow<'static, str>,
    plural: Cow<'static, str>,
    state: Mutex<Option<(bool, Instant)>>,
}

impl ApiDiscovery {
    /// Discovery of the resource `plural` in the group version `api_version`
    /// (an optional CRD's).
    #[must_use]
    pub fn new(api_version: Cow<'static, str>, plural: Cow<'static, str>) -> Self {
        Self {
            api_version,
            plural,
            state: Mutex::new(None),
        }
    }

    /// The group version asked about.
    #[must_use]
    pub fn api_version(&self) -> &str {
        &self.api_version
    }

    /// The resource looked for in it.
    #[must_use]
    pub fn plural(&self) -> &str {
        &self.plural
    }

    /// Whether the group version serves the resource (cached; the watch
    /// of the kind's children refreshes the answer every `DISCOVERY_POLL`).
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
        self.refresh(client).await
    }

    /// Ask the API server now whether the group version serves the
    /// resource, and keep the answer.
    pub async fn refresh(&self, client: &Client) -> Result<bool, kube::Error> {
        let known = match client.list_api_group_resources(&self.api_version).await {
            Ok(list) => list.resources.iter().any(|r| r.name == self.plural),
            Err(kube::Error::Api(s)) if status_not_found(&s) => false,
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
            Err(kube::Error::Api(s)) if status_not_found(&s) => {
                return Err(Error::CrdMissing(crd.to_owned()));
            }
            Err(e) => return Err(Error::Kube(e)),
        }
    }
    Ok(())
}
