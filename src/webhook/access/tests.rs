use std::time::Duration;

use http::{Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};
use tower_test::mock::{self, Handle};

use super::*;
use crate::engine::references::ReferenceKind;

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

fn service_account(name: &str) -> Reference {
    Reference {
        kind: ReferenceKind::ServiceAccount,
        name: name.to_owned(),
        field: "spec.serviceAccountName".to_owned(),
    }
}

/// Answer the next SubjectAccessReview with `allowed`; return what was asked.
async fn answer(server: &mut ApiServer, allowed: bool) -> Value {
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
    let (denied, ask) = r.from_cache(&user, "team-a", refs.clone());
    assert!(ask.is_empty(), "{ask:?}");
    assert_eq!(denied.len(), 1, "{denied:?}");
    assert_eq!(counted(&metrics, "cached"), 2);
    // Another user (or the same name in other groups) is asked about afresh.
    let mut other = alice();
    other.groups = Some(vec!["system:authenticated".to_owned()]);
    let (_, ask) = r.from_cache(&other, "team-a", refs.clone());
    assert_eq!(ask.len(), 2);
    // And another namespace's Secret of the same name.
    let (_, ask) = r.from_cache(&user, "team-b", refs);
    assert_eq!(ask.len(), 2);
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
    let (_, ask) = r.from_cache(&user, "team-a", refs.to_vec());
    assert_eq!(ask.len(), 1);
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
