//! `kubectl infergate why NAME`: why a service is not ready, in sentences,
//! most telling first, each with the next command to run.
//!
//! [`explain`] reads only the [`ServiceFacts`](super::facts::ServiceFacts)
//! `status` shows, above all the conditions the reconciler writes (their
//! messages carry the scheduler's and the kubelet's words), so what `why`
//! says is what the service's status says, in order of what to look at
//! first. The conditions' reasons are read as the API's typed reasons, and
//! the facts their messages carry through the API's message parsers.
//!
//! - `finding`: a [`Finding`], its [`Severity`] and rank, an [`Explanation`];
//! - `explain`: the findings of a service, most telling first;
//! - `conditions`: the findings of each condition, by its reason;
//! - `rollout`: the finding of a held, paused or rolled-back rollout;
//! - `names`: a denial caused by a model name or an adapter, a refused
//!   route's names, names the route has no rule for yet;
//! - `commands`: the next commands, with the service's namespace and name;
//! - `render`: the human text, and `why` run from the command line.

mod commands;
mod conditions;
mod explain;
mod finding;
mod names;
mod render;
mod rollout;

pub use explain::{explain, explanation, is_ready};
pub use finding::{Explanation, Finding, Severity};
pub use render::{Options, render, run};

#[cfg(test)]
mod names_tests;
#[cfg(test)]
mod tests;
