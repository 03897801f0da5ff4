//! What one engine pod's status says about why it is not ready, as a
//! small value that keeps no part of the pod.

use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::Deserialize;

/// Bytes kept of any string a pod's status carries (the scheduler's
/// message, an image name, the kubelet's message, a reason).
pub const KEPT_MAX: usize = 1024;

/// Waiting reasons of a container whose image cannot be pulled.
const IMAGE_PULL_FAILURES: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
];

/// The waiting reason of a container the kubelet holds back after it
/// failed.
const CRASH_LOOP: &str = "CrashLoopBackOff";

/// A Pod as the watch decodes it: metadata and status, without the spec
/// (an engine pod's spec, with its environment and volumes, is most of
/// the object and nothing here reads it).
#[derive(Resource, Clone, Debug, Default, Deserialize)]
#[resource(inherit = "Pod")]
pub struct WatchedPod {
    /// The pod's metadata (its labels name its service and track), only
    /// what the index and the watch read (name, namespace, uid,
    /// resourceVersion, labels, deletion timestamp).
    #[serde(deserialize_with = "kept_metadata")]
    pub metadata: ObjectMeta,
    /// What the scheduler and the kubelet report.
    pub status: Option<PodStatus>,
}

/// A pod's metadata as far as anything here reads it: name, namespace,
/// uid, resourceVersion (the watch resumes from it), labels and deletion
/// timestamp. The rest (managed fields above all: several writers' worth
/// on every pod) is skipped as it is read, never allocated.
fn kept_metadata<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Kept {
        name: Option<String>,
        namespace: Option<String>,
        uid: Option<String>,
        resource_version: Option<String>,
        labels: Option<std::collections::BTreeMap<String, String>>,
        deletion_timestamp: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    }
    let k = Kept::deserialize(d)?;
    Ok(ObjectMeta {
        name: k.name,
        namespace: k.namespace,
        uid: k.uid,
        resource_version: k.resource_version,
        labels: k.labels,
        deletion_timestamp: k.deletion_timestamp,
        ..ObjectMeta::default()
    })
}

/// Why a pod is not ready, or that it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodState {
    /// The pod's `Ready` condition is True.
    Ready,
    /// Placed on a node, not ready, and nothing below: pulling its image,
    /// or running without passing its readiness probe.
    Starting,
    /// Starting, but a container waits for a reason the kubelet names that
    /// is none of the above (`CreateContainerConfigError`: a Secret or
    /// ConfigMap key its env names does not exist; `RunContainerError`).
    /// Reported as `Starting`, with the kubelet's words.
    Waiting {
        /// The container's name.
        container: String,
        /// The kubelet's reason.
        reason: String,
        /// The kubelet's message.
        message: String,
    },
    /// The scheduler finds no node for it.
    Unschedulable {
        /// The scheduler's own message (`0/5 nodes are available: ...`),
        /// cut to [`KEPT_MAX`] bytes.
        message: String,
    },
    /// A container's image cannot be pulled.
    ImagePullFailed {
        /// The image as the container status names it.
        image: String,
        /// The kubelet's message.
        message: String,
        /// The kubelet is waiting before it tries again
        /// (`ImagePullBackOff`): its message says only that.
        backing_off: bool,
    },
    /// A container keeps exiting: it waits in `CrashLoopBackOff`, or runs
    /// again, not ready, after it exited.
    CrashLooping {
        /// The container's name.
        container: String,
        /// The exit code of its last run.
        exit_code: i32,
        /// Why its last run ended (`Error`, `OOMKilled`, ...).
        reason: String,
    },
}

impl PodState {
    /// How telling a state of a not-ready pod is: lower is more telling;
    /// `None` for a ready pod.
    ///
    /// The order is the one a pod goes through: placed on a node, its
    /// image pulled, its engine run, ready. The earliest step that any
    /// pod of a track is stuck at is the one to name: pods stuck there
    /// never reach the later steps, so fixing a later one does not get
    /// them going, and a state that waiting will not clear
    /// (unschedulable, an image that cannot be pulled, an engine that
    /// exits) comes before one that time alone may end (`Starting`).
    #[must_use]
    pub fn rank(&self) -> Option<u8> {
        match self {
            Self::Ready => None,
            Self::Unschedulable { .. } => Some(0),
            Self::ImagePullFailed { .. } => Some(1),
            Self::CrashLooping { .. } => Some(2),
            Self::Waiting { .. } => Some(3),
            Self::Starting => Some(4),
        }
    }
}

/// The restarts of a pod's containers (init containers aside), as its
/// status counts them.
#[must_use]
pub fn restarts(pod: &WatchedPod) -> i32 {
    pod.status
        .iter()
        .flat_map(|s| s.container_statuses.iter().flatten())
        .map(|c| c.restart_count)
        .sum()
}

/// What `pod`'s status says; `None` for a pod that does not count (yet):
/// one not placed on a node and not refused by the scheduler, one
/// being deleted, or one that has finished (`Succeeded`, `Failed`: an
/// evicted pod stays until it is collected, and its replacement is what
/// the track waits for).
#[must_use]
pub fn pod_state(pod: &WatchedPod) -> Option<PodState> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    // Not reported on yet: not placed, nothing to say.
    let status = pod.status.as_ref()?;
    if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
        return None;
    }
    let conditions = status.conditions.as_deref().unwrap_or_default();
    if conditions
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True")
    {
        return Some(PodState::Ready);
    }
    if let Some(c) = conditions.iter().find(|c| {
        c.type_ == "PodScheduled"
            && c.status == "False"
            && c.reason.as_deref() == Some("Unschedulable")
    }) {
        return Some(PodState::Unschedulable {
            message: kept(c.message.as_deref().unwrap_or_default()),
        });
    }
    // Not placed yet, and not refused by the scheduler either: it says
    // nothing about the track yet (`Starting` is for a pod on a node).
    // Until the scheduler answers, the track's count of ready replicas
    // says all there is.
    if !conditions
        .iter()
        .any(|c| c.type_ == "PodScheduled" && c.status == "True")
    {
        return None;
    }
    let containers = status
        .init_container_statuses
        .iter()
        .chain(status.container_statuses.iter())
        .flatten();
    let state = containers
        .filter_map(container_state)
        .min_by_key(|s| s.rank())
        .unwrap_or(PodState::Starting);
    Some(state)
}

/// What one container's status says, when it says more than `Starting`.
fn container_state(c: &ContainerStatus) -> Option<PodState> {
    let waiting = c.state.as_ref().and_then(|s| s.waiting.as_ref());
    let waiting_reason = waiting.and_then(|w| w.reason.as_deref());
    if let Some(reason) = waiting_reason.filter(|r| IMAGE_PULL_FAILURES.contains(r)) {
        return Some(PodState::ImagePullFailed {
            image: kept(&c.image),
            message: kept(
                waiting
                    .and_then(|w| w.message.as_deref())
                    .unwrap_or_default(),
            ),
            backing_off: reason == "ImagePullBackOff",
        });
    }
    // Running again after an exit, not ready yet, is still the loop: the
    // state does not flip to Starting and back at every restart.
    let running_again = c
        .state
        .as_ref()
        .is_some_and(|s| s.running.is_some() && !c.ready && c.restart_count > 0);
    if waiting_reason != Some(CRASH_LOOP) && !running_again {
        // Any other reason but the ordinary ones of a container on its way up.
        return waiting_reason
            .filter(|r| !matches!(*r, "ContainerCreating" | "PodInitializing"))
            .map(|reason| PodState::Waiting {
                container: kept(&c.name),
                reason: kept(reason),
                message: kept(
                    waiting
                        .and_then(|w| w.message.as_deref())
                        .unwrap_or_default(),
                ),
            });
    }
    let last = c.last_state.as_ref().and_then(|s| s.terminated.as_ref())?;
    Some(PodState::CrashLooping {
        container: kept(&c.name),
        exit_code: last.exit_code,
        reason: kept(last.reason.as_deref().unwrap_or_default()),
    })
}

/// `s` cut to [`KEPT_MAX`] bytes on a character boundary.
#[must_use]
pub fn kept(s: &str) -> String {
    let mut end = s.len().min(KEPT_MAX);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

#[cfg(test)]
pub(super) mod tests;
