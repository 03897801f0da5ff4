//! End-to-end with the real LeaderWorkerSet controller (built from its Go
//! module at the pinned version, its CRDs installed, its webhooks
//! registered by URL), kube-controller-manager's StatefulSet controller and
//! garbage collector, the real kube-scheduler and kwok running the pods on
//! fake GPU Nodes (eight `nvidia.com/gpu` each, tainted and labelled as GKE
//! does it).
//!
//! A LeaderWorkerSet of two groups of two, each pod asking for a whole Node's
//! eight GPUs: the controller makes the leader StatefulSet, a worker
//! StatefulSet per group and the headless Service; the StatefulSet
//! controller makes the pods, which the pod webhook labels and gives their
//! `LWS_*` environment; the scheduler puts them on four Nodes; kwok runs
//! them and the LeaderWorkerSet counts two ready groups. Scaled to three
//! through `/scale` with no Node free, the third group waits unschedulable;
//! two Nodes more and it runs. Deleted, the LeaderWorkerSet takes its
//! StatefulSets, pods and Service with it through the garbage collector.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::support::lws::{
    LWS_API_VERSION, LWS_GROUP_INDEX_LABEL, LWS_NAME_LABEL, LWS_WORKER_INDEX_LABEL, Lws,
    leaderworkersets,
};
use crate::support::scheduler::{
    ACCELERATOR_LABEL, GPU_TAINT, Scheduling, gpu_node, pod_condition, scheduling,
};
use crate::support::{control_plane, eventually, get};

/// How long the controllers, the scheduler and kwok may take for a step.
const STEP: Duration = Duration::from_secs(90);

/// The LeaderWorkerSet's name.
const NAME: &str = "llama";

/// What a test runs against: a client, the scheduler and kwok, the
/// LeaderWorkerSet controller, a fresh namespace.
struct Env {
    client: Client,
    sched: &'static Scheduling,
    lws: &'static Lws,
    ns: String,
}

async fn setup(prefix: &str) -> Env {
    crate::support::init_tracing();
    let cp = control_plane().await;
    let sched = scheduling(cp).await;
    let lws = cp.start_lws().await;
    let ns = cp.fresh_namespace(prefix).await;
    Env {
        client: cp.client().await,
        sched,
        lws,
        ns,
    }
}

impl Env {
    /// Add GPU Nodes `<pool>-<i>` for each `i` of `range` to the pool
    /// `pool` (eight GPUs each), Ready.
    async fn add_nodes(&self, pool: &str, range: std::ops::Range<usize>) -> Vec<String> {
        let mut names = Vec::new();
        for i in range {
            let node = self
                .sched
                .create_node(&self.client, gpu_node(&format!("{pool}-{i}"), pool, "8"))
                .await;
            names.push(node.name_any());
        }
        names
    }

    /// Panic with the logs when a process the test needs has exited.
    fn ensure_running(&self) {
        self.lws.ensure_running();
        self.sched.ensure_running();
    }

    /// What the controllers said last, for a timeout's message.
    fn logs(&self) -> String {
        format!(
            "{}\nLeaderWorkerSet controller:\n{}",
            self.sched.logs(5),
            self.lws.logs(10)
        )
    }

    /// The LeaderWorkerSet's pods by name.
    async fn pods(&self) -> BTreeMap<String, Pod> {
        Api::<Pod>::namespaced(self.client.clone(), &self.ns)
            .list(&ListParams::default().labels(&format!("{LWS_NAME_LABEL}={NAME}")))
            .await
            .unwrap_or_else(|e| panic!("listing the pods of {NAME}: {e}"))
            .items
            .into_iter()
            .map(|p| (p.name_any(), p))
            .collect()
    }

    /// Wait until exactly the pods `names` exist, all Running and Ready
    /// (kwok ran them); return them.
    async fn wait_pods_ready(&self, names: &[String]) -> BTreeMap<String, Pod> {
        let want: BTreeSet<&str> = names.iter().map(String::as_str).collect();
        eventually(&format!("pods {want:?} Ready"), STEP, async || {
            self.ensure_running();
            let pods = self.pods().await;
            let have: BTreeSet<&str> = pods.keys().map(String::as_str).collect();
            if have != want {
                return Err(format!("pods {have:?}; {}", self.logs()));
            }
            let not_ready: Vec<&str> = pods
                .iter()
                .filter(|(_, p)| pod_condition(p, "Ready").map(|c| c.0).as_deref() != Some("True"))
                .map(|(n, _)| n.as_str())
                .collect();
            if !not_ready.is_empty() {
                return Err(format!("not Ready: {not_ready:?}; {}", self.logs()));
            }
            Ok(pods.clone())
        })
        .await
    }

    /// Wait until the LeaderWorkerSet's `status.readyReplicas` is `want`.
    async fn wait_ready_groups(&self, want: i64) {
        let sets = leaderworkersets(&self.client, &self.ns);
        eventually(
            &format!("{NAME} with {want} ready groups"),
            STEP,
            async || {
                self.ensure_running();
                let set = sets.get(NAME).await.map_err(|e| e.to_string())?;
                let ready = set.data["status"]["readyReplicas"].as_i64().unwrap_or(0);
                (ready == want)
                    .then_some(())
                    .ok_or_else(|| format!("status {}; {}", set.data["status"], self.logs()))
            },
        )
        .await;
    }
}

/// The LeaderWorkerSet [`NAME`] in `ns`: `replicas` groups of two, every
/// pod asking for eight GPUs of the Nodes labelled `pool` (tolerating the
/// GPU taint), the rollout configuration written out (the controller reads
/// it), groups recreated when a pod restarts, workers started once their
/// leader exists.
fn leaderworkerset(ns: &str, pool: &str, replicas: i64) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": LWS_API_VERSION,
        "kind": "LeaderWorkerSet",
        "metadata": {"name": NAME, "namespace": ns},
        "spec": {
            "replicas": replicas,
            "startupPolicy": "LeaderCreated",
            "rolloutStrategy": {
                "type": "RollingUpdate",
                "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0}
            },
            "leaderWorkerTemplate": {
                "size": 2,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "workerTemplate": {"spec": {
                    "containers": [{
                        "name": "vllm",
                        "image": "registry.example.com/vllm:0.11",
                        "resources": {"limits": {"nvidia.com/gpu": "8"}}
                    }],
                    "tolerations": [{
                        "key": GPU_TAINT, "operator": "Exists", "effect": "NoSchedule"
                    }],
                    "nodeSelector": {ACCELERATOR_LABEL: pool}
                }}
            }
        }
    }))
    .expect("LeaderWorkerSet json")
}

/// The pod names of groups `groups` of [`NAME`]: the leader `<name>-<g>`,
/// its worker `<name>-<g>-1`.
fn pod_names(groups: std::ops::Range<usize>) -> Vec<String> {
    groups
        .flat_map(|g| [format!("{NAME}-{g}"), format!("{NAME}-{g}-1")])
        .collect()
}

/// The value of the environment variable `name` of the pod's first container.
fn env_of(pod: &Pod, name: &str) -> Option<String> {
    pod.spec
        .as_ref()?
        .containers
        .first()?
        .env
        .as_ref()?
        .iter()
        .find(|e| e.name == name)?
        .value
        .clone()
}

/// The kind and name of the object's controller (its owner reference).
fn controller_of<K: ResourceExt>(obj: &K) -> Option<(String, String)> {
    obj.owner_references()
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| (o.kind.clone(), o.name.clone()))
}

/// Check what the pod webhook wrote on pod `name` of group `group` (worker
/// index `worker`) in namespace `ns`.
fn assert_lws_pod(pods: &BTreeMap<String, Pod>, ns: &str, group: usize, worker: usize) {
    let name = if worker == 0 {
        format!("{NAME}-{group}")
    } else {
        format!("{NAME}-{group}-{worker}")
    };
    let pod = pods.get(&name).unwrap_or_else(|| panic!("no pod {name}"));
    let labels = pod.labels();
    assert_eq!(
        labels.get(LWS_NAME_LABEL).map(String::as_str),
        Some(NAME),
        "{name}: {labels:?}"
    );
    assert_eq!(
        labels.get(LWS_GROUP_INDEX_LABEL),
        Some(&group.to_string()),
        "{name}: {labels:?}"
    );
    assert_eq!(
        labels.get(LWS_WORKER_INDEX_LABEL),
        Some(&worker.to_string()),
        "{name}: {labels:?}"
    );
    assert_eq!(
        env_of(pod, "LWS_LEADER_ADDRESS"),
        Some(format!("{NAME}-{group}.{NAME}.{ns}")),
        "{name}'s leader address"
    );
    assert_eq!(
        env_of(pod, "LWS_WORKER_INDEX"),
        Some(worker.to_string()),
        "{name}"
    );
    assert_eq!(
        env_of(pod, "LWS_GROUP_SIZE").as_deref(),
        Some("2"),
        "{name}"
    );
}

/// The Nodes the pods run on; every pod has one, and no two share it.
fn distinct_nodes(pods: &BTreeMap<String, Pod>) -> BTreeSet<String> {
    let nodes: Vec<String> = pods
        .iter()
        .map(|(name, p)| {
            p.spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_else(|| panic!("pod {name} is not bound"))
        })
        .collect();
    let distinct: BTreeSet<String> = nodes.iter().cloned().collect();
    assert_eq!(distinct.len(), pods.len(), "one Node per pod: {nodes:?}");
    distinct
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaderworkerset_runs_its_groups_on_gpu_nodes_scales_and_is_collected() {
    let env = setup("lws").await;
    let (client, ns) = (env.client.clone(), env.ns.clone());
    let pool = format!("lws-gpu-{}", std::process::id());
    let mut nodes = env.add_nodes(&pool, 0..4).await;
    let sets = leaderworkersets(&client, &ns);
    sets.create(&PostParams::default(), &leaderworkerset(&ns, &pool, 2))
        .await
        .unwrap_or_else(|e| panic!("creating LeaderWorkerSet {ns}/{NAME}: {e}"));

    // Its StatefulSets: the leaders' owned by the LeaderWorkerSet, each
    // group's workers' by its leader pod.
    let statefulsets = Api::<StatefulSet>::namespaced(client.clone(), &ns);
    for (name, owner) in [
        (NAME.to_owned(), ("LeaderWorkerSet", NAME.to_owned())),
        (format!("{NAME}-0"), ("Pod", format!("{NAME}-0"))),
        (format!("{NAME}-1"), ("Pod", format!("{NAME}-1"))),
    ] {
        let sts = eventually(&format!("StatefulSet {ns}/{name}"), STEP, async || {
            env.ensure_running();
            statefulsets
                .get_opt(&name)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("none yet; {}", env.logs()))
        })
        .await;
        assert_eq!(
            controller_of(&sts),
            Some((owner.0.to_owned(), owner.1.clone())),
            "StatefulSet {name}'s controller"
        );
    }

    // Four pods, labelled and given their environment by the pod webhook,
    // on four Nodes (each takes a whole Node's GPUs), Running and Ready.
    let pods = env.wait_pods_ready(&pod_names(0..2)).await;
    for group in 0..2 {
        for worker in 0..2 {
            assert_lws_pod(&pods, &ns, group, worker);
        }
    }
    let used = distinct_nodes(&pods);
    assert!(
        used.iter().all(|n| nodes.contains(n)),
        "on the pool's Nodes: {used:?}"
    );

    // The headless Service the pods' subdomain names.
    let svc = get::<Service>(&client, &ns, NAME)
        .await
        .unwrap_or_else(|| panic!("no Service {ns}/{NAME}"));
    let spec = svc.spec.clone().unwrap_or_default();
    assert_eq!(
        spec.cluster_ip.as_deref(),
        Some("None"),
        "headless: {spec:?}"
    );
    assert_eq!(spec.publish_not_ready_addresses, Some(true), "{spec:?}");
    assert_eq!(
        controller_of(&svc),
        Some(("LeaderWorkerSet".to_owned(), NAME.to_owned()))
    );
    for (name, pod) in &pods {
        let subdomain = pod.spec.as_ref().and_then(|s| s.subdomain.as_deref());
        assert_eq!(subdomain, Some(NAME), "{name}'s subdomain");
    }
    env.wait_ready_groups(2).await;

    // Scaled to three through /scale, with every Node taken: the third
    // group's pods wait, unschedulable, and two groups stay ready.
    let scale = sets
        .patch_scale(
            NAME,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap_or_else(|e| panic!("patching {NAME}/scale: {e}"));
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(3));
    let leader = format!("{NAME}-2");
    eventually(&format!("pod {leader} unschedulable"), STEP, async || {
        env.ensure_running();
        let pod = get::<Pod>(&client, &ns, &leader)
            .await
            .ok_or_else(|| format!("no pod yet; {}", env.logs()))?;
        match pod_condition(&pod, "PodScheduled") {
            Some((status, reason, message)) if status == "False" && reason == "Unschedulable" => {
                Ok(message)
            }
            other => Err(format!("PodScheduled {other:?}")),
        }
    })
    .await;
    let set = sets.get(NAME).await.expect("LeaderWorkerSet");
    assert_eq!(set.data["spec"]["replicas"], json!(3));
    assert_eq!(
        set.data["status"]["readyReplicas"],
        json!(2),
        "two groups ready while the third waits: {}",
        set.data["status"]
    );

    // Room for it: the third group lands on the new Nodes and runs.
    let added = env.add_nodes(&pool, 4..6).await;
    nodes.extend(added.iter().cloned());
    let pods = env.wait_pods_ready(&pod_names(0..3)).await;
    for worker in 0..2 {
        assert_lws_pod(&pods, &ns, 2, worker);
    }
    let used = distinct_nodes(&pods);
    for name in [format!("{NAME}-2"), format!("{NAME}-2-1")] {
        let node = pods[&name].spec.as_ref().and_then(|s| s.node_name.clone());
        assert!(
            node.as_ref().is_some_and(|n| added.contains(n)),
            "{name} on a new Node: {node:?}"
        );
    }
    assert_eq!(used.len(), 6);
    env.wait_ready_groups(3).await;

    // Deleted: the garbage collector takes the StatefulSets, the pods and
    // the Service.
    sets.delete(NAME, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("deleting {NAME}: {e}"));
    let services = Api::<Service>::namespaced(client.clone(), &ns);
    eventually(&format!("{NAME}'s children collected"), STEP, async || {
        env.ensure_running();
        let mut left: Vec<String> = Vec::new();
        for name in [
            NAME.to_owned(),
            format!("{NAME}-0"),
            format!("{NAME}-1"),
            format!("{NAME}-2"),
        ] {
            if statefulsets
                .get_opt(&name)
                .await
                .map_err(|e| e.to_string())?
                .is_some()
            {
                left.push(format!("StatefulSet {name}"));
            }
        }
        left.extend(env.pods().await.into_keys().map(|p| format!("pod {p}")));
        if services
            .get_opt(NAME)
            .await
            .map_err(|e| e.to_string())?
            .is_some()
        {
            left.push(format!("Service {NAME}"));
        }
        if sets
            .get_opt(NAME)
            .await
            .map_err(|e| e.to_string())?
            .is_some()
        {
            left.push(format!("LeaderWorkerSet {NAME}"));
        }
        left.is_empty()
            .then_some(())
            .ok_or_else(|| format!("left: {left:?}"))
    })
    .await;
}

/// The LeaderWorkerSet webhooks answer as the API server's admission:
/// defaults written into a stored object, and an invalid one refused with
/// the controller's words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaderworkerset_admission_defaults_and_refuses() {
    let env = setup("lws-admission").await;
    let sets = leaderworkersets(&env.client, &env.ns);
    let mut set = leaderworkerset(&env.ns, "no-such-pool", 1);
    set.data["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("rolloutStrategy");
    let created = sets
        .create(&PostParams::default(), &set)
        .await
        .expect("creating a LeaderWorkerSet without a rollout strategy");
    let spec: &Value = &created.data["spec"];
    assert_eq!(
        spec["rolloutStrategy"],
        json!({"type": "RollingUpdate", "rollingUpdateConfiguration":
               {"maxUnavailable": 1, "maxSurge": 0, "partition": 0}}),
        "defaulted by the mutating webhook: {spec}"
    );
    assert_eq!(spec["networkConfig"]["subdomainPolicy"], json!("Shared"));

    let mut bad = leaderworkerset(&env.ns, "no-such-pool", 1);
    bad.metadata.name = Some("bad".into());
    bad.data["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"] =
        json!({"maxUnavailable": 0, "maxSurge": 0});
    let err = sets
        .create(&PostParams::default(), &bad)
        .await
        .expect_err("maxUnavailable 0 with maxSurge 0 is refused");
    let text = err.to_string();
    assert!(
        text.contains("vleaderworkerset.kb.io") && text.contains("maxUnavailable"),
        "refused by the validating webhook: {text}"
    );
}
