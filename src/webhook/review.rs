//! The `admission.k8s.io/v1` AdmissionReview on the wire: [`decode`] turns
//! a request body into a typed [`Review`], [`encode`] writes a [`Response`]
//! back as an AdmissionReview.
//!
//! One set of wire types, read with serde_json: the request's fields, and
//! each object decoded once, straight into the type of the request's kind
//! (no `serde_json::Value` is built and nothing of the body is copied).
//! Fields no admission rule reads are skipped unparsed: `options`, and of
//! an InferenceService its `managedFields` and `status`
//! (which do not exist at admission: see the route templates in
//! `docs/api-reference.md`). See [`decode`] for the one-pass reading of the
//! common review.

use std::collections::BTreeMap;

use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::admission::Operation;
use kube::core::{GroupVersionKind, GroupVersionResource, Status};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::api::v1beta1::{InferenceService, InferenceServiceSpec};
use crate::api::{ClusterInferencePolicy, GROUP, InferencePolicy, v1alpha1};
use crate::webhook::confine::Child;

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
/// them, less `options`) and its objects decoded by kind.
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
    /// Who sent the request (the access reviews ask about this user).
    pub user_info: UserInfo,
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
    /// An object of another group, written by infergate's own
    /// ServiceAccount: a child, read as far as its checks need
    /// ([`crate::webhook::confine`]).
    Child(Box<Child>),
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
            return typed(raw, |c| Object::Child(Box::new(c)));
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
            Object::Child(c) => c.namespace(),
            Object::Other | Object::Invalid(_) => None,
        }
    }
}

impl Review {
    /// This request without its objects: what an answer that comes later
    /// needs (uid, kind, name, namespace, user).
    #[must_use]
    pub fn head(&self) -> Review {
        Review {
            uid: self.uid.clone(),
            kind: self.kind.clone(),
            resource: self.resource.clone(),
            sub_resource: self.sub_resource.clone(),
            request_kind: self.request_kind.clone(),
            request_resource: self.request_resource.clone(),
            request_sub_resource: self.request_sub_resource.clone(),
            name: self.name.clone(),
            namespace: Some(self.namespace().to_owned()),
            operation: self.operation.clone(),
            dry_run: self.dry_run,
            user_info: self.user_info.clone(),
            object: None,
            old_object: None,
        }
    }

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
struct ReviewIn<R> {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    request: Option<R>,
}

/// The request as sent, its objects read as `O`: slices of the body
/// (`&RawValue`), or straight into the InferenceService.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", bound(deserialize = "O: Deserialize<'de>"))]
struct RequestIn<O> {
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
    #[serde(default)]
    object: Option<O>,
    #[serde(default)]
    old_object: Option<O>,
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    user_info: UserInfo,
}

impl<O> RequestIn<O> {
    /// The typed review, each object turned into an [`Object`] by `typed`
    /// (the old object on UPDATE only).
    fn into_review(self, typed: impl Fn(O, &GroupVersionKind) -> Object) -> Review {
        let object = self.object.map(|o| typed(o, &self.kind));
        let old_object = match self.operation {
            Operation::Update => self.old_object.map(|o| typed(o, &self.kind)),
            _ => None,
        };
        Review {
            uid: self.uid,
            kind: self.kind,
            resource: self.resource,
            sub_resource: self.sub_resource,
            request_kind: self.request_kind,
            request_resource: self.request_resource,
            request_sub_resource: self.request_sub_resource,
            name: self.name,
            namespace: self.namespace,
            operation: self.operation,
            dry_run: self.dry_run,
            user_info: self.user_info,
            object,
            old_object,
        }
    }
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
    /// Only the rollout's state (the stored object's, on UPDATE: a new
    /// version mid-rollout gets a warning); the rest of status is skipped.
    #[serde(default)]
    status: Option<StatusIn>,
}

#[derive(Deserialize, Default)]
struct StatusIn {
    #[serde(default)]
    rollout: Option<crate::api::rollout::RolloutStatus>,
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
            status: s.status.and_then(|st| st.rollout).map(|rollout| {
                crate::api::v1beta1::InferenceServiceStatus {
                    rollout: Some(rollout),
                    ..Default::default()
                }
            }),
        }
    }
}

/// Decode an AdmissionReview body.
///
/// A review of an InferenceService (the kind almost every request is
/// about) is read in one pass, its objects straight into the typed service.
/// Anything else (a body that is not a review, another kind, an object that
/// does not decode as its kind) is read by [`decode_by_slices`], which also
/// words the errors. Both read the same fields into the same wire types, so
/// a review reads the same either way: a property test checks it on
/// generated reviews, answers included.
///
/// Why the one pass: reading by slices reads each object twice (once to find
/// its end, once to decode it), and the objects are most of a review's
/// bytes. The one pass serves more `/mutate` requests in the load bench
/// (`LOAD_RATE_FRACTION=0 cargo bench --bench load -- fixed mutate
/// validate`) and answers both webhooks sooner in process (`cargo bench
/// --bench engine -- handle`).
pub fn decode(body: &[u8]) -> Result<Review, BadReview> {
    decode_service(body).map_or_else(|| decode_by_slices(body), Ok)
}

/// An InferenceService review (not v1alpha1) read in one pass, or `None`
/// when the body is anything else or does not decode so.
fn decode_service(body: &[u8]) -> Option<Review> {
    // UTF-8 checked for the whole body, as reading the objects as slices
    // checks it for theirs (serde_json checks only the strings it keeps).
    let text = std::str::from_utf8(body).ok()?;
    let review: ReviewIn<RequestIn<ServiceIn>> = serde_json::from_str(text).ok()?;
    let r = review.request?;
    let service = review.api_version == API_VERSION
        && review.kind == KIND
        && r.kind.group == GROUP
        && r.kind.kind == "InferenceService"
        && r.kind.version != "v1alpha1";
    service.then(|| r.into_review(|s, _| Object::Service(Box::new(s.into()))))
}

/// Decode an AdmissionReview body keeping each object as a slice of the
/// body, then decoding it as the request's kind says. Takes every review;
/// [`decode`] gives the same [`Review`] faster for InferenceServices.
pub fn decode_by_slices(body: &[u8]) -> Result<Review, BadReview> {
    let review: ReviewIn<RequestIn<&RawValue>> =
        serde_json::from_slice(body).map_err(|e| BadReview::Decode(e.to_string()))?;
    if review.api_version != API_VERSION || review.kind != KIND {
        return Err(BadReview::WrongType {
            api_version: review.api_version,
            kind: review.kind,
        });
    }
    let r = review.request.ok_or(BadReview::NoRequest)?;
    Ok(r.into_review(Object::decode))
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
    patch: Option<Box<RawValue>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    warnings: &'a [String],
}

/// `bytes` as a JSON string of their base64 (which never needs escaping,
/// so it is written into the answer as it is, not scanned again).
fn base64_string(bytes: &[u8]) -> Result<Box<RawValue>, serde_json::Error> {
    let b64 = base64_simd::STANDARD;
    let mut json = String::with_capacity(b64.encoded_length(bytes.len()) + 2);
    json.push('"');
    json.push_str(b64.encode_to_string(bytes).as_str());
    json.push('"');
    RawValue::from_string(json)
}

/// Write `response` as an `admission.k8s.io/v1` AdmissionReview. The patch
/// is base64, as the API server expects (kube-core's own response type
/// writes it as an array of numbers).
pub fn encode(response: &Response) -> Result<Vec<u8>, serde_json::Error> {
    let patch = response.patch.as_deref().map(base64_string).transpose()?;
    let out = ReviewOut {
        api_version: API_VERSION,
        kind: KIND,
        response: ResponseOut {
            uid: &response.uid,
            allowed: response.allowed,
            status: response.status.as_ref(),
            patch_type: patch.as_ref().map(|_| "JSONPatch"),
            patch,
            warnings: &response.warnings,
        },
    };
    let mut bytes =
        Vec::with_capacity(256 + out.response.patch.as_ref().map_or(0, |p| p.get().len()));
    serde_json::to_writer(&mut bytes, &out)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests;
