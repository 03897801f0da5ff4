//! Scaling the running Ray cluster. KubeRay leaves a worker group's replica
//! counts out of its cluster hash and copies them only into a new
//! RayCluster (the autoscaler owns them once the cluster exists), so when
//! `spec.replicas` changes infergate sets the worker group's `replicas`
//! (and `minReplicas`/`maxReplicas`) on the RayService's active RayCluster,
//! and on the pending one if KubeRay is building one.
//!
//! [`RayCluster`] reads only what scaling needs; infergate never writes a
//! whole RayCluster, only a JSON Patch that tests the group's name at the
//! index it changes.

use super::rayservice::{RayService, WORKER_GROUP, WorkerGroupSpec};

pub use crate::api::upstream::kuberay::{
    GroupScale, RayCluster, RayClusterStatus, RayClusterWorkers,
};

/// The RayClusters of `rs` that scaling must reach: the active one and the
/// pending one, as KubeRay names them in the RayService's status.
#[must_use]
pub fn cluster_names(rs: &RayService) -> Vec<String> {
    let Some(status) = rs.status.as_ref() else {
        return Vec::new();
    };
    let mut names: Vec<String> = [
        status.active_service_status.as_ref(),
        status.pending_service_status.as_ref(),
    ]
    .into_iter()
    .flatten()
    .filter_map(|s| s.ray_cluster_name.clone())
    .filter(|n| !n.is_empty())
    .collect();
    names.dedup();
    names
}

/// Whether `cluster` is controlled by the RayService `rs` (KubeRay sets a
/// controller reference): infergate touches no other cluster.
#[must_use]
pub fn owned_by(cluster: &RayCluster, rs: &RayService) -> bool {
    let Some(uid) = rs.metadata.uid.as_deref() else {
        return false;
    };
    cluster
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "RayService" && o.uid == uid && o.controller == Some(true))
}

/// The JSON Patch that gives `cluster`'s worker group the replica counts of
/// `want`, or `None` when it has them (or has no such group).
#[must_use]
pub fn scale_patch(cluster: &RayCluster, want: &WorkerGroupSpec) -> Option<json_patch::Patch> {
    use json_patch::{AddOperation, PatchOperation, TestOperation};
    let (index, group) = cluster
        .spec
        .worker_group_specs
        .iter()
        .enumerate()
        .find(|(_, g)| g.group_name == want.group_name)?;
    let base = format!("/spec/workerGroupSpecs/{index}");
    let mut ops = Vec::new();
    for (field, have, wanted) in [
        ("replicas", group.replicas, want.replicas),
        ("minReplicas", group.min_replicas, want.min_replicas),
        ("maxReplicas", group.max_replicas, want.max_replicas),
    ] {
        if let Some(w) = wanted
            && have != Some(w)
        {
            ops.push(PatchOperation::Add(AddOperation {
                path: format!("{base}/{field}").parse().ok()?,
                value: serde_json::json!(w),
            }));
        }
    }
    if ops.is_empty() {
        return None;
    }
    // The index is only right while the group is still there.
    ops.insert(
        0,
        PatchOperation::Test(TestOperation {
            path: format!("{base}/groupName").parse().ok()?,
            value: serde_json::json!(group.group_name),
        }),
    );
    Some(json_patch::Patch(ops))
}

/// The worker group infergate's RayService asks for.
#[must_use]
pub fn wanted_group(rs: &RayService) -> Option<&WorkerGroupSpec> {
    rs.spec
        .ray_cluster_config
        .worker_group_specs
        .iter()
        .find(|g| g.group_name == WORKER_GROUP)
}

/// `(ready, desired)` workers of a cluster, from its status.
#[must_use]
pub fn workers(cluster: &RayCluster) -> Option<(i32, i32)> {
    let s = cluster.status.as_ref()?;
    let desired = s.desired_worker_replicas?;
    let ready = s
        .ready_worker_replicas
        .or(s.available_worker_replicas)
        .unwrap_or(0);
    Some((ready, desired))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::children::rayservice::{RayServiceClusterStatus, RayServiceStatus};

    fn cluster(groups: &[(&str, i32, i32, i32)]) -> RayCluster {
        let mut c = RayCluster::new(
            "rag-raycluster-abc",
            RayClusterWorkers {
                worker_group_specs: groups
                    .iter()
                    .map(|(n, r, min, max)| GroupScale {
                        group_name: (*n).into(),
                        replicas: Some(*r),
                        min_replicas: Some(*min),
                        max_replicas: Some(*max),
                    })
                    .collect(),
            },
        );
        c.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "ray.io/v1".into(),
                kind: "RayService".into(),
                name: "rag".into(),
                uid: "uid-1".into(),
                controller: Some(true),
                ..Default::default()
            },
        ]);
        c
    }

    fn want(replicas: i32, min: i32, max: i32) -> WorkerGroupSpec {
        WorkerGroupSpec {
            group_name: WORKER_GROUP.into(),
            replicas: Some(replicas),
            min_replicas: Some(min),
            max_replicas: Some(max),
            ..WorkerGroupSpec::default()
        }
    }

    #[test]
    fn only_what_differs_is_patched_at_the_groups_index() {
        let c = cluster(&[("other", 1, 1, 1), ("workers", 2, 2, 2)]);
        assert_eq!(scale_patch(&c, &want(2, 2, 2)), None);
        let p = scale_patch(&c, &want(3, 3, 3)).expect("patch");
        let text = serde_json::to_string(&p).unwrap();
        assert_eq!(
            text,
            r#"[{"op":"test","path":"/spec/workerGroupSpecs/1/groupName","value":"workers"},{"op":"add","path":"/spec/workerGroupSpecs/1/replicas","value":3},{"op":"add","path":"/spec/workerGroupSpecs/1/minReplicas","value":3},{"op":"add","path":"/spec/workerGroupSpecs/1/maxReplicas","value":3}]"#
        );
        // Applied to the cluster as JSON it gives the counts wanted.
        let mut doc = serde_json::to_value(&c).unwrap();
        json_patch::patch(&mut doc, &p).unwrap();
        let after: RayCluster = serde_json::from_value(doc).unwrap();
        assert_eq!(scale_patch(&after, &want(3, 3, 3)), None);
        assert_eq!(
            after.spec.worker_group_specs[0],
            c.spec.worker_group_specs[0]
        );
        // No such group: nothing.
        assert_eq!(
            scale_patch(&cluster(&[("other", 1, 1, 1)]), &want(3, 3, 3)),
            None
        );
    }

    #[test]
    fn the_active_and_the_pending_cluster_of_our_rayservice() {
        let mut rs = RayService::new("rag", Default::default());
        assert!(cluster_names(&rs).is_empty());
        let named = |n: &str| RayServiceClusterStatus {
            ray_cluster_name: Some(n.into()),
            ..Default::default()
        };
        rs.status = Some(RayServiceStatus {
            active_service_status: Some(named("rag-a")),
            pending_service_status: Some(named("rag-b")),
            ..Default::default()
        });
        assert_eq!(cluster_names(&rs), ["rag-a", "rag-b"]);
        let c = cluster(&[("workers", 1, 1, 1)]);
        assert!(!owned_by(&c, &rs), "no uid: not ours");
        rs.metadata.uid = Some("uid-1".into());
        assert!(owned_by(&c, &rs));
        rs.metadata.uid = Some("uid-2".into());
        assert!(!owned_by(&c, &rs));
    }
}
