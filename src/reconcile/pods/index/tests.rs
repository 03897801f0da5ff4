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
