//! Free devices of an AcceleratorClass (API section 14): over the nodes the
//! class selects ([`super::nodes::selects`]), `allocatable[resourceName]`
//! minus what the non-terminal pods bound to each node request of it,
//! and how many more replicas of a given size fit, counted node by node
//! (a pod's devices are all on one node).
//!
//! What a pod requests of a resource is Kubernetes' effective request
//! ([`effective_requests`]); only extended resources are counted
//! ([`is_extended_resource`]), as only they are devices.

use kube_quantity::ParsedQuantity;

use super::nodes::{NodeFacts, selects};
use crate::api::AcceleratorClassSpec;

/// Amounts of extended resources, by resource name.
pub type Requests = Vec<(String, u64)>;

/// Whether `name` is an extended resource (Kubernetes'
/// `IsExtendedResourceName`): domain-prefixed, outside `kubernetes.io/`,
/// and not a quota's `requests.` name. CPU, memory, ephemeral storage and
/// huge pages are not.
#[must_use]
pub fn is_extended_resource(name: &str) -> bool {
    name.contains('/') && !name.contains("kubernetes.io/") && !name.starts_with("requests.")
}

/// Devices in a quantity of an extended resource (whole numbers: `8`,
/// also written `8000m` or `1k`); `None` for a negative, fractional or
/// unparsable one.
#[must_use]
pub fn device_count(quantity: &str) -> Option<u64> {
    if let Ok(n) = quantity.parse::<u64>() {
        return Some(n);
    }
    let q = ParsedQuantity::try_from(quantity).ok()?;
    let f = q.to_bytes_f64()?;
    (f >= 0.0 && f.fract() == 0.0 && f < 9.0e15).then_some(f as u64)
}

/// Add `amount` of `resource` to `list`.
pub fn add(list: &mut Requests, resource: &str, amount: u64) {
    match list.iter_mut().find(|(r, _)| r == resource) {
        Some((_, n)) => *n = n.saturating_add(amount),
        None => list.push((resource.to_owned(), amount)),
    }
}

/// Raise `resource` in `list` to at least `amount`.
fn raise(list: &mut Requests, resource: &str, amount: u64) {
    match list.iter_mut().find(|(r, _)| r == resource) {
        Some((_, n)) => *n = (*n).max(amount),
        None => list.push((resource.to_owned(), amount)),
    }
}

/// One init container's requests, and whether it is a sidecar
/// (`restartPolicy: Always`: it runs beside the app containers).
pub type InitContainer = (Requests, bool);

/// A pod's effective requests, as the scheduler counts them
/// (`component-helpers` `PodRequests`): the app containers' sum plus the
/// sidecars'; at least, for each ordinary init container in turn, its own
/// requests plus the sidecars started before it; plus the pod's
/// `overhead` (its RuntimeClass's). Zero amounts are left out.
#[must_use]
pub fn effective_requests(
    containers: &[Requests],
    init_containers: &[InitContainer],
    overhead: &Requests,
) -> Requests {
    let mut total = Requests::new();
    for c in containers {
        for (r, n) in c {
            add(&mut total, r, *n);
        }
    }
    let mut sidecars = Requests::new();
    let mut init_peak = Requests::new();
    for (requests, sidecar) in init_containers {
        let mut this = requests.clone();
        if *sidecar {
            for (r, n) in requests {
                add(&mut total, r, *n);
                add(&mut sidecars, r, *n);
            }
            this.clone_from(&sidecars);
        } else {
            for (r, n) in &sidecars {
                add(&mut this, r, *n);
            }
        }
        for (r, n) in &this {
            raise(&mut init_peak, r, *n);
        }
    }
    for (r, n) in &init_peak {
        raise(&mut total, r, *n);
    }
    for (r, n) in overhead {
        add(&mut total, r, *n);
    }
    total.retain(|(_, n)| *n > 0);
    total
}

/// The free devices of one class.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Free {
    /// The resource counted (the class's `resourceName`).
    pub resource: String,
    /// Free devices over every node the class selects.
    pub devices: u64,
    /// The nodes the class selects (Ready, schedulable, matched, tolerated).
    pub nodes: u32,
    /// Free devices per node: `(free, nodes with that many)`, most free
    /// first, nodes with none left out.
    pub per_node: Vec<(u64, u32)>,
}

impl Free {
    /// How many more replicas of `devices_per_replica` devices fit, each
    /// pod's devices on one node. A replica larger than `devices_per_node`
    /// (section 15's multi-node replicas) is that many pods of
    /// `devices_per_node` each, on as many nodes; a replica of 0 devices
    /// is not limited by devices (`u64::MAX`).
    #[must_use]
    pub fn replicas(&self, devices_per_replica: u64, devices_per_node: u64) -> u64 {
        if devices_per_replica == 0 {
            return u64::MAX;
        }
        let per_pod = devices_per_replica.min(devices_per_node.max(1));
        let pods_per_replica = devices_per_replica.div_ceil(per_pod);
        let pods: u64 = self
            .per_node
            .iter()
            .map(|(free, nodes)| free / per_pod * u64::from(*nodes))
            .sum();
        pods / pods_per_replica
    }

    /// The most devices free on any one node.
    #[must_use]
    pub fn largest(&self) -> u64 {
        self.per_node.first().map_or(0, |(free, _)| *free)
    }
}

/// The free devices of `class` over `nodes`, each with what the
/// non-terminal pods bound to it request of the class's resource. A node
/// whose pods request more than it offers (devices reported unhealthy
/// after they were allocated) has none free, never fewer.
pub fn free<'a>(
    class: &AcceleratorClassSpec,
    nodes: impl IntoIterator<Item = (&'a NodeFacts, u64)>,
) -> Free {
    let resource = class.resource();
    let mut out = Free {
        resource: resource.to_owned(),
        ..Free::default()
    };
    let mut per_node = std::collections::BTreeMap::<u64, u32>::new();
    for (node, requested) in nodes {
        if !selects(class, node) {
            continue;
        }
        out.nodes += 1;
        let room = node.allocatable(resource).saturating_sub(requested);
        if room > 0 {
            out.devices += room;
            *per_node.entry(room).or_default() += 1;
        }
    }
    out.per_node = per_node.into_iter().rev().collect();
    out
}

#[cfg(test)]
mod tests {
    use super::super::nodes::tests::{class, node, taint, toleration};
    use super::*;

    fn r(pairs: &[(&str, u64)]) -> Requests {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
    }

    const GPU: &str = "nvidia.com/gpu";

    #[test]
    fn extended_resources_are_the_prefixed_ones_outside_kubernetes_io() {
        for name in [
            GPU,
            "amd.com/gpu",
            "nvidia.com/mig-3g.40gb",
            "example.com/foo",
        ] {
            assert!(is_extended_resource(name), "{name}");
        }
        for name in [
            "cpu",
            "memory",
            "ephemeral-storage",
            "hugepages-2Mi",
            "kubernetes.io/batch-cpu",
            "requests.nvidia.com/gpu",
        ] {
            assert!(!is_extended_resource(name), "{name}");
        }
    }

    #[test]
    fn device_counts_are_whole_numbers() {
        assert_eq!(device_count("8"), Some(8));
        assert_eq!(device_count("8000m"), Some(8));
        assert_eq!(device_count("1k"), Some(1000));
        assert_eq!(device_count("500m"), None);
        assert_eq!(device_count("-1"), None);
        assert_eq!(device_count("eight"), None);
    }

    #[test]
    fn effective_requests_follow_kubernetes() {
        // Containers add up.
        let two = [r(&[(GPU, 2)]), r(&[(GPU, 1), ("example.com/nic", 1)])];
        assert_eq!(
            effective_requests(&two, &[], &Requests::new()),
            r(&[(GPU, 3), ("example.com/nic", 1)])
        );
        // An init container larger than the containers' sum sets the request.
        let init = [(r(&[(GPU, 4)]), false)];
        assert_eq!(
            effective_requests(&two, &init, &Requests::new()),
            r(&[(GPU, 4), ("example.com/nic", 1)])
        );
        // A smaller one does not.
        let init = [(r(&[(GPU, 1)]), false)];
        assert_eq!(
            effective_requests(&two, &init, &Requests::new())[0],
            (GPU.into(), 3)
        );
        // A sidecar adds to the containers, and to every init container after it.
        let init = [(r(&[(GPU, 1)]), true), (r(&[(GPU, 4)]), false)];
        assert_eq!(
            effective_requests(&[r(&[(GPU, 2)])], &init, &Requests::new()),
            r(&[(GPU, 5)])
        );
        // An init container before the sidecar does not carry it.
        let init = [(r(&[(GPU, 4)]), false), (r(&[(GPU, 1)]), true)];
        assert_eq!(
            effective_requests(&[r(&[(GPU, 2)])], &init, &Requests::new()),
            r(&[(GPU, 4)])
        );
        // Overhead adds to the whole.
        assert_eq!(
            effective_requests(&[r(&[(GPU, 2)])], &[], &r(&[(GPU, 1)])),
            r(&[(GPU, 3)])
        );
        assert!(effective_requests(&[r(&[(GPU, 0)])], &[], &Requests::new()).is_empty());
    }

    #[test]
    fn free_devices_sum_allocatable_minus_requests_over_selected_nodes() {
        let c = class(&[("pool", "h100")]);
        let a = node("a", &[("pool", "h100")]);
        let b = node("b", &[("pool", "h100")]);
        let other = node("c", &[("pool", "l4")]);
        let mut not_ready = node("d", &[("pool", "h100")]);
        not_ready.ready = false;
        let mut cordoned = node("e", &[("pool", "h100")]);
        cordoned.unschedulable = true;
        let mut tainted = node("f", &[("pool", "h100")]);
        tainted.taints = vec![taint("gpu", "", "NoSchedule")];
        let mut no_gpus = node("g", &[("pool", "h100")]);
        no_gpus.allocatable.clear();
        let f = free(
            &c,
            [
                (&a, 3),
                (&b, 0),
                (&other, 0),
                (&not_ready, 0),
                (&cordoned, 0),
                (&tainted, 0),
                (&no_gpus, 0),
            ],
        );
        assert_eq!(f.resource, GPU);
        assert_eq!(f.devices, 13);
        assert_eq!(f.nodes, 3, "a, b and the node without devices");
        assert_eq!(f.per_node, vec![(8, 1), (5, 1)]);
        assert_eq!(f.largest(), 8);
        // Tolerated, the tainted node counts.
        let mut c = c;
        c.tolerations = Some(vec![toleration("gpu", "Exists", "", "")]);
        assert_eq!(free(&c, [(&tainted, 0)]).devices, 8);
        // More requested than offered: none free, not fewer.
        assert_eq!(free(&c, [(&a, 10), (&b, 2)]).devices, 6);
    }

    #[test]
    fn replicas_are_counted_node_by_node() {
        let f = Free {
            resource: GPU.into(),
            devices: 14,
            nodes: 3,
            per_node: vec![(8, 1), (3, 2)],
        };
        assert_eq!(
            f.replicas(8, 8),
            1,
            "14 free, but 8 together on one node only once"
        );
        assert_eq!(f.replicas(4, 8), 2);
        assert_eq!(f.replicas(2, 8), 6);
        assert_eq!(f.replicas(1, 8), 14);
        assert_eq!(f.replicas(0, 8), u64::MAX);
        // Two nodes per replica (16 devices at 8 per node): one whole node free only.
        assert_eq!(f.replicas(16, 8), 0);
        let two = Free {
            per_node: vec![(8, 2)],
            ..f
        };
        assert_eq!(two.replicas(16, 8), 1);
        assert_eq!(Free::default().replicas(1, 8), 0);
    }
}
