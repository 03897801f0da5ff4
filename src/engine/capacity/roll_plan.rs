//! How a change that rolls a service's primary Deployment is carried out
//! on its class's pool (`docs/rollouts.md`, on a full GPU pool): a surge
//! when one more replica's devices fit, otherwise `Replace` in place or
//! `Wait`, with the numbers said the same way in status and at admission.

use crate::api::rollout::RolloutOnFullPool;
use crate::api::v1beta1::InferenceService;

use super::room::Free;

/// How one rollout of the primary is carried out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RollPlan {
    /// One new pod before an old one goes (the Deployment's own rolling
    /// update): the surge fits, or the pool is not known.
    Surge,
    /// `maxSurge: 0, maxUnavailable: n`: each replaced pod's devices go to
    /// its successor.
    Replace {
        /// Replicas taken down at once.
        max_unavailable: i32,
    },
    /// The Deployment stays on its old template until the surge fits.
    Wait,
}

/// What a rollout of the primary needs of the pool and what it has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shortfall {
    /// The AcceleratorClass.
    pub class: String,
    /// Its resource (`nvidia.com/gpu`).
    pub resource: String,
    /// Devices one more replica needs.
    pub needed: u64,
    /// Devices free over the class's nodes.
    pub free: u64,
    /// The most free on any one node (a replica's pod needs its devices
    /// on one node).
    pub largest: u64,
}

/// The rollout of a primary of `replicas` replicas of `per_replica`
/// devices each (at most `per_node` per pod) on a pool with `free` (None:
/// not known, e.g. the namespaced install): how it is carried out, and
/// what the pool lacks when it does not fit.
#[must_use]
pub fn plan(
    on_full_pool: RolloutOnFullPool,
    max_unavailable: i32,
    replicas: i32,
    per_replica: u64,
    per_node: u64,
    class: &str,
    free: Option<&Free>,
) -> (RollPlan, Option<Shortfall>) {
    let Some(free) = free else {
        return (RollPlan::Surge, None);
    };
    if per_replica == 0 || replicas <= 0 || free.replicas(per_replica, per_node) >= 1 {
        return (RollPlan::Surge, None);
    }
    let short = Shortfall {
        class: class.to_owned(),
        resource: free.resource.clone(),
        needed: per_replica,
        free: free.devices,
        largest: free.largest(),
    };
    let plan = match on_full_pool {
        RolloutOnFullPool::Replace => RollPlan::Replace {
            // One replica always serves (more than one), as validation
            // bounds the field; a single replica is replaced outright.
            max_unavailable: max_unavailable.clamp(1, (replicas - 1).max(1)),
        },
        RolloutOnFullPool::Wait => RollPlan::Wait,
    };
    (plan, Some(short))
}

/// What `replicas` more replicas of `per_replica` devices each (a pod's
/// on one node) lack on a pool with `free`, when they do not fit.
#[must_use]
pub fn shortfall(class: &str, free: &Free, replicas: u64, per_replica: u64) -> Option<Shortfall> {
    shortfall_spanning(class, free, replicas, (per_replica, per_replica))
}

/// [`shortfall`] for replicas that may span nodes: `per_replica` devices
/// each, at most `per_node` on one pod.
#[must_use]
pub fn shortfall_spanning(
    class: &str,
    free: &Free,
    replicas: u64,
    (per_replica, per_node): (u64, u64),
) -> Option<Shortfall> {
    if per_replica == 0 || replicas == 0 || free.replicas(per_replica, per_node) >= replicas {
        return None;
    }
    Some(Shortfall {
        class: class.to_owned(),
        resource: free.resource.clone(),
        needed: per_replica * replicas,
        free: free.devices,
        largest: free.largest(),
    })
}

/// [`plan`] for `svc`'s primary of `replicas`: its `rollout.onFullPool`
/// (`Replace` when unset) and `maxUnavailable`, on the pool of `class`
/// with `free`, `per_replica` devices a replica (on one node).
#[must_use]
pub fn plan_of(
    svc: &InferenceService,
    replicas: i32,
    per_replica: u64,
    class: &str,
    free: Option<&Free>,
) -> (RollPlan, Option<Shortfall>) {
    plan_of_spanning(svc, replicas, (per_replica, per_replica), class, free)
}

/// [`plan_of`] for replicas that may span nodes: `per_replica` devices
/// each, at most `per_node` on one pod (a replica larger than that is a
/// group of pods, one node each).
#[must_use]
pub fn plan_of_spanning(
    svc: &InferenceService,
    replicas: i32,
    (per_replica, per_node): (u64, u64),
    class: &str,
    free: Option<&Free>,
) -> (RollPlan, Option<Shortfall>) {
    let on_full_pool = svc
        .spec
        .rollout
        .as_ref()
        .and_then(|r| r.on_full_pool)
        .unwrap_or(RolloutOnFullPool::Replace);
    plan(
        on_full_pool,
        crate::engine::full_pool::max_unavailable(svc),
        replicas,
        per_replica,
        per_node.min(per_replica).max(1),
        class,
        free,
    )
}

impl Shortfall {
    /// `needs 8 nvidia.com/gpu in h100-80gb, 0 free` (with the most on one
    /// node when the free devices are spread too thin for one pod).
    #[must_use]
    pub fn numbers(&self) -> String {
        self.numbers_naming("")
    }

    /// As [`Shortfall::numbers`], the class named as admission warnings
    /// name it: `needs 8 nvidia.com/gpu in AcceleratorClass h100-80gb, 0
    /// free`.
    #[must_use]
    pub fn numbers_at_admission(&self) -> String {
        self.numbers_naming("AcceleratorClass ")
    }

    fn numbers_naming(&self, kind: &str) -> String {
        let spread = if self.free >= self.needed {
            format!(" (at most {} on one node)", self.largest)
        } else {
            String::new()
        };
        format!(
            "needs {} {} in {kind}{}, {} free{spread}",
            self.needed, self.resource, self.class, self.free
        )
    }

    /// What the plan does, after the numbers: the `RolloutCapacity`
    /// message.
    #[must_use]
    pub fn message(&self, plan: RollPlan, replicas: i32) -> String {
        let what = match plan {
            RollPlan::Replace { max_unavailable } => {
                format!("replacing {max_unavailable} of {replicas} replicas at a time")
            }
            RollPlan::Wait => "waiting for room (rollout.onFullPool: Wait)".to_owned(),
            RollPlan::Surge => "one more replica fits".to_owned(),
        };
        format!("{}: {what}", self.numbers())
    }
}

/// The admission warning of a write that rolls the primary (`field`
/// changes its template) on a pool without room for one more replica:
/// `spec.engine.image: rolling out needs 8 nvidia.com/gpu in
/// AcceleratorClass h100-80gb, 0 free: replacing 1 of 2 replicas at a time
/// (rollout.onFullPool: Replace, maxUnavailable: 1)`.
#[must_use]
pub fn rollout_warning(field: &str, short: &Shortfall, plan: RollPlan, replicas: i32) -> String {
    let numbers = short.numbers_at_admission();
    match plan {
        RollPlan::Replace { max_unavailable } => {
            let outage = if replicas <= max_unavailable {
                ", a short outage: no replica serves until the new one is ready"
            } else {
                ""
            };
            format!(
                "{field}: rolling out {numbers}: replacing {max_unavailable} of {replicas} replicas at a time{outage} (rollout.onFullPool: Replace, maxUnavailable: {max_unavailable})"
            )
        }
        RollPlan::Wait => format!(
            "{field}: rolling out {numbers}: the Deployment keeps its old template until there is room (rollout.onFullPool: Wait)"
        ),
        RollPlan::Surge => format!("{field}: rolling out {numbers}"),
    }
}

/// The admission warning of a canary of `replicas` whose pods do not fit
/// (`what` is what it does then, with its mode, as
/// [`crate::engine::full_pool::canary_mode_words`] says it).
#[must_use]
pub fn canary_warning(field: &str, short: &Shortfall, replicas: i32, what: &str) -> String {
    let of = if replicas == 1 { "replica" } else { "replicas" };
    format!(
        "{field}: adding a canary of {replicas} {of} {}: {what}",
        short.numbers_at_admission()
    )
}

/// The admission warning of a change that makes KubeRay build a second
/// RayCluster (its zero-downtime upgrade) the pool cannot hold.
#[must_use]
pub fn ray_cluster_warning(field: &str, short: &Shortfall, workers: i32) -> String {
    let of = if workers == 1 { "worker" } else { "workers" };
    format!(
        "{field}: KubeRay upgrades the RayService by building a second RayCluster ({workers} GPU {of}) beside the running one, which {}: its pods wait for room while the running cluster serves",
        short.numbers_at_admission()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(per_node: &[(u64, u32)]) -> Free {
        Free {
            resource: "nvidia.com/gpu".to_owned(),
            devices: per_node.iter().map(|(f, n)| f * u64::from(*n)).sum(),
            nodes: per_node.iter().map(|(_, n)| n).sum(),
            per_node: per_node.to_vec(),
        }
    }

    #[test]
    fn a_group_fits_where_each_of_its_nodes_has_a_nodes_devices() {
        // Two nodes of 8 free hold one replica of 16 as a group of two.
        let two = pool(&[(8, 2)]);
        assert!(shortfall_spanning("h100", &two, 1, (16, 8)).is_none());
        assert!(shortfall_spanning("h100", &two, 2, (16, 8)).is_some());
        // On one node it never fits.
        assert!(shortfall("h100", &two, 1, 16).is_some());
        // Four free on each of four nodes hold no pod of 8.
        let thin = pool(&[(4, 4)]);
        assert!(shortfall_spanning("h100", &thin, 1, (16, 8)).is_some());
    }

    #[test]
    fn a_surge_that_fits_one_node_rolls_as_the_deployment_does() {
        let room = pool(&[(8, 1)]);
        let (p, short) = plan(RolloutOnFullPool::Replace, 1, 2, 8, 8, "h100", Some(&room));
        assert_eq!((p, short), (RollPlan::Surge, None));
        // Not known (namespaced install, not synced), no devices, nothing
        // serving: as today.
        assert_eq!(
            plan(RolloutOnFullPool::Wait, 1, 2, 8, 8, "h100", None).0,
            RollPlan::Surge
        );
        assert_eq!(
            plan(
                RolloutOnFullPool::Wait,
                1,
                2,
                0,
                8,
                "h100",
                Some(&pool(&[]))
            )
            .0,
            RollPlan::Surge
        );
        assert_eq!(
            plan(
                RolloutOnFullPool::Wait,
                1,
                0,
                8,
                8,
                "h100",
                Some(&pool(&[]))
            )
            .0,
            RollPlan::Surge
        );
    }

    #[test]
    fn a_full_pool_replaces_in_place_or_waits_and_says_the_numbers() {
        let full = pool(&[]);
        let (p, short) = plan(
            RolloutOnFullPool::Replace,
            1,
            2,
            8,
            8,
            "h100-80gb",
            Some(&full),
        );
        assert_eq!(p, RollPlan::Replace { max_unavailable: 1 });
        let short = short.expect("short");
        assert_eq!(
            short.message(p, 2),
            "needs 8 nvidia.com/gpu in h100-80gb, 0 free: replacing 1 of 2 replicas at a time"
        );
        let (p, short) = plan(
            RolloutOnFullPool::Wait,
            1,
            2,
            8,
            8,
            "h100-80gb",
            Some(&full),
        );
        assert_eq!(p, RollPlan::Wait);
        assert_eq!(
            short.expect("short").message(p, 2),
            "needs 8 nvidia.com/gpu in h100-80gb, 0 free: waiting for room (rollout.onFullPool: Wait)"
        );
        // Free devices spread too thin for one pod: said so.
        let thin = pool(&[(4, 2)]);
        let (p, short) = plan(RolloutOnFullPool::Replace, 2, 3, 8, 8, "h100", Some(&thin));
        assert_eq!(p, RollPlan::Replace { max_unavailable: 2 });
        assert_eq!(
            short.expect("short").numbers(),
            "needs 8 nvidia.com/gpu in h100, 8 free (at most 4 on one node)"
        );
    }

    #[test]
    fn admission_says_the_numbers_and_the_mode() {
        let full = pool(&[]);
        let (p, short) = plan(
            RolloutOnFullPool::Replace,
            1,
            2,
            8,
            8,
            "h100-80gb",
            Some(&full),
        );
        let short = short.expect("short");
        assert_eq!(
            rollout_warning("spec.engine.image", &short, p, 2),
            "spec.engine.image: rolling out needs 8 nvidia.com/gpu in AcceleratorClass h100-80gb, 0 free: replacing 1 of 2 replicas at a time (rollout.onFullPool: Replace, maxUnavailable: 1)"
        );
        let (p, _) = plan(
            RolloutOnFullPool::Replace,
            1,
            1,
            8,
            8,
            "h100-80gb",
            Some(&full),
        );
        assert!(
            rollout_warning("spec.model", &short, p, 1).contains("a short outage"),
            "one replica replaced is an outage"
        );
        let (p, _) = plan(
            RolloutOnFullPool::Wait,
            1,
            2,
            8,
            8,
            "h100-80gb",
            Some(&full),
        );
        assert!(
            rollout_warning("spec.model", &short, p, 2).ends_with("(rollout.onFullPool: Wait)")
        );
        assert_eq!(
            canary_warning(
                "spec.canary",
                &short,
                1,
                "it waits for room and the route stays on the primary (canary.onFullPool: Wait)"
            ),
            "spec.canary: adding a canary of 1 replica needs 8 nvidia.com/gpu in AcceleratorClass h100-80gb, 0 free: it waits for room and the route stays on the primary (canary.onFullPool: Wait)"
        );
    }

    #[test]
    fn one_replica_always_serves_unless_there_is_only_one() {
        let full = pool(&[]);
        // More than the floor allows is held to replicas - 1.
        assert_eq!(
            plan(RolloutOnFullPool::Replace, 5, 3, 8, 8, "h", Some(&full)).0,
            RollPlan::Replace { max_unavailable: 2 }
        );
        // A single replica is replaced outright (a short outage).
        assert_eq!(
            plan(RolloutOnFullPool::Replace, 1, 1, 8, 8, "h", Some(&full)).0,
            RollPlan::Replace { max_unavailable: 1 }
        );
    }
}
