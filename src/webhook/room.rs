//! What admission says about room on a full GPU pool (`docs/rollouts.md`):
//! a write that rolls the primary, adds a canary, or makes KubeRay build a
//! second RayCluster, on an AcceleratorClass whose free devices cannot
//! hold it, is admitted with a warning giving the class, the devices
//! needed and free, and what will happen (the mode). It is never denied:
//! room comes and goes. Free devices come from the watches of nodes and
//! pods ([`ClusterState::free_devices`]); where they are not known (the
//! namespaced install, before the first lists) nothing is said.

use crate::api::v1beta1::InferenceService;
use crate::engine;
use crate::engine::capacity::roll_plan;
use crate::engine::full_pool::{PoolChange, ServingFloor, pool_changes};
use crate::state::ClusterState;

/// The warnings of the write of `svc` (over `old` on UPDATE).
pub(super) fn warnings(
    state: &ClusterState,
    svc: &InferenceService,
    old: Option<&InferenceService>,
) -> Vec<String> {
    let Some((class, per_replica)) = engine::full_pool::pool_of(svc) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let group = engine::multi_node::group_of(svc, state.classes().get(class));
    if let Some(g) = group
        && state.served().leader_worker_sets() == Some(false)
    {
        out.push(format!(
            "spec.parallelism: a replica spans {} nodes and runs as a LeaderWorkerSet group, but the cluster does not serve the LeaderWorkerSet API ({}): the service waits (LeaderWorkerSetNotInstalled) until LeaderWorkerSet is installed",
            g.nodes,
            crate::api::upstream::lws::API_VERSION
        ));
    }
    if let Some(g) = group
        && let Some(free) = state.free_devices(class)
        && free.nodes < u32::try_from(g.nodes).unwrap_or(u32::MAX)
    {
        // No group can ever be placed until the pool grows.
        out.push(format!(
            "spec.parallelism: a replica needs {} nodes of AcceleratorClass {class}; {} exist{}",
            g.nodes,
            free.nodes,
            if free.nodes == 1 { "s" } else { "" }
        ));
    }
    let changes = pool_changes(svc, old);
    if changes.is_empty() {
        return out;
    }
    let Some(free) = state.free_devices(class) else {
        return out;
    };
    for change in changes {
        match change {
            PoolChange::RollsPrimary(field) => {
                let replicas = ServingFloor::of(svc).replicas;
                let per_node = group.map_or(per_replica, |g| {
                    u64::try_from(g.devices_per_pod).unwrap_or(per_replica)
                });
                let (plan, short) = roll_plan::plan_of_spanning(
                    svc,
                    replicas,
                    (per_replica, per_node),
                    class,
                    Some(&free),
                );
                if let Some(short) = short {
                    out.push(roll_plan::rollout_warning(field, &short, plan, replicas));
                }
            }
            PoolChange::AddsCanary { field, replicas } => {
                let adds = u64::try_from(replicas).unwrap_or(0);
                let per_node = group.map_or(per_replica, |g| {
                    u64::try_from(g.devices_per_pod).unwrap_or(per_replica)
                });
                if let Some(short) =
                    roll_plan::shortfall_spanning(class, &free, adds, (per_replica, per_node))
                {
                    let manual = field == "spec.canary";
                    let mode = engine::full_pool::canary_mode_words(svc, manual);
                    out.push(roll_plan::canary_warning(field, &short, replicas, &mode));
                }
            }
            PoolChange::NewRayCluster(field) => {
                let workers = svc.spec.replicas.unwrap_or(1).max(1);
                let adds = u64::try_from(workers).unwrap_or(0);
                if let Some(short) = roll_plan::shortfall(class, &free, adds, per_replica) {
                    out.push(roll_plan::ray_cluster_warning(field, &short, workers));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::warnings;
    use crate::api::AcceleratorClassSpec;
    use crate::api::v1beta1::InferenceService;
    use crate::state::ClusterState;
    use crate::state::room::{RoomNode, RoomPod};

    /// A state whose pool `h100` has one Node of 8 GPUs, `used` of them
    /// taken by a running pod.
    fn pool(used: u64) -> ClusterState {
        let state = ClusterState::default();
        let class: AcceleratorClassSpec = serde_json::from_value(json!({
            "vendor": "nvidia", "memoryPerDevice": "80Gi", "devicesPerNode": 8,
            "nodeSelector": {"pool": "h100"}
        }))
        .expect("class");
        state.set_classes([("h100".to_owned(), class)].into_iter().collect());
        let room = state.room();
        let node: RoomNode = serde_json::from_value(json!({
            "metadata": {"name": "n1", "labels": {"pool": "h100"}},
            "status": {"allocatable": {"nvidia.com/gpu": "8"},
                "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .expect("node");
        let pod: RoomPod = serde_json::from_value(json!({
            "metadata": {"name": "engine", "namespace": "team-a"},
            "spec": {"nodeName": "n1", "containers": [{"name": "engine",
                "resources": {"requests": {"nvidia.com/gpu": used.to_string()}}}]},
            "status": {"phase": "Running"}
        }))
        .expect("pod");
        room.set_watched();
        room.nodes_listing();
        room.list_node(&node);
        room.nodes_listed();
        room.pods_listing();
        room.list_pod(&pod);
        room.pods_listed();
        state
    }

    /// A Ray service as the validating webhook sees it (defaulted: the
    /// accelerator's type from its class).
    fn ray(image: &str) -> InferenceService {
        serde_json::from_value(json!({
            "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
            "metadata": {"name": "rag", "namespace": "team-a"},
            "spec": {"model": {"ref": "m"}, "engine": {"image": image}, "replicas": 1,
                "backend": "RayService", "graph": {"url": "https://g.example.com/g.pb"},
                "accelerator": {"type": "nvidia", "class": "h100"}, "parallelism": {"tensor": 8}}
        }))
        .expect("service")
    }

    #[test]
    fn a_ray_upgrade_the_pool_cannot_hold_is_said_and_one_it_can_is_not() {
        let (new, old) = (ray("vllm:2"), ray("vllm:1"));
        assert_eq!(
            warnings(&pool(8), &new, Some(&old)),
            [
                "spec.engine.image: KubeRay upgrades the RayService by building a second RayCluster (1 GPU worker) beside the running one, which needs 8 nvidia.com/gpu in AcceleratorClass h100, 0 free: its pods wait for room while the running cluster serves"
            ]
        );
        assert!(
            warnings(&pool(0), &new, Some(&old)).is_empty(),
            "room for it"
        );
        assert!(
            warnings(&pool(8), &old, Some(&old)).is_empty(),
            "no new cluster"
        );
        // Not known (nothing watched): nothing said.
        assert!(warnings(&ClusterState::default(), &new, Some(&old)).is_empty());
    }

    #[test]
    fn a_group_larger_than_the_pool_is_said_at_every_write() {
        let svc: InferenceService = serde_json::from_value(json!({
            "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
            "metadata": {"name": "chat", "namespace": "team-a"},
            "spec": {"model": {"ref": "m"}, "engine": {"image": "vllm:1"}, "replicas": 1,
                "accelerator": {"type": "nvidia", "class": "h100"},
                "parallelism": {"tensor": 8, "pipeline": 2}}
        }))
        .expect("service");
        let said = warnings(&pool(0), &svc, None);
        assert_eq!(
            said,
            ["spec.parallelism: a replica needs 2 nodes of AcceleratorClass h100; 1 exists"]
        );
        assert_eq!(warnings(&pool(0), &svc, Some(&svc)), said);
        // Without the LeaderWorkerSet API, that is said too.
        let state = pool(0);
        state.served().set_leader_worker_sets(false);
        let said = warnings(&state, &svc, None);
        assert_eq!(said.len(), 2, "{said:?}");
        assert!(
            said[0].contains("does not serve the LeaderWorkerSet API"),
            "{said:?}"
        );
        // One node holds a replica of 8: nothing to say.
        let mut one = svc.clone();
        one.spec.parallelism = serde_json::from_value(json!({"tensor": 8})).ok();
        assert!(warnings(&pool(0), &one, None).is_empty());
        assert!(warnings(&ClusterState::default(), &svc, None).is_empty());
    }
}
