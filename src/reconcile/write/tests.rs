use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use k8s_openapi::api::apps::v1::Deployment;
use kube::client::Body;
use kube::runtime::events::Reporter;
use kube::runtime::reflector;
use kube::runtime::watcher;
use serde_json::{Value, json};
use tower_test::mock::{self, Handle};

use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::EventType;
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use serde::Serialize;

use super::child::digest_of;
use super::*;
use crate::api::MANAGER;
use crate::api::v1beta1::InferenceService;
use crate::reconcile::children::ANNOTATION_APPLIED;
use crate::reconcile::error::Error;
use crate::reconcile::status::{self, Observation, Outcome, PolicyResult, Reason};
use crate::reconcile::watch::echo::Echoes;
use crate::reconcile::watch::owned::{Owned, OwnedIndex};
use crate::reconcile::watch::watched::WatchedDeployment;

type ApiServer = Handle<Request<Body>, Response<Body>>;

fn writer() -> (Writer, ApiServer) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let reporter = Reporter {
        controller: MANAGER.to_owned(),
        instance: Some("test".to_owned()),
    };
    (
        Writer::new(client, reporter, Arc::new(Echoes::detached())),
        handle,
    )
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

/// A Deployment cache holding `objects`, and what infergate's field
/// manager holds of each (from their managed fields), as the watch keeps
/// them.
fn cache_of(objects: &[Deployment]) -> (Store<WatchedDeployment>, OwnedIndex) {
    let (store, mut writer) = reflector::store();
    let owned = OwnedIndex::default();
    writer.apply_watcher_event(&watcher::Event::Init);
    for d in objects {
        let held = Owned::of(d.metadata.managed_fields.as_deref());
        owned.record(&d.metadata, held);
        writer.apply_watcher_event(&watcher::Event::InitApply(WatchedDeployment::of(d)));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    (store, owned)
}

/// The field set the API server records for infergate's apply of `d`'s
/// metadata (all these tests' Deployments carry).
fn recorded(d: &Deployment) -> Value {
    let keys = |m: Option<&std::collections::BTreeMap<String, String>>| -> Value {
        m.into_iter()
            .flatten()
            .map(|(k, _)| (format!("f:{k}"), json!({})))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    let mut meta = serde_json::Map::new();
    if d.metadata.annotations.is_some() {
        meta.insert(
            "f:annotations".into(),
            keys(d.metadata.annotations.as_ref()),
        );
    }
    if d.metadata.labels.is_some() {
        meta.insert("f:labels".into(), keys(d.metadata.labels.as_ref()));
    }
    let owners: serde_json::Map<_, _> = d
        .owner_references()
        .iter()
        .map(|o| (format!("k:{{\"uid\":\"{}\"}}", o.uid), json!({})))
        .collect();
    meta.insert("f:ownerReferences".into(), owners.into());
    json!({"f:metadata": meta})
}

/// `d` with infergate's apply entry holding `fields`.
fn holding(mut d: Deployment, fields: Value) -> Deployment {
    d.metadata.managed_fields = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry {
            manager: Some(MANAGER.to_owned()),
            operation: Some("Apply".to_owned()),
            fields_v1: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1(
                fields,
            )),
            ..Default::default()
        },
    ]);
    d
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

/// The next request is a PATCH, answered with `applied`; its body.
async fn expect_patch(server: &mut ApiServer, applied: Deployment) -> Value {
    let (method, _, body) = expect(server, |_, _| reply(StatusCode::OK, &applied)).await;
    assert_eq!(method, Method::PATCH);
    body
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
    let (store, owned) = cache_of(&[]);
    let desired = deployment("", 0, "svc-uid");
    let answers = [("d-uid", 1), ("d-uid", 1), ("d-uid", 2)];
    let expected_events = [Some("Created"), None, Some("Updated")];
    for ((uid, generation), event) in answers.into_iter().zip(expected_events) {
        let call = async {
            let applied = writer.apply(&svc, &desired, &store, &owned).await;
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
/// an apply of `desired`: with the digest of `desired`, and infergate's
/// field manager holding its fields.
fn applied_copy(desired: &Deployment, uid: &str, generation: i64) -> Deployment {
    let mut d = deployment(uid, generation, "svc-uid");
    d.metadata.labels.clone_from(&desired.metadata.labels);
    d.annotations_mut().insert(
        ANNOTATION_APPLIED.to_owned(),
        digest_of(desired).expect("digest"),
    );
    let fields = recorded(&d);
    holding(d, fields)
}

#[tokio::test]
async fn a_child_that_holds_what_the_service_wants_is_not_written_again() {
    let (writer, mut server) = writer();
    let svc = service();
    let desired = deployment("", 0, "svc-uid");
    // A new writer (a restart, a new leader): infergate's field manager
    // still holds every field it applied; nothing is sent.
    let (store, owned) = cache_of(&[applied_copy(&desired, "d-uid", 3)]);
    let (result, ()) = tokio::join!(
        writer.apply(&svc, &desired, &store, &owned),
        expect_none(&mut server)
    );
    assert!(matches!(result, Ok(Applied::Unchanged(_))), "{result:?}");
    // Another generation alone (someone else's field changed) is no drift.
    let (store, owned) = cache_of(&[applied_copy(&desired, "d-uid", 9)]);
    let (result, ()) = tokio::join!(
        writer.apply(&svc, &desired, &store, &owned),
        expect_none(&mut server)
    );
    assert!(matches!(result, Ok(Applied::Unchanged(_))), "{result:?}");

    // Somebody took over one of infergate's fields (while infergate was
    // stopped, or not): applied again.
    let taken = holding(
        applied_copy(&desired, "d-uid", 4),
        json!({"f:metadata": {"f:annotations": {"f:infergate.dev/applied-digest": {}}}}),
    );
    let (moved, moved_owned) = cache_of(&[taken]);
    let api = async {
        let answer = applied_copy(&desired, "d-uid", 5);
        let body = expect_patch(&mut server, answer).await;
        assert_eq!(
            body["metadata"]["annotations"][ANNOTATION_APPLIED],
            digest_of(&desired).expect("digest")
        );
        let (_, _, event) = expect(&mut server, |_, body| reply(StatusCode::CREATED, &body)).await;
        assert_eq!(event_reason(&event), "Updated");
    };
    let call = async {
        let applied = writer.apply(&svc, &desired, &moved, &moved_owned).await;
        writer.announce(&svc).await;
        applied
    };
    let (result, ()) = tokio::join!(call, api);
    assert!(matches!(result, Ok(Applied::Written(_))), "{result:?}");
    // No entry of infergate's at all (its managed fields wiped): applied.
    let mut wiped = applied_copy(&desired, "d-uid", 5);
    wiped.metadata.managed_fields = None;
    let (wiped, wiped_owned) = cache_of(&[wiped]);
    let api = async {
        expect_patch(&mut server, applied_copy(&desired, "d-uid", 5)).await;
        expect_none(&mut server).await;
    };
    let (result, ()) = tokio::join!(writer.apply(&svc, &desired, &wiped, &wiped_owned), api);
    assert!(matches!(result, Ok(Applied::Written(_))), "{result:?}");

    // What the service wants changed: applied, whatever the generation.
    let mut wanted = desired.clone();
    wanted
        .labels_mut()
        .insert("team".to_owned(), "a".to_owned());
    let (now, now_owned) = cache_of(&[applied_copy(&desired, "d-uid", 5)]);
    let api = async {
        let body = expect_patch(&mut server, applied_copy(&wanted, "d-uid", 5)).await;
        assert_eq!(body["metadata"]["labels"]["team"], "a");
        expect_none(&mut server).await;
    };
    let (result, ()) = tokio::join!(writer.apply(&svc, &wanted, &now, &now_owned), api);
    assert!(matches!(result, Ok(Applied::Written(_))), "{result:?}");
    assert_eq!(writer.unheld.lock().expect("lock").len(), 0);
}

#[tokio::test]
async fn a_child_whose_record_never_holds_what_was_applied_is_judged_by_its_digest() {
    let (writer, mut server) = writer();
    let svc = service();
    let desired = deployment("", 0, "svc-uid");
    // The API server's answer records less than infergate sent (a field it
    // drops): written once, then compared by the digest alone.
    let mut short = applied_copy(&desired, "d-uid", 1);
    short.metadata.managed_fields = None;
    let (empty, empty_owned) = cache_of(&[]);
    let api = async {
        expect_patch(&mut server, short.clone()).await;
        let (_, _, event) = expect(&mut server, |_, body| reply(StatusCode::CREATED, &body)).await;
        assert_eq!(event_reason(&event), "Created");
    };
    let call = async {
        let applied = writer.apply(&svc, &desired, &empty, &empty_owned).await;
        writer.announce(&svc).await;
        applied
    };
    let (result, ()) = tokio::join!(call, api);
    assert!(matches!(result, Ok(Applied::Written(_))), "{result:?}");
    assert_eq!(writer.unheld.lock().expect("lock").len(), 1);
    let (store, owned) = cache_of(&[short]);
    let (result, ()) = tokio::join!(
        writer.apply(&svc, &desired, &store, &owned),
        expect_none(&mut server)
    );
    assert!(matches!(result, Ok(Applied::Unchanged(_))), "{result:?}");
    // Forgotten with its service.
    writer.forget_service(&kube::runtime::reflector::ObjectRef::new("chat").within("team"));
    assert_eq!(writer.remembered(), 0);
}

#[tokio::test]
async fn one_reconcile_makes_one_event_per_kind_of_change() {
    let (writer, mut server) = writer();
    let svc = service();
    let (store, owned) = cache_of(&[]);
    let primary = deployment("", 0, "svc-uid");
    let mut canary = primary.clone();
    canary.metadata.name = Some("chat-canary".to_owned());
    let call = async {
        writer
            .apply(&svc, &primary, &store, &owned)
            .await
            .expect("applied");
        writer
            .apply(&svc, &canary, &store, &owned)
            .await
            .expect("applied");
        writer.announce(&svc).await;
        // Announced once: nothing left for the next reconcile.
        writer.announce(&svc).await;
    };
    let api = async {
        for uid in ["d-1", "d-2"] {
            expect_patch(&mut server, deployment(uid, 1, "svc-uid")).await;
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
    let (store, owned) = cache_of(&[deployment("d-uid", 1, "someone-else")]);
    let desired = deployment("", 0, "svc-uid");
    let (result, ()) = tokio::join!(
        writer.apply(&svc, &desired, &store, &owned),
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
    let (foreign, _) = cache_of(&[deployment("d-uid", 1, "someone-else")]);
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

    let (owned, _) = cache_of(&[deployment("d-uid", 1, "svc-uid")]);
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
        let (_, _, event) = expect(&mut server, |_, body| reply(StatusCode::CREATED, &body)).await;
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
    Observation::before_applying(
        Some(1),
        Outcome::Invalid(message.to_owned()),
        PolicyResult::Compliant,
    )
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
