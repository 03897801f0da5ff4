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
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::Resource;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};

use super::children::ANNOTATION_APPLIED;
use super::children::httproute::{HTTPRoute, HTTPRouteStatus};
use super::children::inferencepool::{InferencePool, InferencePoolStatus};
use super::children::rayservice::{RayService, RayServiceStatus};

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

/// `spec.replicas` of a Deployment, and a fingerprint of the engine its
/// template runs.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct DeploymentSpecKept {
    /// Desired pods; Kubernetes' default is 1.
    #[serde(default)]
    pub replicas: Option<i32>,
    /// [`engine_fingerprint`] of the template's first container (the
    /// engine): whether a track runs a rollout's version, without keeping
    /// the template. `None` for a template without containers.
    #[serde(default, rename = "template", deserialize_with = "template_engine")]
    pub engine: Option<u64>,
}

/// A fingerprint of an engine container: its image and arguments. Equal
/// for equal containers within one process (the hash's keys are fixed),
/// and 8 bytes however long the arguments are.
#[must_use]
pub fn engine_fingerprint(image: Option<&str>, args: Option<&[String]>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    image.hash(&mut h);
    args.hash(&mut h);
    h.finish()
}

/// [`engine_fingerprint`] of a Deployment's first container.
#[must_use]
pub fn engine_of(d: &Deployment) -> Option<u64> {
    let c = d
        .spec
        .as_ref()?
        .template
        .spec
        .as_ref()?
        .containers
        .first()?;
    Some(engine_fingerprint(c.image.as_deref(), c.args.as_deref()))
}

/// `spec.template` decoded as far as its first container's image and
/// arguments, into their fingerprint.
fn template_engine<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    struct Template {
        spec: Option<PodSpec>,
    }
    #[derive(Deserialize)]
    struct PodSpec {
        #[serde(default)]
        containers: Vec<Container>,
    }
    #[derive(Deserialize)]
    struct Container {
        image: Option<String>,
        args: Option<Vec<String>>,
    }
    let t: Option<Template> = Option::deserialize(d)?;
    Ok(t.and_then(|t| t.spec)
        .and_then(|s| s.containers.into_iter().next())
        .map(|c| engine_fingerprint(c.image.as_deref(), c.args.as_deref())))
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
                engine: engine_of(d),
            }),
            status: d.status.as_ref().map(|s| DeploymentCounts {
                observed_generation: s.observed_generation,
                replicas: s.replicas,
                updated_replicas: s.updated_replicas,
                ready_replicas: s.ready_replicas,
            }),
        }
    }

    /// Whether the template's engine container is the one `want`'s is
    /// (image and arguments).
    #[must_use]
    pub fn runs(&self, want: &Deployment) -> bool {
        let engine = self.spec.as_ref().and_then(|s| s.engine);
        engine.is_some() && engine == engine_of(want)
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
        rollout_complete(
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
pub fn rollout_complete(
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
    /// Desired and ready replicas, and whether the rollout is complete:
    /// the deployment controller's bookkeeping on the way (the generation
    /// it saw, pods made but not ready) changes nothing the reconciler
    /// decides or reports.
    type Signal = (i32, i32, bool);
    fn signal(&self) -> Self::Signal {
        (self.desired(), self.ready(), self.complete())
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
    w.trim();
    Ok(w)
}

/// Trim a cached child's metadata to what the reconciler reads of it: its
/// name and namespace (the cache's key), uid, resourceVersion and
/// generation (whether it changed since infergate applied it), owner
/// references (whose it is; the controller's trigger), deletion timestamp,
/// and [`ANNOTATION_APPLIED`] (what infergate applied). Labels (the watch
/// selects on them on the server), other annotations, finalizers and the
/// managed fields (most of an applied object's metadata) are dropped: at a
/// few kilobytes per child they were most of the reconciler's memory.
pub fn keep_what_the_reconciler_reads(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    meta.labels = None;
    meta.finalizers = None;
    meta.creation_timestamp = None;
    meta.generate_name = None;
    meta.self_link = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.retain(|k, _| k == ANNOTATION_APPLIED);
        if annotations.is_empty() {
            meta.annotations = None;
        }
    }
}

/// A child's metadata decoded as far as [`keep_what_the_reconciler_reads`]
/// keeps it; the rest (the managed fields above all) is skipped as it is
/// read, never allocated.
fn kept_metadata<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Kept {
        name: Option<String>,
        namespace: Option<String>,
        uid: Option<String>,
        resource_version: Option<String>,
        generation: Option<i64>,
        deletion_timestamp: Option<Time>,
        owner_references: Option<Vec<OwnerReference>>,
        #[serde(default, deserialize_with = "applied_annotation")]
        annotations: Option<std::collections::BTreeMap<String, String>>,
    }
    let k = Kept::deserialize(d)?;
    Ok(ObjectMeta {
        name: k.name,
        namespace: k.namespace,
        uid: k.uid,
        resource_version: k.resource_version,
        generation: k.generation,
        deletion_timestamp: k.deletion_timestamp,
        owner_references: k.owner_references,
        annotations: k.annotations,
        ..ObjectMeta::default()
    })
}

/// Of the annotations, [`ANNOTATION_APPLIED`] only.
fn applied_annotation<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<std::collections::BTreeMap<String, String>>, D::Error> {
    let all: Option<std::collections::BTreeMap<String, String>> = Option::deserialize(d)?;
    Ok(all
        .and_then(|mut a| a.remove(ANNOTATION_APPLIED))
        .map(|digest| std::iter::once((ANNOTATION_APPLIED.to_owned(), digest)).collect()))
}

#[cfg(test)]
mod tests;
