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
    let Some(PodState::Unschedulable { message }) = pod_state(&pod("chat-1", unschedulable(&long)))
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
