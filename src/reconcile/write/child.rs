//! Writing a child: server-side apply (only when what the service wants of
//! it changed, or someone else changed it), and deletion of a child the
//! service controls.

use std::fmt::Debug;
use std::sync::Arc;

use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use serde::Serialize;

use super::writer::{ChildMarker, SeenChild, Writer};
use crate::api::MANAGER;
use crate::api::v1beta1::InferenceService;
use crate::reconcile::children::ANNOTATION_APPLIED;
use crate::reconcile::error::{Error, status_not_found};
use crate::reconcile::status::Reason;
use crate::reconcile::watch::echo::{ChildKey, ChildSeen};
use crate::reconcile::watch::kinds::{Change, ChildKind};
use crate::reconcile::watch::watched::watched_of;

/// What [`Writer::apply`] did.
#[derive(Debug)]
pub enum Applied<K: ChildKind> {
    /// The child was written; the API server's answer.
    Written(K),
    /// The child already holds what the service wants (its digest matches
    /// and nobody changed its spec since): nothing was sent; the child as
    /// its watch keeps it.
    Unchanged(Arc<K::Watched>),
}

/// The digest [`ANNOTATION_APPLIED`] records: of the desired object's JSON
/// (without the annotation).
pub(super) fn digest_of<K: Serialize>(obj: &K) -> Result<String, Error> {
    Ok(crate::reconcile::children::digest_of(obj).map_err(kube::Error::SerdeError)?)
}

/// Whether `svc` is the controller of the object `meta` describes.
#[must_use]
pub fn owned_by(meta: &kube::api::ObjectMeta, svc: &InferenceService) -> bool {
    let Some(uid) = svc.uid() else {
        return false;
    };
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| o.uid == uid && o.controller == Some(true))
}

impl Writer {
    /// Server-side apply one child unless it already holds what `obj`
    /// says; remember Created/Updated for [`Writer::announce`]. `store` is
    /// the child kind's cache: it says whether the object exists, who
    /// controls it (an object another controller owns is never taken over)
    /// and the digest of what infergate last applied to it
    /// ([`ANNOTATION_APPLIED`]).
    ///
    /// Nothing is sent when the cached child is this service's, carries the
    /// digest of `obj`, and is as this writer's last apply left it (see
    /// `untouched`). A child this writer has not applied yet (a restart, a
    /// new leader) is taken at its digest.
    pub async fn apply<K: ChildKind>(
        &self,
        svc: &InferenceService,
        obj: &K,
        store: &Store<K::Watched>,
    ) -> Result<Applied<K>, Error> {
        let ns = obj.namespace().unwrap_or_default();
        let name = obj.name_any();
        let kind = K::KIND;
        let marker = |m: &kube::api::ObjectMeta| {
            (
                m.uid.clone().unwrap_or_default(),
                m.generation
                    .map(|g| g.to_string())
                    .or_else(|| m.resource_version.clone())
                    .unwrap_or_default(),
            )
        };
        let key = (kind, ns.clone(), name.clone());
        // What the cache knew before this apply: read before patching, or the
        // watch may already have delivered the object this apply creates.
        let cached = store.get(&ObjectRef::new(&name).within(&ns));
        let cached_before = cached.as_ref().map(|m| marker(m.meta()));
        if let Some(existing) = &cached {
            // Never take over an object another controller owns.
            if let Some(other) = existing
                .meta()
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.controller == Some(true) && Some(&o.uid) != svc.uid().as_ref())
            {
                return Err(Error::ForeignChild {
                    kind,
                    name,
                    owner: format!("{} {}", other.kind, other.name),
                });
            }
        }
        let digest = digest_of(obj)?;
        if let Some(existing) = cached
            && owned_by(existing.meta(), svc)
            && existing.meta().deletion_timestamp.is_none()
            && existing.annotations().get(ANNOTATION_APPLIED) == Some(&digest)
            && self.untouched(&key, svc, marker(existing.meta()), K::CHANGE)
        {
            return Ok(Applied::Unchanged(existing));
        }
        let mut obj = obj.clone();
        obj.annotations_mut()
            .insert(ANNOTATION_APPLIED.to_owned(), digest);
        let api: Api<K> = Api::namespaced(self.client.clone(), &ns);
        let params = PatchParams::apply(MANAGER).force();
        let write = self.echoes.write(&key, ObjectRef::from_obj(svc));
        let applied = api.patch(&name, &params, &Patch::Apply(&obj)).await?;
        write.left(
            applied
                .meta()
                .resource_version
                .clone()
                .map(ChildSeen::Version),
        );
        let now = marker(applied.meta());
        let before = self
            .seen
            .lock()
            .ok()
            .and_then(|s| s.get(&key).map(|c| c.marker.clone()))
            .or(cached_before);
        if let Ok(mut s) = self.seen.lock() {
            s.insert(
                key,
                SeenChild {
                    marker: now.clone(),
                    service: svc.name_any(),
                },
            );
        }
        // Never seen, or gone and made again (a new uid): created; a new
        // generation (or resourceVersion): updated; otherwise nothing to say.
        let change = match before {
            None => Some(Reason::Created),
            Some((uid, _)) if uid != now.0 => Some(Reason::Created),
            Some((_, m)) if m != now.1 => Some(Reason::Updated),
            Some(_) => None,
        };
        if let Some(reason) = change {
            self.record(svc, reason, format!("{kind} {name}"));
        }
        Ok(Applied::Written(applied))
    }

    /// Whether nobody has changed the cached child since this writer last
    /// applied it: the same object (uid) and, unless its kind's `change`
    /// is [`Change::Uid`], the same revision (the generation the apply
    /// left, or for kinds without a generation the resourceVersion). A
    /// child this writer never applied is taken as it is, and remembered.
    fn untouched(
        &self,
        key: &ChildKey,
        svc: &InferenceService,
        current: ChildMarker,
        change: Change,
    ) -> bool {
        let Ok(mut seen) = self.seen.lock() else {
            return false;
        };
        match seen.get(key) {
            None => {
                seen.insert(
                    key.clone(),
                    SeenChild {
                        marker: current,
                        service: svc.name_any(),
                    },
                );
                true
            }
            Some(SeenChild {
                marker: (uid, mark),
                ..
            }) => uid == &current.0 && (change == Change::Uid || mark == &current.1),
        }
    }

    /// Whether the cached child already holds what `obj` says, as
    /// [`Writer::apply`] judges it: applying `obj` would send nothing.
    pub fn holds<K: ChildKind>(
        &self,
        svc: &InferenceService,
        obj: &K,
        store: &Store<K::Watched>,
    ) -> Result<bool, Error> {
        let ns = obj.namespace().unwrap_or_default();
        let name = obj.name_any();
        let Some(existing) = store.get(&ObjectRef::new(&name).within(&ns)) else {
            return Ok(false);
        };
        let meta = existing.meta();
        let current = (
            meta.uid.clone().unwrap_or_default(),
            meta.generation
                .map(|g| g.to_string())
                .or_else(|| meta.resource_version.clone())
                .unwrap_or_default(),
        );
        Ok(owned_by(meta, svc)
            && meta.deletion_timestamp.is_none()
            && existing.annotations().get(ANNOTATION_APPLIED) == Some(&digest_of(obj)?)
            && self.untouched(&(K::KIND, ns, name), svc, current, K::CHANGE))
    }

    /// Whether the cache knows a child `name` of kind `K` that this service
    /// controls and that is not being deleted ([`Writer::delete`] would
    /// delete it).
    #[must_use]
    pub fn controls<K: ChildKind>(
        &self,
        svc: &InferenceService,
        name: &str,
        store: &Store<K::Watched>,
    ) -> bool {
        let ns = svc.namespace().unwrap_or_default();
        store
            .get(&ObjectRef::new(name).within(&ns))
            .is_some_and(|m| m.meta().deletion_timestamp.is_none() && owned_by(m.meta(), svc))
    }

    /// [`Writer::apply`], returning the child as its watch keeps it, for
    /// its status: the API server's answer when it was written, the cached
    /// child when nothing had to be (no request either way but the write).
    pub async fn apply_and_read<K: ChildKind>(
        &self,
        svc: &InferenceService,
        obj: &K,
        store: &Store<K::Watched>,
    ) -> Result<K::Watched, Error> {
        match self.apply(svc, obj, store).await? {
            Applied::Written(applied) => Ok(watched_of(&applied).map_err(kube::Error::SerdeError)?),
            Applied::Unchanged(cached) => Ok((*cached).clone()),
        }
    }

    /// Delete a child this service controls, if the cache knows one.
    pub async fn delete<K: ChildKind>(
        &self,
        svc: &InferenceService,
        name: &str,
        store: &Store<K::Watched>,
    ) -> Result<(), Error> {
        let ns = svc.namespace().unwrap_or_default();
        let Some(cached) = store.get(&ObjectRef::new(name).within(&ns)) else {
            return Ok(());
        };
        let meta = cached.meta();
        if meta.deletion_timestamp.is_some() || !owned_by(meta, svc) {
            return Ok(());
        }
        let kind = K::KIND;
        let api: Api<K> = Api::namespaced(self.client.clone(), &ns);
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: meta.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        let key = (kind, ns.clone(), name.to_owned());
        let write = self.echoes.write(&key, ObjectRef::from_obj(svc));
        let deleted = api.delete(name, &params).await;
        // Gone at once, or (a child with finalizers) marked for deletion.
        write.left(deleted.as_ref().ok().and_then(|d| {
            match d.as_ref().left() {
                Some(marked) => marked
                    .meta()
                    .resource_version
                    .clone()
                    .map(ChildSeen::Version),
                None => meta.uid.clone().map(ChildSeen::Gone),
            }
        }));
        match deleted {
            Ok(_) => {
                if let Ok(mut s) = self.seen.lock() {
                    s.retain(|(_, n, m), _| !(n == &ns && m == name));
                }
                self.record(svc, Reason::Deleted, format!("{kind} {name}"));
                Ok(())
            }
            Err(kube::Error::Api(s)) if status_not_found(&s) => Ok(()),
            Err(e) => Err(Error::Kube(e)),
        }
    }
}
