//! No privilege through infergate: a requester may make infergate's pods use
//! only what the requester could use directly. For every Secret, ConfigMap
//! or ServiceAccount a CREATE or UPDATE adds or changes a reference to
//! ([`crate::engine::references`]), the validating webhook asks the API
//! server with a SubjectAccessReview for the request's whole `userInfo`:
//! `get` on the Secret or ConfigMap, `create` on `serviceaccounts/token`
//! for the ServiceAccount. Answers are kept [`CACHE_TTL`] per user and
//! object; a review that fails or takes over [`REVIEW_TIMEOUT`] denies.
//! This is the only API call on the admission path.
//!
//! - `reviewer`: the [`AccessReviewer`], its cache and its bounds;
//! - `split`: the references of one write by what the cache knows ([`Split`]);
//! - `ask`: one SubjectAccessReview and the decision it carries;
//! - `denials`: the field errors that say who may not do what.

mod ask;
mod denials;
mod reviewer;
mod split;

pub use reviewer::{AccessReviewer, CACHE_ENTRIES, CACHE_TTL, MAX_REVIEWS, REVIEW_TIMEOUT};
pub use split::Split;

#[cfg(test)]
mod tests;
