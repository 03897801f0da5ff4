use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kube::runtime::reflector;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};

use super::*;
use crate::reconcile::echo::Echoes;
use crate::reconcile::watched::{WatchedDeployment, WatchedMeta};

fn deployment(rv: &str, generation: i64, status: Value) -> WatchedDeployment {
    serde_json::from_value(json!({
        "metadata": {
            "name": "chat", "namespace": "team", "uid": "u-1", "resourceVersion": rv,
            "generation": generation, "annotations": {ANNOTATION_APPLIED: "d1"},
            "ownerReferences": [{"apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
                                 "name": "chat", "uid": "svc-uid", "controller": true}]
        },
        "spec": {"replicas": 1},
        "status": status
    }))
    .expect("deployment")
}

fn feed<K: ChildKind>() -> (Feed<K>, Arc<Echoes>) {
    let (_, writer) = reflector::store::<K::Watched>();
    let echoes = Arc::new(Echoes::detached());
    (Feed::new(writer, Arc::clone(&echoes)), echoes)
}

fn names<W: Resource>(news: Option<W>) -> Option<String> {
    news.and_then(|w| w.meta().resource_version.clone())
}

#[test]
fn the_first_list_is_not_news_and_a_change_by_someone_else_is() {
    let (mut feed, _) = feed::<Deployment>();
    assert_eq!(names(feed.take(Event::Init)), None);
    assert_eq!(
        names(feed.take(Event::InitApply(deployment("1", 1, Value::Null)))),
        None
    );
    assert_eq!(names(feed.take(Event::InitDone)), None);
    // The deployment controller's bookkeeping: not news.
    let seen = json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1});
    assert_eq!(
        names(feed.take(Event::Apply(deployment("2", 1, seen.clone())))),
        None
    );
    // A pod ready: news.
    let ready =
        json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1});
    assert_eq!(
        names(feed.take(Event::Apply(deployment("3", 1, ready.clone())))),
        Some("3".into())
    );
    // Someone edits the spec: news.
    assert_eq!(
        names(feed.take(Event::Apply(deployment("4", 2, ready.clone())))),
        Some("4".into())
    );
    // Deleted: news.
    assert_eq!(
        names(feed.take(Event::Delete(deployment("5", 2, ready)))),
        Some("5".into())
    );
}

#[test]
fn the_echo_of_a_write_is_not_news() {
    let (mut feed, echoes) = feed::<Deployment>();
    feed.take(Event::Init);
    feed.take(Event::InitDone);
    let key = ("Deployment", "team".to_owned(), "chat".to_owned());
    let owner = kube::runtime::reflector::ObjectRef::new("chat").within("team");
    // Created by the writer: its event is an echo.
    echoes.begin(&key, owner.clone());
    echoes.end(&key, Some(Seen::Version("1".into())));
    assert_eq!(
        names(feed.take(Event::Apply(deployment("1", 1, Value::Null)))),
        None
    );
    // Updated by the writer, the event arriving before the write's answer.
    echoes.begin(&key, owner.clone());
    assert_eq!(
        names(feed.take(Event::Apply(deployment("2", 2, Value::Null)))),
        None
    );
    echoes.end(&key, Some(Seen::Version("2".into())));
    // Deleted by the writer.
    echoes.begin(&key, owner);
    echoes.end(&key, Some(Seen::Gone("u-1".into())));
    assert_eq!(
        names(feed.take(Event::Delete(deployment("2", 2, Value::Null)))),
        None
    );
    assert_eq!(echoes.pending(), 0);
}

#[test]
fn a_list_after_the_first_hands_on_only_what_changed_meanwhile() {
    let (mut feed, _) = feed::<Service>();
    let service = |name: &str, rv: &str| -> WatchedMeta<Service> {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "team",
                                                   "uid": name, "resourceVersion": rv}}))
        .expect("service")
    };
    feed.take(Event::Init);
    feed.take(Event::InitApply(service("a", "1")));
    feed.take(Event::InitApply(service("b", "1")));
    feed.take(Event::InitDone);
    // The watch expired; the list again.
    assert_eq!(names(feed.take(Event::Init)), None);
    assert_eq!(names(feed.take(Event::InitApply(service("a", "1")))), None);
    assert_eq!(
        names(feed.take(Event::InitApply(service("b", "7")))),
        Some("7".into())
    );
    assert_eq!(
        names(feed.take(Event::InitApply(service("c", "8")))),
        Some("8".into())
    );
    feed.take(Event::InitDone);
    // After a restart of the watch (an optional CRD installed again), the
    // first list is not handed on.
    feed.restart();
    feed.take(Event::Init);
    assert_eq!(names(feed.take(Event::InitApply(service("d", "9")))), None);
}

#[test]
fn what_matters_by_the_kinds_change_signal() {
    let before = deployment("1", 1, Value::Null);
    // Only the resourceVersion moved: not for a kind with a generation.
    assert!(!matters(
        Some(&before),
        &deployment("2", 1, Value::Null),
        Change::Revision
    ));
    assert!(matters(
        Some(&before),
        &deployment("2", 2, Value::Null),
        Change::Revision
    ));
    // A kind whose resourceVersion moves on its own: a new object only.
    assert!(!matters(
        Some(&before),
        &deployment("2", 2, Value::Null),
        Change::Uid
    ));
    let mut other = deployment("2", 1, Value::Null);
    other.metadata.uid = Some("u-2".into());
    assert!(matters(Some(&before), &other, Change::Uid));
    // Another applied digest, a deletion begun, no owner: news.
    let mut edited = deployment("2", 1, Value::Null);
    edited.metadata.annotations = None;
    assert!(matters(Some(&before), &edited, Change::Uid));
    let mut deleting = deployment("2", 1, Value::Null);
    deleting.metadata.deletion_timestamp =
        serde_json::from_value(json!("2026-11-27T00:00:00Z")).ok();
    assert!(matters(Some(&before), &deleting, Change::Uid));
    let mut orphan = deployment("2", 1, Value::Null);
    orphan.metadata.owner_references = None;
    assert!(matters(Some(&before), &orphan, Change::Uid));
    // Nothing cached: news.
    assert!(matters(None, &before, Change::Uid));
}
