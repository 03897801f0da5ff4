//! What one engine pod's status says about why it is not ready, as a
//! small value that keeps no part of the pod.

use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::Deserialize;

use crate::state::kept::kept_metadata;

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

kept_metadata! {
    /// A pod's metadata as far as anything here reads it: name, namespace,
    /// uid, resourceVersion (the watch resumes from it), labels and deletion
    /// timestamp. The rest (managed fields above all: several writers' worth
    /// on every pod) is skipped as it is read, never allocated.
    fn kept_metadata {
        labels: Option<std::collections::BTreeMap<String, String>>,
    }
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
    /// The state of a pod of a group (a replica that spans nodes), its
    /// words led by which group and pod say it: `group 1, pod
    /// chat-lws-1-1: 0/3 nodes are available: ...`. A state without words
    /// of its own (starting, crash-looping) is as it was.
    #[must_use]
    pub fn in_group(self, group: &str, pod: &str) -> Self {
        let lead = |m: String| format!("group {group}, pod {pod}: {m}");
        match self {
            Self::Unschedulable { message } if message.is_empty() => Self::Unschedulable {
                message: lead("the scheduler finds no node for it".to_owned()),
            },
            Self::Unschedulable { message } => Self::Unschedulable {
                message: lead(message),
            },
            Self::ImagePullFailed {
                image,
                message,
                backing_off,
            } => Self::ImagePullFailed {
                image,
                message: lead(message),
                backing_off,
            },
            Self::Waiting {
                container,
                reason,
                message,
            } => Self::Waiting {
                container,
                reason,
                message: lead(message),
            },
            other => other,
        }
    }

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
pub(super) mod tests {
    //! Pod states from pods written the way the scheduler and the kubelet
    //! write them.

    use serde_json::json;

    use super::*;

    pub(crate) const SCHEDULER: &str = "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) had untolerated taint {nvidia.com/gpu: present}. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.";

    /// A pod of `chat`'s primary track with `status`.
    pub(crate) fn pod(name: &str, status: serde_json::Value) -> WatchedPod {
        pod_of("chat", "primary", name, status)
    }

    /// Pod `name` of `service`'s `track` in namespace `team-a` with `status`,
    /// decoded as the watch decodes it (the spec is read past).
    pub(crate) fn pod_of(
        service: &str,
        track: &str,
        name: &str,
        status: serde_json::Value,
    ) -> WatchedPod {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": name, "namespace": "team-a",
                "labels": {"app.kubernetes.io/managed-by": "infergate",
                           "infergate.dev/service": service, "infergate.dev/track": track}
            },
            "spec": {"containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.9.0",
                                     "env": [{"name": "HF_TOKEN", "value": "x"}]}]},
            "status": status,
        }))
        .expect("pod decodes")
    }

    pub(crate) fn unschedulable(message: &str) -> serde_json::Value {
        json!({
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                            "message": message, "lastProbeTime": null,
                            "lastTransitionTime": "2026-11-25T10:00:00Z"}],
            "qosClass": "Guaranteed"
        })
    }

    pub(crate) fn pulling(reason: &str, message: &str) -> serde_json::Value {
        json!({
            "phase": "Pending",
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-25T10:00:00Z"},
                {"type": "Initialized", "status": "True", "lastTransitionTime": "2026-11-25T10:00:00Z"},
                {"type": "Ready", "status": "False", "reason": "ContainersNotReady",
                 "message": "containers with unready status: [engine]",
                 "lastTransitionTime": "2026-11-25T10:00:00Z"}
            ],
            "containerStatuses": [{
                "name": "engine", "image": "registry.example.com/vllm:bad", "imageID": "",
                "ready": false, "restartCount": 0, "started": false,
                "state": {"waiting": {"reason": reason, "message": message}},
                "lastState": {}
            }]
        })
    }

    pub(crate) fn crash_looping() -> serde_json::Value {
        json!({
            "phase": "Running",
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-25T10:00:00Z"},
                {"type": "Ready", "status": "False", "reason": "ContainersNotReady",
                 "lastTransitionTime": "2026-11-25T10:00:00Z"}
            ],
            "containerStatuses": [{
                "name": "engine", "image": "vllm/vllm-openai:v0.9.0",
                "imageID": "docker.io/vllm/vllm-openai@sha256:0123", "containerID": "containerd://ab",
                "ready": false, "restartCount": 4, "started": false,
                "state": {"waiting": {"reason": "CrashLoopBackOff",
                                      "message": "back-off 1m20s restarting failed container=engine pod=chat-1_team-a(u)"}},
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                                             "startedAt": "2026-11-25T10:01:00Z",
                                             "finishedAt": "2026-11-25T10:01:30Z",
                                             "containerID": "containerd://ab"}}
            }]
        })
    }

    pub(crate) fn running(ready: bool) -> serde_json::Value {
        let status = if ready { "True" } else { "False" };
        json!({
            "phase": "Running",
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-25T10:00:00Z"},
                {"type": "ContainersReady", "status": status, "lastTransitionTime": "2026-11-25T10:00:00Z"},
                {"type": "Ready", "status": status, "lastTransitionTime": "2026-11-25T10:00:00Z"}
            ],
            "containerStatuses": [{
                "name": "engine", "image": "vllm/vllm-openai:v0.9.0",
                "imageID": "docker.io/vllm/vllm-openai@sha256:0123",
                "ready": ready, "restartCount": 0, "started": true,
                "state": {"running": {"startedAt": "2026-11-25T10:00:05Z"}}
            }]
        })
    }

    #[test]
    fn an_unschedulable_pod_carries_the_schedulers_message() {
        assert_eq!(
            pod_state(&pod("chat-1", unschedulable(SCHEDULER))),
            Some(PodState::Unschedulable {
                message: SCHEDULER.into()
            })
        );
    }

    #[test]
    fn a_pod_that_cannot_pull_names_the_image() {
        let back_off = "Back-off pulling image \"registry.example.com/vllm:bad\"";
        assert_eq!(
            pod_state(&pod("chat-1", pulling("ImagePullBackOff", back_off))),
            Some(PodState::ImagePullFailed {
                image: "registry.example.com/vllm:bad".into(),
                message: back_off.into(),
                backing_off: true,
            })
        );
        for reason in ["ErrImagePull", "InvalidImageName", "ErrImageNeverPull"] {
            let state = pod_state(&pod("chat-1", pulling(reason, "why")));
            assert!(
                matches!(&state, Some(PodState::ImagePullFailed { image, message, backing_off: false })
                    if image == "registry.example.com/vllm:bad" && message == "why"),
                "{reason}: {state:?}"
            );
        }
        // Still creating the container is only starting.
        assert_eq!(
            pod_state(&pod("chat-1", pulling("ContainerCreating", ""))),
            Some(PodState::Starting)
        );
    }

    #[test]
    fn an_init_container_that_cannot_pull_counts_too() {
        let mut status = pulling("ContainerCreating", "");
        status["initContainerStatuses"] = json!([{
            "name": "model", "image": "registry.example.com/weights:gone", "imageID": "",
            "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ErrImagePull", "message": "not found"}}
        }]);
        assert_eq!(
            pod_state(&pod("chat-1", status)),
            Some(PodState::ImagePullFailed {
                image: "registry.example.com/weights:gone".into(),
                message: "not found".into(),
                backing_off: false,
            })
        );
    }

    #[test]
    fn a_crash_looping_pod_carries_the_last_exit() {
        let looping = Some(PodState::CrashLooping {
            container: "engine".into(),
            exit_code: 1,
            reason: "Error".into(),
        });
        assert_eq!(pod_state(&pod("chat-1", crash_looping())), looping);
        // Between two back-offs the container runs again, not ready: still
        // the loop, not Starting.
        let mut again = crash_looping();
        again["containerStatuses"][0]["state"] =
            json!({"running": {"startedAt": "2026-11-25T10:03:00Z"}});
        assert_eq!(pod_state(&pod("chat-1", again)), looping);
    }

    #[test]
    fn a_running_pod_not_ready_yet_is_starting_and_a_ready_one_is_ready() {
        assert_eq!(
            pod_state(&pod("chat-1", running(false))),
            Some(PodState::Starting)
        );
        assert_eq!(
            pod_state(&pod("chat-1", running(true))),
            Some(PodState::Ready)
        );
        // A pod the scheduler has not placed yet says nothing: the status
        // that says the track's replicas are not ready stays as it is until
        // the scheduler places the pod (Starting) or cannot (Unschedulable).
        assert_eq!(pod_state(&pod("chat-1", json!({"phase": "Pending"}))), None);
        let mut unplaced = pod("chat-1", json!({"phase": "Pending"}));
        unplaced.status = None;
        assert_eq!(pod_state(&unplaced), None);
        let gated = json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]});
        assert_eq!(pod_state(&pod("chat-1", gated)), None);
    }

    #[test]
    fn a_pod_being_deleted_or_finished_does_not_count() {
        let mut p = pod("chat-1", crash_looping());
        p.metadata.deletion_timestamp =
            Some(serde_json::from_value(json!("2026-11-25T11:00:00Z")).expect("time"));
        assert_eq!(pod_state(&p), None);
        let evicted = json!({"phase": "Failed", "reason": "Evicted",
                             "message": "The node was low on resource: memory."});
        assert_eq!(pod_state(&pod("chat-1", evicted)), None);
    }

    #[test]
    fn a_pod_in_several_states_gives_the_most_telling() {
        // One container cannot pull, another crash-loops: the pull comes first.
        let mut status = crash_looping();
        status["containerStatuses"]
            .as_array_mut()
            .expect("array")
            .push(pulling("ErrImagePull", "denied")["containerStatuses"][0].clone());
        assert!(matches!(
            pod_state(&pod("chat-1", status)),
            Some(PodState::ImagePullFailed { .. })
        ));
        let order = [
            PodState::Unschedulable {
                message: String::new(),
            },
            PodState::ImagePullFailed {
                image: String::new(),
                message: String::new(),
                backing_off: false,
            },
            PodState::CrashLooping {
                container: String::new(),
                exit_code: 1,
                reason: String::new(),
            },
            PodState::Waiting {
                container: String::new(),
                reason: "CreateContainerConfigError".into(),
                message: String::new(),
            },
            PodState::Starting,
        ];
        let ranks: Vec<Option<u8>> = order.iter().map(PodState::rank).collect();
        assert_eq!(ranks, [Some(0), Some(1), Some(2), Some(3), Some(4)]);
        assert_eq!(PodState::Ready.rank(), None);
    }

    #[test]
    fn what_a_pod_says_is_kept_to_a_kibibyte_on_a_character_boundary() {
        // 3-byte characters: 1024 is not a boundary.
        let long = format!("0/9 nodes are available: {}", "é€".repeat(600));
        let Some(PodState::Unschedulable { message }) =
            pod_state(&pod("chat-1", unschedulable(&long)))
        else {
            panic!("unschedulable")
        };
        assert!(
            message.len() <= KEPT_MAX && message.len() > KEPT_MAX - 4,
            "{}",
            message.len()
        );
        assert!(long.starts_with(&message));
        assert_eq!(kept("short"), "short");
    }

    /// A Secret key the env names that does not exist: the kubelet cannot
    /// create the container and says why; the state keeps its words (reported
    /// as Starting, which the contract names), while a container that is only
    /// being created is plainly Starting.
    #[test]
    fn a_container_the_kubelet_cannot_create_says_why() {
        let missing = pulling("CreateContainerConfigError", "secret \"hf\" not found");
        assert_eq!(
            pod_state(&pod("chat-1", missing)),
            Some(PodState::Waiting {
                container: "engine".into(),
                reason: "CreateContainerConfigError".into(),
                message: "secret \"hf\" not found".into(),
            })
        );
        assert_eq!(
            pod_state(&pod("chat-1", pulling("ContainerCreating", ""))),
            Some(PodState::Starting)
        );
        // Less telling than a crash loop, more than starting.
        let waiting = PodState::Waiting {
            container: "engine".into(),
            reason: "RunContainerError".into(),
            message: String::new(),
        };
        assert!(waiting.rank() > Some(2) && waiting.rank() < PodState::Starting.rank());
    }

    /// What the watch keeps of a pod's metadata: enough to key and resume,
    /// without the managed fields and annotations every writer adds.
    #[test]
    fn a_watched_pod_keeps_only_the_metadata_read() {
        let p: WatchedPod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "chat-1", "namespace": "team-a", "uid": "u", "resourceVersion": "7",
                "labels": {"infergate.dev/service": "chat"},
                "annotations": {"kubectl.kubernetes.io/restartedAt": "x"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "r"}],
                "managedFields": [{"manager": "kube-controller-manager", "operation": "Update",
                                   "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {}}}]
            },
            "status": {"phase": "Pending"}
        }))
        .expect("pod decodes");
        assert_eq!(
            serde_json::to_value(&p.metadata).expect("json"),
            json!({"name": "chat-1", "namespace": "team-a", "uid": "u", "resourceVersion": "7",
                   "labels": {"infergate.dev/service": "chat"}})
        );
    }
}
