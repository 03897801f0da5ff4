//! The one decode and the one encoder, on fixtures and on generated reviews.

use serde_json::{Value, json};

use kube::core::Status;
use kube::core::admission::Operation;

use super::incoming::decode_service;
use super::*;
use crate::api::GROUP;
use crate::api::v1beta1::InferenceService;

const MINIMAL: &str = include_str!("../../../tests/fixtures/webhook/mutate-create-minimal.json");

fn minimal() -> Value {
    serde_json::from_str(MINIMAL).unwrap()
}

/// The review as kubectl's client-side apply makes the API server send
/// it: a last-applied annotation full of escapes, managed fields, the
/// user and the create options.
fn kubectl_shaped() -> Value {
    let mut review = minimal();
    let object = review["request"]["object"].clone();
    let meta = &mut review["request"]["object"]["metadata"];
    meta["annotations"] = json!({
        "kubectl.kubernetes.io/last-applied-configuration": object.to_string(),
        "note": "tab\there, quote \" and unicode \u{00e9}\u{1F600}",
    });
    meta["labels"] = json!({"team": "a"});
    meta["managedFields"] = json!([{"manager": "kubectl-client-side-apply",
        "operation": "Update", "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:annotations": {".": {}}}, "f:spec": {".": {}, "f:model": {}}}}]);
    review["request"]["userInfo"] =
        json!({"username": "alice", "groups": ["system:authenticated"], "extra": {"k": ["v"]}});
    review["request"]["options"] = json!({"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"});
    review
}

fn decode_value(review: &Value) -> Result<Review, BadReview> {
    decode(&serde_json::to_vec(review).unwrap())
}

fn service(object: Option<&Object>) -> &InferenceService {
    match object {
        Some(Object::Service(s)) => s,
        other => panic!("not a v1beta1 service: {other:?}"),
    }
}

/// The request's fields, and the object as the typed service: its spec,
/// labels and every annotation (the provenance annotation included) as
/// sent; managed fields skipped.
#[test]
fn decodes_a_kubectl_shaped_review() {
    let mut with_provenance = kubectl_shaped();
    with_provenance["request"]["object"]["metadata"]["annotations"]
        [crate::api::DEFAULTED_FROM_ANNOTATION] = json!(r#"{"spec.replicas":"built-in"}"#);
    for sent in [minimal(), kubectl_shaped(), with_provenance] {
        let review = decode_value(&sent).unwrap();
        let request = &sent["request"];
        assert_eq!(review.uid, request["uid"].as_str().unwrap());
        assert_eq!(
            review.kind,
            ObjectKind::new(GROUP, "v1beta1", "InferenceService")
        );
        assert_eq!(review.resource.resource, "inferenceservices");
        assert_eq!(review.request_kind.as_ref(), Some(&review.kind));
        assert_eq!(review.name, "chat");
        assert_eq!(review.namespace.as_deref(), Some("team-a"));
        assert_eq!(review.operation, Operation::Create);
        assert!(!review.dry_run);
        assert_eq!(review.old_object, None);
        let svc = service(review.object.as_ref());
        let object = &request["object"];
        let typed: InferenceService = serde_json::from_value(object.clone()).unwrap();
        assert_eq!(svc.spec, typed.spec);
        assert_eq!(svc.metadata.name, typed.metadata.name);
        assert_eq!(svc.metadata.namespace, typed.metadata.namespace);
        assert_eq!(svc.metadata.labels, typed.metadata.labels);
        assert_eq!(svc.metadata.annotations, typed.metadata.annotations);
        assert_eq!(svc.metadata.managed_fields, None);
        assert_eq!(svc.status, None);
    }
}

/// The old object is read on UPDATE, and only then.
#[test]
fn the_old_object_is_read_on_update_only() {
    let mut update = kubectl_shaped();
    update["request"]["operation"] = json!("UPDATE");
    update["request"]["oldObject"] = update["request"]["object"].clone();
    update["request"]["oldObject"]["spec"]["replicas"] = json!(7);
    let review = decode_value(&update).unwrap();
    assert_eq!(service(review.old_object.as_ref()).spec.replicas, Some(7));
    assert_eq!(service(review.object.as_ref()).spec.replicas, None);

    let mut create_with_old = kubectl_shaped();
    create_with_old["request"]["oldObject"] = json!({"not": "a service"});
    assert_eq!(decode_value(&create_with_old).unwrap().old_object, None);
    let mut delete = minimal();
    delete["request"]["operation"] = json!("DELETE");
    delete["request"]["oldObject"] = delete["request"]["object"].take();
    let review = decode_value(&delete).unwrap();
    assert_eq!((review.object, review.old_object), (None, None));
}

/// Each object is decoded as the request's kind says; what is not an
/// object of that kind is `Invalid` with the decoder's message.
#[test]
fn objects_are_typed_by_kind() {
    let with = |group: &str, version: &str, kind: &str, object: Value| {
        let mut review = minimal();
        review["request"]["kind"] = json!({"group": group, "version": version, "kind": kind});
        review["request"]["object"] = object;
        decode_value(&review).unwrap().object
    };
    let policy = json!({"metadata": {"name": "p", "namespace": "team-a"}, "spec": {"priority": 3}});
    match with(GROUP, "v1beta1", "InferencePolicy", policy.clone()) {
        Some(Object::Policy(p)) => assert_eq!(p.spec.priority, 3),
        other => panic!("{other:?}"),
    }
    match with(GROUP, "v1beta1", "ClusterInferencePolicy", policy.clone()) {
        Some(Object::ClusterPolicy(p)) => assert_eq!(p.spec.priority, 3),
        other => panic!("{other:?}"),
    }
    let alpha = json!({"metadata": {"name": "a"}, "spec": {"modelRef": "m", "replicas": 2}});
    match with(GROUP, "v1alpha1", "InferenceService", alpha) {
        Some(Object::ServiceV1alpha1(s)) => assert_eq!(s.spec.replicas, Some(2)),
        other => panic!("{other:?}"),
    }
    // Another group's object: a child infergate writes, read as far as the
    // confinement needs.
    match with("apps", "v1", "Deployment", policy.clone()) {
        Some(Object::Child(c)) => assert_eq!(c.namespace(), Some("team-a")),
        other => panic!("{other:?}"),
    }
    assert_eq!(with(GROUP, "v1beta1", "Other", policy), Some(Object::Other));
    let no_spec = json!({"metadata": {"name": "chat"}});
    match with(GROUP, "v1beta1", "InferenceService", no_spec) {
        Some(Object::Invalid(e)) => assert!(e.contains("missing field `spec`"), "{e}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        with(GROUP, "v1beta1", "InferenceService", Value::Null),
        None
    );
}

/// A request without a namespace takes the object's.
#[test]
fn the_namespace_falls_back_to_the_object() {
    let mut review = minimal();
    review["request"]
        .as_object_mut()
        .unwrap()
        .remove("namespace");
    let review = decode_value(&review).unwrap();
    assert_eq!(review.namespace, None);
    assert_eq!(review.namespace(), "team-a");
    let mut cluster = minimal();
    cluster["request"]["namespace"] = json!("");
    cluster["request"]["object"]["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("namespace");
    assert_eq!(decode_value(&cluster).unwrap().namespace(), "");
}

/// Bodies that are not an `admission.k8s.io/v1` AdmissionReview with a
/// request are refused, each with its reason.
#[test]
fn bodies_that_are_not_reviews_are_refused() {
    let body = serde_json::to_vec(&minimal()).unwrap();
    for bad in [
        &body[..body.len() - 1],
        b"not json",
        b"",
        &[0xff, 0xfe],
        b"[1]",
    ] {
        assert!(matches!(decode(bad), Err(BadReview::Decode(_))), "{bad:?}");
    }
    let mut conversion = minimal();
    conversion["kind"] = json!("ConversionReview");
    assert!(matches!(
        decode_value(&conversion),
        Err(BadReview::WrongType { kind, .. }) if kind == "ConversionReview"
    ));
    let mut empty = minimal();
    empty.as_object_mut().unwrap().remove("request");
    assert!(matches!(decode_value(&empty), Err(BadReview::NoRequest)));
}

/// The answer's fields in the API server's order; the patch as base64
/// with its type; nothing empty written.
#[test]
fn encode_writes_the_wire_format() {
    let allowed = Response {
        uid: "u-1".to_owned(),
        allowed: true,
        ..Response::default()
    };
    assert_eq!(
        String::from_utf8(encode(&allowed).unwrap()).unwrap(),
        r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"u-1","allowed":true}}"#
    );
    let patched = Response {
        patch: Some(br#"[{"op":"add","path":"/spec/replicas","value":1}]"#.to_vec()),
        warnings: vec!["quote \" here".to_owned()],
        ..allowed
    };
    let written: Value = serde_json::from_slice(&encode(&patched).unwrap()).unwrap();
    let response = &written["response"];
    assert_eq!(response["patchType"], "JSONPatch");
    use base64::Engine as _;
    let patch = base64::engine::general_purpose::STANDARD
        .decode(response["patch"].as_str().unwrap())
        .unwrap();
    assert_eq!(Some(patch), patched.patch);
    assert_eq!(response["warnings"], json!(["quote \" here"]));
    assert!(response.get("status").is_none());
    let denied = Response {
        uid: "u-2".to_owned(),
        allowed: false,
        status: Some(Status::failure("no", "Forbidden").with_code(403)),
        ..Response::default()
    };
    let written: Value = serde_json::from_slice(&encode(&denied).unwrap()).unwrap();
    assert_eq!(written["response"]["status"]["code"], 403);
    assert!(written["response"].get("patch").is_none());
    assert!(written["response"].get("warnings").is_none());
}

/// Both readings of a body, errors as their messages.
fn both(body: &[u8]) -> (Result<Review, String>, Result<Review, String>) {
    (
        decode(body).map_err(|e| e.to_string()),
        decode_by_slices(body).map_err(|e| e.to_string()),
    )
}

/// The one pass takes InferenceService reviews, CREATE and UPDATE,
/// kubectl-shaped or not; everything else is read by slices, and both
/// readings agree on all of them.
#[test]
fn the_one_pass_takes_service_reviews_and_leaves_the_rest() {
    let mut update = kubectl_shaped();
    update["request"]["operation"] = json!("UPDATE");
    update["request"]["oldObject"] = update["request"]["object"].clone();
    let mut alpha = minimal();
    alpha["request"]["kind"]["version"] = json!("v1alpha1");
    let mut policy = minimal();
    policy["request"]["kind"]["kind"] = json!("InferencePolicy");
    let mut foreign = minimal();
    foreign["request"]["kind"]["group"] = json!("apps");
    let mut no_spec = minimal();
    no_spec["request"]["object"]
        .as_object_mut()
        .unwrap()
        .remove("spec");
    let mut malformed_old = update.clone();
    malformed_old["request"]["oldObject"]["spec"]["replicas"] = json!("two");
    let mut conversion = minimal();
    conversion["kind"] = json!("ConversionReview");
    let body = |v: &Value| serde_json::to_vec(v).unwrap();
    for taken in [minimal(), kubectl_shaped(), update] {
        assert!(decode_service(&body(&taken)).is_some(), "{taken}");
    }
    let mut bodies: Vec<Vec<u8>> = [alpha, policy, foreign, no_spec, malformed_old, conversion]
        .iter()
        .map(body)
        .collect();
    let mut invalid_utf8 = body(&kubectl_shaped());
    let at = invalid_utf8
        .windows(8)
        .position(|w| w == b"f:model\"")
        .unwrap();
    invalid_utf8[at] = 0xff;
    let mut trailing = body(&kubectl_shaped());
    trailing.extend_from_slice(b" x");
    let text = String::from_utf8(body(&kubectl_shaped())).unwrap();
    let twice_spec = text.replacen(
        "\"spec\":",
        "\"spec\":{\"model\":{\"ref\":\"a\"}},\"spec\":",
        1,
    );
    let unclosed = text[..text.len() - 1].to_owned();
    // An unknown field nested 1,000 deep: skipped by both readings alike
    // (serde_json skips without recursing).
    let deep_unknown = text.replacen(
        "\"metadata\":{",
        &format!(
            "\"metadata\":{{\"x\":{}{},",
            "[".repeat(1000),
            "]".repeat(1000)
        ),
        1,
    );
    assert!(deep_unknown.len() > text.len());
    bodies.extend([
        invalid_utf8,
        trailing,
        twice_spec.into_bytes(),
        unclosed.into_bytes(),
        b"{}".to_vec(),
        b"not json".to_vec(),
    ]);
    for left in &bodies {
        assert!(
            decode_service(left).is_none(),
            "{}",
            String::from_utf8_lossy(left)
        );
    }
    for b in bodies.iter().chain(&[
        body(&minimal()),
        body(&kubectl_shaped()),
        deep_unknown.into_bytes(),
    ]) {
        let (one, slices) = both(b);
        assert_eq!(one, slices, "{}", String::from_utf8_lossy(b));
    }
}

mod generated {
    use std::sync::Arc;

    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::super::*;
    use crate::engine::ServerDefaults;
    use crate::metrics::Metrics;
    use crate::state::ClusterState;
    use crate::webhook::admission::Admission;

    /// Text with JSON escapes, control characters and non-ASCII.
    fn text() -> impl Strategy<Value = String> {
        "[a-z0-9 ./:{}\"\\\\\t\n\u{1}é😀-]{0,12}"
    }

    /// A value of some JSON type, to put where another is expected.
    fn junk() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<i64>().prop_map(Value::from),
            text().prop_map(Value::from),
            Just(json!([1, "x", {"y": null}])),
            Just(json!({"a": {"b": [true]}})),
        ]
    }

    fn metadata() -> impl Strategy<Value = Value> {
        (
            text(),
            prop::option::of(prop_oneof![Just("team-a".to_owned()), Just(String::new())]),
            prop::collection::btree_map(text(), text(), 0..3),
            prop::collection::btree_map(text(), text(), 0..3),
            prop::option::of(text()),
            junk(),
        )
            .prop_map(|(name, namespace, labels, mut annotations, provenance, managed)| {
                if let Some(p) = provenance {
                    annotations.insert(crate::api::DEFAULTED_FROM_ANNOTATION.to_owned(), p);
                }
                let mut m = json!({"name": name, "labels": labels, "annotations": annotations,
                    "generation": 3, "managedFields": [{"manager": "kubectl", "fieldsV1": managed}]});
                if let Some(ns) = namespace {
                    m["namespace"] = json!(ns);
                }
                m
            })
    }

    fn service_spec() -> impl Strategy<Value = Value> {
        (
            text(),
            prop::option::of(0..4_i32),
            prop::option::of(text()),
            prop::collection::vec(text(), 0..3),
            prop::option::of(prop_oneof![Just("Deployment"), Just("RayService")]),
            prop::option::of((text(), prop_oneof![Just("5m"), Just("90s"), Just("soon")])),
        )
            .prop_map(|(model, replicas, image, args, backend, routing)| {
                let mut s = json!({"model": {"ref": model}, "engine": {"args": args}});
                if let Some(r) = replicas {
                    s["replicas"] = json!(r);
                }
                if let Some(i) = image {
                    s["engine"]["image"] = json!(i);
                }
                if let Some(b) = backend {
                    s["backend"] = json!(b);
                }
                if let Some((template, timeout)) = routing {
                    s["routing"] = json!({"pathTemplate": template, "requestTimeout": timeout});
                }
                s
            })
    }

    /// An object of one of the kinds (not necessarily the request's),
    /// sometimes with a field of the wrong type or missing.
    fn object() -> impl Strategy<Value = Value> {
        let service = (metadata(), service_spec())
            .prop_map(|(m, s)| json!({"apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService", "metadata": m, "spec": s, "status": {"replicas": 1}}))
            .boxed();
        let alpha = (metadata(), text(), 0..4_i32)
            .prop_map(
                |(m, model, r)| json!({"metadata": m, "spec": {"modelRef": model, "replicas": r}}),
            )
            .boxed();
        let policy = (metadata(), 0..4_i32)
            .prop_map(|(m, p)| json!({"metadata": m, "spec": {"priority": p, "defaults": {"replicas": p}}}))
            .boxed();
        let spoiled = (
            prop_oneof![service.clone(), alpha.clone(), policy.clone()],
            junk(),
            prop_oneof![
                Just("/spec/replicas"),
                Just("/spec"),
                Just("/metadata/labels"),
                Just("/metadata/annotations"),
                Just("/metadata/name"),
                Just("/status"),
                Just("/spec/model"),
            ],
        )
            .prop_map(|(mut o, junk, at)| {
                if let Some(v) = o.pointer_mut(at) {
                    *v = junk;
                }
                o
            });
        let no_spec = metadata().prop_map(|m| json!({"metadata": m}));
        prop_oneof![
            4 => service,
            1 => alpha,
            1 => policy,
            2 => spoiled,
            1 => no_spec,
            1 => junk(),
        ]
    }

    /// A review body, its request's fields in any order.
    fn review_body() -> impl Strategy<Value = String> {
        let kind = prop_oneof![
            4 => Just(("infergate.dev", "v1beta1", "InferenceService")),
            1 => Just(("infergate.dev", "v1alpha1", "InferenceService")),
            1 => Just(("infergate.dev", "v1", "InferenceService")),
            1 => Just(("infergate.dev", "v1beta1", "ClusterInferencePolicy")),
            1 => Just(("infergate.dev", "v1beta1", "InferencePolicy")),
            1 => Just(("apps", "v1", "Deployment")),
        ];
        let operation = prop_oneof![
            3 => Just("CREATE"),
            3 => Just("UPDATE"),
            1 => Just("DELETE"),
            1 => Just("CONNECT"),
        ];
        (
            kind,
            prop::option::of(prop_oneof![Just("v1beta1"), Just("v1alpha1")]),
            operation,
            prop::option::of(object()),
            prop::option::of(object()),
            prop::option::of(prop_oneof![Just("team-a"), Just("")]),
            any::<bool>(),
            prop_oneof![20 => Just(true), 1 => Just(false)],
        )
            .prop_flat_map(
                |((group, version, kind), request_version, op, object, old, namespace, dry_run, well_formed)| {
                    let mut fields = vec![
                        ("uid", if well_formed { json!("u-1") } else { json!(5) }),
                        ("kind", json!({"group": group, "version": version, "kind": kind})),
                        ("resource", json!({"group": group, "version": version, "resource": "things"})),
                        ("name", json!("chat")),
                        ("operation", json!(op)),
                        ("dryRun", json!(dry_run)),
                        ("userInfo", json!({"username": "alice", "groups": ["g"]})),
                        ("options", json!({"kind": "CreateOptions"})),
                    ];
                    if let Some(v) = request_version {
                        fields.push(("requestKind", json!({"group": group, "version": v, "kind": kind})));
                    }
                    if let Some(ns) = namespace {
                        fields.push(("namespace", json!(ns)));
                    }
                    if let Some(o) = object {
                        fields.push(("object", o));
                    }
                    if let Some(o) = old {
                        fields.push(("oldObject", o));
                    }
                    Just(fields).prop_shuffle()
                },
            )
            .prop_map(|fields| {
                let request: Vec<String> = fields
                    .iter()
                    .map(|(k, v)| format!("{}:{v}", json!(k)))
                    .collect();
                format!(
                    r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{{}}}}}"#,
                    request.join(",")
                )
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Read in one pass or by slices, a review is the same review
        /// and gets the same answers from both webhooks, byte for byte;
        /// a body that is not a review is refused with the same reason.
        #[test]
        fn both_readings_give_the_same_review_and_answers(body in review_body()) {
            let admission = Admission {
                state: Arc::new(ClusterState::default()),
                server: ServerDefaults { engine_image: Some("registry.example.com/vllm:0.9".to_owned()), replicas: None },
                metrics: Metrics::new(),
                access: crate::webhook::access::AccessReviewer::default(),
                ledger: crate::state::ledger::Ledger::default(),
                names: crate::state::names::NamesLedger::default(),
                owners: crate::webhook::confine::Owners::default(),
            };
            match (decode(body.as_bytes()), decode_by_slices(body.as_bytes())) {
                (Ok(one), Ok(slices)) => {
                    prop_assert_eq!(&one, &slices);
                    prop_assert_eq!(
                        encode(&admission.mutate(&one)).unwrap(),
                        encode(&admission.mutate(&slices)).unwrap()
                    );
                    prop_assert_eq!(
                        encode(&admission.validate(&one)).unwrap(),
                        encode(&admission.validate(&slices)).unwrap()
                    );
                }
                (Err(one), Err(slices)) => prop_assert_eq!(one.to_string(), slices.to_string()),
                (one, slices) => prop_assert!(false, "{one:?} but {slices:?}"),
            }
        }
    }
}

/// The envelope's names of infergate's own reviews are read without an
/// allocation (borrowed); any other name is read as sent (owned).
#[test]
fn envelope_names_are_borrowed_when_known_and_kept_as_sent_otherwise() {
    use std::borrow::Cow;
    let review = decode_value(&kubectl_shaped()).unwrap();
    for name in [
        &review.kind.group,
        &review.kind.version,
        &review.kind.kind,
        &review.resource.group,
        &review.resource.version,
        &review.resource.resource,
    ] {
        assert!(matches!(name, Cow::Borrowed(_)), "{name:?} was allocated");
    }
    let mut other = kubectl_shaped();
    other["request"]["kind"] = json!({"group": "apps", "version": "v1", "kind": "Déployment\n"});
    let review = decode_value(&other).unwrap();
    assert_eq!(review.kind, ObjectKind::new("apps", "v1", "Déployment\n"));
    assert!(matches!(review.kind.kind, Cow::Owned(_)));
}
