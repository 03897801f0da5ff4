//! A watch's events into the index: changes at once, a list when it is
//! complete.

use super::*;
use crate::reconcile::children::Track;
use crate::reconcile::pods::PodState;
use crate::reconcile::pods::classify::tests::{crash_looping, pod, running};

#[test]
fn the_selector_leaves_out_the_pickers_and_ray_pods() {
    assert_eq!(
        selector(),
        "app.kubernetes.io/managed-by=infergate,infergate.dev/service,infergate.dev/track,!ray.io/node-type"
    );
}

#[test]
fn a_list_counts_once_it_is_complete() {
    let states = PodStates::default();
    let mut feed = Feed::new(Some("team-a".into()));
    assert_eq!(
        feed.handle(&states, Event::Apply(pod("chat-1", running(false))))
            .len(),
        1
    );
    // The watch lists again: the pod crashed meanwhile.
    assert!(feed.handle(&states, Event::Init).is_empty());
    assert!(
        feed.handle(&states, Event::InitApply(pod("chat-1", crash_looping())))
            .is_empty()
    );
    assert_eq!(
        states.worst("team-a", "chat", Track::Primary),
        Some(PodState::Starting),
        "the list before answers until this one is complete"
    );
    let changed = feed.handle(&states, Event::InitDone);
    assert_eq!(changed, [ObjectRef::new("chat").within("team-a")]);
    assert!(matches!(
        states.worst("team-a", "chat", Track::Primary),
        Some(PodState::CrashLooping { .. })
    ));
    // Deleted: the service is handed on, nothing is held.
    assert_eq!(
        feed.handle(&states, Event::Delete(pod("chat-1", crash_looping())))
            .len(),
        1
    );
    assert_eq!(states.worst("team-a", "chat", Track::Primary), None);
}
