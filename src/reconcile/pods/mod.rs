//! Why an engine pod does not start, for the service's `Ready` condition:
//! a watch on the engine pods (label-selected, metadata and status only)
//! keeps one small state per not-ready pod, and triggers a reconcile of a
//! service only when the most telling state of one of its tracks changes.
//!
//! - [`classify`]: what one pod's status says ([`PodState`]), pure;
//! - [`index`]: per service and track, the states of its not-ready pods
//!   ([`PodStates`]) and the most telling of them;
//! - [`watch`]: the watch that feeds the index and hands on the services
//!   to reconcile.

pub mod classify;
pub mod index;
pub mod watch;

pub use classify::{PodState, WatchedPod, pod_state};
pub use index::{Listing, PodStates};
