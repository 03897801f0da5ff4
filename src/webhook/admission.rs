//! `POST /mutate` and `POST /validate`: admission.k8s.io/v1 AdmissionReview
//! for InferenceService and both policy kinds.
//!
//! The review is decoded into kube-core's [`AdmissionRequest`] over
//! [`AdmittedObject`] (the object kept as JSON, decoded into the typed kind
//! once the request's kind is known) and answered with kube-core's
//! [`AdmissionResponse`]. Everything here is synchronous and makes no API
//! call: policies, namespace labels and routes come from the [`PolicyCache`].

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
use crate::webhook::cache::PolicyCache;

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

/// The parts of an object defaulting may change.
#[derive(Deserialize)]
struct MutableView {
    #[serde(default)]
    metadata: MetaView,
    #[serde(default)]
    spec: Option<serde_json::Value>,
}

#[derive(Deserialize, Default)]
struct MetaView {
    #[serde(default)]
    annotations: Option<serde_json::Value>,
    #[serde(default)]
    namespace: Option<String>,
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
struct ReviewIn {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    request: Option<AdmissionRequest<AdmittedObject>>,
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
    let review: ReviewIn =
        serde_json::from_slice(body).map_err(|e| BadReview::Decode(e.to_string()))?;
    if review.api_version != "admission.k8s.io/v1" || review.kind != "AdmissionReview" {
        return Err(BadReview::WrongType {
            api_version: review.api_version,
            kind: review.kind,
        });
    }
    let mut request = review.request.ok_or(BadReview::NoRequest)?;
    request.types = TypeMeta {
        api_version: review.api_version,
        kind: review.kind,
    };
    Ok(request)
}

/// What the admission handlers need.
#[derive(Debug)]
pub struct Admission {
    /// Policies, namespaces, routes.
    pub cache: std::sync::Arc<PolicyCache>,
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
                .and_then(|o| o.decode::<MutableView>().ok())
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
        obj.decode().map_err(|e| e.to_string())
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
        let req = decode_review(body)?;
        let resp = match webhook {
            Webhook::Mutate => self.mutate(&req),
            Webhook::Validate => self.validate(&req),
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
        if !matches!(req.operation, Operation::Create | Operation::Update)
            || req.kind.group != GROUP
            || req.kind.kind != "InferenceService"
        {
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
        let svc = match decode_service(obj, &req.kind.version) {
            Ok(s) => s,
            Err(e) => {
                // Mutating admission runs before the API server's schema
                // validation: leave a malformed object untouched so the user
                // gets the schema's field error (the validating webhook, run
                // after the schema, denies anything that still does not decode).
                tracing::debug!(uid = %req.uid, error = %e, "object does not decode; not defaulting");
                return with_warnings(resp, warnings);
            }
        };
        let namespace = namespace_of(req);
        let labels = self.cache.namespace_labels(&namespace);
        let policies = self.cache.policies();
        let routes = self.cache.routes();
        let ctx = Context {
            namespace: &namespace,
            namespace_labels: &labels,
            policies: &policies,
            server: &self.server,
            routes: &*routes,
        };
        let defaulted = crate::engine::default_service(&svc, &ctx);
        let patch = match obj
            .decode::<MutableView>()
            .and_then(|view| service_patch(view.spec, view.metadata.annotations, &defaulted.object))
        {
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
        let resp = if patch.0.is_empty() {
            resp
        } else {
            match resp.with_patch(patch) {
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
        let namespace = namespace_of(req);
        let labels = self.cache.namespace_labels(&namespace);
        let policies = self.cache.policies();
        let routes = self.cache.routes();
        let ctx = Context {
            namespace: &namespace,
            namespace_labels: &labels,
            policies: &policies,
            server: &self.server,
            routes: &*routes,
        };
        let mut warnings = Vec::new();
        let verdict: Verdict = match req.kind.kind.as_str() {
            "InferenceService" => {
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
                crate::engine::validate_service(&svc, old.as_ref(), &ctx)
            }
            "ClusterInferencePolicy" => match obj.decode::<ClusterInferencePolicy>() {
                Ok(p) => crate::engine::validate_cluster_policy(&p),
                Err(e) => return bad_object(resp, req, &e.to_string()),
            },
            "InferencePolicy" => match obj.decode::<InferencePolicy>() {
                Ok(p) => crate::engine::validate_namespaced_policy(&p, &ctx),
                Err(e) => return bad_object(resp, req, &e.to_string()),
            },
            _ => return resp,
        };
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

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireReview<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: WireResponse<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireResponse<'a> {
    uid: &'a str,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<&'a Status>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "std::collections::HashMap::is_empty")]
    audit_annotations: &'a std::collections::HashMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    warnings: Option<&'a Vec<String>>,
}

/// Serialize `resp` as an `admission.k8s.io/v1` AdmissionReview with a
/// base64 `patch`.
pub fn review_json(resp: &AdmissionResponse) -> Result<Vec<u8>, serde_json::Error> {
    use base64::Engine as _;
    let patch = resp
        .patch
        .as_ref()
        .map(|p| base64::engine::general_purpose::STANDARD.encode(p));
    let status = (!resp.allowed || resp.result != Status::default()).then_some(&resp.result);
    serde_json::to_vec(&WireReview {
        api_version: "admission.k8s.io/v1",
        kind: "AdmissionReview",
        response: WireResponse {
            uid: &resp.uid,
            allowed: resp.allowed,
            status,
            patch_type: patch.as_ref().map(|_| "JSONPatch"),
            patch,
            audit_annotations: &resp.audit_annotations,
            warnings: resp.warnings.as_ref().filter(|w| !w.is_empty()),
        },
    })
}

/// JSONPatch from the object as received (its `spec` and
/// `metadata.annotations`) to the defaulted object. Only those two subtrees
/// may change (defaulting touches nothing else), so only they are decoded
/// and compared: the rest of the object (managed fields, status) is never
/// copied, compared or touched by the patch.
pub fn service_patch(
    spec: Option<serde_json::Value>,
    annotations: Option<serde_json::Value>,
    defaulted: &InferenceService,
) -> Result<json_patch::Patch, serde_json::Error> {
    use serde_json::{Map, Value};
    fn view(spec: Option<Value>, annotations: Option<Value>) -> Value {
        let mut metadata = Map::new();
        if let Some(a) = annotations.filter(|a| !a.is_null()) {
            metadata.insert("annotations".to_owned(), a);
        }
        let mut root = Map::new();
        root.insert("metadata".to_owned(), Value::Object(metadata));
        if let Some(s) = spec {
            root.insert("spec".to_owned(), s);
        }
        Value::Object(root)
    }
    let before = view(spec, annotations);
    let after = view(
        Some(serde_json::to_value(&defaulted.spec)?),
        Some(serde_json::to_value(&defaulted.metadata.annotations)?),
    );
    Ok(crate::engine::diff_patch(&before, &after))
}
