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
use crate::api::v1beta1::InferenceService;
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
    let state = pod_state(pod)?;
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
    let track = match labels.get(LABEL_TRACK)?.as_str() {
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
mod tests;
