//! Free devices from watches (issue 49 point 1): what the node and pod
//! watches of `state::room` cost at 1,000 nodes and 20,000 pods, half of
//! them requesting GPUs (run by hand, not in CI):
//!
//! ```text
//! cargo bench --locked --bench room
//! INFERGATE_ROOM_NODES=5000 INFERGATE_ROOM_PODS=100000 cargo bench --locked --bench room
//! ```
//!
//! Every object is the JSON the API server sends (full specs: several
//! containers with env, probes and volume mounts, projected volumes,
//! tolerations, affinity, managed fields of three writers, status with
//! container statuses; nodes with their images, addresses and managed
//! fields), made one at a time so that nothing but the index stays.
//! Each goes through the watch's own path: a watch event line decoded as
//! `WatchEvent<RoomPod>` (or a list page as `ObjectList`) and handed to
//! `state::room::watch::pod_event`. The process runs on mimalloc, as the
//! binary does.
//!
//! It reports the thread CPU time per event (list, add, update, delete;
//! GPU pods and the others apart), the bytes the index holds (its own
//! estimate and the process's VmRSS growth, VmHWM), and what one
//! free-device question costs. Today's figures are in
//! `docs/performance.md`.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::core::{ObjectList, WatchEvent};
use kube::runtime::watcher::Event;
use serde_json::{Value, json};

use infergate::api::AcceleratorClassSpec;
use infergate::state::room::watch::{node_event, pod_event};
use infergate::state::room::{Room, RoomNode, RoomPod};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// This thread's CPU time.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// A `/proc/self/status` field in kB.
fn proc_kb(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

const POOLS: [&str; 2] = ["nvidia-h100-80gb", "nvidia-a100-80gb"];

fn managed(manager: &str, operation: &str, sub: Option<&str>, fields: Value) -> Value {
    let mut m = json!({"manager": manager, "operation": operation, "apiVersion": "v1",
        "time": "2026-12-01T10:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": fields});
    if let Some(s) = sub {
        m["subresource"] = json!(s);
    }
    m
}

/// Node `i`, as the API server sends it: GPU nodes of two pools, 8 devices each.
fn node(i: usize) -> Value {
    let pool = POOLS[i % 2];
    let name = format!("gke-inference-gpu-pool-{i:05}");
    let images: Vec<Value> = (0..30)
        .map(|k| json!({"names": [format!("registry.example.com/team/image-{k}@sha256:{:064x}", k * 7919 + i), format!("registry.example.com/team/image-{k}:v1.{k}")], "sizeBytes": 1_000_000 + k * 7}))
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name, "uid": format!("{:08x}-node-4000-8000-{i:012}", i),
            "resourceVersion": format!("{}", 100_000 + i), "creationTimestamp": "2026-11-01T10:00:00Z",
            "labels": {
                "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/instance-type": "a3-highgpu-8g",
                "cloud.google.com/gke-accelerator": pool, "cloud.google.com/gke-boot-disk": "pd-ssd",
                "cloud.google.com/gke-container-runtime": "containerd", "cloud.google.com/gke-gpu": "true",
                "cloud.google.com/gke-nodepool": format!("gpu-{pool}"), "cloud.google.com/gke-os-distribution": "cos",
                "cloud.google.com/machine-family": "a3", "cloud.google.com/private-node": "false",
                "failure-domain.beta.kubernetes.io/region": "us-central1",
                "failure-domain.beta.kubernetes.io/zone": format!("us-central1-{}", ["a", "b", "c"][i % 3]),
                "kubernetes.io/arch": "amd64", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                "node.kubernetes.io/instance-type": "a3-highgpu-8g",
                "topology.kubernetes.io/region": "us-central1",
                "topology.kubernetes.io/zone": format!("us-central1-{}", ["a", "b", "c"][i % 3]),
                "nvidia.com/gpu.present": "true"
            },
            "annotations": {
                "container.googleapis.com/instance_id": format!("{}", 7_000_000_000u64 + i as u64),
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                "csi.volume.kubernetes.io/nodeid": format!("{{\"pd.csi.storage.gke.io\":\"projects/p/zones/us-central1-a/instances/{name}\"}}")
            },
            "managedFields": [
                managed("kubelet", "Update", None, json!({"f:metadata": {"f:annotations": {".": {}, "f:node.alpha.kubernetes.io/ttl": {}}, "f:labels": {".": {}, "f:kubernetes.io/arch": {}, "f:kubernetes.io/hostname": {}, "f:kubernetes.io/os": {}}}, "f:spec": {"f:podCIDR": {}, "f:providerID": {}}})),
                managed("kube-controller-manager", "Update", None, json!({"f:metadata": {"f:annotations": {"f:node.alpha.kubernetes.io/ttl": {}}}, "f:spec": {"f:podCIDRs": {".": {}, "v:\"10.4.0.0/24\"": {}}}})),
                managed("kubelet", "Update", Some("status"), json!({"f:status": {"f:allocatable": {"f:nvidia.com/gpu": {}, "f:cpu": {}, "f:memory": {}}, "f:capacity": {"f:nvidia.com/gpu": {}}, "f:conditions": {"k:{\"type\":\"Ready\"}": {"f:lastHeartbeatTime": {}, "f:status": {}}}, "f:images": {}, "f:nodeInfo": {"f:bootID": {}}}}))
            ]
        },
        "spec": {
            "podCIDR": format!("10.{}.{}.0/24", i / 256, i % 256), "podCIDRs": [format!("10.{}.{}.0/24", i / 256, i % 256)],
            "providerID": format!("gce://project/us-central1-a/{name}"),
            "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
        },
        "status": {
            "capacity": {"cpu": "208", "ephemeral-storage": "507944172Ki", "hugepages-1Gi": "0", "hugepages-2Mi": "0", "memory": "1891052140Ki", "nvidia.com/gpu": "8", "pods": "110"},
            "allocatable": {"cpu": "207690m", "ephemeral-storage": "210721501558", "hugepages-1Gi": "0", "hugepages-2Mi": "0", "memory": "1840012396Ki", "nvidia.com/gpu": "8", "pods": "110"},
            "conditions": [
                {"type": "FrequentContainerdRestart", "status": "False", "lastHeartbeatTime": "2026-12-01T10:00:00Z", "lastTransitionTime": "2026-11-01T10:00:00Z", "reason": "NoFrequentContainerdRestart", "message": "containerd is functioning properly"},
                {"type": "KernelDeadlock", "status": "False", "lastHeartbeatTime": "2026-12-01T10:00:00Z", "lastTransitionTime": "2026-11-01T10:00:00Z", "reason": "KernelHasNoDeadlock", "message": "kernel has no deadlock"},
                {"type": "MemoryPressure", "status": "False", "lastHeartbeatTime": "2026-12-01T10:00:00Z", "lastTransitionTime": "2026-11-01T10:00:00Z", "reason": "KubeletHasSufficientMemory", "message": "kubelet has sufficient memory available"},
                {"type": "DiskPressure", "status": "False", "lastHeartbeatTime": "2026-12-01T10:00:00Z", "lastTransitionTime": "2026-11-01T10:00:00Z", "reason": "KubeletHasNoDiskPressure", "message": "kubelet has no disk pressure"},
                {"type": "PIDPressure", "status": "False", "lastHeartbeatTime": "2026-12-01T10:00:00Z", "lastTransitionTime": "2026-11-01T10:00:00Z", "reason": "KubeletHasSufficientPID", "message": "kubelet has sufficient PID available"},
                {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-12-01T10:00:00Z", "lastTransitionTime": "2026-11-01T10:00:00Z", "reason": "KubeletReady", "message": "kubelet is posting ready status"}
            ],
            "addresses": [{"type": "InternalIP", "address": format!("10.128.{}.{}", i / 256, i % 256)}, {"type": "ExternalIP", "address": "34.1.2.3"}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": format!("{i:032x}"), "systemUUID": format!("{i:032x}"), "bootID": format!("{i:032x}"), "kernelVersion": "6.1.100+", "osImage": "Container-Optimized OS from Google", "containerRuntimeVersion": "containerd://1.7.24", "kubeletVersion": "v1.36.3-gke.100", "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"},
            "images": images
        }
    })
}

fn env_vars() -> Value {
    (0..15)
        .map(|k| json!({"name": format!("ENGINE_SETTING_{k}"), "value": format!("value-{k}-{}", "x".repeat(k))}))
        .chain(std::iter::once(json!({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}})))
        .collect()
}

/// Pod `i` on `node`, as the API server sends it; `gpus` devices for its
/// engine (0: a CPU-only pod), in `phase`, at `rv`.
fn pod(i: usize, node: &str, gpus: u32, phase: &str, rv: usize) -> Value {
    let ns = format!("team-{}", i % 50);
    let name = format!("chat-{i:06}-7d9f8b6c5d-x{:04x}", i % 65_536);
    let mut limits = json!({"cpu": "8", "memory": "64Gi"});
    let mut requests = json!({"cpu": "4", "memory": "32Gi"});
    if gpus > 0 {
        limits["nvidia.com/gpu"] = json!(gpus.to_string());
        requests["nvidia.com/gpu"] = json!(gpus.to_string());
    }
    let probe = json!({"httpGet": {"path": "/health", "port": 8000, "scheme": "HTTP"}, "initialDelaySeconds": 30, "timeoutSeconds": 5, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3});
    let mounts = json!([
        {"name": "shm", "mountPath": "/dev/shm"}, {"name": "cache", "mountPath": "/root/.cache/huggingface"},
        {"name": "config", "mountPath": "/etc/engine", "readOnly": true},
        {"name": "kube-api-access-abcde", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}
    ]);
    let status_of = |c: &str, image: &str| json!({"name": c, "image": image, "imageID": format!("{image}@sha256:{:064x}", i), "containerID": format!("containerd://{:064x}", i * 3 + 1), "ready": true, "started": true, "restartCount": 0, "state": {"running": {"startedAt": "2026-12-01T10:05:00Z"}}, "lastState": {}});
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "generateName": format!("chat-{i:06}-7d9f8b6c5d-"), "namespace": ns,
            "uid": format!("{:08x}-pod0-4000-8000-{i:012}", i), "resourceVersion": rv.to_string(),
            "creationTimestamp": "2026-12-01T10:00:00Z",
            "labels": {"app.kubernetes.io/name": "chat", "app.kubernetes.io/instance": format!("chat-{i}"), "app.kubernetes.io/managed-by": "infergate", "infergate.dev/service": format!("chat-{i}"), "infergate.dev/track": "primary", "pod-template-hash": "7d9f8b6c5d"},
            "annotations": {"infergate.dev/template-hash": format!("{:016x}", i), "kubectl.kubernetes.io/default-container": "engine", "prometheus.io/scrape": "true"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("chat-{i:06}-7d9f8b6c5d"), "uid": format!("{:08x}-rs00-4000-8000-{i:012}", i), "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [
                managed("kube-controller-manager", "Update", None, json!({"f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:app.kubernetes.io/name": {}, "f:infergate.dev/service": {}, "f:infergate.dev/track": {}}, "f:ownerReferences": {".": {}, "k:{\"uid\":\"x\"}": {}}}, "f:spec": {"f:containers": {"k:{\"name\":\"engine\"}": {".": {}, "f:args": {}, "f:env": {".": {}, "k:{\"name\":\"HF_TOKEN\"}": {".": {}, "f:name": {}, "f:valueFrom": {}}}, "f:image": {}, "f:livenessProbe": {}, "f:ports": {}, "f:readinessProbe": {}, "f:resources": {"f:limits": {}, "f:requests": {}}, "f:volumeMounts": {}}, "k:{\"name\":\"proxy\"}": {}, "k:{\"name\":\"logs\"}": {}}, "f:initContainers": {}, "f:tolerations": {}, "f:volumes": {}}})),
                managed("kube-scheduler", "Update", Some("status"), json!({"f:status": {"f:conditions": {"k:{\"type\":\"PodScheduled\"}": {".": {}, "f:status": {}, "f:type": {}}}}})),
                managed("kubelet", "Update", Some("status"), json!({"f:status": {"f:conditions": {"k:{\"type\":\"ContainersReady\"}": {}, "k:{\"type\":\"Initialized\"}": {}, "k:{\"type\":\"Ready\"}": {}}, "f:containerStatuses": {}, "f:hostIP": {}, "f:initContainerStatuses": {}, "f:phase": {}, "f:podIP": {}, "f:podIPs": {}, "f:startTime": {}}}))
            ]
        },
        "spec": {
            "initContainers": [{"name": "fetch-model", "image": "registry.example.com/fetcher:1.2", "args": ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--to", "/root/.cache/huggingface"], "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}, "volumeMounts": mounts.clone(), "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"}],
            "containers": [
                {"name": "engine", "image": "registry.example.com/vllm/vllm-openai:v0.9.2", "args": ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--port", "8000", "--tensor-parallel-size", gpus.max(1).to_string(), "--max-model-len", "32768", "--gpu-memory-utilization", "0.92", "--served-model-name", "chat"], "ports": [{"name": "http", "containerPort": 8000, "protocol": "TCP"}], "env": env_vars(), "resources": {"limits": limits, "requests": requests}, "volumeMounts": mounts.clone(), "livenessProbe": probe.clone(), "readinessProbe": probe.clone(), "startupProbe": probe, "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent", "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}},
                {"name": "proxy", "image": "registry.example.com/envoy:v1.31", "args": ["-c", "/etc/envoy/envoy.yaml"], "ports": [{"name": "proxy", "containerPort": 9000, "protocol": "TCP"}], "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}, "volumeMounts": mounts.clone(), "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"},
                {"name": "logs", "image": "registry.example.com/fluent-bit:3.1", "env": [{"name": "NODE", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}}}], "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}}, "volumeMounts": mounts, "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"}
            ],
            "volumes": [
                {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}},
                {"name": "cache", "emptyDir": {}},
                {"name": "config", "configMap": {"name": "engine-config", "defaultMode": 420}},
                {"name": "kube-api-access-abcde", "projected": {"defaultMode": 420, "sources": [{"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}, {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}, {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}
            ],
            "nodeName": node, "nodeSelector": {"cloud.google.com/gke-accelerator": POOLS[i % 2]},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}, {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
            "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": {"labelSelector": {"matchLabels": {"infergate.dev/service": format!("chat-{i}")}}, "topologyKey": "kubernetes.io/hostname"}}]}},
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst", "serviceAccountName": "default", "serviceAccount": "default", "securityContext": {}, "schedulerName": "default-scheduler", "priority": 0, "enableServiceLinks": true, "preemptionPolicy": "PreemptLowerPriority"
        },
        "status": {
            "phase": phase,
            "conditions": [
                {"type": "PodReadyToStartContainers", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-12-01T10:01:00Z"},
                {"type": "Initialized", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-12-01T10:04:00Z"},
                {"type": "Ready", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-12-01T10:06:00Z"},
                {"type": "ContainersReady", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-12-01T10:06:00Z"},
                {"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-12-01T10:00:00Z"}
            ],
            "hostIP": "10.128.0.1", "hostIPs": [{"ip": "10.128.0.1"}], "podIP": format!("10.4.{}.{}", i / 256 % 256, i % 256), "podIPs": [{"ip": format!("10.4.{}.{}", i / 256 % 256, i % 256)}],
            "startTime": "2026-12-01T10:00:00Z", "qosClass": "Burstable",
            "initContainerStatuses": [{"name": "fetch-model", "image": "registry.example.com/fetcher:1.2", "imageID": "x", "containerID": "containerd://y", "ready": true, "started": false, "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": "2026-12-01T10:01:00Z", "finishedAt": "2026-12-01T10:04:00Z"}}, "lastState": {}}],
            "containerStatuses": [status_of("engine", "registry.example.com/vllm/vllm-openai:v0.9.2"), status_of("proxy", "registry.example.com/envoy:v1.31"), status_of("logs", "registry.example.com/fluent-bit:3.1")]
        }
    })
}

/// The pods of the run: `(index, node, gpus, phase)`. Half request one
/// GPU, spread over the nodes: on each node the first 7 run and the rest
/// have finished (jobs not yet collected: the API server's field selector
/// would not list them, a watch delivers their last change), so each node
/// has one device free at 20,000 pods; the other half are CPU-only pods on
/// the same nodes.
fn plan(nodes: usize, pods: usize) -> Vec<(usize, String, u32, &'static str)> {
    (0..pods)
        .map(|i| {
            let j = i / 2;
            let node = format!("gke-inference-gpu-pool-{:05}", j % nodes);
            match (i % 2, j / nodes.max(1)) {
                (0, 0..7) => (i, node, 1, "Running"),
                (0, _) => (i, node, 1, "Succeeded"),
                _ => (i, node, 0, "Running"),
            }
        })
        .collect()
}

/// A watch line as the API server writes it: `type` first (a decoder
/// that met `object` first would have to buffer it).
fn line(kind: &str, object: &Value) -> Vec<u8> {
    let mut out = format!("{{\"type\":\"{kind}\",\"object\":").into_bytes();
    serde_json::to_writer(&mut out, object).expect("encode");
    out.push(b'}');
    out
}

/// The pages of the pod list, made and encoded as the run makes them.
fn pod_page(page: &[(usize, String, u32, &'static str)]) -> Vec<u8> {
    let items: Vec<Value> = page
        .iter()
        .map(|(i, node, gpus, phase)| pod(*i, node, *gpus, phase, 200_000 + i))
        .collect();
    serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "1"}, "items": items})).expect("encode")
}

/// Decode one watch line as the watcher does and hand its event on.
fn pod_line(room: &Room, bytes: &[u8]) {
    match serde_json::from_slice::<WatchEvent<RoomPod>>(bytes).expect("decode") {
        WatchEvent::Added(p) | WatchEvent::Modified(p) => pod_event(room, Event::Apply(p)),
        WatchEvent::Deleted(p) => pod_event(room, Event::Delete(p)),
        _ => {}
    }
}

#[derive(Default)]
struct Cpu {
    gpu: (Duration, usize, usize),
    other: (Duration, usize, usize),
}

impl Cpu {
    fn add(&mut self, gpus: u32, spent: Duration, bytes: usize) {
        let slot = if gpus > 0 {
            &mut self.gpu
        } else {
            &mut self.other
        };
        slot.0 += spent;
        slot.1 += 1;
        slot.2 += bytes;
    }

    fn row(&self, what: &str) {
        let per = |(d, n, _): (Duration, usize, usize)| d.as_secs_f64() * 1e6 / n.max(1) as f64;
        let all = (
            self.gpu.0 + self.other.0,
            self.gpu.1 + self.other.1,
            self.gpu.2 + self.other.2,
        );
        println!(
            "| {what} | {:.2} µs | {:.2} µs | {:.2} µs | {:.1} KB |",
            per(all),
            per(self.gpu),
            per(self.other),
            all.2 as f64 / all.1.max(1) as f64 / 1000.0
        );
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let n_nodes = env_or("INFERGATE_ROOM_NODES", 1000);
    let n_pods = env_or("INFERGATE_ROOM_PODS", 20_000);
    let room = Room::default();
    room.set_watched();
    let plan = plan(n_nodes, n_pods);
    // What making the objects costs the allocator (a page of JSON values
    // and its bytes, a node list page) is paid once before the baseline:
    // the RSS growth measured after it is the index's (and the decoders').
    for page in plan.chunks(100).take(3) {
        std::hint::black_box(pod_page(page));
    }
    std::hint::black_box(
        serde_json::to_vec(&(0..100).map(node).collect::<Vec<_>>()).expect("encode"),
    );
    let rss0 = proc_kb("VmRSS:");

    // The node watch's first list, a page of 100 at a time (the pages'
    // encoding included: nodes are few).
    let start = thread_cpu();
    node_event(&room, Event::Init);
    for page in (0..n_nodes).collect::<Vec<_>>().chunks(100) {
        let body = serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "NodeList", "metadata": {"resourceVersion": "1"}, "items": page.iter().map(|i| node(*i)).collect::<Vec<_>>()})).expect("encode");
        let list: ObjectList<RoomNode> = serde_json::from_slice(&body).expect("decode");
        for n in list.items {
            node_event(&room, Event::InitApply(n));
        }
    }
    node_event(&room, Event::InitDone);
    let nodes_cpu = thread_cpu() - start;

    // The pod watch's first list (pages of 100), then every pod changed
    // once and deleted, as watch events.
    let mut list_cpu = Cpu::default();
    pod_event(&room, Event::Init);
    for page in plan.chunks(100) {
        let body = pod_page(page);
        let t = thread_cpu();
        let list: ObjectList<RoomPod> = serde_json::from_slice(&body).expect("decode");
        for p in list.items {
            pod_event(&room, Event::InitApply(p));
        }
        let spent = thread_cpu() - t;
        for (_, _, gpus, _) in page {
            list_cpu.add(*gpus, spent / page.len() as u32, body.len() / page.len());
        }
    }
    pod_event(&room, Event::InitDone);
    let (held_pods, held_nodes) = room.held();
    let held_bytes = room.held_bytes();
    let rss_listed = proc_kb("VmRSS:");
    let hwm_listed = proc_kb("VmHWM:");

    let class = |pool: &str| -> AcceleratorClassSpec {
        serde_json::from_value(json!({"vendor": "nvidia", "memoryPerDevice": "80Gi", "devicesPerNode": 8,
            "nodeSelector": {"cloud.google.com/gke-accelerator": pool},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}))
        .expect("class")
    };
    let h100 = class(POOLS[0]);
    let free = room.free(&h100).expect("synced");
    let queries = 2_000;
    let t = thread_cpu();
    for _ in 0..queries {
        std::hint::black_box(room.free(std::hint::black_box(&h100)));
    }
    let cached = (thread_cpu() - t) / queries;
    // A pod event between questions: each is a pass over the nodes.
    let (i, node, gpus, phase) = &plan[0];
    let one = serde_json::from_value::<RoomPod>(pod(*i, node, *gpus, phase, 1)).expect("pod");
    let mut spent = Duration::ZERO;
    for _ in 0..queries {
        pod_event(&room, Event::Delete(one.clone()));
        pod_event(&room, Event::Apply(one.clone()));
        let t = thread_cpu();
        std::hint::black_box(room.free(std::hint::black_box(&h100)));
        spent += thread_cpu() - t;
    }
    let query = spent / queries;

    let mut add = Cpu::default();
    let mut update = Cpu::default();
    let mut delete = Cpu::default();
    let mut skim = Cpu::default();
    let mut full = Cpu::default();
    for (i, node, gpus, phase) in &plan {
        // Baselines on the same line: the JSON read and thrown away (the
        // floor of any decoder), and decoded as a whole k8s-openapi Pod.
        let base = line("MODIFIED", &pod(*i, node, *gpus, phase, 600_000 + i));
        let t = thread_cpu();
        std::hint::black_box(serde_json::from_slice::<serde::de::IgnoredAny>(&base).expect("skim"));
        skim.add(*gpus, thread_cpu() - t, base.len());
        let t = thread_cpu();
        std::hint::black_box(serde_json::from_slice::<WatchEvent<Pod>>(&base).expect("pod"));
        full.add(*gpus, thread_cpu() - t, base.len());
        // Deleted, added back, then changed (a new resourceVersion and a
        // status write): each a watch line.
        let del = line("DELETED", &pod(*i, node, *gpus, phase, 300_000 + i));
        let t = thread_cpu();
        pod_line(&room, &del);
        delete.add(*gpus, thread_cpu() - t, del.len());
        let added = line("ADDED", &pod(*i, node, *gpus, phase, 400_000 + i));
        let t = thread_cpu();
        pod_line(&room, &added);
        add.add(*gpus, thread_cpu() - t, added.len());
        let changed = line("MODIFIED", &pod(*i, node, *gpus, phase, 500_000 + i));
        let t = thread_cpu();
        pod_line(&room, &changed);
        update.add(*gpus, thread_cpu() - t, changed.len());
    }
    assert_eq!(
        room.free(&h100),
        Some(free.clone()),
        "the same after every pod came back"
    );
    let rss_end = proc_kb("VmRSS:");
    let hwm_end = proc_kb("VmHWM:");

    println!(
        "{n_nodes} nodes ({held_nodes} held), {n_pods} pods ({held_pods} held: bound, unfinished, requesting devices)"
    );
    println!(
        "node list: {:.2} µs per node (decode + index)",
        nodes_cpu.as_secs_f64() * 1e6 / n_nodes.max(1) as f64
    );
    println!();
    println!(
        "| pod event (thread CPU, decode + index) | all | GPU pods | other pods | bytes per object |"
    );
    println!("|---|---|---|---|---|");
    list_cpu.row("list (pages of 100)");
    add.row("ADDED");
    update.row("MODIFIED");
    delete.row("DELETED");
    skim.row("baseline: the line read and discarded (`IgnoredAny`)");
    full.row("baseline: the line decoded as a whole `Pod`, not indexed");
    println!();
    println!(
        "index: {:.2} MB held (its estimate), {} bytes per held pod and node on average",
        held_bytes as f64 / 1e6,
        held_bytes / (held_pods + held_nodes).max(1)
    );
    println!(
        "RSS: {:.1} MB before, {:.1} MB after the lists (+{:.1} MB), {:.1} MB after 3 x {n_pods} events; VmHWM {:.1} MB after the lists, {:.1} MB at the end",
        rss0 as f64 / 1000.0,
        rss_listed as f64 / 1000.0,
        rss_listed.saturating_sub(rss0) as f64 / 1000.0,
        rss_end as f64 / 1000.0,
        hwm_listed as f64 / 1000.0,
        hwm_end as f64 / 1000.0
    );
    println!(
        "free devices of one class ({} nodes, {} free): {:.1} µs per question after a change, {:.2} µs asked again before the next",
        free.nodes,
        free.devices,
        query.as_secs_f64() * 1e6,
        cached.as_secs_f64() * 1e6
    );
}
