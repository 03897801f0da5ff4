//! What the reconciler watches, and how its events become reconciles.
//!
//! - [`kinds`]: the kinds of children the reconciler owns, one row each;
//! - [`watched`]: what the watches keep of each child;
//! - [`child`]: the watch of one kind, handing on only news;
//! - [`echo`]: which events are the echo of infergate's own writes;
//! - [`owned`]: what infergate's field manager still owns of a child, so
//!   drift made at any time (infergate stopped included) is seen;
//! - [`discovery`]: which optional APIs the cluster serves, and the
//!   preflight of infergate's own CRDs;
//! - [`optional`]: the children of an optional CRD, followed while it is
//!   served;
//! - [`triggers`]: the watches of one term, and the services their events
//!   (and the shared state's) reconcile.

pub mod child;
pub mod discovery;
pub mod echo;
pub mod kinds;
pub mod optional;
pub mod owned;
#[cfg(test)]
mod owned_tests;
pub mod triggers;
pub mod watched;
