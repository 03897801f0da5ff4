//! The writer: one per term, shared by every reconcile; what it remembers
//! of its writes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;

use super::recorders::Recorders;
use crate::api::v1beta1::InferenceService;
use crate::reconcile::watch::echo::{ChildKey, Echoes};

/// (uid, generation or resourceVersion) of a child as last applied.
pub(super) type ChildMarker = (String, String);

/// What the writer remembers of a child it applied or took as it was.
pub(super) struct SeenChild {
    /// Its marker then.
    pub(super) marker: ChildMarker,
    /// The name of the service it belongs to (in the child's namespace).
    pub(super) service: String,
}

/// Writes children, status and events for the reconciler.
pub struct Writer {
    pub(super) client: Client,
    pub(super) recorders: Recorders<Recorder>,
    /// Last applied (uid, generation or resourceVersion) per child, for events.
    pub(super) seen: Mutex<HashMap<ChildKey, SeenChild>>,
    /// The children whose API server record of infergate's fields did not
    /// hold all it applied: (service, digest applied), judged by the
    /// digest alone.
    pub(super) unheld: Mutex<HashMap<ChildKey, (String, String)>>,
    /// Children created, updated or deleted by the reconcile under way, per
    /// service (namespace, name): announced when it ends
    /// ([`Writer::announce`]), one event per kind of change.
    pub(super) changes: Mutex<HashMap<(String, String), Changes>>,
    /// Where the child watches learn which events this writer caused.
    pub(super) echoes: Arc<Echoes>,
    /// The values of the once-per-value annotations each service's last
    /// status write held acted on.
    pub(super) once: crate::reconcile::once::Written,
}

/// What one reconcile did to a service's children, as `Kind name`.
#[derive(Default)]
pub(super) struct Changes {
    pub(super) created: Vec<String>,
    pub(super) updated: Vec<String>,
    pub(super) deleted: Vec<String>,
}

impl Writer {
    /// A writer using `client`, publishing events as `reporter`, telling
    /// `echoes` what each write of a child left.
    #[must_use]
    pub fn new(client: Client, reporter: Reporter, echoes: Arc<Echoes>) -> Self {
        let events = client.clone();
        Writer {
            client,
            recorders: Recorders::new(|| Recorder::new(events.clone(), reporter.clone())),
            seen: Mutex::new(HashMap::new()),
            unheld: Mutex::new(HashMap::new()),
            changes: Mutex::new(HashMap::new()),
            echoes,
            once: crate::reconcile::once::Written::default(),
        }
    }

    /// The values of the once-per-value annotations this writer last wrote
    /// in `svc`'s status: acted on, whether or not the status read shows
    /// them yet.
    #[must_use]
    pub fn acted_on(&self, svc: &InferenceService) -> crate::reconcile::once::Lists {
        self.once.get(svc)
    }

    /// Forget everything remembered for the service `key` (deleted): its
    /// children's markers, its pending changes and echoes, the lists of its
    /// last status write.
    pub fn forget_service(&self, key: &ObjectRef<InferenceService>) {
        let ns = key.namespace.clone().unwrap_or_default();
        self.once.forget_key(&ns, &key.name);
        if let Ok(mut seen) = self.seen.lock() {
            seen.retain(|(_, child_ns, _), c| !(child_ns == &ns && c.service == key.name));
        }
        if let Ok(mut unheld) = self.unheld.lock() {
            unheld.retain(|(_, child_ns, _), (service, _)| {
                !(child_ns == &ns && service == &key.name)
            });
        }
        if let Ok(mut changes) = self.changes.lock() {
            changes.remove(&(ns, key.name.clone()));
        }
        self.echoes.forget(key);
    }

    /// How many entries the writer remembers (children, pending changes,
    /// written lists, echoes to come): back where it started once the
    /// services it wrote for are gone.
    #[must_use]
    pub fn remembered(&self) -> usize {
        let seen = self.seen.lock().map_or(0, |s| s.len());
        let unheld = self.unheld.lock().map_or(0, |u| u.len());
        let changes = self.changes.lock().map_or(0, |c| c.len());
        seen + unheld + changes + self.once.len() + self.echoes.pending()
    }
}
