//! A track's replicas, as its Deployment reports them, and why its pods
//! are not ready.

use crate::reconcile::pods::PodState;
use crate::reconcile::watch::watched::{WatchedDeployment, replicas_complete};

/// A track's replicas as its Deployment reports them (wanted, ready, up to
/// date, in all), and why its pods are not ready. Not the progressive
/// rollout (`status.rollout`, decided in `rollout/`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrackReplicas {
    /// `spec.replicas` (after the HPA, when it manages the Deployment).
    pub desired: i32,
    /// `status.readyReplicas`.
    pub ready: i32,
    /// `status.updatedReplicas`.
    pub updated: i32,
    /// `status.replicas`: pods of the current template and of older ones.
    pub total: i32,
    /// The deployment controller has seen the current spec.
    pub observed: bool,
    /// The most telling state among the track's not-ready pods (from the
    /// watch on the engine pods); `None` when none is known. Boxed: most
    /// tracks have none, and an outcome carries two tracks.
    pub blocker: Option<Box<PodState>>,
}

impl TrackReplicas {
    /// Read a Deployment as its watch keeps it.
    #[must_use]
    pub fn of(d: &WatchedDeployment) -> Self {
        Self {
            desired: d.desired(),
            ready: d.ready(),
            updated: d.updated(),
            total: d.total(),
            observed: d.observed(),
            blocker: None,
        }
    }

    /// The same replicas, with why the track's pods are not ready.
    #[must_use]
    pub fn with_blocker(self, blocker: Option<PodState>) -> Self {
        Self {
            blocker: blocker.map(Box::new),
            ..self
        }
    }

    /// Why the track serves fewer replicas than it wants, when its pods say:
    /// the Deployment's rollout is not complete, fewer replicas are ready than desired,
    /// and a pod of the track is not ready.
    #[must_use]
    pub fn blocked(&self) -> Option<&PodState> {
        if self.complete() || self.ready >= self.desired {
            return None;
        }
        self.blocker.as_deref().filter(|b| b.rank().is_some())
    }

    /// Every wanted replica is ready and runs the current template, and no
    /// pod of an older template is left (while one is, the ready replicas
    /// may be old ones).
    #[must_use]
    pub fn complete(&self) -> bool {
        replicas_complete(
            self.observed,
            self.desired,
            self.ready,
            self.updated,
            self.total,
        )
    }
}
