//! The progressive rollout (`spec.rollout.strategy: Canary`): what it
//! decides, and the analysis gate it asks.
//!
//! - `types`: what the state machine reads ([`Input`]) and answers
//!   ([`Decision`]), and the step times this process keeps;
//! - `machine`: the state machine, one pure function ([`decide`]);
//! - [`gate`]: the Prometheus query a step's soak ends with.
//!
//! The `Deployment` backend drives it
//! (`reconcile/backend/deployment/drive.rs`): it reads what the cluster
//! shows, asks [`decide`], and builds the tracks from the decision. The
//! driver reads the term's context, which keeps each step's times
//! ([`StepClock`]): it sits above that context, and the decision below it.

pub mod gate;
mod machine;
mod types;

pub use machine::{POLL, decide, gate_due, new_action};
pub(in crate::reconcile) use types::StepTimes;
pub use types::{
    ACTION_ANNOTATION, Decision, Gate, Input, Note, Readiness, RolloutObserved, StepClock,
};

#[cfg(test)]
mod tests;
