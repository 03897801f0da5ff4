//! Reading an AdmissionReview body: [`decode`] (one pass for an
//! InferenceService, the rest by [`decode_by_slices`]), the wire types it
//! reads into, and [`BadReview`], why a body is not a review.

use std::collections::BTreeMap;

use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::admission::Operation;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::request::{API_VERSION, KIND, Name, Object, ObjectKind, ObjectResource, Review, name};
use crate::api::GROUP;
use crate::api::v1beta1::{InferenceService, InferenceServiceSpec};

/// Objects of a review read by their kind (one InferenceService by the
/// wire type of this module, the rest by their own types).
impl Object {
    /// Decode `raw` as an object of `kind`.
    pub(super) fn decode(raw: &RawValue, kind: &ObjectKind) -> Self {
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
        match &*kind.kind {
            "InferenceService" if kind.version == "v1alpha1" => {
                typed(raw, |s| Object::ServiceV1alpha1(Box::new(s)))
            }
            "InferenceService" => typed(raw, |s: ServiceIn| Object::Service(Box::new(s.into()))),
            "ClusterInferencePolicy" => typed(raw, |p| Object::ClusterPolicy(Box::new(p))),
            "InferencePolicy" => typed(raw, |p| Object::Policy(Box::new(p))),
            _ => Object::Other,
        }
    }
}

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

/// The envelope as sent.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReviewIn<R> {
    #[serde(default, deserialize_with = "name")]
    api_version: Name,
    #[serde(default, deserialize_with = "name")]
    kind: Name,
    request: Option<R>,
}

/// The request as sent, its objects read as `O`: slices of the body
/// (`&RawValue`), or straight into the InferenceService.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", bound(deserialize = "O: Deserialize<'de>"))]
struct RequestIn<O> {
    uid: String,
    kind: ObjectKind,
    resource: ObjectResource,
    #[serde(default)]
    sub_resource: Option<String>,
    #[serde(default)]
    request_kind: Option<ObjectKind>,
    #[serde(default)]
    request_resource: Option<ObjectResource>,
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
    fn into_review(self, typed: impl Fn(O, &ObjectKind) -> Object) -> Review {
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
pub(super) struct ServiceIn {
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
///
/// serde_json, not simd-json: simd-json ran fewer instructions for a
/// kubectl-shaped review (52k against 71k) and took twice the CPU time in
/// the loaded server (`perf record` of the load bench: 9.6 against 4.7
/// samples per 1,000 requests in decoding), its index of the whole body
/// costing more in memory traffic than the instructions it saves.
pub(super) fn decode_service(body: &[u8]) -> Option<Review> {
    // UTF-8 checked for the whole body, as reading the objects as slices
    // checks it for theirs (serde_json checks only the strings it keeps).
    let text = std::str::from_utf8(body).ok()?;
    // The service boxed as it is read: the request and the review around
    // it stay small, so each step of the reading moves only their few
    // hundred bytes, not the service's two kilobytes (most of the time
    // the loaded server spent in `memmove` was those moves).
    let review: ReviewIn<RequestIn<Box<ServiceIn>>> = serde_json::from_str(text).ok()?;
    let r = review.request?;
    let service = review.api_version == API_VERSION
        && review.kind == KIND
        && r.kind.group == GROUP
        && r.kind.kind == "InferenceService"
        && r.kind.version != "v1alpha1";
    service.then(|| r.into_review(|s, _| Object::Service(Box::new((*s).into()))))
}

/// Decode an AdmissionReview body keeping each object as a slice of the
/// body, then decoding it as the request's kind says. Takes every review;
/// [`decode`] gives the same [`Review`] faster for InferenceServices.
pub fn decode_by_slices(body: &[u8]) -> Result<Review, BadReview> {
    let review: ReviewIn<RequestIn<&RawValue>> =
        serde_json::from_slice(body).map_err(|e| BadReview::Decode(e.to_string()))?;
    if review.api_version != API_VERSION || review.kind != KIND {
        return Err(BadReview::WrongType {
            api_version: review.api_version.into_owned(),
            kind: review.kind.into_owned(),
        });
    }
    let r = review.request.ok_or(BadReview::NoRequest)?;
    Ok(r.into_review(Object::decode))
}
