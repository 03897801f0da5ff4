//! `POST /mutate` and `POST /validate`: admission.k8s.io/v1 AdmissionReview
//! for InferenceService and both policy kinds.
//!
//! The review is decoded into kube-core's [`AdmissionRequest`] over
//! [`AdmittedObject`] (the object kept as JSON, decoded into the typed kind
//! once the request's kind is known) and answered with kube-core's
//! [`AdmissionResponse`]. The most common request, a v1beta1
//! InferenceService CREATE or UPDATE on `/mutate`, is decoded in one pass
//! (simd-json) straight into what defaulting reads; its patch is written
//! from what defaulting recorded ([`crate::engine::defaulting_patch_json`]),
//! and the answer is written as JSON text ([`review_json`]). Everything here
//! is synchronous and makes no API call: policies, namespace labels and
//! routes come from the [`PolicyCache`].

use std::borrow::Cow;
use std::sync::OnceLock;
use std::time::Instant;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::response::{StatusCause, StatusDetails, StatusSummary};
use kube::core::{ApiResource, DynamicObject, DynamicResourceScope, Status, TypeMeta};
use serde::{Deserialize, Serialize};

use crate::api::v1beta1::InferenceService;
use crate::api::{ClusterInferencePolicy, InferencePolicy, v1alpha1};
use crate::engine::{Context, FieldError, ServerDefaults, Verdict};
use crate::metrics::{Metrics, Webhook};
use crate::state::{ClusterState, context};

/// The API group of infergate's kinds.
pub const GROUP: &str = "infergate.dev";

/// Warning added to every request made through the deprecated version.
pub const V1ALPHA1_WARNING: &str =
    "infergate.dev/v1alpha1 InferenceService is deprecated; use infergate.dev/v1beta1";

/// The object of an admission request, kept as the raw JSON text until its
/// kind is known, then decoded straight into the typed kind (no
/// intermediate `serde_json::Value` of managed fields and annotations).
/// Implements [`Resource`] so kube-core's [`AdmissionRequest`] can carry it;
/// its metadata is decoded on first use.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AdmittedObject {
    /// The object as the API server sent it.
    pub raw: Box<serde_json::value::RawValue>,
    #[serde(skip)]
    meta: OnceLock<ObjectMeta>,
}

/// Just the namespace of an object (when the request does not carry one).
#[derive(Deserialize)]
struct NamespaceView {
    #[serde(default)]
    metadata: NamespaceMeta,
}

#[derive(Deserialize, Default)]
struct NamespaceMeta {
    #[serde(default)]
    namespace: Option<String>,
}

/// An InferenceService as admission reads it. The metadata the engine's
/// rules read (names, labels, annotations, identity) is decoded; the rest,
/// above all `managedFields`, is skipped unparsed: it is most of a kubectl
/// object's bytes and no rule or default looks at it. The patch only ever
/// touches `spec` and `metadata.annotations`, so nothing skipped is lost.
#[derive(Deserialize)]
struct ServiceView {
    #[serde(default)]
    metadata: MetaView,
    spec: crate::api::v1beta1::InferenceServiceSpec,
    #[serde(default)]
    status: Option<crate::api::v1beta1::InferenceServiceStatus>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct MetaView {
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
    labels: Option<std::collections::BTreeMap<String, String>>,
    #[serde(default)]
    annotations: Option<std::collections::BTreeMap<String, String>>,
}

/// An InferenceService as defaulting reads it: the spec, the name and
/// namespace, and of the annotations only `infergate.dev/defaulted-from`
/// (whether the object has an annotations map at all is kept, so the patch
/// adds to it rather than replacing it). Everything else, the long
/// `last-applied-configuration` above all, is skipped without being
/// unescaped or copied: defaulting reads none of it and the patch never
/// touches it.
#[derive(Deserialize)]
struct DefaultingView {
    #[serde(default)]
    metadata: DefaultingMeta,
    spec: crate::api::v1beta1::InferenceServiceSpec,
}

#[derive(Deserialize, Default)]
struct DefaultingMeta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    annotations: Option<ProvenanceAnnotation>,
}

/// An annotations map reduced to the provenance annotation.
#[derive(Default)]
struct ProvenanceAnnotation(std::collections::BTreeMap<String, String>);

impl<'de> Deserialize<'de> for ProvenanceAnnotation {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = ProvenanceAnnotation;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a map of annotations")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut out = std::collections::BTreeMap::new();
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    if key == crate::api::DEFAULTED_FROM_ANNOTATION {
                        out.insert(key.into_owned(), map.next_value::<String>()?);
                    } else {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    }
                }
                Ok(ProvenanceAnnotation(out))
            }
        }
        d.deserialize_map(Visit)
    }
}

impl From<DefaultingView> for InferenceService {
    fn from(v: DefaultingView) -> Self {
        InferenceService {
            metadata: ObjectMeta {
                name: v.metadata.name,
                namespace: v.metadata.namespace,
                annotations: v.metadata.annotations.map(|a| a.0),
                ..ObjectMeta::default()
            },
            spec: v.spec,
            status: None,
        }
    }
}

impl From<ServiceView> for InferenceService {
    fn from(v: ServiceView) -> Self {
        let m = v.metadata;
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
            spec: v.spec,
            status: v.status,
        }
    }
}

impl AdmittedObject {
    /// Wrap a JSON object.
    pub fn new(json: &serde_json::Value) -> Result<Self, serde_json::Error> {
        Ok(Self {
            raw: serde_json::value::to_raw_value(json)?,
            meta: OnceLock::new(),
        })
    }

    /// Decode the object as `K`.
    pub fn decode<K: serde::de::DeserializeOwned>(&self) -> Result<K, serde_json::Error> {
        serde_json::from_str(self.raw.get())
    }

    fn decode_meta(&self) -> ObjectMeta {
        #[derive(Deserialize)]
        struct M {
            #[serde(default)]
            metadata: ObjectMeta,
        }
        serde_json::from_str::<M>(self.raw.get())
            .map(|m| m.metadata)
            .unwrap_or_default()
    }
}

impl Resource for AdmittedObject {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }
    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }
    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }
    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }
    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }
    fn meta(&self) -> &ObjectMeta {
        self.meta.get_or_init(|| self.decode_meta())
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        if self.meta.get().is_none() {
            let m = self.decode_meta();
            let _ = self.meta.set(m);
        }
        match self.meta.get_mut() {
            Some(m) => m,
            None => unreachable!("metadata was initialised above"),
        }
    }
}

/// The incoming envelope. kube-core's own `AdmissionReview` flattens
/// `TypeMeta`, which makes serde buffer the whole body first; this decodes
/// in one pass into the same [`AdmissionRequest`].
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReviewIn<R> {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    request: Option<R>,
}

/// The request fields admission reads, with the object decoded as `O` and
/// the old object as `P`. `userInfo` and `options` are skipped unparsed (no
/// rule depends on who asks or on the create options), which saves building
/// a `DynamicObject` and a user's groups and extras on every request; the
/// rest is kube-core's [`AdmissionRequest`] field for field.
#[derive(Deserialize)]
#[serde(
    rename_all = "camelCase",
    bound(deserialize = "O: Deserialize<'de>, P: Deserialize<'de>")
)]
struct RequestIn<O, P> {
    uid: String,
    kind: kube::core::GroupVersionKind,
    resource: kube::core::GroupVersionResource,
    #[serde(default)]
    sub_resource: Option<String>,
    #[serde(default)]
    request_kind: Option<kube::core::GroupVersionKind>,
    #[serde(default)]
    request_resource: Option<kube::core::GroupVersionResource>,
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
    old_object: Option<P>,
    #[serde(default)]
    dry_run: bool,
}

impl<O, P> RequestIn<O, P> {
    /// kube-core's request (objects left out) and the decoded objects.
    fn split(self, types: TypeMeta) -> (AdmissionRequest<AdmittedObject>, Option<O>, Option<P>) {
        let req = AdmissionRequest {
            types,
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
            user_info: Default::default(),
            object: None,
            old_object: None,
            dry_run: self.dry_run,
            options: None,
        };
        (req, self.object, self.old_object)
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

/// Decode an AdmissionReview body.
pub fn decode_review(body: &[u8]) -> Result<AdmissionRequest<AdmittedObject>, BadReview> {
    let review: ReviewIn<RequestIn<AdmittedObject, AdmittedObject>> =
        serde_json::from_slice(body).map_err(|e| BadReview::Decode(e.to_string()))?;
    if review.api_version != "admission.k8s.io/v1" || review.kind != "AdmissionReview" {
        return Err(BadReview::WrongType {
            api_version: review.api_version,
            kind: review.kind,
        });
    }
    let r = review.request.ok_or(BadReview::NoRequest)?;
    let (mut req, object, old_object) = r.split(TypeMeta {
        api_version: review.api_version,
        kind: review.kind,
    });
    req.object = object;
    req.old_object = old_object;
    Ok(req)
}

/// The largest body whose parsing buffers a thread keeps for the next request.
const KEPT_SCRATCH_BYTES: usize = 256 * 1024;

thread_local! {
    /// simd-json parses in place: a copy of the body and its working
    /// buffers, kept per thread so each request allocates none of them.
    static SCRATCH: std::cell::RefCell<(Vec<u8>, simd_json::Buffers)> =
        std::cell::RefCell::new((Vec::new(), simd_json::Buffers::default()));
}

/// A review decoded in one pass with simd-json (SIMD structural scanning,
/// chosen at run time for the CPU), the object as `O` and the old object
/// as `P`, when it is a v1beta1 InferenceService CREATE or UPDATE made
/// through v1beta1. `None` for anything else (another kind or version,
/// DELETE, a body that does not decode): the caller then takes the general
/// path (serde_json), which also reports the errors.
fn decode_service_write<O, P>(
    body: &[u8],
) -> Option<(AdmissionRequest<AdmittedObject>, Option<O>, Option<P>)>
where
    O: serde::de::DeserializeOwned,
    P: serde::de::DeserializeOwned,
{
    let review: ReviewIn<RequestIn<O, P>> = SCRATCH.with_borrow_mut(|(input, buffers)| {
        input.clear();
        input.extend_from_slice(body);
        let review = simd_json::serde::from_slice_with_buffers(input, buffers).ok();
        // Keep what a typical review needs, not the largest ever seen.
        if input.capacity() > KEPT_SCRATCH_BYTES {
            *input = Vec::new();
            *buffers = simd_json::Buffers::default();
        }
        review
    })?;
    if review.api_version != "admission.k8s.io/v1" || review.kind != "AdmissionReview" {
        return None;
    }
    let (req, object, old_object) = review.request?.split(TypeMeta {
        api_version: review.api_version,
        kind: review.kind,
    });
    if !is_service_write(&req) || req.kind.version != "v1beta1" || deprecated_version(&req) {
        return None;
    }
    Some((req, object, old_object))
}

/// The common mutating request: the object straight into what defaulting
/// reads, the old object and the user skipped unparsed.
fn decode_defaulting_review(
    body: &[u8],
) -> Option<(AdmissionRequest<AdmittedObject>, InferenceService)> {
    let (mut req, object, _) = decode_service_write::<DefaultingView, serde::de::IgnoredAny>(body)?;
    let svc = InferenceService::from(object?);
    if req.namespace.as_deref().is_none_or(str::is_empty) {
        req.namespace.clone_from(&svc.metadata.namespace);
    }
    Some((req, svc))
}

/// The common validating request: the object, and on UPDATE the old
/// object, straight into what the rules read (the same view the general
/// path decodes from the raw object).
fn decode_validating_review(
    body: &[u8],
) -> Option<(
    AdmissionRequest<AdmittedObject>,
    InferenceService,
    Option<InferenceService>,
)> {
    let (mut req, object, old_object) = decode_service_write::<ServiceView, ServiceView>(body)?;
    let svc = InferenceService::from(object?);
    let old = match req.operation {
        Operation::Update => old_object.map(InferenceService::from),
        _ => None,
    };
    if req.namespace.as_deref().is_none_or(str::is_empty) {
        req.namespace.clone_from(&svc.metadata.namespace);
    }
    Some((req, svc, old))
}

/// What the admission handlers need.
#[derive(Debug)]
pub struct Admission {
    /// Policies, namespaces, routes.
    pub state: std::sync::Arc<ClusterState>,
    /// Server flag defaults.
    pub server: ServerDefaults,
    /// Metrics.
    pub metrics: Metrics,
}

/// The answer to one review plus what the trace records.
#[derive(Debug)]
pub struct Answer {
    /// The response to send back (see [`Answer::to_json`]).
    pub response: AdmissionResponse,
    /// Whether the request was allowed.
    pub allowed: bool,
    /// Whether a non-empty patch was returned.
    pub mutated: bool,
}

fn operation_str(op: &Operation) -> &'static str {
    match op {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

/// A denial with HTTP-ish `code`, `message`, and field causes.
fn deny(
    mut resp: AdmissionResponse,
    code: u16,
    reason: &str,
    message: String,
    causes: &[FieldError],
    req: &AdmissionRequest<AdmittedObject>,
) -> AdmissionResponse {
    resp.allowed = false;
    resp.result = Status {
        status: Some(StatusSummary::Failure),
        code,
        message,
        metadata: None,
        reason: reason.to_owned(),
        details: Some(StatusDetails {
            name: req.name.clone(),
            group: req.kind.group.clone(),
            kind: req.kind.kind.clone(),
            uid: String::new(),
            causes: causes
                .iter()
                .map(|e| StatusCause {
                    reason: e.reason.as_str().to_owned(),
                    message: e.message.clone(),
                    field: e.field.clone(),
                })
                .collect(),
            retry_after_seconds: 0,
        }),
    };
    resp
}

fn with_warnings(mut resp: AdmissionResponse, warnings: Vec<String>) -> AdmissionResponse {
    if !warnings.is_empty() {
        resp.warnings.get_or_insert_with(Vec::new).extend(warnings);
    }
    resp
}

/// `resp` with `patch`, a JSONPatch already serialised. kube-core's
/// `with_patch` serialises a typed patch and is the only way to set the
/// (private) patch type, so it is given an empty patch and the bytes are
/// put in its place.
fn with_patch_json(
    resp: AdmissionResponse,
    patch: Vec<u8>,
) -> Result<AdmissionResponse, kube::core::admission::SerializePatchError> {
    let mut resp = resp.with_patch(json_patch::Patch(Vec::new()))?;
    resp.patch = Some(patch);
    Ok(resp)
}

/// A CREATE or UPDATE of an InferenceService (any version): what `/mutate` defaults.
fn is_service_write(req: &AdmissionRequest<AdmittedObject>) -> bool {
    matches!(req.operation, Operation::Create | Operation::Update)
        && req.kind.group == GROUP
        && req.kind.kind == "InferenceService"
}

fn deprecated_version(req: &AdmissionRequest<AdmittedObject>) -> bool {
    let kind = req.request_kind.as_ref().unwrap_or(&req.kind);
    kind.group == GROUP && kind.kind == "InferenceService" && kind.version == "v1alpha1"
}

fn namespace_of(req: &AdmissionRequest<AdmittedObject>) -> String {
    req.namespace
        .clone()
        .filter(|ns| !ns.is_empty())
        .or_else(|| {
            req.object
                .as_ref()
                .and_then(|o| o.decode::<NamespaceView>().ok())
                .and_then(|v| v.metadata.namespace)
        })
        .unwrap_or_default()
}

/// Decode the request's InferenceService (v1beta1, or v1alpha1 converted).
fn decode_service(obj: &AdmittedObject, version: &str) -> Result<InferenceService, String> {
    if version == "v1alpha1" {
        let old: v1alpha1::InferenceService = obj.decode().map_err(|e| e.to_string())?;
        crate::api::conversion::to_v1beta1(&old).map_err(|e| e.to_string())
    } else {
        obj.decode::<ServiceView>()
            .map(InferenceService::from)
            .map_err(|e| e.to_string())
    }
}

fn bad_object(
    resp: AdmissionResponse,
    req: &AdmissionRequest<AdmittedObject>,
    e: &str,
) -> AdmissionResponse {
    deny(
        resp,
        400,
        "BadRequest",
        format!("invalid {} object: {e}", req.kind.kind),
        &[],
        req,
    )
}

impl Admission {
    /// Answer a review body for `webhook`. `Err` means the body is not an
    /// AdmissionReview at all (HTTP 400).
    pub fn handle(&self, webhook: Webhook, body: &[u8]) -> Result<Answer, BadReview> {
        let start = Instant::now();
        let (req, resp) = match webhook {
            Webhook::Mutate => match decode_defaulting_review(body) {
                Some((req, svc)) => {
                    let resp = AdmissionResponse::from(&req);
                    let resp = self.default_decoded(&req, resp, &svc, Vec::new());
                    (req, resp)
                }
                None => {
                    let req = decode_review(body)?;
                    let resp = self.mutate(&req);
                    (req, resp)
                }
            },
            Webhook::Validate => match decode_validating_review(body) {
                Some((req, svc, old)) => {
                    let resp = AdmissionResponse::from(&req);
                    let resp = self.validate_decoded(&req, resp, &svc, old.as_ref(), Vec::new());
                    (req, resp)
                }
                None => {
                    let req = decode_review(body)?;
                    let resp = self.validate(&req);
                    (req, resp)
                }
            },
        };
        let allowed = resp.allowed;
        let mutated = resp.patch.as_ref().is_some_and(|p| p.as_slice() != b"[]");
        let elapsed = start.elapsed();
        self.metrics
            .admission(webhook, operation_str(&req.operation), allowed, elapsed);
        tracing::debug!(
            webhook = webhook.as_str(),
            uid = %req.uid,
            kind = %req.kind.kind,
            namespace = req.namespace.as_deref().unwrap_or(""),
            name = %req.name,
            operation = operation_str(&req.operation),
            dry_run = req.dry_run,
            allowed,
            mutated,
            elapsed_us = elapsed.as_micros() as u64,
            "admission"
        );
        Ok(Answer {
            response: resp,
            allowed,
            mutated,
        })
    }

    /// The mutating webhook: fill in defaults (InferenceService only).
    pub fn mutate(&self, req: &AdmissionRequest<AdmittedObject>) -> AdmissionResponse {
        let resp = AdmissionResponse::from(req);
        if !is_service_write(req) {
            return resp;
        }
        let mut warnings = Vec::new();
        if deprecated_version(req) {
            warnings.push(V1ALPHA1_WARNING.to_owned());
        }
        let Some(obj) = req.object.as_ref() else {
            return bad_object(resp, req, "no object in request");
        };
        if req.kind.version != "v1beta1" {
            // Registered for v1beta1 with matchPolicy Equivalent: the API server
            // converts first. A v1alpha1 request reaching here (another
            // registration) cannot be patched in its own version.
            return with_warnings(resp, warnings);
        }
        let svc = match obj.decode::<DefaultingView>() {
            Ok(s) => InferenceService::from(s),
            Err(e) => {
                // Mutating admission runs before the API server's schema
                // validation: leave a malformed object untouched so the user
                // gets the schema's field error (the validating webhook, run
                // after the schema, denies anything that still does not decode).
                tracing::debug!(uid = %req.uid, error = %e, "object does not decode; not defaulting");
                return with_warnings(resp, warnings);
            }
        };
        self.default_decoded(req, resp, &svc, warnings)
    }

    /// Default a decoded v1beta1 InferenceService and answer with the patch.
    fn default_decoded(
        &self,
        req: &AdmissionRequest<AdmittedObject>,
        resp: AdmissionResponse,
        svc: &InferenceService,
        warnings: Vec<String>,
    ) -> AdmissionResponse {
        let defaulted = self.with_context(req, |ctx| crate::engine::default_service(svc, ctx));
        let patch = match crate::engine::defaulting_patch_json(svc, &defaulted) {
            Ok(p) => p,
            Err(e) => {
                return deny(
                    resp,
                    500,
                    "InternalError",
                    format!("failed to build patch: {e}"),
                    &[],
                    req,
                );
            }
        };
        let resp = if patch.as_slice() == b"[]" {
            resp
        } else {
            match with_patch_json(resp, patch) {
                Ok(r) => r,
                Err(e) => {
                    return deny(
                        AdmissionResponse::from(req),
                        500,
                        "InternalError",
                        e.to_string(),
                        &[],
                        req,
                    );
                }
            }
        };
        with_warnings(resp, warnings)
    }

    /// The validating webhook: every rule of the engine, all errors at once.
    pub fn validate(&self, req: &AdmissionRequest<AdmittedObject>) -> AdmissionResponse {
        let resp = AdmissionResponse::from(req);
        if !matches!(req.operation, Operation::Create | Operation::Update)
            || req.kind.group != GROUP
        {
            return resp;
        }
        let Some(obj) = req.object.as_ref() else {
            return bad_object(resp, req, "no object in request");
        };
        match req.kind.kind.as_str() {
            "InferenceService" => {
                let mut warnings = Vec::new();
                if deprecated_version(req) {
                    warnings.push(V1ALPHA1_WARNING.to_owned());
                }
                let svc = match decode_service(obj, &req.kind.version) {
                    Ok(s) => s,
                    Err(e) => return with_warnings(bad_object(resp, req, &e), warnings),
                };
                let old = match (&req.operation, req.old_object.as_ref()) {
                    (Operation::Update, Some(o)) => match decode_service(o, &req.kind.version) {
                        Ok(s) => Some(s),
                        Err(e) => return with_warnings(bad_object(resp, req, &e), warnings),
                    },
                    _ => None,
                };
                self.validate_decoded(req, resp, &svc, old.as_ref(), warnings)
            }
            "ClusterInferencePolicy" => match obj.decode::<ClusterInferencePolicy>() {
                Ok(p) => verdict_response(
                    req,
                    resp,
                    &crate::engine::validate_cluster_policy(&p),
                    Vec::new(),
                ),
                Err(e) => bad_object(resp, req, &e.to_string()),
            },
            "InferencePolicy" => match obj.decode::<InferencePolicy>() {
                Ok(p) => {
                    let verdict = self.with_context(req, |ctx| {
                        crate::engine::validate_namespaced_policy(&p, ctx)
                    });
                    verdict_response(req, resp, &verdict, Vec::new())
                }
                Err(e) => bad_object(resp, req, &e.to_string()),
            },
            _ => resp,
        }
    }

    /// Validate a decoded v1beta1 InferenceService (and the stored one, on
    /// UPDATE) and answer.
    fn validate_decoded(
        &self,
        req: &AdmissionRequest<AdmittedObject>,
        resp: AdmissionResponse,
        svc: &InferenceService,
        old: Option<&InferenceService>,
        warnings: Vec<String>,
    ) -> AdmissionResponse {
        let verdict = self.with_context(req, |ctx| crate::engine::validate_service(svc, old, ctx));
        verdict_response(req, resp, &verdict, warnings)
    }

    /// Run `f` with the engine's view of the request's namespace, the
    /// policies and the routes, all from the watch caches.
    fn with_context<T>(
        &self,
        req: &AdmissionRequest<AdmittedObject>,
        f: impl FnOnce(&Context<'_>) -> T,
    ) -> T {
        let namespace = namespace_of(req);
        let source = context::Watched {
            state: &self.state,
            server: &self.server,
            reconciling: None,
        };
        crate::state::with_context(&source, &namespace, f)
    }
}

/// Allow with the verdict's warnings, or deny with its field errors.
fn verdict_response(
    req: &AdmissionRequest<AdmittedObject>,
    resp: AdmissionResponse,
    verdict: &Verdict,
    mut warnings: Vec<String>,
) -> AdmissionResponse {
    warnings.extend(verdict.warnings.iter().cloned());
    if verdict.allowed() {
        with_warnings(resp, warnings)
    } else {
        with_warnings(
            deny(
                resp,
                403,
                "Forbidden",
                verdict.message(),
                &verdict.errors,
                req,
            ),
            warnings,
        )
    }
}

impl Answer {
    /// The AdmissionReview in Kubernetes' wire format. kube-core's
    /// `AdmissionResponse` serializes `patch` as an array of numbers; the API
    /// server documents (and every client expects) base64, which is also a
    /// quarter of the size.
    pub fn to_json(&self) -> Result<Vec<u8>, serde_json::Error> {
        review_json(&self.response)
    }

    /// The same review as kube-core's typed value.
    #[must_use]
    pub fn into_review(self) -> AdmissionReview<DynamicObject> {
        self.response.into_review()
    }
}

/// Serialize `resp` as an `admission.k8s.io/v1` AdmissionReview with a
/// base64 `patch`. The envelope is fixed text and each field is written
/// with serde_json; the patch is base64-encoded (SIMD where the CPU has
/// it) straight into the output, as base64 never needs JSON escaping, so
/// the largest part of a mutating response is neither copied nor scanned
/// again.
pub fn review_json(resp: &AdmissionResponse) -> Result<Vec<u8>, serde_json::Error> {
    let b64 = base64_simd::STANDARD;
    let patch_len = resp
        .patch
        .as_ref()
        .map_or(0, |p| b64.encoded_length(p.len()));
    let mut out = Vec::with_capacity(256 + patch_len);
    out.extend_from_slice(
        br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"#,
    );
    serde_json::to_writer(&mut out, &resp.uid)?;
    out.extend_from_slice(if resp.allowed {
        br#","allowed":true"#
    } else {
        br#","allowed":false"#
    });
    if !resp.allowed || resp.result != Status::default() {
        out.extend_from_slice(br#","status":"#);
        serde_json::to_writer(&mut out, &resp.result)?;
    }
    if let Some(patch) = &resp.patch {
        out.extend_from_slice(br#","patch":""#);
        b64.encode_append(patch, &mut out);
        out.extend_from_slice(br#"","patchType":"JSONPatch""#);
    }
    if !resp.audit_annotations.is_empty() {
        out.extend_from_slice(br#","auditAnnotations":"#);
        serde_json::to_writer(&mut out, &resp.audit_annotations)?;
    }
    if let Some(warnings) = resp.warnings.as_ref().filter(|w| !w.is_empty()) {
        out.extend_from_slice(br#","warnings":"#);
        serde_json::to_writer(&mut out, warnings)?;
    }
    out.extend_from_slice(b"}}");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = include_str!("../../tests/fixtures/webhook/mutate-create-minimal.json");

    /// The review as kubectl's client-side apply makes the API server send
    /// it: a last-applied annotation full of escapes, managed fields, the
    /// user and the create options.
    fn kubectl_shaped() -> serde_json::Value {
        let mut review: serde_json::Value = serde_json::from_str(MINIMAL).unwrap();
        let object = review["request"]["object"].clone();
        let meta = &mut review["request"]["object"]["metadata"];
        meta["annotations"] = serde_json::json!({
            "kubectl.kubernetes.io/last-applied-configuration": object.to_string(),
            "note": "tab\there, quote \" and unicode \u{00e9}\u{1F600}",
        });
        meta["managedFields"] = serde_json::json!([{"manager": "kubectl-client-side-apply",
            "operation": "Update", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:annotations": {".": {}}}, "f:spec": {".": {}, "f:model": {}}}}]);
        review["request"]["userInfo"] = serde_json::json!({"username": "alice", "groups": ["system:authenticated"], "extra": {"k": ["v"]}});
        review["request"]["options"] =
            serde_json::json!({"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"});
        review
    }

    /// The one-pass decode takes the common mutating review and reads the
    /// same request and service as the general path.
    #[test]
    fn one_pass_decode_takes_the_common_review_and_agrees_with_the_general_path() {
        let mut with_provenance = kubectl_shaped();
        with_provenance["request"]["object"]["metadata"]["annotations"]
            [crate::api::DEFAULTED_FROM_ANNOTATION] =
            serde_json::json!(r#"{"spec.replicas":"built-in"}"#);
        for review in [
            serde_json::from_str(MINIMAL).unwrap(),
            kubectl_shaped(),
            with_provenance,
        ] {
            let body = serde_json::to_vec(&review).unwrap();
            let (req, svc) = decode_defaulting_review(&body)
                .unwrap_or_else(|| panic!("one-pass decode refused {review}"));
            let general = decode_review(&body).unwrap();
            assert_eq!(req.uid, general.uid);
            assert_eq!(req.kind, general.kind);
            assert_eq!(req.namespace, general.namespace);
            assert_eq!(req.name, general.name);
            let view: DefaultingView = general.object.as_ref().unwrap().decode().unwrap();
            assert_eq!(svc, InferenceService::from(view));
            assert_eq!(
                svc.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(crate::api::DEFAULTED_FROM_ANNOTATION)),
                review["request"]["object"]["metadata"]["annotations"]
                    [crate::api::DEFAULTED_FROM_ANNOTATION]
                    .as_str()
                    .map(str::to_owned)
                    .as_ref()
            );
        }
    }

    /// The validating one-pass decode reads the object, and on UPDATE the
    /// old object, exactly as the general path does; on CREATE an old
    /// object is ignored, as the general path ignores it.
    #[test]
    fn one_pass_validating_decode_agrees_with_the_general_path() {
        let create = kubectl_shaped();
        let mut update = kubectl_shaped();
        update["request"]["operation"] = serde_json::json!("UPDATE");
        update["request"]["oldObject"] = update["request"]["object"].clone();
        update["request"]["oldObject"]["spec"]["replicas"] = serde_json::json!(7);
        let mut create_with_old = kubectl_shaped();
        create_with_old["request"]["oldObject"] = create_with_old["request"]["object"].clone();
        for review in [
            serde_json::from_str(MINIMAL).unwrap(),
            create,
            update,
            create_with_old,
        ] {
            let body = serde_json::to_vec(&review).unwrap();
            let (req, svc, old) = decode_validating_review(&body)
                .unwrap_or_else(|| panic!("one-pass decode refused {review}"));
            let general = decode_review(&body).unwrap();
            assert_eq!(req.uid, general.uid);
            assert_eq!(req.operation, general.operation);
            assert_eq!(req.namespace, general.namespace);
            assert_eq!(
                svc,
                decode_service(general.object.as_ref().unwrap(), "v1beta1").unwrap()
            );
            let general_old = match general.operation {
                Operation::Update => general
                    .old_object
                    .as_ref()
                    .map(|o| decode_service(o, "v1beta1").unwrap()),
                _ => None,
            };
            assert_eq!(old, general_old);
            assert_eq!(
                old.is_some(),
                review["request"]["operation"] == "UPDATE",
                "{review}"
            );
        }
        // What it leaves to the general path.
        let mut policy: serde_json::Value = serde_json::from_str(MINIMAL).unwrap();
        policy["request"]["kind"]["kind"] = serde_json::json!("InferencePolicy");
        let mut no_spec: serde_json::Value = serde_json::from_str(MINIMAL).unwrap();
        no_spec["request"]["object"]
            .as_object_mut()
            .unwrap()
            .remove("spec");
        for review in [policy, no_spec] {
            let body = serde_json::to_vec(&review).unwrap();
            assert!(decode_validating_review(&body).is_none(), "{review}");
        }
    }

    /// Anything else goes to the general path: other operations, versions
    /// and kinds, and bodies that are not a well-formed review.
    #[test]
    fn one_pass_decode_leaves_everything_else_to_the_general_path() {
        let base: serde_json::Value = serde_json::from_str(MINIMAL).unwrap();
        let mut delete = base.clone();
        delete["request"]["operation"] = serde_json::json!("DELETE");
        let mut alpha = base.clone();
        alpha["request"]["kind"]["version"] = serde_json::json!("v1alpha1");
        let mut policy = base.clone();
        policy["request"]["kind"]["kind"] = serde_json::json!("InferencePolicy");
        let mut wrong_type = base.clone();
        wrong_type["kind"] = serde_json::json!("ConversionReview");
        let mut no_spec = base.clone();
        no_spec["request"]["object"]
            .as_object_mut()
            .unwrap()
            .remove("spec");
        for review in [delete, alpha, policy, wrong_type, no_spec] {
            let body = serde_json::to_vec(&review).unwrap();
            assert!(decode_defaulting_review(&body).is_none(), "{review}");
        }
        let body = serde_json::to_vec(&base).unwrap();
        for bad in [&body[..body.len() - 1], b"not json", b"", &[0xff, 0xfe]] {
            assert!(decode_defaulting_review(bad).is_none());
        }
    }

    /// A thread keeps its parse buffers for the next review, but not the
    /// buffers of an unusually large one.
    #[test]
    fn one_pass_decode_keeps_only_typical_buffers() {
        let kept = || SCRATCH.with_borrow(|(input, _)| input.capacity());
        let small = serde_json::to_vec(&kubectl_shaped()).unwrap();
        assert!(decode_defaulting_review(&small).is_some());
        assert!(kept() >= small.len());
        let mut large = kubectl_shaped();
        large["request"]["object"]["metadata"]["annotations"]["note"] =
            serde_json::json!("x".repeat(2 * KEPT_SCRATCH_BYTES));
        let large = serde_json::to_vec(&large).unwrap();
        assert!(decode_defaulting_review(&large).is_some());
        assert!(kept() <= KEPT_SCRATCH_BYTES, "kept {} bytes", kept());
    }
}
