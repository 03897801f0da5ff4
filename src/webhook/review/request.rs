//! One admission request, typed: [`Review`], its objects decoded by kind
//! ([`Object`]), and the `apiVersion` and `kind` of the reviews this
//! webhook answers.

use std::borrow::Cow;

use k8s_openapi::api::authentication::v1::UserInfo;
use kube::core::admission::Operation;
use serde::Deserialize;

use crate::api::v1beta1::InferenceService;
use crate::api::{ClusterInferencePolicy, GROUP, InferencePolicy, v1alpha1};
use crate::webhook::confine::Child;

/// The `apiVersion` of the reviews this webhook answers.
pub const API_VERSION: &str = "admission.k8s.io/v1";
/// The `kind` of the reviews this webhook answers.
pub const KIND: &str = "AdmissionReview";

/// A name a review's envelope carries (its `apiVersion` and `kind`, a
/// group, version, kind or resource): borrowed for the names of
/// infergate's own reviews, owned for any other. A review names its kind
/// and resource twice (`kind`, `requestKind`): fourteen strings that were
/// as many allocations on every request.
pub type Name = Cow<'static, str>;

/// The names [`name`] borrows instead of allocating.
const KNOWN_NAMES: &[&str] = &[
    API_VERSION,
    KIND,
    GROUP,
    "",
    "v1beta1",
    "v1alpha1",
    "InferenceService",
    "inferenceservices",
    "ClusterInferencePolicy",
    "clusterinferencepolicies",
    "InferencePolicy",
    "inferencepolicies",
];

/// `v` as one of [`KNOWN_NAMES`], if it is one.
fn known(v: &str) -> Option<&'static str> {
    KNOWN_NAMES.iter().copied().find(|k| *k == v)
}

/// Read a [`Name`]: one of [`KNOWN_NAMES`] borrowed, any other owned.
pub(super) fn name<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Name, D::Error> {
    struct Visitor;
    impl serde::de::Visitor<'_> for Visitor {
        type Value = Name;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a string")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Name, E> {
            Ok(known(v).map_or_else(|| Cow::Owned(v.to_owned()), Cow::Borrowed))
        }
        fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Name, E> {
            Ok(known(&v).map_or(Cow::Owned(v), Cow::Borrowed))
        }
    }
    d.deserialize_str(Visitor)
}

/// The group, version and kind of a review's object (as kube-core's
/// `GroupVersionKind`, each name a [`Name`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct ObjectKind {
    /// API group (empty for the core group).
    #[serde(deserialize_with = "name")]
    pub group: Name,
    /// Version.
    #[serde(deserialize_with = "name")]
    pub version: Name,
    /// Kind.
    #[serde(deserialize_with = "name")]
    pub kind: Name,
}

impl ObjectKind {
    /// The kind `kind` of `group`/`version`.
    #[must_use]
    pub fn new(group: &str, version: &str, kind: &str) -> Self {
        let owned = |s: &str| Cow::Owned(s.to_owned());
        Self {
            group: owned(group),
            version: owned(version),
            kind: owned(kind),
        }
    }
}

/// The group, version and resource a review addresses (as kube-core's
/// `GroupVersionResource`, each name a [`Name`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct ObjectResource {
    /// API group (empty for the core group).
    #[serde(deserialize_with = "name")]
    pub group: Name,
    /// Version.
    #[serde(deserialize_with = "name")]
    pub version: Name,
    /// Resource (plural, lowercase).
    #[serde(deserialize_with = "name")]
    pub resource: Name,
}

/// One admission request, typed: the request's fields (as kube-core names
/// them, less `options`) and its objects decoded by kind.
#[derive(Clone, Debug, PartialEq)]
pub struct Review {
    /// Echoed in the response.
    pub uid: String,
    /// The kind of the object, in the version the webhook is called with.
    pub kind: ObjectKind,
    /// The resource being admitted.
    pub resource: ObjectResource,
    /// The subresource, if any.
    pub sub_resource: Option<String>,
    /// The kind the user sent, when the API server converted it (`matchPolicy: Equivalent`).
    pub request_kind: Option<ObjectKind>,
    /// The resource the user addressed, when the API server converted it.
    pub request_resource: Option<ObjectResource>,
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
