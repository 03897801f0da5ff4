//! The [`AccessReviewer`]: answers kept per user and object, the questions
//! not answered yet sent to the API server concurrently within a deadline,
//! and the bounds on both.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use kube::api::Api;

use super::ask::{AccessDecision, ask};
use super::denials::{denial, unchecked};
use super::split::Split;
use crate::engine::FieldError;
use crate::engine::references::Reference;
use crate::metrics::Metrics;

/// How long an answer is kept, per user and object.
pub const CACHE_TTL: Duration = Duration::from_secs(60);
/// How long the reviews of one admission may take before it is denied.
pub const REVIEW_TIMEOUT: Duration = Duration::from_secs(2);
/// Answers kept at most (users x objects); the oldest go first.
pub const CACHE_ENTRIES: u64 = 16_384;
/// Reviews of one admission sent at once.
const CONCURRENT_REVIEWS: usize = 8;
/// References one write may add that are not answered from the cache: each
/// costs the API server a review, so one request's cost stays bounded. A
/// write over it is denied (the references past it named), and can be split.
pub const MAX_REVIEWS: usize = 32;

/// One question: may this user do this to this object.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    /// The whole `userInfo` (username, uid, groups, extra), as one string:
    /// two requesters share an answer only when the authorizer sees them
    /// as the same.
    user: Arc<str>,
    namespace: String,
    kind: crate::engine::references::ReferenceKind,
    name: String,
}

/// Asks the API server whether requesters may use what they reference.
#[derive(Clone)]
pub struct AccessReviewer {
    client: Option<kube::Client>,
    metrics: Metrics,
    cache: moka::sync::Cache<Key, AccessDecision>,
    timeout: Duration,
}

impl std::fmt::Debug for AccessReviewer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessReviewer")
            .field("client", &self.client.is_some())
            .field("cached", &self.cache.entry_count())
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Default for AccessReviewer {
    /// A reviewer with no API server to ask: every reference is denied.
    fn default() -> Self {
        Self::new(None, Metrics::new())
    }
}

impl AccessReviewer {
    /// A reviewer asking through `client` (none: every reference is denied,
    /// saying why), counting its reviews in `metrics`.
    #[must_use]
    pub fn new(client: Option<kube::Client>, metrics: Metrics) -> Self {
        Self {
            client,
            metrics,
            cache: moka::sync::Cache::builder()
                .max_capacity(CACHE_ENTRIES)
                .time_to_live(CACHE_TTL)
                .build(),
            timeout: REVIEW_TIMEOUT,
        }
    }

    /// This reviewer with another deadline (tests).
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Split `refs` into the field errors of answers already known (denied)
    /// and the references still to ask about.
    #[must_use]
    pub fn from_cache(&self, user: &UserInfo, namespace: &str, refs: Vec<Reference>) -> Split {
        let digest = identity(user);
        let total = refs.len();
        let fields = refs.iter().map(|r| r.field.clone()).collect();
        let mut denied = Vec::new();
        let mut ask = Vec::new();
        for r in refs {
            match self.cache.get(&key(&digest, namespace, &r)) {
                Some(AccessDecision::Allowed) => {}
                Some(AccessDecision::Denied(reason)) => {
                    denied.push(denial(user, namespace, &r, &reason))
                }
                None => ask.push(r),
            }
        }
        self.metrics.access_reviews(
            "cached",
            u64::try_from(total - ask.len()).unwrap_or(u64::MAX),
        );
        Split {
            denied,
            ask,
            fields,
        }
    }

    /// Every reference of `split` the user may not use: the denials the
    /// cache knew and those of asking about the rest ([`Self::review`]),
    /// in the order of the spec's fields. A known denial does not spare
    /// the others their review: a write is denied naming each reference
    /// it may not make, as the API server lists every field error.
    pub async fn settle(&self, user: &UserInfo, namespace: &str, split: Split) -> Vec<FieldError> {
        let asked = if split.ask.is_empty() {
            Vec::new()
        } else {
            self.review(user, namespace, &split.ask).await
        };
        split.with(asked)
    }

    /// Ask about every reference of `refs` (concurrently, within the
    /// deadline); the field errors of those the user may not use, or of
    /// every reference when the reviews could not be made.
    pub async fn review(
        &self,
        user: &UserInfo,
        namespace: &str,
        refs: &[Reference],
    ) -> Vec<FieldError> {
        let Some(client) = self.client.clone() else {
            return refs
                .iter()
                .map(|r| {
                    unchecked(
                        user,
                        namespace,
                        r,
                        "infergate has no connection to the API server",
                    )
                })
                .collect();
        };
        if refs.len() > MAX_REVIEWS {
            return refs[MAX_REVIEWS..]
                .iter()
                .map(|r| {
                    FieldError::forbidden(
                        r.field.clone(),
                        &format!(
                            "{} {:?} is one of {} new references in one write: at most {MAX_REVIEWS} are reviewed at once; add them in more than one write",
                            r.kind,
                            r.name,
                            refs.len()
                        ),
                    )
                })
                .collect();
        }
        let digest = identity(user);
        let api: Api<SubjectAccessReview> = Api::all(client);
        let asked = futures::stream::iter(refs.iter().cloned().map(|r| {
            let api = api.clone();
            async move {
                let answer = ask(&api, user, namespace, &r).await;
                (r, answer)
            }
        }))
        .buffer_unordered(CONCURRENT_REVIEWS)
        .collect::<Vec<_>>();
        let answers = match tokio::time::timeout(self.timeout, asked).await {
            Ok(answers) => answers,
            Err(_) => {
                let why = format!(
                    "the access review did not answer within {}s",
                    self.timeout.as_secs_f64()
                );
                tracing::warn!(namespace, "{why}; denied");
                self.metrics
                    .access_reviews("timeout", u64::try_from(refs.len()).unwrap_or(u64::MAX));
                return refs
                    .iter()
                    .map(|r| unchecked(user, namespace, r, &why))
                    .collect();
            }
        };
        let mut errors = Vec::new();
        for (r, answer) in answers {
            match answer {
                Ok(decision) => {
                    if let AccessDecision::Denied(reason) = &decision {
                        errors.push(denial(user, namespace, &r, reason));
                        self.metrics.access_reviews("denied", 1);
                    } else {
                        self.metrics.access_reviews("allowed", 1);
                    }
                    self.cache.insert(key(&digest, namespace, &r), decision);
                }
                Err(e) => {
                    self.metrics.access_reviews("failed", 1);
                    tracing::warn!(namespace, object = %r.name, error = %e, "access review failed; denied");
                    errors.push(unchecked(
                        user,
                        namespace,
                        &r,
                        &format!("the access review failed: {e}"),
                    ));
                }
            }
        }
        // Errors in the order of the spec's fields, whatever order the answers came in.
        errors.sort_by_key(|e| refs.iter().position(|r| r.field == e.field));
        errors
    }
}

fn key(user: &Arc<str>, namespace: &str, r: &Reference) -> Key {
    Key {
        user: Arc::clone(user),
        namespace: namespace.to_owned(),
        kind: r.kind,
        name: r.name.clone(),
    }
}

/// Everything the authorizer decides on, as one string: username, uid,
/// groups and extra (`extra` is a sorted map, so the same identity always
/// gives the same string).
fn identity(user: &UserInfo) -> Arc<str> {
    // Strings only: it always serialises; the Debug form is as exact.
    Arc::from(serde_json::to_string(user).unwrap_or_else(|_| format!("{user:?}")))
}
