//! Writing a child: server-side apply (only when what the service wants of
//! it changed, or someone else changed it), and deletion of a child the
//! service controls.

use std::fmt::Debug;
use std::sync::Arc;

use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use tracing::{info, warn};

use super::writer::{SeenChild, Writer};
use crate::api::MANAGER;
use crate::api::v1beta1::InferenceService;
use crate::reconcile::children::ANNOTATION_APPLIED;
use crate::reconcile::error::{Error, status_not_found};
use crate::reconcile::status::Reason;
use crate::reconcile::watch::echo::{ChildKey, ChildSeen};
use crate::reconcile::watch::kinds::ChildKind;
use crate::reconcile::watch::owned::{Owned, OwnedIndex};
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

/// `obj` as JSON, made once into `slot` (what the ownership checks walk).
fn desired_of<'a, K: Serialize>(
    obj: &K,
    slot: &'a mut Option<serde_json::Value>,
) -> Result<&'a serde_json::Value, Error> {
    if slot.is_none() {
        *slot = Some(serde_json::to_value(obj).map_err(kube::Error::SerdeError)?);
    }
    Ok(slot.get_or_insert(serde_json::Value::Null))
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
    /// digest of `obj`, and infergate's field manager still holds every
    /// field of `obj` (`owned`, see `untouched`): whoever changed, took over
    /// or removed one of them, while infergate ran or not, it is put back.
    pub async fn apply<K: ChildKind>(
        &self,
        svc: &InferenceService,
        obj: &K,
        store: &Store<K::Watched>,
        owned: &OwnedIndex,
    ) -> Result<Applied<K>, Error> {
        let ns = obj.namespace().unwrap_or_default();
        let name = obj.name_any();
        let kind = K::KIND;
        let key = (kind, ns.clone(), name.clone());
        // What the cache knew before this apply: read before patching, or the
        // watch may already have delivered the object this apply creates.
        let cached = store.get(&ObjectRef::new(&name).within(&ns));
        let cached_before = cached.as_ref().map(|m| marker(m.meta()));
        if let Some(existing) = &cached {
            refuse_foreign(existing.meta(), svc, kind, &name)?;
        }
        let digest = digest_of(obj)?;
        let mut desired = None;
        if let Some(existing) = cached
            && owned_by(existing.meta(), svc)
            && existing.meta().deletion_timestamp.is_none()
            && existing.annotations().get(ANNOTATION_APPLIED) == Some(&digest)
            && self.untouched(
                &key,
                existing.meta(),
                owned,
                desired_of(obj, &mut desired)?,
                &digest,
            )
        {
            return Ok(Applied::Unchanged(existing));
        }
        let mut obj = obj.clone();
        obj.annotations_mut()
            .insert(ANNOTATION_APPLIED.to_owned(), digest.clone());
        let api: Api<K> = Api::namespaced(self.client.clone(), &ns);
        let params = PatchParams::apply(MANAGER).force();
        let write = self.echoes.write(&key, ObjectRef::from_obj(svc));
        let applied = apply_or_replace(&api, &obj, &params, cached_before.is_some()).await?;
        write.left(
            applied
                .meta()
                .resource_version
                .clone()
                .map(ChildSeen::Version),
        );
        self.check_held(
            &key,
            svc,
            &applied,
            desired_of(&obj, &mut desired)?,
            &digest,
        );
        self.note_change(key, svc, applied.meta(), cached_before);
        Ok(Applied::Written(applied))
    }

    /// Remember the marker of the child `key` just written and record an
    /// event when it was created (never seen, or a new uid) or updated (a
    /// new generation or resourceVersion).
    fn note_change(
        &self,
        key: (&'static str, String, String),
        svc: &InferenceService,
        applied: &kube::api::ObjectMeta,
        cached_before: Option<(String, String)>,
    ) {
        let now = marker(applied);
        let before = self
            .seen
            .lock()
            .ok()
            .and_then(|s| s.get(&key).map(|c| c.marker.clone()))
            .or(cached_before);
        let (kind, _, name) = key.clone();
        if let Ok(mut s) = self.seen.lock() {
            s.insert(
                key,
                SeenChild {
                    marker: now.clone(),
                    service: svc.name_any(),
                },
            );
        }
        let change = match before {
            None => Some(Reason::Created),
            Some((uid, _)) if uid != now.0 => Some(Reason::Created),
            Some((_, m)) if m != now.1 => Some(Reason::Updated),
            Some(_) => None,
        };
        if let Some(reason) = change {
            self.record(svc, reason, format!("{kind} {name}"));
        }
    }

    /// Whether the cached child (`meta`) is as infergate left it:
    /// infergate's field manager still holds every field of `desired`
    /// ([`OwnedIndex::covers`]). For a child whose API server record never
    /// showed all of them (`check_held`), the digest alone.
    fn untouched(
        &self,
        key: &ChildKey,
        meta: &kube::api::ObjectMeta,
        owned: &OwnedIndex,
        desired: &serde_json::Value,
        digest: &str,
    ) -> bool {
        owned.covers(meta, desired)
            || self
                .unheld
                .lock()
                .is_ok_and(|u| u.get(key).is_some_and(|(_, d)| d == digest))
    }

    /// After an apply: whether the API server's record of infergate's
    /// fields (`applied`'s managed fields) holds every field of `desired`,
    /// as [`Writer::untouched`] will ask of the cached child. A child for
    /// which it does not (a field the API server drops, a keyed list of an
    /// unexpected shape) is remembered with its digest, and judged by the
    /// digest alone from then on: a change to it made while infergate was
    /// stopped would go unseen, so this is said once per kind.
    fn check_held<K: Resource>(
        &self,
        key: &ChildKey,
        svc: &InferenceService,
        applied: &K,
        desired: &serde_json::Value,
        digest: &str,
    ) {
        let held = Owned::of(applied.meta().managed_fields.as_deref()).covers(desired);
        let Ok(mut unheld) = self.unheld.lock() else {
            return;
        };
        if held {
            unheld.remove(key);
            return;
        }
        if !unheld.keys().any(|(kind, _, _)| *kind == key.0) {
            warn!(
                kind = key.0,
                name = %key.2,
                namespace = %key.1,
                "the API server's record of the fields infergate applied does not hold all of them; such a child is compared by its digest only"
            );
        }
        unheld.insert(key.clone(), (svc.name_any(), digest.to_owned()));
    }

    /// Whether the cached child already holds what `obj` says, as
    /// [`Writer::apply`] judges it: applying `obj` would send nothing.
    pub fn holds<K: ChildKind>(
        &self,
        svc: &InferenceService,
        obj: &K,
        store: &Store<K::Watched>,
        owned: &OwnedIndex,
    ) -> Result<bool, Error> {
        let ns = obj.namespace().unwrap_or_default();
        let name = obj.name_any();
        let Some(existing) = store.get(&ObjectRef::new(&name).within(&ns)) else {
            return Ok(false);
        };
        let meta = existing.meta();
        let digest = digest_of(obj)?;
        if !owned_by(meta, svc)
            || meta.deletion_timestamp.is_some()
            || existing.annotations().get(ANNOTATION_APPLIED) != Some(&digest)
        {
            return Ok(false);
        }
        let desired = serde_json::to_value(obj).map_err(kube::Error::SerdeError)?;
        Ok(self.untouched(&(K::KIND, ns, name), meta, owned, &desired, &digest))
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
        owned: &OwnedIndex,
    ) -> Result<K::Watched, Error> {
        match self.apply(svc, obj, store, owned).await? {
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
                    s.remove(&key);
                }
                if let Ok(mut u) = self.unheld.lock() {
                    u.remove(&key);
                }
                self.record(svc, Reason::Deleted, format!("{kind} {name}"));
                Ok(())
            }
            Err(kube::Error::Api(s)) if status_not_found(&s) => Ok(()),
            Err(e) => Err(Error::Kube(e)),
        }
    }
}

/// A child's uid and its generation (its resourceVersion for kinds without
/// one): what tells a new or changed child.
fn marker(m: &kube::api::ObjectMeta) -> (String, String) {
    (
        m.uid.clone().unwrap_or_default(),
        m.generation
            .map(|g| g.to_string())
            .or_else(|| m.resource_version.clone())
            .unwrap_or_default(),
    )
}

/// Never take over an object another controller owns.
fn refuse_foreign(
    meta: &kube::api::ObjectMeta,
    svc: &InferenceService,
    kind: &'static str,
    name: &str,
) -> Result<(), Error> {
    let other = meta
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true) && Some(&o.uid) != svc.uid().as_ref());
    match other {
        Some(other) => Err(Error::ForeignChild {
            kind,
            name: name.to_owned(),
            owner: format!("{} {}", other.kind, other.name),
        }),
        None => Ok(()),
    }
}

/// Server-side apply `obj`. A child that exists (`existed`) but was changed
/// so that infergate's fields no longer merge into it (a Service port
/// renumbered by hand keeps its name, which infergate's port then repeats:
/// 422) has its fields put back whole, lists replaced, then is applied again.
async fn apply_or_replace<K: ChildKind>(
    api: &Api<K>,
    obj: &K,
    params: &PatchParams,
    existed: bool,
) -> Result<K, Error> {
    let name = obj.name_any();
    match api.patch(&name, params, &Patch::Apply(obj)).await {
        Err(kube::Error::Api(s)) if s.code == 422 && existed => {
            info!(
                kind = K::KIND,
                name = %name,
                namespace = %obj.namespace().unwrap_or_default(),
                refused = %s.message,
                "the child was changed beyond what an apply merges; its fields are replaced"
            );
            let replace = PatchParams {
                field_manager: Some(MANAGER.to_owned()),
                ..PatchParams::default()
            };
            api.patch(&name, &replace, &Patch::Merge(obj)).await?;
            Ok(api.patch(&name, params, &Patch::Apply(obj)).await?)
        }
        answer => Ok(answer?),
    }
}
