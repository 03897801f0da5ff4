//! The webhook transport:
//!
//! - [`listener`]: TLS and probe listeners, connection limits and deadlines, drain;
//! - [`limits`]: what one request may cost: body limits, the budget of work
//!   in flight, body and request deadlines, the pool for large bodies;
//! - [`server`]: the routers and the thin handlers;
//! - [`review`]: the one decode of an AdmissionReview and the one encoder
//!   of its answer;
//! - [`admission`] and [`conversion`]: what the handlers do, on typed reviews;
//! - [`access`]: the access reviews of what a service makes its pods use;
//! - [`confine`]: infergate's own writes of children, checked against the
//!   services that control them;
//! - [`charging`]: what admission decides about a charge on a namespace's
//!   GPU budget ledger ([`crate::state::ledger`]);
//! - [`naming`]: what admission decides about the served names of a
//!   service routed by name on its Gateway's names ledger
//!   ([`crate::state::names`]), and routes infergate does not own;
//! - [`patch`]: the JSONPatch of what defaulting filled in;
//! - `room`: the warnings of a write that needs room its GPU pool lacks;
//! - [`tls`]: the serving certificate (resolver, files, rcgen, the
//!   self-signed Secret and caBundle injection).

pub mod access;
pub mod admission;
pub mod charging;
pub mod confine;
pub mod conversion;
pub mod limits;
pub mod listener;
pub mod naming;
pub mod patch;
pub mod review;
mod room;
pub mod server;
pub mod tls;
