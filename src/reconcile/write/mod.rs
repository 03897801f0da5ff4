//! Writing to the cluster: children, status and events, through one
//! [`Writer`] per term.
//!
//! - `writer`: the [`Writer`] and what it remembers of its writes;
//! - `child`: server-side apply of a child (only when what the service
//!   wants of it changed, or someone else changed it), and deletion of a
//!   child the service controls;
//! - `status`: status writes (only when the status changed) with the
//!   events its conditions call for;
//! - `events`: one event per kind of change per reconcile, and any other
//!   event regarding a service, through the `recorders`.

mod child;
mod events;
mod recorders;
mod status;
mod writer;

pub use child::Applied;
pub use writer::Writer;

#[cfg(test)]
mod tests;
