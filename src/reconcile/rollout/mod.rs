//! The progressive rollout (`spec.rollout.strategy: Canary`): what it
//! decides, and the analysis gate it asks. The `Deployment` backend drives
//! it (`backend::deployment`): it reads what the cluster shows, asks
//! [`decide`], and builds the tracks from the decision.
//!
//! - `types`: what the state machine reads ([`Input`]) and answers
//!   ([`Decision`]);
//! - `machine`: the state machine, one pure function ([`decide`]);
//! - [`gate`]: the Prometheus query a step's soak ends with.

pub mod gate;
mod machine;
mod types;

pub use machine::{POLL, decide, gate_due, new_action};
pub(in crate::reconcile) use types::StepTimes;
pub use types::{ACTION_ANNOTATION, Decision, Gate, Input, Note, Observed, Readiness, StepClock};

#[cfg(test)]
mod tests;
