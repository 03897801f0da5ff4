//! [`Room`]: the nodes that offer extended resources, and the bound,
//! non-terminal pods that request them, each kept as little as free
//! devices read, with each node's requested sums kept up to date per
//! event: a question costs one pass over the nodes, an event one pod.
//!
//! Memory is bounded by the pods that request an extended resource (each
//! held as its node, its requests and a key) and the nodes that offer
//! one, not by the cluster's pods: every other pod is dropped at decode.
//! A list (the watch's first, or one after it expired) marks what it
//! delivers and drops what it did not, without a second copy.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use tokio::sync::watch;

use super::decode::{RoomNode, RoomPod};
use crate::api::AcceleratorClassSpec;
use crate::engine::capacity::nodes::NodeFacts;
use crate::engine::capacity::room::{Free, free};

/// Amounts by interned resource name.
type Amounts = Vec<(Arc<str>, u64)>;

/// What is held of one pod.
#[derive(Debug)]
struct HeldPod {
    node: Arc<str>,
    requests: Box<[(Arc<str>, u64)]>,
    /// The list that last delivered it.
    epoch: u32,
}

/// What is held of one node.
#[derive(Debug)]
struct HeldNode {
    facts: NodeFacts,
    epoch: u32,
}

/// The index behind [`Room`].
#[derive(Debug, Default)]
struct Index {
    nodes: HashMap<Box<str>, HeldNode>,
    /// By `namespace/name`.
    pods: HashMap<Box<str>, HeldPod>,
    /// What the held pods request, per node (also of nodes not held).
    requested: HashMap<Arc<str>, Amounts>,
    /// Resource names, interned.
    resources: HashSet<Arc<str>>,
    node_epoch: u32,
    pod_epoch: u32,
    nodes_listed: bool,
    pods_listed: bool,
    /// Moves with every change of what free devices read.
    generation: u64,
}

/// Classes whose last answer is kept until the index changes.
const ANSWERS_KEPT: usize = 32;

/// The answers given since the index last changed: a burst of questions
/// (every service of a class reconciled, admission's) between two pod
/// events costs one pass over the nodes.
#[derive(Debug, Default)]
struct Answers {
    generation: u64,
    by_class: Vec<(AcceleratorClassSpec, Free)>,
}

/// Free devices per AcceleratorClass, from the watches of nodes and pods
/// (see the module documentation). Shared by admission and the reconciler
/// through [`crate::state::ClusterState::room`].
#[derive(Debug)]
pub struct Room {
    index: RwLock<Index>,
    answers: Mutex<Answers>,
    watched: AtomicBool,
    grew: watch::Sender<u64>,
}

impl Default for Room {
    fn default() -> Self {
        Self {
            index: RwLock::default(),
            answers: Mutex::default(),
            watched: AtomicBool::new(false),
            grew: watch::Sender::new(0),
        }
    }
}

fn pod_key(pod: &RoomPod) -> Option<Box<str>> {
    let m = &pod.metadata;
    Some(format!("{}/{}", m.namespace.as_deref()?, m.name.as_deref()?).into_boxed_str())
}

fn intern(set: &mut HashSet<Arc<str>>, name: &str) -> Arc<str> {
    if let Some(a) = set.get(name) {
        return Arc::clone(a);
    }
    let a: Arc<str> = Arc::from(name);
    set.insert(Arc::clone(&a));
    a
}

impl Index {
    fn node_key(&mut self, name: &str) -> Arc<str> {
        match self.requested.get_key_value(name) {
            Some((k, _)) => Arc::clone(k),
            None => Arc::from(name),
        }
    }

    /// Add (`sign` true) or take away a pod's requests on its node.
    fn count(&mut self, node: &Arc<str>, requests: &[(Arc<str>, u64)], sign: bool) {
        self.generation += 1;
        let sums = self.requested.entry(Arc::clone(node)).or_default();
        for (r, n) in requests {
            match sums.iter_mut().find(|(k, _)| k == r) {
                Some((_, sum)) if sign => *sum = sum.saturating_add(*n),
                Some((_, sum)) => *sum = sum.saturating_sub(*n),
                None if sign => sums.push((Arc::clone(r), *n)),
                None => {}
            }
        }
        sums.retain(|(_, n)| *n > 0);
        if sums.is_empty() {
            self.requested.remove(node);
        }
    }

    /// Forget a pod; whether it held devices.
    fn remove_pod(&mut self, key: &str) -> bool {
        let Some(held) = self.pods.remove(key) else {
            return false;
        };
        self.count(&held.node, &held.requests, false);
        true
    }

    /// Take in a pod; whether devices were freed (it finished, or moved).
    /// A pod that requests no extended resource was never held (a pod's
    /// requests of extended resources cannot change): nothing to do.
    fn apply_pod(&mut self, pod: &RoomPod) -> bool {
        if pod.spec.requests.is_empty() {
            return false;
        }
        let Some(key) = pod_key(pod) else {
            return false;
        };
        let node = match &pod.spec.node_name {
            Some(n) if !pod.is_terminal() && !pod.spec.requests.is_empty() => n,
            _ => return self.remove_pod(&key),
        };
        let epoch = self.pod_epoch;
        if let Some(held) = self.pods.get_mut(&key)
            && &*held.node == node.as_str()
            && held.requests.len() == pod.spec.requests.len()
            && held
                .requests
                .iter()
                .zip(&pod.spec.requests)
                .all(|((a, x), (b, y))| &**a == b.as_str() && x == y)
        {
            held.epoch = epoch;
            return false;
        }
        let freed = self.remove_pod(&key);
        let node = self.node_key(node);
        let requests: Box<[(Arc<str>, u64)]> = pod
            .spec
            .requests
            .iter()
            .map(|(r, n)| (intern(&mut self.resources, r), *n))
            .collect();
        self.count(&node, &requests, true);
        self.pods.insert(
            key,
            HeldPod {
                node,
                requests,
                epoch,
            },
        );
        freed
    }

    /// Take in a node; whether what it offers may have grown.
    fn apply_node(&mut self, node: &RoomNode) -> bool {
        let Some(name) = node.metadata.name.as_deref() else {
            return false;
        };
        if !node.has_devices() {
            if self.nodes.remove(name).is_some() {
                self.generation += 1;
            }
            return false;
        }
        let facts = node.facts();
        let epoch = self.node_epoch;
        match self.nodes.get_mut(name) {
            Some(held) if held.facts == facts => {
                held.epoch = epoch;
                false
            }
            _ => {
                self.nodes.insert(name.into(), HeldNode { facts, epoch });
                self.generation += 1;
                true
            }
        }
    }

    /// What the held pods request of `resource` on `node`.
    fn requested(&self, node: &str, resource: &str) -> u64 {
        self.requested
            .get(node)
            .and_then(|s| s.iter().find(|(r, _)| &**r == resource))
            .map_or(0, |(_, n)| *n)
    }
}

impl Room {
    fn read(&self) -> RwLockReadGuard<'_, Index> {
        // Every writer leaves the index consistent between statements that
        // could panic: a panic elsewhere does not make it unreadable.
        self.index
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Index> {
        self.index
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The free devices of `class`; `None` until both watches have listed
    /// once, and always when nothing watches nodes (the namespace-scoped
    /// install): then the caller behaves as if it knew nothing of room.
    #[must_use]
    pub fn free(&self, class: &AcceleratorClassSpec) -> Option<Free> {
        if !self.is_synced() {
            return None;
        }
        let index = self.read();
        let generation = index.generation;
        let mut answers = self
            .answers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if answers.generation != generation {
            answers.generation = generation;
            answers.by_class.clear();
        } else if let Some((_, f)) = answers.by_class.iter().find(|(c, _)| c == class) {
            return Some(f.clone());
        }
        let resource = class.resource();
        let answer = free(
            class,
            index
                .nodes
                .values()
                .map(|n| (&n.facts, index.requested(&n.facts.name, resource))),
        );
        if answers.by_class.len() < ANSWERS_KEPT {
            answers.by_class.push((class.clone(), answer.clone()));
        }
        Some(answer)
    }

    /// Whether the watches run and both have delivered their first list.
    #[must_use]
    pub fn is_synced(&self) -> bool {
        if !self.watched.load(Ordering::Acquire) {
            return false;
        }
        let index = self.read();
        index.nodes_listed && index.pods_listed
    }

    /// Whether free devices will be known soon: the watches run but have
    /// not both listed yet (after a start). A change that needs room waits
    /// for them rather than act as if room were unknown.
    #[must_use]
    pub fn listing(&self) -> bool {
        self.watched.load(Ordering::Acquire) && !self.is_synced()
    }

    /// A counter that moves whenever free devices may have grown: a pod
    /// that held devices finished or went, a node joined or changed, a
    /// list completed. A change waiting for room (API section 14: within
    /// 30 s of room appearing) waits on it, then asks [`Room::free`].
    #[must_use]
    pub fn grew(&self) -> watch::Receiver<u64> {
        self.grew.subscribe()
    }

    fn grow(&self) {
        self.grew.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Mark the room as fed by watches (done once they start).
    pub fn set_watched(&self) {
        self.watched.store(true, Ordering::Release);
    }

    /// A pod added or changed.
    pub fn apply_pod(&self, pod: &RoomPod) {
        if self.write().apply_pod(pod) {
            self.grow();
        }
    }

    /// A pod deleted.
    pub fn delete_pod(&self, pod: &RoomPod) {
        if pod.spec.requests.is_empty() {
            return;
        }
        let freed = pod_key(pod).is_some_and(|k| self.write().remove_pod(&k));
        if freed {
            self.grow();
        }
    }

    /// The pod watch starts a list.
    pub fn pods_listing(&self) {
        let mut index = self.write();
        index.pod_epoch = index.pod_epoch.wrapping_add(1);
    }

    /// A pod of the list in progress.
    pub fn list_pod(&self, pod: &RoomPod) {
        self.write().apply_pod(pod);
    }

    /// The pod list is complete: pods it did not deliver are gone.
    pub fn pods_listed(&self) {
        {
            let mut index = self.write();
            let epoch = index.pod_epoch;
            let gone: Vec<Box<str>> = index
                .pods
                .iter()
                .filter(|(_, p)| p.epoch != epoch)
                .map(|(k, _)| k.clone())
                .collect();
            for key in gone {
                index.remove_pod(&key);
            }
            index.pods.shrink_to_fit();
            index.pods_listed = true;
            index.generation += 1;
        }
        self.grow();
    }

    /// A node added or changed.
    pub fn apply_node(&self, node: &RoomNode) {
        if self.write().apply_node(node) {
            self.grow();
        }
    }

    /// A node deleted.
    pub fn delete_node(&self, node: &RoomNode) {
        if let Some(name) = node.metadata.name.as_deref() {
            let mut index = self.write();
            if index.nodes.remove(name).is_some() {
                index.generation += 1;
            }
        }
    }

    /// The node watch starts a list.
    pub fn nodes_listing(&self) {
        let mut index = self.write();
        index.node_epoch = index.node_epoch.wrapping_add(1);
    }

    /// A node of the list in progress.
    pub fn list_node(&self, node: &RoomNode) {
        self.write().apply_node(node);
    }

    /// The node list is complete: nodes it did not deliver are gone.
    pub fn nodes_listed(&self) {
        {
            let mut index = self.write();
            let epoch = index.node_epoch;
            index.nodes.retain(|_, n| n.epoch == epoch);
            index.nodes_listed = true;
            index.generation += 1;
        }
        self.grow();
    }

    /// Pods and nodes held.
    #[must_use]
    pub fn held(&self) -> (usize, usize) {
        let index = self.read();
        (index.pods.len(), index.nodes.len())
    }

    /// An estimate of the heap the index holds, in bytes: its tables'
    /// capacity and every string and list they own (allocator overhead
    /// aside).
    #[must_use]
    pub fn held_bytes(&self) -> usize {
        use std::mem::size_of;
        let index = self.read();
        let entry = |k: usize, v: usize| k + v + 1;
        let strings = |m: &std::collections::BTreeMap<String, String>| -> usize {
            m.iter().map(|(k, v)| k.len() + v.len() + 64).sum()
        };
        let pods = index.pods.capacity() * entry(size_of::<Box<str>>(), size_of::<HeldPod>())
            + index
                .pods
                .iter()
                .map(|(k, p)| k.len() + p.requests.len() * size_of::<(Arc<str>, u64)>())
                .sum::<usize>();
        let requested = index.requested.capacity()
            * entry(size_of::<Arc<str>>(), size_of::<Amounts>())
            + index
                .requested
                .iter()
                .map(|(k, a)| k.len() + 16 + a.capacity() * size_of::<(Arc<str>, u64)>())
                .sum::<usize>();
        let nodes = index.nodes.capacity() * entry(size_of::<Box<str>>(), size_of::<HeldNode>())
            + index
                .nodes
                .iter()
                .map(|(k, n)| {
                    let f = &n.facts;
                    k.len()
                        + f.name.len()
                        + strings(&f.labels)
                        + f.taints
                            .iter()
                            .map(|t| size_of_val(t) + t.key.len() + t.value.len() + t.effect.len())
                            .sum::<usize>()
                        + f.allocatable
                            .iter()
                            .map(|(r, _)| size_of::<(String, u64)>() + r.len())
                            .sum::<usize>()
                })
                .sum::<usize>();
        pods + requested + nodes
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::engine::capacity::nodes::tests::class;

    pub(crate) fn gpu_node(name: &str, gpus: u64, ready: bool) -> RoomNode {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"pool": "h100"}},
            "status": {"allocatable": {"nvidia.com/gpu": gpus.to_string()},
                "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}
        }))
        .expect("node")
    }

    pub(crate) fn gpu_pod(name: &str, node: Option<&str>, gpus: u64, phase: &str) -> RoomPod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"nodeName": node, "containers": [{"name": "engine",
                "resources": {"requests": {"nvidia.com/gpu": gpus.to_string()}}}]},
            "status": {"phase": phase}
        }))
        .expect("pod")
    }

    fn synced() -> Room {
        let room = Room::default();
        room.set_watched();
        room.nodes_listing();
        room.nodes_listed();
        room.pods_listing();
        room.pods_listed();
        room
    }

    fn devices(room: &Room) -> u64 {
        room.free(&class(&[("pool", "h100")]))
            .expect("synced")
            .devices
    }

    #[test]
    fn room_is_being_listed_only_between_the_watches_start_and_their_lists() {
        let room = Room::default();
        assert!(!room.listing(), "nothing watches: never known, not awaited");
        room.set_watched();
        assert!(room.listing());
        room.nodes_listing();
        room.nodes_listed();
        assert!(room.listing(), "the pods not listed yet");
        room.pods_listing();
        room.pods_listed();
        assert!(!room.listing());
        assert!(room.is_synced());
    }

    #[test]
    fn nothing_is_known_until_both_watches_listed_or_when_nothing_watches() {
        let room = Room::default();
        room.nodes_listed();
        room.pods_listed();
        assert_eq!(room.free(&class(&[])), None, "not watched");
        let room = Room::default();
        room.set_watched();
        room.nodes_listed();
        assert_eq!(room.free(&class(&[])), None, "pods not listed yet");
        room.pods_listed();
        assert_eq!(room.free(&class(&[])).map(|f| f.devices), Some(0));
    }

    #[test]
    fn free_devices_follow_nodes_and_pods() {
        let room = synced();
        let mut grew = room.grew();
        grew.mark_unchanged();
        room.apply_node(&gpu_node("a", 8, true));
        assert_eq!(devices(&room), 8);
        assert!(grew.has_changed().unwrap(), "a node joined");
        grew.mark_unchanged();

        room.apply_pod(&gpu_pod("p1", Some("a"), 2, "Running"));
        room.apply_pod(&gpu_pod("p2", Some("a"), 2, "Pending"));
        assert_eq!(devices(&room), 4, "bound pods count, pending or running");
        room.apply_pod(&gpu_pod("p3", None, 2, "Pending"));
        assert_eq!(devices(&room), 4, "a pod not yet bound does not count");
        assert!(
            !grew.has_changed().unwrap(),
            "pods that take devices free none"
        );

        room.apply_pod(&gpu_pod("p2", Some("a"), 2, "Succeeded"));
        assert_eq!(devices(&room), 6, "a finished pod frees its devices");
        assert!(grew.has_changed().unwrap());
        grew.mark_unchanged();
        room.delete_pod(&gpu_pod("p1", Some("a"), 2, "Running"));
        assert_eq!(devices(&room), 8);
        assert!(grew.has_changed().unwrap());
        assert_eq!(room.held(), (0, 1));

        room.apply_node(&gpu_node("a", 8, false));
        assert_eq!(devices(&room), 0, "a node not ready");
        room.apply_node(&gpu_node("a", 0, true));
        assert_eq!(room.held(), (0, 0), "a node without devices is not held");
    }

    #[test]
    fn pods_bound_before_their_node_is_seen_count_once_it_is() {
        let room = synced();
        room.apply_pod(&gpu_pod("p1", Some("b"), 3, "Running"));
        room.apply_node(&gpu_node("b", 8, true));
        assert_eq!(devices(&room), 5);
        room.delete_node(&gpu_node("b", 8, true));
        assert_eq!(devices(&room), 0);
    }

    #[test]
    fn a_list_drops_what_it_did_not_deliver() {
        let room = synced();
        room.apply_node(&gpu_node("a", 8, true));
        room.apply_node(&gpu_node("b", 8, true));
        room.apply_pod(&gpu_pod("p1", Some("a"), 4, "Running"));
        room.apply_pod(&gpu_pod("p2", Some("b"), 4, "Running"));
        assert_eq!(devices(&room), 8);
        // The watches list again: p2 and node b went meanwhile.
        room.pods_listing();
        room.list_pod(&gpu_pod("p1", Some("a"), 4, "Running"));
        room.pods_listed();
        room.nodes_listing();
        room.list_node(&gpu_node("a", 8, true));
        room.nodes_listed();
        assert_eq!(devices(&room), 4);
        assert_eq!(room.held(), (1, 1));
        assert!(room.held_bytes() > 0);
    }
}
