//! Per service and track, the states of its engine pods that are not
//! ready, and the most telling of them.
//!
//! Only not-ready pods are held, each as a [`PodState`] of a few strings
//! cut to [`super::classify::KEPT_MAX`] bytes, and a canary's pods whose
//! containers restarted (a progressive rollout counts the restarts); a
//! service none of whose pods is held has no entry. A cluster whose pods
//! all serve and never restarted holds nothing; the Pod objects themselves
//! are never kept.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use kube::runtime::reflector::ObjectRef;

use super::classify::{PodState, WatchedPod, pod_state, restarts};
use crate::api::upstream::lws::LABEL_GROUP_INDEX;
use crate::api::v1beta1::InferenceService;
use crate::reconcile::children::lws::LABEL_WORKER_OF;
use crate::reconcile::children::{LABEL_SERVICE, LABEL_TRACK, Track};

/// `(namespace, service name)`.
type ServiceKey = (String, String);

/// A service's held pods by name.
type ServicePods = BTreeMap<String, Held>;

/// What is held of one pod.
#[derive(Clone, Debug)]
struct Held {
    track: Track,
    /// [`PodState::Ready`] only for a canary's pod held for its restarts.
    state: PodState,
    /// Its containers' restarts (a canary's pod; 0 for a primary's).
    restarts: i32,
}

/// What to hold of a pod of `track`: a pod not ready, or a canary's pod
/// whose containers restarted; `None` for any other (and a pod going away).
fn held(track: Track, pod: &WatchedPod) -> Option<Held> {
    let mut state = pod_state(pod)?;
    // A pod of a group says which group and pod it is.
    let labels = pod.metadata.labels.as_ref();
    if let (Some(group), Some(name)) = (
        labels.and_then(|l| l.get(LABEL_GROUP_INDEX)),
        pod.metadata.name.as_deref(),
    ) {
        state = state.in_group(group, name);
    }
    let restarts = if track == Track::Canary {
        restarts(pod)
    } else {
        0
    };
    (state.rank().is_some() || restarts > 0).then_some(Held {
        track,
        state,
        restarts,
    })
}

/// The most telling state of each track: `[primary, canary]`.
type Summary = [Option<PodState>; 2];

/// The not-ready engine pods of every service, shared by the watch that
/// fills it and the reconciles that read it.
#[derive(Debug, Default)]
pub struct PodStates {
    services: Mutex<HashMap<ServiceKey, ServicePods>>,
}

/// What a pod's labels say about where it belongs.
struct Place {
    key: ServiceKey,
    pod: String,
    track: Track,
}

/// The service, name and track of an engine pod; `None` for a pod
/// without them (not one of a track's engine pods).
fn place(pod: &WatchedPod) -> Option<Place> {
    let labels = pod.metadata.labels.as_ref()?;
    // A worker of a group (a replica that spans nodes) names its track
    // in its own label.
    let track = labels
        .get(LABEL_TRACK)
        .or_else(|| labels.get(LABEL_WORKER_OF))?;
    let track = match track.as_str() {
        "primary" => Track::Primary,
        "canary" => Track::Canary,
        _ => return None,
    };
    Some(Place {
        key: (
            pod.metadata.namespace.clone()?,
            labels.get(LABEL_SERVICE)?.clone(),
        ),
        pod: pod.metadata.name.clone()?,
        track,
    })
}

/// The state to hold for a pod, given the one held before: a pull in
/// back-off keeps the message of the failed pull before it (the kubelet
/// alternates `ErrImagePull`, which says why, and `ImagePullBackOff`,
/// which says only that it waits).
fn settle(before: Option<&PodState>, now: PodState) -> PodState {
    match (before, &now) {
        (
            Some(
                old @ PodState::ImagePullFailed {
                    image: old_image, ..
                },
            ),
            PodState::ImagePullFailed {
                image,
                backing_off: true,
                ..
            },
        ) if old_image == image => old.clone(),
        _ => now,
    }
}

/// The most telling state among `pods` of `track` (the first by pod name
/// among equals).
fn worst_of(pods: Option<&ServicePods>, track: Track) -> Option<PodState> {
    pods?
        .values()
        .filter(|h| h.track == track)
        .filter_map(|h| h.state.rank().map(|r| (r, &h.state)))
        .min_by_key(|(r, _)| *r)
        .map(|(_, s)| s.clone())
}

fn summary(pods: Option<&ServicePods>) -> Summary {
    [
        worst_of(pods, Track::Primary),
        worst_of(pods, Track::Canary),
    ]
}

fn service_ref((namespace, name): &ServiceKey) -> ObjectRef<InferenceService> {
    ObjectRef::new(name).within(namespace)
}

impl PodStates {
    fn lock(&self) -> MutexGuard<'_, HashMap<ServiceKey, ServicePods>> {
        // The map is left consistent by every holder: a panic elsewhere
        // does not make it unreadable.
        self.services
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Take in a pod as the watch saw it (added or changed). The service to
    /// reconcile when the most telling state of one of its tracks changed.
    pub fn apply(&self, pod: &WatchedPod) -> Option<ObjectRef<InferenceService>> {
        let place = place(pod)?;
        let now = held(place.track, pod);
        self.update(place, now)
    }

    /// Forget a deleted pod. The service to reconcile when the most telling
    /// state of one of its tracks changed.
    pub fn delete(&self, pod: &WatchedPod) -> Option<ObjectRef<InferenceService>> {
        self.update(place(pod)?, None)
    }

    fn update(&self, place: Place, now: Option<Held>) -> Option<ObjectRef<InferenceService>> {
        let mut services = self.lock();
        let before = summary(services.get(&place.key));
        match now {
            Some(mut held) => {
                let pods = services.entry(place.key.clone()).or_default();
                held.state = settle(pods.get(&place.pod).map(|h| &h.state), held.state);
                pods.insert(place.pod, held);
            }
            None => {
                if let Some(pods) = services.get_mut(&place.key) {
                    pods.remove(&place.pod);
                    if pods.is_empty() {
                        services.remove(&place.key);
                    }
                }
            }
        }
        let after = summary(services.get(&place.key));
        (before != after).then(|| service_ref(&place.key))
    }

    /// Replace what is held for `namespace` (every namespace for `None`)
    /// by a complete list of its pods. The services whose summary changed.
    pub fn replace(
        &self,
        namespace: Option<&str>,
        listing: Listing,
    ) -> Vec<ObjectRef<InferenceService>> {
        let in_scope = |key: &ServiceKey| namespace.is_none_or(|ns| key.0 == ns);
        let mut services = self.lock();
        let mut listed = listing.services;
        for (key, pods) in &mut listed {
            let old = services.get(key);
            for (name, held) in pods.iter_mut() {
                let before = old.and_then(|o| o.get(name)).map(|h| &h.state);
                held.state = settle(
                    before,
                    std::mem::replace(&mut held.state, PodState::Starting),
                );
            }
        }
        let mut changed = Vec::new();
        for (key, pods) in services.iter().filter(|(k, _)| in_scope(k)) {
            if summary(Some(pods)) != summary(listed.get(key)) {
                changed.push(service_ref(key));
            }
        }
        for (key, pods) in &listed {
            if !services.contains_key(key) && summary(Some(pods)) != summary(None) {
                changed.push(service_ref(key));
            }
        }
        services.retain(|k, _| !in_scope(k));
        services.extend(
            listed
                .into_iter()
                .filter(|(k, p)| in_scope(k) && !p.is_empty()),
        );
        changed
    }

    /// The most telling state among the not-ready pods of `service`'s
    /// `track` (in the order of [`PodState::rank`]); `None` when every pod
    /// seen is ready, or none was seen.
    #[must_use]
    pub fn worst(&self, namespace: &str, service: &str, track: Track) -> Option<PodState> {
        let services = self.lock();
        let pods = services.get(&(namespace.to_owned(), service.to_owned()));
        worst_of(pods, track)
    }

    /// The container restarts of `service`'s canary pods that exist and
    /// are not going away.
    #[must_use]
    pub fn canary_restarts(&self, namespace: &str, service: &str) -> i32 {
        let services = self.lock();
        services
            .get(&(namespace.to_owned(), service.to_owned()))
            .map_or(0, |pods| {
                pods.values()
                    .filter(|h| h.track == Track::Canary)
                    .map(|h| h.restarts)
                    .sum()
            })
    }
}

/// The not-ready pods of one complete list, before they replace what the
/// index holds ([`PodStates::replace`]).
#[derive(Debug, Default)]
pub struct Listing {
    services: HashMap<ServiceKey, ServicePods>,
}

impl Listing {
    /// Add a listed pod.
    pub fn add(&mut self, pod: &WatchedPod) {
        let Some(place) = place(pod) else { return };
        if let Some(held) = held(place.track, pod) {
            self.services
                .entry(place.key)
                .or_default()
                .insert(place.pod, held);
        }
    }
}

#[cfg(test)]
mod tests {
    //! The index: a service is handed on only when a track's most telling
    //! state changes, and nothing is held for pods that serve.

    use serde_json::json;

    use super::*;
    use crate::reconcile::pods::classify::tests::{
        SCHEDULER, crash_looping, pod, pod_of, pulling, running, unschedulable,
    };

    fn chat() -> ObjectRef<InferenceService> {
        ObjectRef::new("chat").within("team-a")
    }

    fn held(states: &PodStates) -> usize {
        states.lock().values().map(BTreeMap::len).sum()
    }

    #[test]
    fn a_pod_of_a_group_names_its_group_and_itself() {
        let states = PodStates::default();
        let mut p = pod("chat-lws-1-1", unschedulable(SCHEDULER));
        if let Some(labels) = p.metadata.labels.as_mut() {
            labels.remove(LABEL_TRACK);
            labels.insert(LABEL_WORKER_OF.to_owned(), "primary".to_owned());
            labels.insert(LABEL_GROUP_INDEX.to_owned(), "1".to_owned());
        }
        assert_eq!(states.apply(&p), Some(chat()));
        assert_eq!(
            states.worst("team-a", "chat", Track::Primary),
            Some(PodState::Unschedulable {
                message: format!("group 1, pod chat-lws-1-1: {SCHEDULER}")
            })
        );
    }

    #[test]
    fn the_same_status_twice_triggers_once() {
        let states = PodStates::default();
        let p = pod("chat-1", unschedulable(SCHEDULER));
        assert_eq!(states.apply(&p), Some(chat()));
        assert_eq!(states.apply(&p), None, "nothing changed");
        // A new scheduler message is a change.
        let p = pod(
            "chat-1",
            unschedulable("0/4 nodes are available: 4 Insufficient nvidia.com/gpu."),
        );
        assert_eq!(states.apply(&p), Some(chat()));
        // Scheduled and starting: a change.
        assert_eq!(states.apply(&pod("chat-1", running(false))), Some(chat()));
        assert_eq!(
            states.worst("team-a", "chat", Track::Primary),
            Some(PodState::Starting)
        );
    }

    #[test]
    fn a_ready_pod_is_not_held_and_a_service_without_pods_has_no_entry() {
        let states = PodStates::default();
        assert_eq!(states.apply(&pod("chat-1", running(true))), None);
        assert_eq!(held(&states), 0, "a ready pod holds nothing");
        assert_eq!(states.apply(&pod("chat-1", crash_looping())), Some(chat()));
        assert_eq!(held(&states), 1);
        // Ready again: the track has nothing to say, the entry goes.
        assert_eq!(states.apply(&pod("chat-1", running(true))), Some(chat()));
        assert!(states.lock().is_empty());
        assert_eq!(states.worst("team-a", "chat", Track::Primary), None);
        // A deleted pod goes, and its service with it.
        let p = pod("chat-2", running(false));
        assert_eq!(states.apply(&p), Some(chat()));
        assert_eq!(states.delete(&p), Some(chat()));
        assert!(states.lock().is_empty());
        assert_eq!(states.delete(&p), None, "already gone");
    }

    #[test]
    fn a_second_pod_in_the_same_state_changes_nothing() {
        let states = PodStates::default();
        assert_eq!(states.apply(&pod("chat-1", running(false))), Some(chat()));
        assert_eq!(states.apply(&pod("chat-2", running(false))), None);
        // One of them becomes ready: the other still starts.
        assert_eq!(states.apply(&pod("chat-1", running(true))), None);
        assert_eq!(held(&states), 1);
    }

    #[test]
    fn worst_names_the_most_telling_state_of_the_track() {
        let states = PodStates::default();
        states.apply(&pod("chat-a", running(false)));
        states.apply(&pod("chat-b", crash_looping()));
        states.apply(&pod("chat-c", pulling("ErrImagePull", "not found")));
        states.apply(&pod("chat-d", unschedulable(SCHEDULER)));
        let worst = || states.worst("team-a", "chat", Track::Primary);
        assert!(matches!(worst(), Some(PodState::Unschedulable { .. })));
        states.delete(&pod("chat-d", json!({})));
        assert!(matches!(worst(), Some(PodState::ImagePullFailed { .. })));
        states.delete(&pod("chat-c", json!({})));
        assert!(matches!(worst(), Some(PodState::CrashLooping { .. })));
        states.delete(&pod("chat-b", json!({})));
        assert_eq!(worst(), Some(PodState::Starting));
        // Another track's and another service's pods are their own.
        assert_eq!(
            states.apply(&pod_of(
                "chat",
                "canary",
                "chat-canary-1",
                unschedulable(SCHEDULER)
            )),
            Some(chat())
        );
        states.apply(&pod_of("other", "primary", "other-1", crash_looping()));
        assert_eq!(worst(), Some(PodState::Starting));
        assert!(matches!(
            states.worst("team-a", "chat", Track::Canary),
            Some(PodState::Unschedulable { .. })
        ));
        assert!(matches!(
            states.worst("team-a", "other", Track::Primary),
            Some(PodState::CrashLooping { .. })
        ));
        assert_eq!(states.worst("team-b", "chat", Track::Primary), None);
    }

    #[test]
    fn a_pull_in_back_off_keeps_the_message_that_says_why() {
        let states = PodStates::default();
        let why = "failed to pull and unpack image \"registry.example.com/vllm:bad\": not found";
        assert_eq!(
            states.apply(&pod("chat-1", pulling("ErrImagePull", why))),
            Some(chat())
        );
        let back_off = pulling(
            "ImagePullBackOff",
            "Back-off pulling image \"registry.example.com/vllm:bad\"",
        );
        assert_eq!(states.apply(&pod("chat-1", back_off.clone())), None);
        let Some(PodState::ImagePullFailed { message, .. }) =
            states.worst("team-a", "chat", Track::Primary)
        else {
            panic!("image pull")
        };
        assert_eq!(message, why);
        // A pod first seen in back-off says what it has.
        assert_eq!(
            states.apply(&pod("chat-2", back_off)),
            None,
            "chat-1 comes first"
        );
        states.delete(&pod("chat-1", json!({})));
        assert!(matches!(
            states.worst("team-a", "chat", Track::Primary),
            Some(PodState::ImagePullFailed {
                backing_off: true,
                ..
            })
        ));
    }

    #[test]
    fn a_ray_clusters_head_and_workers_count_for_their_service() {
        let states = PodStates::default();
        // As KubeRay makes them: its own labels beside the template's.
        let ray_pod = |name: &str, node_type: &str, status| {
            let mut p = pod_of("rag", "primary", name, status);
            if let Some(labels) = p.metadata.labels.as_mut() {
                for (k, v) in [
                    ("ray.io/cluster", "rag-raycluster-abcde"),
                    ("ray.io/node-type", node_type),
                    ("ray.io/group", "workers"),
                    ("ray.io/is-ray-node", "yes"),
                ] {
                    labels.insert(k.to_owned(), v.to_owned());
                }
            }
            p
        };
        let rag = ObjectRef::new("rag").within("team-a");
        assert_eq!(
            states.apply(&ray_pod("rag-head-x", "head", running(false))),
            Some(rag.clone())
        );
        assert_eq!(
            states.apply(&ray_pod(
                "rag-workers-y",
                "worker",
                unschedulable(SCHEDULER)
            )),
            Some(rag.clone())
        );
        assert_eq!(
            states.worst("team-a", "rag", Track::Primary),
            Some(PodState::Unschedulable {
                message: SCHEDULER.to_owned()
            })
        );
        // The head ready, the worker placed and starting.
        states.apply(&ray_pod("rag-head-x", "head", running(true)));
        assert_eq!(
            states.apply(&ray_pod("rag-workers-y", "worker", running(false))),
            Some(rag)
        );
        assert_eq!(
            states.worst("team-a", "rag", Track::Primary),
            Some(PodState::Starting)
        );
        assert_eq!(held(&states), 1, "only the not-ready worker is held");
    }

    #[test]
    fn pods_that_are_not_a_tracks_engine_pods_are_ignored() {
        let states = PodStates::default();
        let mut picker = pod("chat-epp-1", crash_looping());
        if let Some(labels) = picker.metadata.labels.as_mut() {
            labels.remove(LABEL_TRACK);
        }
        assert_eq!(states.apply(&picker), None);
        let odd = pod_of("chat", "shadow", "chat-x", crash_looping());
        assert_eq!(states.apply(&odd), None);
        assert!(states.lock().is_empty());
    }

    #[test]
    fn a_new_list_replaces_its_namespace_and_triggers_what_changed() {
        let states = PodStates::default();
        states.apply(&pod_of("gone", "primary", "gone-1", running(false)));
        states.apply(&pod_of("same", "primary", "same-1", crash_looping()));
        states.apply(&pod_of("moved", "primary", "moved-1", running(false)));
        let mut elsewhere = pod_of("far", "primary", "far-1", running(false));
        elsewhere.metadata.namespace = Some("team-b".into());
        states.apply(&elsewhere);

        let mut listing = Listing::default();
        listing.add(&pod_of("same", "primary", "same-1", crash_looping()));
        listing.add(&pod_of(
            "moved",
            "primary",
            "moved-1",
            unschedulable(SCHEDULER),
        ));
        listing.add(&pod_of("new", "primary", "new-1", running(false)));
        listing.add(&pod_of("fine", "primary", "fine-1", running(true)));
        let mut changed = states.replace(Some("team-a"), listing);
        changed.sort_by_key(|r| r.name.clone());
        let names: Vec<&str> = changed.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["gone", "moved", "new"]);
        assert_eq!(states.worst("team-a", "gone", Track::Primary), None);
        assert_eq!(states.worst("team-a", "fine", Track::Primary), None);
        assert!(matches!(
            states.worst("team-a", "moved", Track::Primary),
            Some(PodState::Unschedulable { .. })
        ));
        // Another namespace's pods are not touched by this namespace's list.
        assert_eq!(
            states.worst("team-b", "far", Track::Primary),
            Some(PodState::Starting)
        );
        // A list of every namespace replaces everything.
        assert_eq!(
            states.replace(None, Listing::default()).len(),
            4,
            "far, moved, new and same lose their pods"
        );
        assert!(states.lock().is_empty());
    }

    #[test]
    fn a_canarys_restarts_are_held_while_its_pods_serve_and_counted_per_service() {
        let states = PodStates::default();
        let restarted = |n: i64| {
            let mut s = running(true);
            s["containerStatuses"][0]["restartCount"] = json!(n);
            s
        };
        // A primary's restarts are not held: the rollout counts a canary's.
        assert_eq!(states.apply(&pod("chat-1", restarted(2))), None);
        assert_eq!(held(&states), 0);
        // A canary's pod that serves after two restarts is held, and changes
        // no track's summary.
        assert_eq!(
            states.apply(&pod_of("chat", "canary", "chat-next-1", restarted(2))),
            None
        );
        assert_eq!(held(&states), 1);
        assert_eq!(states.worst("team-a", "chat", Track::Canary), None);
        // A second canary pod, crash looping (4 restarts): both count.
        assert_eq!(
            states.apply(&pod_of("chat", "canary", "chat-next-2", crash_looping())),
            Some(chat())
        );
        assert_eq!(states.canary_restarts("team-a", "chat"), 6);
        assert_eq!(states.canary_restarts("team-a", "other"), 0);
        // A pod going away no longer counts; a canary pod that never
        // restarted and serves is not held.
        states.delete(&pod_of("chat", "canary", "chat-next-2", json!({})));
        assert_eq!(states.canary_restarts("team-a", "chat"), 2);
        states.apply(&pod_of("chat", "canary", "chat-next-1", running(true)));
        assert_eq!(states.canary_restarts("team-a", "chat"), 0);
        assert!(states.lock().is_empty());
        // A new list holds the same.
        let mut listing = Listing::default();
        listing.add(&pod_of("chat", "canary", "chat-next-3", restarted(1)));
        listing.add(&pod("chat-4", restarted(5)));
        assert!(
            states.replace(None, listing).is_empty(),
            "no summary changed"
        );
        assert_eq!(states.canary_restarts("team-a", "chat"), 1);
        assert_eq!(held(&states), 1);
    }
}
