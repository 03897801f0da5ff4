//! The watch of one child kind: by infergate's label, metadata only,
//! trimmed to what the reconciler reads, and which of its events touch a
//! child the controller is told of.

use kube::Client;
use kube::api::{ObjectMeta, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};

use super::children::{ANNOTATION_APPLIED, LABEL_MANAGED_BY};
use super::kinds::Child;
use crate::api::MANAGER;
use crate::state::Scope;

/// The watch of one kind's children: by infergate's label, metadata only,
/// trimmed to what the reconciler reads, retried with backoff.
pub(super) fn child_stream<K: Child>(
    client: &Client,
    scope: &Scope,
) -> impl futures::Stream<Item = watcher::Result<Event<PartialObjectMeta<K>>>> + Send + 'static {
    let wc = crate::state::scope::list_in_pages().labels(&format!("{LABEL_MANAGED_BY}={MANAGER}"));
    scope
        .watch::<PartialObjectMeta<K>>(client, wc)
        .default_backoff()
        .modify(|m| {
            m.types = None;
            keep_what_the_reconciler_reads(&mut m.metadata);
        })
}

/// The child an event touched, to hand on to the controller as an owner
/// trigger: every applied or deleted object, and a list's objects once
/// `listed` (a list after the first: the watch expired, and it carries
/// what changed meanwhile). `listed` turns true when a list is done.
pub(super) fn touched<K>(event: Event<K>, listed: &mut bool) -> Option<K> {
    match event {
        Event::Apply(obj) | Event::Delete(obj) => Some(obj),
        Event::InitApply(obj) if *listed => Some(obj),
        Event::InitDone => {
            *listed = true;
            None
        }
        Event::Init | Event::InitApply(_) => None,
    }
}

/// Trim a cached child's metadata to what the reconciler reads of it: its
/// name and namespace (the cache's key), uid, resourceVersion and
/// generation (whether it changed since infergate applied it), owner
/// references (whose it is; the controller's trigger), deletion timestamp,
/// and [`ANNOTATION_APPLIED`] (what infergate applied). Labels (the watch
/// selects on them on the server), other annotations, finalizers and the
/// managed fields (most of an applied object's metadata) are dropped: at a
/// few kilobytes per child they were most of the reconciler's memory.
fn keep_what_the_reconciler_reads(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    meta.labels = None;
    meta.finalizers = None;
    meta.creation_timestamp = None;
    meta.generate_name = None;
    meta.self_link = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.retain(|k, _| k == ANNOTATION_APPLIED);
        if annotations.is_empty() {
            meta.annotations = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_cached_child_keeps_only_what_the_reconciler_reads() {
        let mut meta: ObjectMeta = serde_json::from_value(json!({
            "name": "chat", "namespace": "team", "uid": "u-1", "resourceVersion": "42",
            "generation": 3, "creationTimestamp": "2026-11-25T10:00:00Z",
            "deletionTimestamp": "2026-11-25T11:00:00Z", "finalizers": ["x/y"],
            "labels": {"app.kubernetes.io/managed-by": "infergate", "infergate.dev/track": "primary"},
            "annotations": {ANNOTATION_APPLIED: "d1", "deployment.kubernetes.io/revision": "2"},
            "ownerReferences": [{"apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
                                 "name": "chat", "uid": "svc-uid", "controller": true}],
            "managedFields": [{"manager": "infergate", "operation": "Apply",
                               "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]
        }))
        .expect("metadata");
        keep_what_the_reconciler_reads(&mut meta);
        assert_eq!(
            serde_json::to_value(&meta).expect("json"),
            json!({
                "name": "chat", "namespace": "team", "uid": "u-1", "resourceVersion": "42",
                "generation": 3, "deletionTimestamp": "2026-11-25T11:00:00Z",
                "annotations": {ANNOTATION_APPLIED: "d1"},
                "ownerReferences": [{"apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
                                     "name": "chat", "uid": "svc-uid", "controller": true}]
            })
        );
        // A child without the annotation keeps no empty map.
        let mut bare: ObjectMeta =
            serde_json::from_value(json!({"name": "x", "annotations": {"a": "b"}})).expect("meta");
        keep_what_the_reconciler_reads(&mut bare);
        assert_eq!(bare.annotations, None);
    }
}
