//! What the child watches keep of each kind: the metadata the reconciler
//! reads and, for the kinds whose state it reports (a Deployment's
//! replicas, a route's, pool's or RayService's status), that state, so a
//! reconcile reads a child's status from the cache instead of asking the
//! API server; and the part of that state a change of which is worth a
//! reconcile ([`WatchedChild::signal`]).

use std::borrow::Cow;
use std::fmt::Debug;
use std::marker::PhantomData;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};

use crate::reconcile::children::httproute::{HTTPRoute, HTTPRouteStatus};
use crate::reconcile::children::inferencepool::{InferencePool, InferencePoolStatus};
use crate::reconcile::children::lws::LeaderWorkerSet;
use crate::reconcile::children::rayservice::{RayService, RayServiceStatus};
use crate::reconcile::children::{
    ANNOTATION_APPLIED, ANNOTATION_LENT, ANNOTATION_ROLL_PLAN, ANNOTATION_TEMPLATE,
};
use crate::state::kept::kept_metadata;

/// An object of a child kind as its watch keeps it.
pub trait WatchedChild:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Debug
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// What the reconciler reads of the child beyond its metadata.
    type Signal: PartialEq;
    /// The state a change of which changes what a reconcile would do or
    /// report.
    fn signal(&self) -> Self::Signal;
    /// Drop what the reconciler does not read (after decoding).
    fn trim(&mut self);
}

/// A child of a kind whose state the reconciler does not read: its
/// metadata only.
#[derive(Debug, Deserialize)]
#[serde(bound = "")]
pub struct WatchedMeta<K> {
    /// What the reconciler reads of the metadata (see
    /// [`keep_what_the_reconciler_reads`]).
    #[serde(default, deserialize_with = "kept_metadata")]
    pub metadata: ObjectMeta,
    #[serde(skip)]
    kind: PhantomData<fn() -> K>,
}

impl<K> Clone for WatchedMeta<K> {
    fn clone(&self) -> Self {
        Self::new(self.metadata.clone())
    }
}

impl<K> WatchedMeta<K> {
    /// A cached child with this metadata.
    #[must_use]
    pub fn new(metadata: ObjectMeta) -> Self {
        Self {
            metadata,
            kind: PhantomData,
        }
    }
}

impl<K: Resource<DynamicType = (), Scope = NamespaceResourceScope>> Resource for WatchedMeta<K> {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl<K> WatchedChild for WatchedMeta<K>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope> + Debug + Send + Sync + 'static,
{
    type Signal = ();
    fn signal(&self) {}
    fn trim(&mut self) {}
}

/// A Deployment as its watch keeps it: metadata, `spec.replicas` and the
/// replica counts of its status.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct WatchedDeployment {
    /// What the reconciler reads of the metadata (see
    /// [`keep_what_the_reconciler_reads`]).
    #[serde(default, deserialize_with = "kept_metadata")]
    pub metadata: ObjectMeta,
    /// `spec.replicas` (after the HPA, when it manages the Deployment).
    #[serde(default)]
    pub spec: Option<DeploymentSpecKept>,
    /// The replica counts the deployment controller reports.
    #[serde(default)]
    pub status: Option<DeploymentCounts>,
}

/// `spec.replicas` of a Deployment (its template is known by the digest
/// infergate records, [`ANNOTATION_TEMPLATE`], kept with the metadata).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct DeploymentSpecKept {
    /// Desired pods; Kubernetes' default is 1.
    #[serde(default)]
    pub replicas: Option<i32>,
}

/// The counts of a Deployment's status the reconciler reads.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentCounts {
    /// The generation the deployment controller last acted on.
    #[serde(default)]
    pub observed_generation: Option<i64>,
    /// Pods of the current template and of older ones.
    #[serde(default)]
    pub replicas: Option<i32>,
    /// Pods of the current template.
    #[serde(default)]
    pub updated_replicas: Option<i32>,
    /// Ready pods.
    #[serde(default)]
    pub ready_replicas: Option<i32>,
}

impl WatchedDeployment {
    /// What the watch would keep of `d`.
    #[must_use]
    pub fn of(d: &Deployment) -> Self {
        let mut metadata = d.metadata.clone();
        keep_what_the_reconciler_reads(&mut metadata);
        Self {
            metadata,
            spec: d.spec.as_ref().map(|s| DeploymentSpecKept {
                replicas: s.replicas,
            }),
            status: d.status.as_ref().map(|s| DeploymentCounts {
                observed_generation: s.observed_generation,
                replicas: s.replicas,
                updated_replicas: s.updated_replicas,
                ready_replicas: s.ready_replicas,
            }),
        }
    }

    /// Whether the Deployment runs `want`'s whole pod template (model
    /// image, env and placement included): it carries that template's
    /// digest, so the cache has seen the write of it, and the deployment
    /// controller has seen that generation, so its counts are of it.
    #[must_use]
    pub fn runs(&self, want: &Deployment) -> bool {
        self.runs_template_of(&want.metadata)
    }

    /// [`Self::runs`] for the workload whose metadata (with the template
    /// digest infergate records) is `want`: a Deployment's or a
    /// LeaderWorkerSet's.
    #[must_use]
    pub fn runs_template_of(&self, want: &ObjectMeta) -> bool {
        let digest = |m: &ObjectMeta| m.annotations.as_ref()?.get(ANNOTATION_TEMPLATE).cloned();
        let ours = digest(&self.metadata);
        ours.is_some() && ours == digest(want) && self.observed()
    }

    /// Desired replicas: `spec.replicas`, or Kubernetes' default of one.
    #[must_use]
    pub fn desired(&self) -> i32 {
        self.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
    }

    fn count(&self, of: impl Fn(&DeploymentCounts) -> Option<i32>) -> i32 {
        self.status.as_ref().and_then(of).unwrap_or(0)
    }

    /// `status.readyReplicas`.
    #[must_use]
    pub fn ready(&self) -> i32 {
        self.count(|c| c.ready_replicas)
    }

    /// `status.updatedReplicas`.
    #[must_use]
    pub fn updated(&self) -> i32 {
        self.count(|c| c.updated_replicas)
    }

    /// `status.replicas`.
    #[must_use]
    pub fn total(&self) -> i32 {
        self.count(|c| c.replicas)
    }

    /// The deployment controller has seen the current spec.
    #[must_use]
    pub fn observed(&self) -> bool {
        match (
            self.status.as_ref().and_then(|c| c.observed_generation),
            self.metadata.generation,
        ) {
            (Some(seen), Some(current)) => seen >= current,
            (_, None) => true,
            (None, Some(_)) => false,
        }
    }

    /// Every wanted replica is ready and runs the current template, and no
    /// pod of an older template is left.
    #[must_use]
    pub fn complete(&self) -> bool {
        replicas_complete(
            self.observed(),
            self.desired(),
            self.ready(),
            self.updated(),
            self.total(),
        )
    }
}

/// Every wanted replica is ready and runs the current template (which the
/// deployment controller has seen), and no pod of an older template is
/// left (while one is, the ready replicas may be old ones).
#[must_use]
pub fn replicas_complete(
    observed: bool,
    desired: i32,
    ready: i32,
    updated: i32,
    total: i32,
) -> bool {
    observed && ready >= desired && updated >= desired && total <= updated
}

impl Resource for WatchedDeployment {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        Deployment::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        Deployment::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        Deployment::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        Deployment::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl WatchedChild for WatchedDeployment {
    /// Desired and ready replicas, and whether they are complete:
    /// the deployment controller's bookkeeping on the way (the generation
    /// it saw, pods made but not ready) changes nothing the reconciler
    /// decides or reports.
    type Signal = (i32, i32, bool);
    fn signal(&self) -> Self::Signal {
        (self.desired(), self.ready(), self.complete())
    }
    fn trim(&mut self) {}
}

/// A LeaderWorkerSet as its watch keeps it: what a Deployment's keeps,
/// read the same way (its status has the same counts, of groups:
/// `observedGeneration`, `replicas`, `updatedReplicas`, `readyReplicas`;
/// a group is ready when all its pods are).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(transparent)]
pub struct WatchedLeaderWorkerSet(pub WatchedDeployment);

impl std::ops::Deref for WatchedLeaderWorkerSet {
    type Target = WatchedDeployment;
    fn deref(&self) -> &WatchedDeployment {
        &self.0
    }
}

impl Resource for WatchedLeaderWorkerSet {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        LeaderWorkerSet::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        LeaderWorkerSet::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        LeaderWorkerSet::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        LeaderWorkerSet::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.0.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

impl WatchedChild for WatchedLeaderWorkerSet {
    /// As a Deployment's, of groups.
    type Signal = (i32, i32, bool);
    fn signal(&self) -> Self::Signal {
        self.0.signal()
    }
    fn trim(&mut self) {}
}

/// Kinds kept whole but for their spec (what infergate applied, and the
/// digest annotation says it): their status is small and read.
macro_rules! kept_with_status {
    ($($kind:ty: $status:ty;)*) => {
        $(
            impl WatchedChild for $kind {
                type Signal = Option<$status>;
                fn signal(&self) -> Self::Signal {
                    self.status.clone()
                }
                fn trim(&mut self) {
                    self.spec = Default::default();
                    keep_what_the_reconciler_reads(&mut self.metadata);
                }
            }
        )*
    };
}

kept_with_status! {
    HTTPRoute: HTTPRouteStatus;
    InferencePool: InferencePoolStatus;
    RayService: RayServiceStatus;
}

/// What the watch keeps of an object the API server returned (an apply's
/// answer): decoded again as the watch decodes it.
pub fn watched_of<K: serde::Serialize, W: WatchedChild>(obj: &K) -> Result<W, serde_json::Error> {
    let mut w: W = serde_json::from_value(serde_json::to_value(obj)?)?;
    w.meta_mut().managed_fields = None;
    w.trim();
    Ok(w)
}

/// Trim a cached child's metadata to what the reconciler reads of it: its
/// name and namespace (the cache's key), uid, resourceVersion and
/// generation (whether it changed since infergate applied it), owner
/// references (whose it is; the controller's trigger), deletion timestamp,
/// and [`ANNOTATION_APPLIED`], [`ANNOTATION_TEMPLATE`] and
/// [`ANNOTATION_ROLL_PLAN`] and [`ANNOTATION_LENT`] (what infergate
/// applied). Labels (the watch
/// selects on them on the server), other annotations, finalizers and the
/// managed fields (most of an applied object's metadata) are dropped: at a
/// few kilobytes per child they were most of the reconciler's memory. The
/// watch keeps what infergate's own entry of the managed fields holds
/// apart, as path hashes ([`crate::reconcile::watch::owned`]).
pub fn keep_what_the_reconciler_reads(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    meta.labels = None;
    meta.finalizers = None;
    meta.creation_timestamp = None;
    meta.generate_name = None;
    meta.self_link = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.retain(|k, _| kept_annotation(k));
        if annotations.is_empty() {
            meta.annotations = None;
        }
    }
}

kept_metadata! {
    /// A child's metadata decoded as far as [`keep_what_the_reconciler_reads`]
    /// keeps it, with infergate's own entry of the managed fields (the
    /// watch's feed turns it into path hashes and drops it); the rest (the
    /// others' managed fields above all) is skipped as it is read.
    fn kept_metadata {
        generation: Option<i64>,
        owner_references: Option<Vec<OwnerReference>>,
        #[serde(default, deserialize_with = "applied_annotation")]
        annotations: Option<std::collections::BTreeMap<String, String>>,
        #[serde(default, deserialize_with = "crate::reconcile::watch::owned::our_entry")]
        managed_fields: Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry>>,
    }
}

/// Whether the watch keeps the annotation `key`: [`ANNOTATION_APPLIED`],
/// [`ANNOTATION_TEMPLATE`], [`ANNOTATION_ROLL_PLAN`] and [`ANNOTATION_LENT`].
fn kept_annotation(key: &str) -> bool {
    [
        ANNOTATION_APPLIED,
        ANNOTATION_TEMPLATE,
        ANNOTATION_ROLL_PLAN,
        ANNOTATION_LENT,
    ]
    .contains(&key)
}

/// Of the annotations, those [`kept_annotation`] names only.
fn applied_annotation<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<std::collections::BTreeMap<String, String>>, D::Error> {
    let all: Option<std::collections::BTreeMap<String, String>> = Option::deserialize(d)?;
    Ok(all
        .map(|mut a| {
            a.retain(|k, _| kept_annotation(k));
            a
        })
        .filter(|a| !a.is_empty()))
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    /// A Deployment as the API server sends it, with everything the watch
    /// does not keep.
    fn deployment_json(generation: i64, status: Value) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {
                "name": "chat", "namespace": "team", "uid": "u-1", "resourceVersion": "42",
                "generation": generation, "creationTimestamp": "2026-11-25T10:00:00Z",
                "labels": {"app.kubernetes.io/managed-by": "infergate"},
                "annotations": {ANNOTATION_APPLIED: "d1", "deployment.kubernetes.io/revision": "2"},
                "finalizers": ["x/y"],
                "ownerReferences": [{"apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
                                     "name": "chat", "uid": "svc-uid", "controller": true}],
                "managedFields": [{"manager": "infergate", "operation": "Apply",
                                   "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}},
                                  {"manager": "kube-controller-manager", "operation": "Update",
                                   "subresource": "status", "fieldsType": "FieldsV1",
                                   "fieldsV1": {"f:status": {"f:replicas": {}}}}]
            },
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "chat"}},
                "template": {"metadata": {"labels": {"app": "chat"}},
                             "spec": {"containers": [{"name": "engine", "image": "vllm"}]}}
            },
            "status": status
        })
    }

    fn kept_metadata_json() -> Value {
        json!({
            "name": "chat", "namespace": "team", "uid": "u-1", "resourceVersion": "42",
            "generation": 3,
            "annotations": {ANNOTATION_APPLIED: "d1"},
            "ownerReferences": [{"apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
                                 "name": "chat", "uid": "svc-uid", "controller": true}]
        })
    }

    #[test]
    fn a_watched_deployment_keeps_its_metadata_replicas_and_counts_only() {
        let full = deployment_json(
            3,
            json!({"observedGeneration": 3, "replicas": 2, "updatedReplicas": 2,
                   "readyReplicas": 1, "availableReplicas": 1,
                   "conditions": [{"type": "Available", "status": "False"}]}),
        );
        let mut w: WatchedDeployment = serde_json::from_value(full.clone()).expect("decodes");
        // Infergate's own entry of the managed fields, and no other, until
        // the watch's feed takes it.
        let entries = w.metadata.managed_fields.as_deref().unwrap_or_default();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].manager.as_deref(), Some("infergate"));
        let owned = crate::reconcile::watch::owned::Owned::take(&mut w.metadata);
        assert!(!owned.is_empty());
        let metadata: ObjectMeta = serde_json::from_value(kept_metadata_json()).expect("meta");
        assert_eq!(
            w,
            WatchedDeployment {
                metadata,
                spec: Some(DeploymentSpecKept { replicas: Some(2) }),
                status: Some(DeploymentCounts {
                    observed_generation: Some(3),
                    replicas: Some(2),
                    updated_replicas: Some(2),
                    ready_replicas: Some(1),
                }),
            }
        );
        // An apply's answer becomes the same as the watch's decode.
        let d: Deployment = serde_json::from_value(full).expect("deployment");
        assert_eq!(WatchedDeployment::of(&d), w);
        assert_eq!(watched_of::<_, WatchedDeployment>(&d).expect("watched"), w);
        assert_eq!(
            (w.desired(), w.ready(), w.updated(), w.total()),
            (2, 1, 2, 2)
        );
        assert!(w.observed() && !w.complete());
    }

    #[test]
    fn a_track_runs_a_template_only_once_its_digest_is_seen_and_observed() {
        let with_template = |generation: i64, observed: i64, digest: Option<&str>| {
            let mut full = deployment_json(generation, json!({"observedGeneration": observed}));
            if let Some(d) = digest {
                full["metadata"]["annotations"][ANNOTATION_TEMPLATE] = json!(d);
            }
            let mut w: WatchedDeployment = serde_json::from_value(full.clone()).expect("decodes");
            w.metadata.managed_fields = None;
            let d: Deployment = serde_json::from_value(full).expect("deployment");
            (w, d)
        };
        let (w, want) = with_template(2, 2, Some("t-2"));
        assert!(w.runs(&want), "the same template, observed");
        // The digest is kept, as the watch decodes it and as an apply answers.
        assert_eq!(WatchedDeployment::of(&want), w);
        // Another template (a model image alone changes the digest).
        let (_, other) = with_template(2, 2, Some("t-3"));
        assert!(!w.runs(&other));
        // The cache has the template, the deployment controller not yet.
        let (w, want) = with_template(3, 2, Some("t-2"));
        assert!(!w.runs(&want), "generation 3 not observed");
        // A Deployment without the digest runs nothing known.
        let (w, want) = with_template(1, 1, None);
        assert!(!w.runs(&want));
    }

    #[test]
    fn a_deployment_signals_readiness_not_the_controllers_bookkeeping() {
        let watched = |generation, status| -> WatchedDeployment {
            serde_json::from_value(deployment_json(generation, status)).expect("decodes")
        };
        // Just created: no status yet.
        let created = watched(1, Value::Null);
        assert_eq!(created.signal(), (2, 0, false));
        assert!(!created.observed());
        // The controller has seen it and made the pods: nothing new.
        let seen = watched(
            1,
            json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2,
                   "unavailableReplicas": 2}),
        );
        assert_eq!(seen.signal(), created.signal());
        // A pod is ready: news.
        let one = watched(
            1,
            json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 1}),
        );
        assert_ne!(one.signal(), seen.signal());
        // Both ready: complete.
        let all = watched(
            1,
            json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 2}),
        );
        assert_eq!(all.signal(), (2, 2, true));
        // Ready pods of an older template left: not complete.
        let old_left = watched(
            1,
            json!({"observedGeneration": 1, "replicas": 3, "updatedReplicas": 2, "readyReplicas": 2}),
        );
        assert_eq!(old_left.signal(), (2, 2, false));
    }

    #[test]
    fn metadata_only_kinds_keep_what_the_reconciler_reads() {
        use k8s_openapi::api::core::v1::Service;
        let mut w: WatchedMeta<Service> = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": deployment_json(3, Value::Null)["metadata"].clone(),
            "spec": {"ports": [{"port": 80}]}
        }))
        .expect("decodes");
        w.metadata.managed_fields = None;
        assert_eq!(
            serde_json::to_value(&w.metadata).expect("json"),
            kept_metadata_json()
        );
        assert_eq!(WatchedMeta::<Service>::kind(&()), "Service");
        assert_eq!(WatchedMeta::<Service>::plural(&()), "services");
        // A child without the annotation keeps no empty map.
        let bare: WatchedMeta<Service> =
            serde_json::from_value(json!({"metadata": {"name": "x", "annotations": {"a": "b"}}}))
                .expect("decodes");
        assert_eq!(bare.metadata.annotations, None);
    }

    #[test]
    fn trimming_metadata_keeps_what_the_reconciler_reads() {
        let mut meta: ObjectMeta =
            serde_json::from_value(deployment_json(3, Value::Null)["metadata"].clone())
                .expect("metadata");
        meta.deletion_timestamp = serde_json::from_value(json!("2026-11-25T11:00:00Z")).ok();
        keep_what_the_reconciler_reads(&mut meta);
        let mut want = kept_metadata_json();
        want["deletionTimestamp"] = json!("2026-11-25T11:00:00Z");
        assert_eq!(serde_json::to_value(&meta).expect("json"), want);
    }

    #[test]
    fn a_route_is_kept_without_its_spec_and_signals_its_status() {
        let route = |accepted: &str| -> HTTPRoute {
            let mut r: HTTPRoute = serde_json::from_value(json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                "metadata": deployment_json(1, Value::Null)["metadata"].clone(),
                "spec": {"parentRefs": [{"name": "gw"}], "rules": [{"backendRefs": [{"name": "chat", "port": 8000}]}]},
                "status": {"parents": [{"parentRef": {"name": "gw"}, "controllerName": "example.com/gw",
                             "conditions": [{"type": "Accepted", "status": accepted, "reason": "R",
                                             "message": "m", "lastTransitionTime": "2026-11-25T10:00:00Z"}]}]}
            }))
            .expect("route");
            r.trim();
            r
        };
        let accepted = route("True");
        assert_eq!(accepted.spec, Default::default());
        assert!(accepted.metadata.managed_fields.is_none() && accepted.metadata.labels.is_none());
        assert_eq!(accepted.status.as_ref().map(|s| s.parents.len()), Some(1));
        assert_ne!(accepted.signal(), route("False").signal());
        assert_eq!(accepted.signal(), route("True").signal());
    }
}
