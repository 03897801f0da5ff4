use std::time::Duration;

use http::{Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};
use tower_test::mock::{self, Handle};

use k8s_openapi::api::authentication::v1::UserInfo;

use super::*;
use crate::engine::FieldError;
use crate::engine::references::{Reference, ReferenceKind};
use crate::metrics::Metrics;

type ApiServer = Handle<Request<Body>, Response<Body>>;

fn reviewer(timeout: Duration) -> (AccessReviewer, ApiServer, Metrics) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let metrics = Metrics::new();
    let r = AccessReviewer::new(Some(kube::Client::new(service, "default")), metrics.clone())
        .with_timeout(timeout);
    (r, handle, metrics)
}

fn alice() -> UserInfo {
    serde_json::from_value(json!({
        "username": "alice", "uid": "u-alice", "groups": ["team-a", "system:authenticated"],
        "extra": {"scopes": ["inference"]}
    }))
    .expect("user")
}

fn secret(name: &str, field: &str) -> Reference {
    Reference {
        kind: ReferenceKind::Secret,
        name: name.to_owned(),
        field: field.to_owned(),
    }
}

fn config_map(name: &str, field: &str) -> Reference {
    Reference {
        kind: ReferenceKind::ConfigMap,
        name: name.to_owned(),
        field: field.to_owned(),
    }
}

fn service_account(name: &str) -> Reference {
    Reference {
        kind: ReferenceKind::ServiceAccount,
        name: name.to_owned(),
        field: "spec.serviceAccountName".to_owned(),
    }
}

/// Answer the next SubjectAccessReview with `allowed`; return what was asked.
async fn answer(server: &mut ApiServer, allowed: bool) -> Value {
    answer_with(server, |_| allowed).await
}

/// Answer the next SubjectAccessReview with what `allow` says of the
/// object it names; return what was asked.
async fn answer_with(server: &mut ApiServer, allow: impl Fn(&str) -> bool) -> Value {
    let (request, send) = tokio::time::timeout(Duration::from_secs(5), server.next_request())
        .await
        .expect("a review is sent")
        .expect("request");
    assert_eq!(request.method(), http::Method::POST);
    assert_eq!(
        request.uri().path(),
        "/apis/authorization.k8s.io/v1/subjectaccessreviews"
    );
    let bytes = request.into_body().collect_bytes().await.expect("body");
    let mut review: Value = serde_json::from_slice(&bytes).expect("json");
    let allowed = allow(
        review["spec"]["resourceAttributes"]["name"]
            .as_str()
            .unwrap_or_default(),
    );
    review["status"] = if allowed {
        json!({"allowed": true})
    } else {
        json!({"allowed": false, "reason": "RBAC: no rule allows it"})
    };
    send.send_response(
        Response::builder()
            .status(StatusCode::CREATED)
            .body(Body::from(serde_json::to_vec(&review).expect("json")))
            .expect("response"),
    );
    review
}

fn counted(metrics: &Metrics, result: &str) -> u64 {
    let text = metrics.encode().expect("metrics");
    text.lines()
        .find(|l| {
            l.starts_with(&format!(
                "infergate_access_reviews_total{{result=\"{result}\"}}"
            ))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn a_review_asks_for_the_whole_user_and_the_exact_object() {
    let (r, mut server, _) = reviewer(Duration::from_secs(2));
    let refs = [secret(
        "hf",
        "spec.engine.env[0].valueFrom.secretKeyRef.name",
    )];
    let user = alice();
    let (errors, asked) = tokio::join!(r.review(&user, "team-a", &refs), answer(&mut server, true));
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(
        asked["spec"],
        json!({
            "user": "alice", "uid": "u-alice",
            "groups": ["team-a", "system:authenticated"],
            "extra": {"scopes": ["inference"]},
            "resourceAttributes": {"namespace": "team-a", "verb": "get", "group": "",
                                   "resource": "secrets", "name": "hf"}
        })
    );
}

#[tokio::test]
async fn acting_as_a_service_account_is_creating_its_token() {
    let (r, mut server, _) = reviewer(Duration::from_secs(2));
    let refs = [service_account("chat-engine")];
    let user = alice();
    let (errors, asked) =
        tokio::join!(r.review(&user, "team-a", &refs), answer(&mut server, false));
    assert_eq!(
        asked["spec"]["resourceAttributes"],
        json!({"namespace": "team-a", "verb": "create", "group": "",
               "resource": "serviceaccounts", "subresource": "token", "name": "chat-engine"})
    );
    assert_eq!(
        errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
        [
            "spec.serviceAccountName: Forbidden: user \"alice\" may not create serviceaccounts/token for ServiceAccount \"chat-engine\" in namespace \"team-a\": infergate's pods may use only what the requester may use (RBAC: no rule allows it)"
        ]
    );
}

#[tokio::test]
async fn answers_are_kept_per_user_and_object() {
    let (r, mut server, metrics) = reviewer(Duration::from_secs(2));
    let refs = vec![
        secret("hf", "spec.engine.env[0].valueFrom.secretKeyRef.name"),
        secret("registry", "spec.imagePullSecrets[0].name"),
    ];
    let user = alice();
    let (errors, _) = tokio::join!(r.review(&user, "team-a", &refs), async {
        answer(&mut server, true).await;
        answer(&mut server, false).await;
    });
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(counted(&metrics, "allowed"), 1);
    assert_eq!(counted(&metrics, "denied"), 1);
    // Asked again within the minute: nothing is sent; the denial is remembered.
    let split = r.from_cache(&user, "team-a", refs.clone());
    assert!(split.ask.is_empty(), "{split:?}");
    assert_eq!(split.denied.len(), 1, "{split:?}");
    assert_eq!(counted(&metrics, "cached"), 2);
    // Another user (or the same name in other groups) is asked about afresh.
    let mut other = alice();
    other.groups = Some(vec!["system:authenticated".to_owned()]);
    assert_eq!(r.from_cache(&other, "team-a", refs.clone()).ask.len(), 2);
    // And another namespace's Secret of the same name.
    assert_eq!(r.from_cache(&user, "team-b", refs).ask.len(), 2);
}

#[tokio::test]
async fn a_review_that_does_not_answer_in_time_denies() {
    let (r, mut server, metrics) = reviewer(Duration::from_millis(200));
    let refs = [secret(
        "hf",
        "spec.engine.env[0].valueFrom.secretKeyRef.name",
    )];
    let user = alice();
    // The API server takes the request and never answers.
    let hold = async {
        let (_request, send) = server.next_request().await.expect("request");
        tokio::time::sleep(Duration::from_secs(2)).await;
        drop(send);
    };
    let (errors, ()) = tokio::join!(r.review(&user, "team-a", &refs), hold);
    assert_eq!(
        errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
        [
            "spec.engine.env[0].valueFrom.secretKeyRef.name: Forbidden: could not check whether user \"alice\" may get secrets for Secret \"hf\" in namespace \"team-a\": the access review did not answer within 0.2s; denied (infergate fails closed)"
        ]
    );
    assert_eq!(counted(&metrics, "timeout"), 1);
    // Nothing was cached: the next write asks again.
    assert_eq!(r.from_cache(&user, "team-a", refs.to_vec()).ask.len(), 1);
}

#[tokio::test]
async fn without_an_api_server_every_reference_is_denied() {
    let r = AccessReviewer::default();
    let errors = r
        .review(&alice(), "team-a", &[service_account("chat-engine")])
        .await;
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0]
            .to_string()
            .contains("infergate has no connection to the API server; denied"),
        "{}",
        errors[0]
    );
}

#[tokio::test]
async fn one_write_asks_about_a_bounded_number_of_references() {
    let (r, mut server, _) = reviewer(Duration::from_secs(2));
    let refs: Vec<Reference> = (0..MAX_REVIEWS + 2)
        .map(|i| {
            secret(
                &format!("s{i}"),
                &format!("spec.engine.env[{i}].valueFrom.secretKeyRef.name"),
            )
        })
        .collect();
    let errors = r.review(&alice(), "team-a", &refs).await;
    // Nothing was asked; the references past the bound are named.
    let next = tokio::time::timeout(Duration::from_millis(100), server.next_request()).await;
    assert!(next.is_err(), "no review is sent for an oversized write");
    assert_eq!(errors.len(), 2);
    assert_eq!(
        errors[0].field,
        format!("spec.engine.env[{MAX_REVIEWS}].valueFrom.secretKeyRef.name")
    );
    assert!(
        errors[0]
            .to_string()
            .contains("at most 32 are reviewed at once"),
        "{}",
        errors[0]
    );
}

fn shown(errors: &[FieldError]) -> Vec<String> {
    errors.iter().map(ToString::to_string).collect()
}

/// `envFrom` with a Secret and a ConfigMap the user may not read: the
/// denial names both (field, object, verb), in the spec's order, whatever
/// order the answers come back in.
#[tokio::test]
async fn every_reference_the_user_may_not_use_is_named() {
    let (r, mut server, metrics) = reviewer(Duration::from_secs(2));
    let refs = vec![
        secret("extra", "spec.engine.envFrom[0].secretRef.name"),
        config_map("tuning", "spec.engine.envFrom[1].configMapRef.name"),
    ];
    let user = alice();
    let split = r.from_cache(&user, "team-a", refs);
    assert_eq!(split.ask.len(), 2, "{split:?}");
    let (errors, ()) = tokio::join!(r.settle(&user, "team-a", split), async {
        answer(&mut server, false).await;
        answer(&mut server, false).await;
    });
    assert_eq!(
        shown(&errors),
        [
            "spec.engine.envFrom[0].secretRef.name: Forbidden: user \"alice\" may not get secrets for Secret \"extra\" in namespace \"team-a\": infergate's pods may use only what the requester may use (RBAC: no rule allows it)",
            "spec.engine.envFrom[1].configMapRef.name: Forbidden: user \"alice\" may not get configmaps for ConfigMap \"tuning\" in namespace \"team-a\": infergate's pods may use only what the requester may use (RBAC: no rule allows it)",
        ]
    );
    assert_eq!(counted(&metrics, "denied"), 2);
}

/// A denial the cache already knows does not stand in for the others: the
/// references it does not know are still asked about, and the answer
/// names every one, in the spec's order.
#[tokio::test]
async fn a_known_denial_does_not_hide_the_others() {
    let (r, mut server, metrics) = reviewer(Duration::from_secs(2));
    let user = alice();
    // The user was denied Secret "extra" a moment ago.
    let first = [secret("extra", "spec.engine.envFrom[0].secretRef.name")];
    let (errors, _) = tokio::join!(
        r.review(&user, "team-a", &first),
        answer(&mut server, false)
    );
    assert_eq!(errors.len(), 1, "{errors:?}");
    // Now the write names a ConfigMap first, then that Secret, then a
    // pull secret: only the two new ones are asked about.
    let refs = vec![
        config_map(
            "tuning",
            "spec.engine.env[0].valueFrom.configMapKeyRef.name",
        ),
        secret("extra", "spec.engine.envFrom[0].secretRef.name"),
        secret("registry", "spec.imagePullSecrets[0].name"),
    ];
    let split = r.from_cache(&user, "team-a", refs);
    assert_eq!(split.denied.len(), 1, "{split:?}");
    let asked: Vec<&str> = split.ask.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(asked, ["tuning", "registry"]);
    // The two are asked at once: whichever comes first, only "registry" is allowed.
    let (errors, ()) = tokio::join!(r.settle(&user, "team-a", split), async {
        for _ in 0..2 {
            answer_with(&mut server, |name| name == "registry").await;
        }
    });
    let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "spec.engine.env[0].valueFrom.configMapKeyRef.name",
            "spec.engine.envFrom[0].secretRef.name",
        ],
        "{errors:?}"
    );
    assert!(
        errors[0].to_string().contains("ConfigMap \"tuning\"")
            && errors[1].to_string().contains("Secret \"extra\""),
        "{errors:?}"
    );
    assert_eq!(counted(&metrics, "cached"), 1);
    assert_eq!(counted(&metrics, "denied"), 2);
    assert_eq!(counted(&metrics, "allowed"), 1);
}

/// With every answer in the cache nothing is asked, and the known
/// denials come back as they are.
#[tokio::test]
async fn a_split_the_cache_settles_asks_nothing() {
    let (r, mut server, _) = reviewer(Duration::from_secs(2));
    let split = Split {
        denied: Vec::new(),
        ask: Vec::new(),
        fields: Vec::new(),
    };
    let errors = r.settle(&alice(), "team-a", split).await;
    assert!(errors.is_empty(), "{errors:?}");
    let next = tokio::time::timeout(Duration::from_millis(100), server.next_request()).await;
    assert!(next.is_err(), "no review is sent");
}
