//! Events: one per kind of change to a service's children per reconcile
//! ([`Writer::announce`]), and any other event regarding a service.

use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use tracing::warn;

use super::writer::Writer;
use crate::api::v1beta1::InferenceService;
use crate::reconcile::status::Reason;

impl Writer {
    /// Remember a change to one of the service's children.
    pub(super) fn record(&self, svc: &InferenceService, reason: Reason, child: String) {
        let key = (svc.namespace().unwrap_or_default(), svc.name_any());
        if let Ok(mut changes) = self.changes.lock() {
            let c = changes.entry(key).or_default();
            match reason {
                Reason::Created => c.created.push(child),
                Reason::Deleted => c.deleted.push(child),
                _ => c.updated.push(child),
            }
        }
    }

    /// Publish what the reconcile that ends did to the service's children:
    /// one event per kind of change (`Created`, `Updated`, `Deleted`), each
    /// naming every child it concerns, so a new service costs one event
    /// write, not one per child.
    pub async fn announce(&self, svc: &InferenceService) {
        let key = (svc.namespace().unwrap_or_default(), svc.name_any());
        let Some(changes) = self.changes.lock().ok().and_then(|mut c| c.remove(&key)) else {
            return;
        };
        for (reason, verb, children) in [
            (Reason::Created, "created", changes.created),
            (Reason::Updated, "updated", changes.updated),
            (Reason::Deleted, "deleted", changes.deleted),
        ] {
            if !children.is_empty() {
                let note = format!("{verb} {}", children.join(", "));
                self.publish(svc, EventType::Normal, reason, note).await;
            }
        }
    }

    /// Publish an event regarding the service.
    pub async fn publish(
        &self,
        svc: &InferenceService,
        type_: EventType,
        reason: Reason,
        note: String,
    ) {
        self.publish_related(svc, type_, reason, note, None).await;
    }

    /// Publish an event regarding the service; `related` names the child it is
    /// about (so events about different children are not merged into one series).
    pub async fn publish_related(
        &self,
        svc: &InferenceService,
        type_: EventType,
        reason: Reason,
        note: String,
        related: Option<k8s_openapi::api::core::v1::ObjectReference>,
    ) {
        let event = Event {
            type_,
            reason: reason.as_str().to_owned(),
            note: Some(crate::telemetry::cut_message(&note)),
            action: "Reconcile".to_owned(),
            secondary: related,
        };
        let key = svc.uid().unwrap_or_else(|| {
            format!("{}/{}", svc.namespace().unwrap_or_default(), svc.name_any())
        });
        let recorder = self.recorders.get(&key);
        if let Err(e) = recorder.publish(&event, &svc.object_ref(&())).await {
            warn!(error = %e, reason = reason.as_str(), "failed to publish event");
        }
    }
}
