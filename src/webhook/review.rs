//! The `admission.k8s.io/v1` AdmissionReview on the wire: [`decode`] turns
//! a request body into a typed [`Review`], [`encode`] writes a [`Response`]
//! back as an AdmissionReview.
//!
//! One decode path: a single serde_json pass over the body reads the
//! request's fields and keeps `object` and `oldObject` as slices of the body
//! (nothing of the body is copied); each object is then decoded once,
//! straight into the type of the request's kind. No `serde_json::Value` is
//! built. Fields no admission rule reads are skipped unparsed: `userInfo`,
//! `options`, and of an InferenceService its `managedFields` and `status`
//! (which do not exist for admission: see the route templates in
//! `docs/api-reference.md`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::admission::Operation;
use kube::core::{GroupVersionKind, GroupVersionResource, Status};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::api::v1beta1::{InferenceService, InferenceServiceSpec};
use crate::api::{ClusterInferencePolicy, GROUP, InferencePolicy, v1alpha1};

/// The `apiVersion` of the reviews this webhook answers.
pub const API_VERSION: &str = "admission.k8s.io/v1";
/// The `kind` of the reviews this webhook answers.
pub const KIND: &str = "AdmissionReview";

/// Why a body is not an AdmissionReview (answered with HTTP 400).
#[derive(Debug, thiserror::Error)]
pub enum BadReview {
    /// Not JSON, or JSON of the wrong shape.
    #[error("request body is not an admission.k8s.io/v1 AdmissionReview: {0}")]
    Decode(String),
    /// Some other apiVersion/kind.
    #[error(
        "unsupported review type {api_version:?}/{kind:?}: expected admission.k8s.io/v1 AdmissionReview"
    )]
    WrongType {
        /// The apiVersion sent.
        api_version: String,
        /// The kind sent.
        kind: String,
    },
    /// The review carries no request.
    #[error("AdmissionReview has no request")]
    NoRequest,
}

/// One admission request, typed: the request's fields (as kube-core names
/// them, less `userInfo` and `options`) and its objects decoded by kind.
#[derive(Clone, Debug, PartialEq)]
pub struct Review {
    /// Echoed in the response.
    pub uid: String,
    /// The kind of the object, in the version the webhook is called with.
    pub kind: GroupVersionKind,
    /// The resource being admitted.
    pub resource: GroupVersionResource,
    /// The subresource, if any.
    pub sub_resource: Option<String>,
    /// The kind the user sent, when the API server converted it (`matchPolicy: Equivalent`).
    pub request_kind: Option<GroupVersionKind>,
    /// The resource the user addressed, when the API server converted it.
    pub request_resource: Option<GroupVersionResource>,
    /// The subresource the user addressed.
    pub request_sub_resource: Option<String>,
    /// The object's name (empty on a CREATE with `generateName`).
    pub name: String,
    /// The request's namespace; see [`Review::namespace`].
    pub namespace: Option<String>,
    /// CREATE, UPDATE, DELETE or CONNECT.
    pub operation: Operation,
    /// Whether the request is a dry run.
    pub dry_run: bool,
    /// The object, when the request has one.
    pub object: Option<Object>,
    /// The stored object on UPDATE (admission reads it on UPDATE only, so
    /// it is decoded then and left out otherwise).
    pub old_object: Option<Object>,
}

/// An object of a review, decoded by the request's kind.
#[derive(Clone, Debug, PartialEq)]
pub enum Object {
    /// An `infergate.dev` InferenceService in any version but v1alpha1,
    /// read as v1beta1 (its metadata without `managedFields`, no status).
    Service(Box<InferenceService>),
    /// An `infergate.dev/v1alpha1` InferenceService.
    ServiceV1alpha1(Box<v1alpha1::InferenceService>),
    /// A ClusterInferencePolicy.
    ClusterPolicy(Box<ClusterInferencePolicy>),
    /// An InferencePolicy.
    Policy(Box<InferencePolicy>),
    /// A kind infergate does not admit (left undecoded).
    Other,
    /// JSON that is not an object of the request's kind: why not.
    Invalid(String),
}

impl Object {
    /// Decode `raw` as an object of `kind`.
    fn decode(raw: &RawValue, kind: &GroupVersionKind) -> Self {
        fn typed<T: serde::de::DeserializeOwned>(
            raw: &RawValue,
            wrap: impl FnOnce(T) -> Object,
        ) -> Object {
            match serde_json::from_str(raw.get()) {
                Ok(v) => wrap(v),
                Err(e) => Object::Invalid(e.to_string()),
            }
        }
        if kind.group != GROUP {
            return Object::Other;
        }
        match kind.kind.as_str() {
            "InferenceService" if kind.version == "v1alpha1" => {
                typed(raw, |s| Object::ServiceV1alpha1(Box::new(s)))
            }
            "InferenceService" => typed(raw, |s: ServiceIn| Object::Service(Box::new(s.into()))),
            "ClusterInferencePolicy" => typed(raw, |p| Object::ClusterPolicy(Box::new(p))),
            "InferencePolicy" => typed(raw, |p| Object::Policy(Box::new(p))),
            _ => Object::Other,
        }
    }

    /// The object's `metadata.namespace`.
    fn namespace(&self) -> Option<&str> {
        match self {
            Object::Service(s) => s.metadata.namespace.as_deref(),
            Object::ServiceV1alpha1(s) => s.metadata.namespace.as_deref(),
            Object::ClusterPolicy(p) => p.metadata.namespace.as_deref(),
            Object::Policy(p) => p.metadata.namespace.as_deref(),
            Object::Other | Object::Invalid(_) => None,
        }
    }
}

impl Review {
    /// The namespace of the request, or of the object when the request
    /// names none; empty for cluster-scoped objects.
    #[must_use]
    pub fn namespace(&self) -> &str {
        self.namespace
            .as_deref()
            .filter(|ns| !ns.is_empty())
            .or_else(|| self.object.as_ref().and_then(Object::namespace))
            .unwrap_or_default()
    }
}

/// The envelope as sent.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReviewIn<'a> {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(borrow)]
    request: Option<RequestIn<'a>>,
}

/// The request as sent, its objects kept as slices of the body.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RequestIn<'a> {
    uid: String,
    kind: GroupVersionKind,
    resource: GroupVersionResource,
    #[serde(default)]
    sub_resource: Option<String>,
    #[serde(default)]
    request_kind: Option<GroupVersionKind>,
    #[serde(default)]
    request_resource: Option<GroupVersionResource>,
    #[serde(default)]
    request_sub_resource: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    operation: Operation,
    #[serde(default, borrow)]
    object: Option<&'a RawValue>,
    #[serde(default, borrow)]
    old_object: Option<&'a RawValue>,
    #[serde(default)]
    dry_run: bool,
}

/// An InferenceService as admission reads it: the metadata the rules read
/// and the spec. `managedFields` (most of a kubectl object's bytes) and
/// `status` are skipped unparsed; the patch only ever touches `spec` and
/// `metadata.annotations`, so nothing skipped is lost.
#[derive(Deserialize)]
struct ServiceIn {
    #[serde(default)]
    metadata: MetaIn,
    spec: InferenceServiceSpec,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct MetaIn {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    generate_name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default)]
    generation: Option<i64>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    annotations: Option<BTreeMap<String, String>>,
}

impl From<ServiceIn> for InferenceService {
    fn from(s: ServiceIn) -> Self {
        let m = s.metadata;
        InferenceService {
            metadata: ObjectMeta {
                name: m.name,
                generate_name: m.generate_name,
                namespace: m.namespace,
                uid: m.uid,
                resource_version: m.resource_version,
                generation: m.generation,
                labels: m.labels,
                annotations: m.annotations,
                ..ObjectMeta::default()
            },
            spec: s.spec,
            status: None,
        }
    }
}

/// Decode an AdmissionReview body.
pub fn decode(body: &[u8]) -> Result<Review, BadReview> {
    let review: ReviewIn<'_> =
        serde_json::from_slice(body).map_err(|e| BadReview::Decode(e.to_string()))?;
    if review.api_version != API_VERSION || review.kind != KIND {
        return Err(BadReview::WrongType {
            api_version: review.api_version,
            kind: review.kind,
        });
    }
    let r = review.request.ok_or(BadReview::NoRequest)?;
    let object = r.object.map(|raw| Object::decode(raw, &r.kind));
    let old_object = match r.operation {
        Operation::Update => r.old_object.map(|raw| Object::decode(raw, &r.kind)),
        _ => None,
    };
    Ok(Review {
        uid: r.uid,
        kind: r.kind,
        resource: r.resource,
        sub_resource: r.sub_resource,
        request_kind: r.request_kind,
        request_resource: r.request_resource,
        request_sub_resource: r.request_sub_resource,
        name: r.name,
        namespace: r.namespace,
        operation: r.operation,
        dry_run: r.dry_run,
        object,
        old_object,
    })
}

/// The answer to one review.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Response {
    /// The request's uid.
    pub uid: String,
    /// Whether the request is admitted.
    pub allowed: bool,
    /// Why not, when it is denied: code, reason, message and field causes.
    pub status: Option<Status>,
    /// A JSONPatch (JSON text) to apply to the object; never empty.
    pub patch: Option<Vec<u8>>,
    /// Warnings shown to the user.
    pub warnings: Vec<String>,
}

impl Response {
    /// Allow `review`, with nothing to say.
    #[must_use]
    pub fn allow(review: &Review) -> Self {
        Self {
            uid: review.uid.clone(),
            allowed: true,
            ..Self::default()
        }
    }
}

/// The envelope as written.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ReviewOut<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: ResponseOut<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResponseOut<'a> {
    uid: &'a str,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<&'a Status>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<Base64<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    warnings: &'a [String],
}

/// Bytes written as a base64 string, straight into the output.
struct Base64<'a>(&'a [u8]);

impl Serialize for Base64<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&base64::display::Base64Display::new(
            self.0,
            &base64::engine::general_purpose::STANDARD,
        ))
    }
}

/// Write `response` as an `admission.k8s.io/v1` AdmissionReview. The patch
/// is base64, as the API server expects (kube-core's own response type
/// writes it as an array of numbers).
pub fn encode(response: &Response) -> Result<Vec<u8>, serde_json::Error> {
    let patch = response.patch.as_deref();
    let out = ReviewOut {
        api_version: API_VERSION,
        kind: KIND,
        response: ResponseOut {
            uid: &response.uid,
            allowed: response.allowed,
            status: response.status.as_ref(),
            patch: patch.map(Base64),
            patch_type: patch.map(|_| "JSONPatch"),
            warnings: &response.warnings,
        },
    };
    let mut bytes = Vec::with_capacity(256 + patch.map_or(0, |p| p.len() / 3 * 4 + 4));
    serde_json::to_writer(&mut bytes, &out)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    const MINIMAL: &str = include_str!("../../tests/fixtures/webhook/mutate-create-minimal.json");

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
        review["request"]["options"] =
            json!({"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"});
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
                GroupVersionKind::gvk(GROUP, "v1beta1", "InferenceService")
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
        let policy =
            json!({"metadata": {"name": "p", "namespace": "team-a"}, "spec": {"priority": 3}});
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
        assert_eq!(
            with("apps", "v1", "Deployment", policy.clone()),
            Some(Object::Other)
        );
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
}
