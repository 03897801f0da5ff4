//! When a reconcile comes back, shared by both backends.

use std::time::Duration;

use crate::api::v1beta1::InferenceService;

/// Periodic re-reconcile of every service (drift that no watch event reported).
pub const RESYNC: Duration = Duration::from_secs(3600);
/// Come back while waiting in line for a graph fetch slot (to say where it
/// stands; its turn brings it back at once).
pub const GRAPH_QUEUE_POLL: Duration = Duration::from_secs(30);
/// Re-reconcile while waiting for an optional API (Gateway API, KubeRay,
/// InferencePool) to be installed (its arrival also reconciles the
/// services waiting for it).
pub const OPTIONAL_API_RECHECK: Duration = Duration::from_secs(30);

/// Up to a second, fixed per service, so services deferred together do
/// not come back together.
#[must_use]
pub fn jitter(svc: &InferenceService) -> Duration {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    svc.metadata.uid.hash(&mut h);
    svc.metadata.name.hash(&mut h);
    Duration::from_millis(h.finish() % 1000)
}
