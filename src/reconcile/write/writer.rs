//! The writer: one per term, shared by every reconcile; what it remembers
//! of its writes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kube::Client;
use kube::runtime::events::{Recorder, Reporter};

use super::recorders::Recorders;
use crate::api::v1beta1::InferenceService;
use crate::reconcile::watch::echo::{ChildKey, Echoes};

/// (uid, generation or resourceVersion) of a child as last applied.
pub(super) type ChildMarker = (String, String);

/// Writes children, status and events for the reconciler.
pub struct Writer {
    pub(super) client: Client,
    pub(super) recorders: Recorders<Recorder>,
    /// Last applied (uid, generation or resourceVersion) per child, for events.
    pub(super) seen: Mutex<HashMap<ChildKey, ChildMarker>>,
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

    /// Forget what was written for `svc` (deleted).
    pub fn forget(&self, svc: &InferenceService) {
        self.once.forget(svc);
    }
}
