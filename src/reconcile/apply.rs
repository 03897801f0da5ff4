//! Writing to the cluster: server-side apply of a child with the events
//! that say what changed, deletion of a child the service controls, status
//! writes (only when the status changed) with the events its conditions
//! call for.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Mutex;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, PartialObjectMeta, Patch, PatchParams, Preconditions};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::warn;

use super::Error;
use super::status::{self, Observation, Reason};
use crate::api::MANAGER;
use crate::api::v1beta1::InferenceService;

/// (kind, namespace, name) of a child.
type ChildKey = (&'static str, String, String);
/// (uid, generation or resourceVersion) of a child as last applied.
type ChildMarker = (String, String);

/// Writes children, status and events for the reconciler.
pub struct Writer {
    client: Client,
    recorder: Recorder,
    /// Last applied (uid, generation or resourceVersion) per child, for events.
    seen: Mutex<HashMap<ChildKey, ChildMarker>>,
}

/// Whether `svc` is the controller of the object `meta` describes.
#[must_use]
pub fn owned_by(meta: &kube::api::ObjectMeta, svc: &InferenceService) -> bool {
    let Some(uid) = svc.uid() else {
        return false;
    };
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| o.uid == uid && o.controller == Some(true))
}

impl Writer {
    /// A writer using `client`, publishing events through `recorder`.
    #[must_use]
    pub fn new(client: Client, recorder: Recorder) -> Self {
        Writer {
            client,
            recorder,
            seen: Mutex::new(HashMap::new()),
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
            note: Some(note),
            action: "Reconcile".to_owned(),
            secondary: related,
        };
        if let Err(e) = self.recorder.publish(&event, &svc.object_ref(&())).await {
            warn!(error = %e, reason = reason.as_str(), "failed to publish event");
        }
    }

    /// Server-side apply one child; publish Created/Updated when it changed.
    /// `store` is the child kind's cache: it says whether the object existed
    /// and who controls it (an object another controller owns is never
    /// taken over).
    pub async fn apply<K>(
        &self,
        svc: &InferenceService,
        obj: &K,
        store: &Store<PartialObjectMeta<K>>,
    ) -> Result<K, Error>
    where
        K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
            + Clone
            + Debug
            + Serialize
            + DeserializeOwned,
    {
        let ns = obj.namespace().unwrap_or_default();
        let name = obj.name_any();
        let kind: &'static str = match K::kind(&()).as_ref() {
            "Deployment" => "Deployment",
            "Service" => "Service",
            "HorizontalPodAutoscaler" => "HorizontalPodAutoscaler",
            "HTTPRoute" => "HTTPRoute",
            "RayService" => "RayService",
            _ => "object",
        };
        let marker = |m: &kube::api::ObjectMeta| {
            (
                m.uid.clone().unwrap_or_default(),
                m.generation
                    .map(|g| g.to_string())
                    .or_else(|| m.resource_version.clone())
                    .unwrap_or_default(),
            )
        };
        // What the cache knew before this apply: read before patching, or the
        // watch may already have delivered the object this apply creates.
        let cached = store.get(&ObjectRef::new(&name).within(&ns));
        let cached_before = cached.as_ref().map(|m| marker(m.meta()));
        // Never take over an object another controller owns.
        if let Some(existing) = cached
            && let Some(other) = existing
                .metadata
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.controller == Some(true) && Some(&o.uid) != svc.uid().as_ref())
        {
            return Err(Error::ForeignChild {
                kind,
                name,
                owner: format!("{} {}", other.kind, other.name),
            });
        }
        let api: Api<K> = Api::namespaced(self.client.clone(), &ns);
        let params = PatchParams::apply(MANAGER).force();
        let applied = api.patch(&name, &params, &Patch::Apply(obj)).await?;
        let now = marker(applied.meta());
        let key = (kind, ns.clone(), name.clone());
        let before = self
            .seen
            .lock()
            .ok()
            .and_then(|s| s.get(&key).cloned())
            .or(cached_before);
        if let Ok(mut s) = self.seen.lock() {
            s.insert(key, now.clone());
        }
        match before {
            Some((uid, _)) if uid != now.0 => {
                self.publish(
                    svc,
                    EventType::Normal,
                    Reason::Created,
                    format!("created {kind} {name}"),
                )
                .await;
            }
            None => {
                self.publish(
                    svc,
                    EventType::Normal,
                    Reason::Created,
                    format!("created {kind} {name}"),
                )
                .await;
            }
            Some((_, m)) if m != now.1 => {
                self.publish(
                    svc,
                    EventType::Normal,
                    Reason::Updated,
                    format!("updated {kind} {name}"),
                )
                .await;
            }
            Some(_) => {}
        }
        Ok(applied)
    }

    /// Delete a child this service controls, if the cache knows one.
    pub async fn delete<K>(
        &self,
        svc: &InferenceService,
        name: &str,
        store: &Store<PartialObjectMeta<K>>,
    ) -> Result<(), Error>
    where
        K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
            + Clone
            + Debug
            + DeserializeOwned,
    {
        let ns = svc.namespace().unwrap_or_default();
        let Some(meta) = store.get(&ObjectRef::new(name).within(&ns)) else {
            return Ok(());
        };
        if meta.metadata.deletion_timestamp.is_some() || !owned_by(&meta.metadata, svc) {
            return Ok(());
        }
        let kind = K::kind(&()).into_owned();
        let api: Api<K> = Api::namespaced(self.client.clone(), &ns);
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: meta.uid(),
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        match api.delete(name, &params).await {
            Ok(_) => {
                if let Ok(mut s) = self.seen.lock() {
                    s.retain(|(_, n, m), _| !(n == &ns && m == name));
                }
                self.publish(
                    svc,
                    EventType::Normal,
                    Reason::Deleted,
                    format!("deleted {kind} {name}"),
                )
                .await;
                Ok(())
            }
            Err(kube::Error::Api(s)) if super::status_not_found(&s) => Ok(()),
            Err(e) => Err(Error::Kube(e)),
        }
    }

    /// Write the status through the status subresource (server-side apply)
    /// when it changed, with events for condition transitions that matter.
    pub async fn write_status(
        &self,
        svc: &InferenceService,
        obs: &Observation,
    ) -> Result<(), Error> {
        let previous = svc.status.as_ref();
        let new = status::compute(previous, obs, Timestamp::now());
        if previous == Some(&new) {
            return Ok(());
        }
        for c in status::conditions_for(obs) {
            let old = status::condition(previous, c.type_);
            let status = if c.status { "True" } else { "False" };
            if old.is_some_and(|o| o.status == status && o.reason == c.reason.as_str()) {
                continue;
            }
            if !c.status && (c.type_ == status::GRAPH_READY || c.reason.is_warning()) {
                self.publish(svc, EventType::Warning, c.reason, c.message.clone())
                    .await;
            } else if c.type_ == status::READY && c.status {
                self.publish(svc, EventType::Normal, Reason::Ready, c.message.clone())
                    .await;
            }
        }
        let api: Api<InferenceService> =
            Api::namespaced(self.client.clone(), &svc.namespace().unwrap_or_default());
        let patch = serde_json::json!({
            "apiVersion": InferenceService::api_version(&()),
            "kind": InferenceService::kind(&()),
            "status": new,
        });
        api.patch_status(
            &svc.name_any(),
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
        Ok(())
    }
}
