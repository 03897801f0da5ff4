//! A real scheduler for end-to-end tests: kube-scheduler (built with the
//! control plane by `build-control-plane.sh`) and kwok (built by
//! `build-tool.sh kwok`) against a control plane, started once per plane
//! and stopped with it (see [`super::control_plane`]).
//!
//! kwok plays the kubelet of every Node annotated [`KWOK_NODE_ANNOTATION`]
//! `=` [`KWOK_NODE_VALUE`]: it keeps the Node Ready (status heartbeats and
//! a Lease) and takes each pod the scheduler binds to it to Running and
//! Ready. What the scheduler sees of such a Node is what the test wrote:
//! labels, taints, `status.capacity` and `status.allocatable`. A
//! kube-controller-manager running only the node lifecycle controller lifts
//! the `node.kubernetes.io/not-ready` taint a new Node is created with once
//! kwok has made it Ready.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, Pod, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::{Client, ResourceExt};

use super::control_plane::ControlPlane;
use super::process::{go_tool, spawn_logged, tail};
use super::wait::{WAIT, eventually};

/// The annotation that hands a Node to kwok.
pub const KWOK_NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";
/// Its value.
pub const KWOK_NODE_VALUE: &str = "fake";

/// The taint the API server puts on every new Node until it is Ready.
pub const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";

/// Where kwok's fake pods take their IPs from (no network exists).
const POD_CIDR: &str = "10.244.0.0/16";

/// kube-scheduler, kwok and the node lifecycle controller, running.
pub struct Scheduling {
    dir: PathBuf,
    children: Mutex<Vec<Child>>,
}

/// The scheduler and kwok against `cp`, started on first use.
///
/// Panics with how to build them when a binary is missing: a scheduling test
/// never passes by skipping.
pub async fn scheduling(cp: &ControlPlane) -> &Scheduling {
    cp.scheduling
        .get_or_init(|| async {
            Scheduling::start(cp)
                .unwrap_or_else(|e| panic!("the test scheduler could not start: {e:#}"))
        })
        .await
}

/// The kwok binary (built when missing; `INFERGATE_KWOK` names one built
/// elsewhere) and the stages file beside its `bin/`.
pub fn kwok_binary() -> (PathBuf, PathBuf) {
    let bin = go_tool("kwok");
    let stages = bin
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("stages.yaml"))
        .unwrap_or_default();
    assert!(
        stages.is_file(),
        "kwok's stages are missing at {}: run tests/support/build-tool.sh kwok (or make tools), which writes them beside bin/kwok",
        stages.display()
    );
    (bin, stages)
}

impl Scheduling {
    fn start(cp: &ControlPlane) -> anyhow::Result<Self> {
        let scheduler = cp.bin_dir().join("kube-scheduler");
        anyhow::ensure!(
            scheduler.is_file(),
            "{} is missing: build it with tests/support/build-control-plane.sh (or make control-plane), which builds kube-scheduler with the API server",
            scheduler.display()
        );
        let (kwok, stages) = kwok_binary();
        let dir = cp.dir().to_path_buf();
        let kubeconfig = cp.kubeconfig().display().to_string();

        let mut cmd = Command::new(&scheduler);
        cmd.arg(format!("--kubeconfig={kubeconfig}"))
            .arg("--leader-elect=false")
            .arg("--secure-port=0")
            .arg("--v=0");
        let mut children = vec![spawn_logged(cmd, &dir.join("kube-scheduler.log"))?];

        let mut cmd = Command::new(&kwok);
        cmd.arg(format!("--kubeconfig={kubeconfig}"))
            .arg(format!("--config={}", stages.display()))
            .arg("--manage-all-nodes=false")
            .arg(format!(
                "--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}={KWOK_NODE_VALUE}"
            ))
            .arg(format!("--cidr={POD_CIDR}"))
            // Renew each Node's Lease as a kubelet does (kwokctl's value):
            // without it the node lifecycle controller marks every Node
            // NotReady, and their pods not ready, 50 s after they join.
            .arg("--node-lease-duration-seconds=40")
            .arg("--node-ip=127.0.0.1");
        children.push(spawn_logged(cmd, &dir.join("kwok.log"))?);

        let mut cmd = Command::new(cp.bin_dir().join("kube-controller-manager"));
        cmd.arg(format!("--kubeconfig={kubeconfig}"))
            .arg("--controllers=node-lifecycle-controller")
            .arg("--leader-elect=false")
            .arg("--secure-port=0")
            .arg("--v=0");
        children.push(spawn_logged(
            cmd,
            &dir.join("kube-controller-manager-nodes.log"),
        )?);

        Ok(Self {
            dir,
            children: Mutex::new(children),
        })
    }

    /// Panic with the logs when the scheduler, kwok or the node lifecycle
    /// controller has exited.
    pub fn ensure_running(&self) {
        let mut children = self.children.lock().expect("children lock");
        for child in children.iter_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "a scheduling process exited early ({status}); logs in {}:\nkube-scheduler: {}\nkwok: {}\nnode lifecycle: {}",
                    self.dir.display(),
                    tail(&self.dir.join("kube-scheduler.log"), 20),
                    tail(&self.dir.join("kwok.log"), 20),
                    tail(&self.dir.join("kube-controller-manager-nodes.log"), 20),
                );
            }
        }
    }

    /// The last `lines` lines of the scheduler's and kwok's logs.
    pub fn logs(&self, lines: usize) -> String {
        format!(
            "kube-scheduler:\n{}\nkwok:\n{}",
            tail(&self.dir.join("kube-scheduler.log"), lines),
            tail(&self.dir.join("kwok.log"), lines)
        )
    }

    /// Create `node` (see [`kwok_node`]) and wait until kwok has made it
    /// Ready and it carries no `not-ready` taint: schedulable as written.
    pub async fn create_node(&self, client: &Client, node: Node) -> Node {
        self.ensure_running();
        let name = node.name_any();
        let nodes: Api<Node> = Api::all(client.clone());
        nodes
            .create(&PostParams::default(), &node)
            .await
            .unwrap_or_else(|e| panic!("creating node {name}: {e}"));
        eventually(
            &format!("node {name} Ready without the not-ready taint"),
            WAIT,
            async || {
                self.ensure_running();
                let node = nodes.get(&name).await.map_err(|e| e.to_string())?;
                if !node_ready(&node) {
                    return Err(format!(
                        "not Ready: {:?}",
                        node.status.map(|s| s.conditions)
                    ));
                }
                let taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
                if taints.iter().any(|t| t.key == NOT_READY_TAINT) {
                    return Err(format!("still tainted: {taints:?}"));
                }
                Ok(())
            },
        )
        .await;
        nodes
            .get(&name)
            .await
            .unwrap_or_else(|e| panic!("reading node {name}: {e}"))
    }
}

/// A Node for kwok named `name` with `labels`, `taints` and `allocatable`
/// (also its capacity), plus the CPU, memory and pod room of a large machine
/// unless `allocatable` names them.
pub fn kwok_node(
    name: &str,
    labels: &[(&str, &str)],
    taints: Vec<Taint>,
    allocatable: &[(&str, &str)],
) -> Node {
    let mut resources: BTreeMap<String, Quantity> =
        [("cpu", "64"), ("memory", "512Gi"), ("pods", "110")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), Quantity(v.to_owned())))
            .collect();
    for (k, v) in allocatable {
        resources.insert((*k).to_owned(), Quantity((*v).to_owned()));
    }
    let mut all_labels: BTreeMap<String, String> = [
        ("kubernetes.io/hostname", name),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        ("type", "kwok"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    for (k, v) in labels {
        all_labels.insert((*k).to_owned(), (*v).to_owned());
    }
    Node {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(all_labels),
            annotations: Some(BTreeMap::from([(
                KWOK_NODE_ANNOTATION.to_owned(),
                KWOK_NODE_VALUE.to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            taints: (!taints.is_empty()).then_some(taints),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            capacity: Some(resources.clone()),
            allocatable: Some(resources),
            ..NodeStatus::default()
        }),
    }
}

/// The taint of a GPU pool's Nodes, as GKE sets it (`=present:NoSchedule`).
pub const GPU_TAINT: &str = "nvidia.com/gpu";
/// The label naming a GPU pool's accelerator, as GKE sets it.
pub const ACCELERATOR_LABEL: &str = "cloud.google.com/gke-accelerator";

/// The GPU pools' taint.
pub fn gpu_taint() -> Taint {
    Taint {
        key: GPU_TAINT.into(),
        value: Some("present".into()),
        effect: "NoSchedule".into(),
        ..Taint::default()
    }
}

/// A GPU pool's Node for kwok: labelled [`ACCELERATOR_LABEL`]`=label`,
/// tainted [`gpu_taint`], offering `gpus` `nvidia.com/gpu`.
pub fn gpu_node(name: &str, label: &str, gpus: &str) -> Node {
    kwok_node(
        name,
        &[(ACCELERATOR_LABEL, label)],
        vec![gpu_taint()],
        &[("nvidia.com/gpu", gpus)],
    )
}

/// The AcceleratorClass `name` of the pool labelled [`ACCELERATOR_LABEL`]
/// `=label`, claiming `devices` GPUs per node and tolerating [`GPU_TAINT`].
pub fn accelerator_class(
    name: &str,
    label: &str,
    devices: i32,
) -> infergate::api::AcceleratorClass {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "AcceleratorClass",
        "metadata": {"name": name},
        "spec": {
            "vendor": "nvidia", "memoryPerDevice": "80Gi", "devicesPerNode": devices,
            "nodeSelector": {ACCELERATOR_LABEL: label},
            "tolerations": [{"key": GPU_TAINT, "operator": "Exists", "effect": "NoSchedule"}]
        }
    }))
    .expect("class json")
}

/// Whether the Node's `Ready` condition is `True`.
pub fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The pod's condition `type_` as `(status, reason, message)`, if set.
pub fn pod_condition(pod: &Pod, type_: &str) -> Option<(String, String, String)> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| {
            (
                c.status.clone(),
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
}

/// How long kwok may take to run a pod once it is bound.
pub const RUN_WAIT: Duration = Duration::from_secs(60);

/// What a kubelet writes of a pod whose one container, `engine` running
/// `image`, is not ready: `waiting` as its state (`{"reason": ..., "message":
/// ...}`) and `last` as its last state (`{}`, or `{"terminated": ...}`).
/// kwok takes a pod to Running and Ready; a test writes this over it with
/// [`write_pod_status`] to play a kubelet that cannot pull or start it.
pub fn container_not_ready(
    image: &str,
    waiting: serde_json::Value,
    last: serde_json::Value,
) -> serde_json::Value {
    let now = "2026-11-26T12:00:00Z";
    serde_json::json!({"status": {
        "phase": "Running",
        "conditions": [
            {"type": "Ready", "status": "False", "lastTransitionTime": now, "reason": "ContainersNotReady"},
            {"type": "ContainersReady", "status": "False", "lastTransitionTime": now, "reason": "ContainersNotReady"},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
            {"type": "Initialized", "status": "True", "lastTransitionTime": now}
        ],
        "containerStatuses": [{
            "name": "engine", "image": image, "imageID": "",
            "ready": false, "restartCount": 4,
            "state": {"waiting": waiting}, "lastState": last
        }]
    }})
}

/// Merge `status` (see [`container_not_ready`]) into pod `ns/name`'s status.
pub async fn write_pod_status(client: &Client, ns: &str, name: &str, status: serde_json::Value) {
    Api::<Pod>::namespaced(client.clone(), ns)
        .patch_status(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(status),
        )
        .await
        .unwrap_or_else(|e| panic!("writing pod {ns}/{name}'s status: {e}"));
}

/// The back-off a kubelet reports for a container that keeps exiting, and
/// its last exit: killed for memory (code 137).
pub fn crash_loop() -> (serde_json::Value, serde_json::Value) {
    (
        serde_json::json!({"reason": "CrashLoopBackOff",
               "message": "back-off 40s restarting failed container=engine"}),
        serde_json::json!({"terminated": {"exitCode": 137, "reason": "OOMKilled",
                              "startedAt": "2026-11-26T12:00:00Z", "finishedAt": "2026-11-26T12:00:00Z"}}),
    )
}
