//! Writing to the cluster: server-side apply of a child (only when what
//! the service wants of it changed, or someone else changed it), deletion
//! of a child the service controls, one event per kind of change per
//! reconcile, status writes (only when the status changed) with the events
//! its conditions call for.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Mutex;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::jiff::Timestamp;
use kube::api::{
    Api, DeleteParams, GetParams, PartialObjectMeta, Patch, PatchParams, Preconditions,
};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::warn;

use super::Error;
use super::children::ANNOTATION_APPLIED;
use super::events::Recorders;
use super::status::{self, Observation, Reason};
use crate::api::MANAGER;
use crate::api::v1beta1::InferenceService;

/// (kind, namespace, name) of a child.
type ChildKey = (&'static str, String, String);
/// (uid, generation or resourceVersion) of a child as last applied.
type ChildMarker = (String, String);

/// What [`Writer::apply`] did.
#[derive(Debug)]
pub enum Applied<K> {
    /// The child was written; the API server's answer.
    Written(K),
    /// The child already holds what the service wants (its digest matches
    /// and nobody changed its spec since): nothing was sent.
    Unchanged,
}

/// The digest [`ANNOTATION_APPLIED`] records: SHA-256 of the desired
/// object's JSON (without the annotation), first 16 bytes, hex.
fn digest_of<K: Serialize>(obj: &K) -> Result<String, Error> {
    let bytes = serde_json::to_vec(obj).map_err(kube::Error::SerdeError)?;
    let sum = ring::digest::digest(&ring::digest::SHA256, &bytes);
    Ok(sum.as_ref()[..16]
        .iter()
        .fold(String::with_capacity(32), |mut s, b| {
            use std::fmt::Write as _;
            let _ = write!(s, "{b:02x}");
            s
        }))
}

/// Writes children, status and events for the reconciler.
pub struct Writer {
    client: Client,
    recorders: Recorders<Recorder>,
    /// Last applied (uid, generation or resourceVersion) per child, for events.
    seen: Mutex<HashMap<ChildKey, ChildMarker>>,
    /// Children created, updated or deleted by the reconcile under way, per
    /// service (namespace, name): announced when it ends
    /// ([`Writer::announce`]), one event per kind of change.
    changes: Mutex<HashMap<(String, String), Changes>>,
}

/// What one reconcile did to a service's children, as `Kind name`.
#[derive(Default)]
struct Changes {
    created: Vec<String>,
    updated: Vec<String>,
    deleted: Vec<String>,
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
    /// A writer using `client`, publishing events as `reporter`.
    #[must_use]
    pub fn new(client: Client, reporter: Reporter) -> Self {
        let events = client.clone();
        Writer {
            client,
            recorders: Recorders::new(|| Recorder::new(events.clone(), reporter.clone())),
            seen: Mutex::new(HashMap::new()),
            changes: Mutex::new(HashMap::new()),
        }
    }

    /// Remember a change to one of the service's children.
    fn record(&self, svc: &InferenceService, reason: Reason, child: String) {
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

    /// Server-side apply one child unless it already holds what `obj`
    /// says; remember Created/Updated for [`Writer::announce`]. `store` is
    /// the child kind's cache: it says whether the object exists, who
    /// controls it (an object another controller owns is never taken over)
    /// and the digest of what infergate last applied to it
    /// ([`ANNOTATION_APPLIED`]).
    ///
    /// Nothing is sent when the cached child is this service's, carries the
    /// digest of `obj`, and is as this writer's last apply left it (see
    /// `untouched`). A child this writer has not applied yet (a restart, a
    /// new leader) is taken at its digest.
    pub async fn apply<K>(
        &self,
        svc: &InferenceService,
        obj: &K,
        store: &Store<PartialObjectMeta<K>>,
    ) -> Result<Applied<K>, Error>
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
            "PodMonitor" => "PodMonitor",
            "InferencePool" => "InferencePool",
            "ServiceAccount" => "ServiceAccount",
            "Role" => "Role",
            "RoleBinding" => "RoleBinding",
            "ConfigMap" => "ConfigMap",
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
        let key = (kind, ns.clone(), name.clone());
        // What the cache knew before this apply: read before patching, or the
        // watch may already have delivered the object this apply creates.
        let cached = store.get(&ObjectRef::new(&name).within(&ns));
        let cached_before = cached.as_ref().map(|m| marker(m.meta()));
        if let Some(existing) = &cached {
            // Never take over an object another controller owns.
            if let Some(other) = existing
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
        }
        let digest = digest_of(obj)?;
        if let Some(existing) = &cached
            && owned_by(&existing.metadata, svc)
            && existing.metadata.deletion_timestamp.is_none()
            && existing.annotations().get(ANNOTATION_APPLIED) == Some(&digest)
            && self.untouched(&key, marker(&existing.metadata))
        {
            return Ok(Applied::Unchanged);
        }
        let mut obj = obj.clone();
        obj.annotations_mut()
            .insert(ANNOTATION_APPLIED.to_owned(), digest);
        let api: Api<K> = Api::namespaced(self.client.clone(), &ns);
        let params = PatchParams::apply(MANAGER).force();
        let applied = api.patch(&name, &params, &Patch::Apply(&obj)).await?;
        let now = marker(applied.meta());
        let before = self
            .seen
            .lock()
            .ok()
            .and_then(|s| s.get(&key).cloned())
            .or(cached_before);
        if let Ok(mut s) = self.seen.lock() {
            s.insert(key, now.clone());
        }
        // Never seen, or gone and made again (a new uid): created; a new
        // generation (or resourceVersion): updated; otherwise nothing to say.
        let change = match before {
            None => Some(Reason::Created),
            Some((uid, _)) if uid != now.0 => Some(Reason::Created),
            Some((_, m)) if m != now.1 => Some(Reason::Updated),
            Some(_) => None,
        };
        if let Some(reason) = change {
            self.record(svc, reason, format!("{kind} {name}"));
        }
        Ok(Applied::Written(applied))
    }

    /// Whether nobody has changed the cached child since this writer last
    /// applied it: the same object (uid) at the generation the apply left,
    /// or for kinds without a generation (Service, ConfigMap, RBAC) the
    /// same resourceVersion. An HPA compares the uid only: the autoscaler
    /// rewrites its status (and so its resourceVersion) all the time. A
    /// child this writer never applied is taken as it is, and remembered.
    fn untouched(&self, key: &ChildKey, current: ChildMarker) -> bool {
        let Ok(mut seen) = self.seen.lock() else {
            return false;
        };
        match seen.get(key) {
            None => {
                seen.insert(key.clone(), current);
                true
            }
            Some((uid, mark)) => {
                uid == &current.0 && (key.0 == "HorizontalPodAutoscaler" || mark == &current.1)
            }
        }
    }

    /// [`Writer::apply`], returning the child as the API server holds it:
    /// when nothing had to be written, read from the API server's watch
    /// cache (`resourceVersion=0`: no etcd read), for its status.
    pub async fn apply_and_read<K>(
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
        match self.apply(svc, obj, store).await? {
            Applied::Written(applied) => Ok(applied),
            Applied::Unchanged => {
                let api: Api<K> =
                    Api::namespaced(self.client.clone(), &obj.namespace().unwrap_or_default());
                Ok(api.get_with(&obj.name_any(), &GetParams::any()).await?)
            }
        }
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
                self.record(svc, Reason::Deleted, format!("{kind} {name}"));
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use http::{Method, Request, Response, StatusCode};
    use k8s_openapi::api::apps::v1::Deployment;
    use kube::client::Body;
    use kube::runtime::events::Reporter;
    use kube::runtime::reflector;
    use kube::runtime::watcher;
    use serde_json::{Value, json};
    use tower_test::mock::{self, Handle};

    use super::*;
    use crate::reconcile::status::{Outcome, PolicyResult};

    type ApiServer = Handle<Request<Body>, Response<Body>>;

    fn writer() -> (Writer, ApiServer) {
        let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "default");
        let reporter = Reporter {
            controller: MANAGER.to_owned(),
            instance: Some("test".to_owned()),
        };
        (Writer::new(client, reporter), handle)
    }

    fn service() -> InferenceService {
        serde_json::from_value(json!({
            "apiVersion": "infergate.dev/v1beta1",
            "kind": "InferenceService",
            "metadata": {"namespace": "team", "name": "chat", "uid": "svc-uid", "generation": 1},
            "spec": {"model": {"ref": "m"}},
        }))
        .expect("service decodes")
    }

    fn deployment(uid: &str, generation: i64, owner_uid: &str) -> Deployment {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "namespace": "team", "name": "chat", "uid": uid, "generation": generation,
                "ownerReferences": [{
                    "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
                    "name": "chat", "uid": owner_uid, "controller": true,
                }],
            },
        }))
        .expect("deployment decodes")
    }

    fn cache_of(objects: &[Deployment]) -> Store<PartialObjectMeta<Deployment>> {
        let (store, mut writer) = reflector::store();
        writer.apply_watcher_event(&watcher::Event::Init);
        for d in objects {
            let meta = PartialObjectMeta::<Deployment> {
                types: None,
                metadata: d.metadata.clone(),
                _phantom: std::marker::PhantomData,
            };
            writer.apply_watcher_event(&watcher::Event::InitApply(meta));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
        store
    }

    fn reply(status: StatusCode, body: &impl Serialize) -> Response<Body> {
        Response::builder()
            .status(status)
            .body(Body::from(serde_json::to_vec(body).expect("json")))
            .expect("response")
    }

    /// The next request the code sends, answered with `answer(request, body)`.
    async fn expect(
        server: &mut ApiServer,
        answer: impl FnOnce(&Request<Body>, Value) -> Response<Body>,
    ) -> (Method, String, Value) {
        let (request, send) = tokio::time::timeout(Duration::from_secs(5), server.next_request())
            .await
            .expect("a request within 5 s")
            .expect("the client is alive");
        let (parts, body) = request.into_parts();
        let bytes = http_body_util::BodyExt::collect(body)
            .await
            .expect("request body")
            .to_bytes();
        let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        let request = Request::from_parts(parts, Body::empty());
        send.send_response(answer(&request, value.clone()));
        let uri = request.uri().to_string();
        (request.method().clone(), uri, value)
    }

    /// No request is sent within a short while.
    async fn expect_none(server: &mut ApiServer) {
        let next = tokio::time::timeout(Duration::from_millis(100), server.next_request()).await;
        assert!(
            next.is_err(),
            "unexpected request: {:?}",
            next.ok().flatten().map(|(r, _)| r.uri().clone())
        );
    }

    fn event_reason(event: &Value) -> &str {
        event["reason"].as_str().unwrap_or_default()
    }

    #[tokio::test]
    async fn a_repeated_event_is_a_series_of_its_own_service_only() {
        let (writer, mut server) = writer();
        let chat = service();
        let mut other = service();
        other.metadata.name = Some("other".to_owned());
        other.metadata.uid = Some("other-uid".to_owned());
        let publish = async {
            for svc in [&chat, &chat, &other] {
                writer
                    .publish(
                        svc,
                        EventType::Warning,
                        Reason::Ready,
                        "same note".to_owned(),
                    )
                    .await;
            }
        };
        let api = async {
            let mut seen = Vec::new();
            for status in [StatusCode::CREATED, StatusCode::OK, StatusCode::CREATED] {
                let (method, _, body) = expect(&mut server, |_, body| reply(status, &body)).await;
                seen.push((
                    method,
                    body["regarding"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    body["series"]["count"].as_i64(),
                ));
            }
            seen
        };
        let ((), seen) = tokio::join!(publish, api);
        assert_eq!(
            seen,
            [
                (Method::POST, "chat".to_owned(), None),
                (Method::PATCH, "chat".to_owned(), Some(2)),
                (Method::POST, "other".to_owned(), None),
            ],
            "the repeat is counted on chat's event; other's same note is its own event"
        );
    }

    #[tokio::test]
    async fn apply_is_server_side_and_events_say_what_changed() {
        let (writer, mut server) = writer();
        let svc = service();
        let store = cache_of(&[]);
        let desired = deployment("", 0, "svc-uid");
        let answers = [("d-uid", 1), ("d-uid", 1), ("d-uid", 2)];
        let expected_events = [Some("Created"), None, Some("Updated")];
        for ((uid, generation), event) in answers.into_iter().zip(expected_events) {
            let call = async {
                let applied = writer.apply(&svc, &desired, &store).await;
                writer.announce(&svc).await;
                applied
            };
            let api = async {
                let (method, uri, body) = expect(&mut server, |_, _| {
                    reply(StatusCode::OK, &deployment(uid, generation, "svc-uid"))
                })
                .await;
                assert_eq!(method, Method::PATCH);
                assert!(
                    uri.starts_with("/apis/apps/v1/namespaces/team/deployments/chat?")
                        && uri.contains("fieldManager=infergate")
                        && uri.contains("force=true"),
                    "{uri}"
                );
                assert_eq!(body["metadata"]["name"], "chat");
                match event {
                    Some(reason) => {
                        let (method, uri, body) =
                            expect(&mut server, |_, body| reply(StatusCode::CREATED, &body)).await;
                        assert_eq!(method, Method::POST);
                        assert!(
                            uri.starts_with("/apis/events.k8s.io/v1/namespaces/team/events"),
                            "{uri}"
                        );
                        assert_eq!(event_reason(&body), reason);
                        assert_eq!(body["regarding"]["name"], "chat");
                    }
                    None => expect_none(&mut server).await,
                }
            };
            let (applied, ()) = tokio::join!(call, api);
            let Applied::Written(applied) = applied.expect("applied") else {
                panic!("an empty cache holds no digest: the child is written");
            };
            assert_eq!(applied.metadata.generation, Some(generation));
        }
    }

    /// `deployment(uid, generation, "svc-uid")` as the cache holds it after
    /// an apply of `desired`: with the digest of `desired`.
    fn applied_copy(desired: &Deployment, uid: &str, generation: i64) -> Deployment {
        let mut d = deployment(uid, generation, "svc-uid");
        d.annotations_mut().insert(
            ANNOTATION_APPLIED.to_owned(),
            digest_of(desired).expect("digest"),
        );
        d
    }

    #[tokio::test]
    async fn a_child_that_holds_what_the_service_wants_is_not_written_again() {
        let (writer, mut server) = writer();
        let svc = service();
        let desired = deployment("", 0, "svc-uid");
        // A new writer (a restart, a new leader) takes the child at its digest.
        let store = cache_of(&[applied_copy(&desired, "d-uid", 3)]);
        let (result, ()) = tokio::join!(
            writer.apply(&svc, &desired, &store),
            expect_none(&mut server)
        );
        assert!(matches!(result, Ok(Applied::Unchanged)), "{result:?}");

        // Somebody changed its spec since (a new generation): applied again.
        let moved = cache_of(&[applied_copy(&desired, "d-uid", 4)]);
        let api = async {
            let (method, _, body) = expect(&mut server, |_, _| {
                reply(StatusCode::OK, &deployment("d-uid", 5, "svc-uid"))
            })
            .await;
            assert_eq!(method, Method::PATCH);
            assert_eq!(
                body["metadata"]["annotations"][ANNOTATION_APPLIED],
                digest_of(&desired).expect("digest")
            );
            let (_, _, event) =
                expect(&mut server, |_, body| reply(StatusCode::CREATED, &body)).await;
            assert_eq!(event_reason(&event), "Updated");
        };
        let call = async {
            let applied = writer.apply(&svc, &desired, &moved).await;
            writer.announce(&svc).await;
            applied
        };
        let (result, ()) = tokio::join!(call, api);
        assert!(matches!(result, Ok(Applied::Written(_))), "{result:?}");

        // What the service wants changed: applied, whatever the generation.
        let mut wanted = desired.clone();
        wanted
            .labels_mut()
            .insert("team".to_owned(), "a".to_owned());
        let now = cache_of(&[applied_copy(&desired, "d-uid", 5)]);
        let api = async {
            let (method, _, body) = expect(&mut server, |_, _| {
                reply(StatusCode::OK, &deployment("d-uid", 5, "svc-uid"))
            })
            .await;
            assert_eq!(method, Method::PATCH);
            assert_eq!(body["metadata"]["labels"]["team"], "a");
            expect_none(&mut server).await;
        };
        let (result, ()) = tokio::join!(writer.apply(&svc, &wanted, &now), api);
        assert!(matches!(result, Ok(Applied::Written(_))), "{result:?}");
    }

    #[tokio::test]
    async fn one_reconcile_makes_one_event_per_kind_of_change() {
        let (writer, mut server) = writer();
        let svc = service();
        let store = cache_of(&[]);
        let primary = deployment("", 0, "svc-uid");
        let mut canary = primary.clone();
        canary.metadata.name = Some("chat-canary".to_owned());
        let call = async {
            writer.apply(&svc, &primary, &store).await.expect("applied");
            writer.apply(&svc, &canary, &store).await.expect("applied");
            writer.announce(&svc).await;
            // Announced once: nothing left for the next reconcile.
            writer.announce(&svc).await;
        };
        let api = async {
            for uid in ["d-1", "d-2"] {
                let (method, _, _) = expect(&mut server, |_, _| {
                    reply(StatusCode::OK, &deployment(uid, 1, "svc-uid"))
                })
                .await;
                assert_eq!(method, Method::PATCH);
            }
            let (method, _, event) =
                expect(&mut server, |_, body| reply(StatusCode::CREATED, &body)).await;
            assert_eq!(method, Method::POST);
            assert_eq!(event_reason(&event), "Created");
            assert_eq!(
                event["note"],
                "created Deployment chat, Deployment chat-canary"
            );
            expect_none(&mut server).await;
        };
        tokio::join!(call, api);
    }

    #[tokio::test]
    async fn a_child_another_controller_owns_is_never_taken_over() {
        let (writer, mut server) = writer();
        let svc = service();
        let store = cache_of(&[deployment("d-uid", 1, "someone-else")]);
        let desired = deployment("", 0, "svc-uid");
        let (result, ()) = tokio::join!(
            writer.apply(&svc, &desired, &store),
            expect_none(&mut server)
        );
        assert!(
            matches!(
                result,
                Err(Error::ForeignChild {
                    kind: "Deployment",
                    ..
                })
            ),
            "{result:?}"
        );
    }

    #[tokio::test]
    async fn delete_removes_only_what_the_service_controls() {
        let (writer, mut server) = writer();
        let svc = service();
        // Owned by another controller, or not in the cache: nothing is sent.
        let foreign = cache_of(&[deployment("d-uid", 1, "someone-else")]);
        let (result, ()) = tokio::join!(
            writer.delete::<Deployment>(&svc, "chat", &foreign),
            expect_none(&mut server)
        );
        result.expect("nothing to delete");
        let (result, ()) = tokio::join!(
            writer.delete::<Deployment>(&svc, "missing", &foreign),
            expect_none(&mut server)
        );
        result.expect("nothing to delete");

        let owned = cache_of(&[deployment("d-uid", 1, "svc-uid")]);
        let api = async {
            let (method, uri, body) = expect(&mut server, |_, _| {
                reply(
                    StatusCode::OK,
                    &json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
                )
            })
            .await;
            assert_eq!(method, Method::DELETE);
            assert!(
                uri.starts_with("/apis/apps/v1/namespaces/team/deployments/chat"),
                "{uri}"
            );
            // Only the object that was looked at is deleted.
            assert_eq!(body["preconditions"]["uid"], "d-uid");
            let (_, _, event) =
                expect(&mut server, |_, body| reply(StatusCode::CREATED, &body)).await;
            assert_eq!(event_reason(&event), "Deleted");
        };
        let call = async {
            let deleted = writer.delete::<Deployment>(&svc, "chat", &owned).await;
            writer.announce(&svc).await;
            deleted
        };
        let (result, ()) = tokio::join!(call, api);
        result.expect("deleted");
    }

    fn invalid(message: &str) -> Observation {
        Observation {
            generation: Some(1),
            outcome: Outcome::Invalid(message.to_owned()),
            policy: PolicyResult::Compliant,
            route_path: None,
            request_timeout: None,
            rollout: None,
        }
    }

    #[tokio::test]
    async fn status_is_written_only_when_it_changes() {
        let (writer, mut server) = writer();
        let mut svc = service();
        let obs = invalid("spec.replicas: Invalid value: -1");
        let api = async {
            // Warning events for the invalid spec, then the status write.
            let mut events = Vec::new();
            let (uri, body) = loop {
                let (method, uri, body) = expect(&mut server, |req, body| {
                    if req.uri().path().ends_with("/status") {
                        reply(StatusCode::OK, &service())
                    } else {
                        reply(StatusCode::OK, &body)
                    }
                })
                .await;
                if uri.starts_with("/apis/events.k8s.io/") {
                    events.push(body);
                    continue;
                }
                assert_eq!(method, Method::PATCH);
                break (uri, body);
            };
            assert!(
                events
                    .iter()
                    .any(|e| event_reason(e) == "InvalidSpec" && e["type"] == "Warning"),
                "{events:?}"
            );
            assert!(
                uri.starts_with(
                    "/apis/infergate.dev/v1beta1/namespaces/team/inferenceservices/chat/status?"
                ) && uri.contains("fieldManager=infergate"),
                "{uri}"
            );
            let reasons: Vec<&str> = body["status"]["conditions"]
                .as_array()
                .expect("conditions")
                .iter()
                .map(|c| c["reason"].as_str().unwrap_or_default())
                .collect();
            assert!(reasons.contains(&"InvalidSpec"), "{reasons:?}");
        };
        let (result, ()) = tokio::join!(writer.write_status(&svc, &obs), api);
        result.expect("status written");

        // The stored status already says this: no write, no event.
        svc.status = Some(status::compute(None, &obs, Timestamp::now()));
        let (result, ()) = tokio::join!(writer.write_status(&svc, &obs), expect_none(&mut server));
        result.expect("nothing to write");
    }
}
