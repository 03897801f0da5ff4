//! `status.graph`: which serving graph is live, and how the last fetch went.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::api::v1beta1::{GraphStatus, InferenceServiceStatus};
use crate::reconcile::once;

/// Hex digits of the digest in `status.graph.shortDigest`.
const SHORT_DIGEST: usize = 12;

/// `status.graph.lastFetchAt` alone is written at most this often: a
/// periodic fetch that brings nothing new is not a change worth a write
/// (the fetcher keeps the time in memory meanwhile).
pub const FETCH_TIME_WRITE_EVERY: std::time::Duration = std::time::Duration::from_secs(600);

/// The graph a RayService was applied with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppliedGraph {
    /// The URL it was fetched from.
    pub url: String,
    /// `sha256:<hex>` of its bytes.
    pub digest: String,
    /// The ETag the server sent with it.
    pub etag: Option<String>,
}

/// What one reconcile learnt about the serving graph.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GraphReport {
    /// A fetch ended (a graph, a 304 or a failure): `lastFetchAt` moves.
    pub fetched: bool,
    /// The graph the RayService now runs.
    pub applied: Option<AppliedGraph>,
    /// Why the fetched graph could not be applied (`Reason: message`).
    pub error: Option<String>,
    /// The `infergate.dev/graph-refresh` value acted on, as recorded
    /// ([`refresh_key`]).
    pub refresh: Option<String>,
}

/// How a refresh value is recorded in `status.graph.refreshesSeen`
/// ([`once::key`]).
#[must_use]
pub fn refresh_key(token: &str) -> String {
    once::key(token)
}

/// The refresh the annotation asks for, if its value was not acted on yet
/// (neither in `status.graph.refreshesSeen` nor in `also_seen`, the list
/// this process last wrote).
#[must_use]
pub fn pending_refresh(
    annotation: Option<&str>,
    status: Option<&InferenceServiceStatus>,
    also_seen: &[String],
) -> Option<String> {
    let key = refresh_key(annotation?);
    let g = status.and_then(|s| s.graph.as_ref());
    let seen = g.map_or(&[][..], |g| g.refreshes_seen.as_slice());
    let last = g.and_then(|g| g.last_refresh.as_deref());
    let done = once::contains(seen, last, &key) || also_seen.contains(&key);
    (!done).then_some(key)
}

/// `status.graph.shortDigest` of a digest.
#[must_use]
pub fn short_digest(digest: &str) -> String {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    hex.chars().take(SHORT_DIGEST).collect()
}

/// The live graph, in words, when one was applied: `sha256:0123456789ab
/// from URL, applied at T`.
#[must_use]
pub fn live_graph(status: Option<&InferenceServiceStatus>) -> Option<String> {
    let g = status?.graph.as_ref()?;
    let digest = g.digest.as_deref()?;
    let mut out = format!("sha256:{}", short_digest(digest));
    if let Some(url) = &g.url {
        out.push_str(&format!(" from {url}"));
    }
    if let Some(at) = &g.applied_at {
        out.push_str(&format!(", applied at {}", at.0));
    }
    Some(out)
}

/// Record `report` in `st.graph` at `now`: `appliedAt` moves only when the
/// applied graph changes.
pub fn record(st: &mut InferenceServiceStatus, report: &GraphReport, now: Timestamp) {
    let g = st.graph.get_or_insert_with(GraphStatus::default);
    if report.fetched {
        g.last_fetch_at = Some(Time(now));
        g.last_fetch_error = report.error.as_deref().map(crate::telemetry::cut_message);
    }
    if let Some(a) = &report.applied {
        if g.digest.as_deref() != Some(a.digest.as_str()) || g.url.as_deref() != Some(&a.url) {
            g.applied_at = Some(Time(now));
        }
        g.url = Some(a.url.clone());
        g.short_digest = Some(short_digest(&a.digest));
        g.digest = Some(a.digest.clone());
        g.etag.clone_from(&a.etag);
    }
    if let Some(r) = &report.refresh {
        // A status from before the list existed: its last value was acted on.
        once::seed(&mut g.refreshes_seen, g.last_refresh.as_deref());
        once::remember(&mut g.refreshes_seen, r.clone());
        g.last_refresh = Some(r.clone());
    }
}

/// Keep `previous`'s `lastFetchAt` in `new` when nothing else differs and
/// it was written less than [`FETCH_TIME_WRITE_EVERY`] before `now`: a
/// fetch that changed nothing writes no status. Any other change (or a
/// time that old) carries the new time with it.
pub fn settle_fetch_time(
    previous: Option<&InferenceServiceStatus>,
    new: &mut InferenceServiceStatus,
    now: Timestamp,
) {
    let Some(before) = previous
        .and_then(|p| p.graph.as_ref())
        .and_then(|g| g.last_fetch_at.clone())
    else {
        return;
    };
    let Some(g) = new.graph.as_mut() else { return };
    if g.last_fetch_at.as_ref() == Some(&before) {
        return;
    }
    let recent = now.duration_since(before.0).unsigned_abs() < FETCH_TIME_WRITE_EVERY;
    let later = g.last_fetch_at.replace(before);
    if (!recent || previous != Some(&*new))
        && let Some(g) = new.graph.as_mut()
    {
        g.last_fetch_at = later;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applied(digest: &str) -> GraphReport {
        GraphReport {
            fetched: true,
            applied: Some(AppliedGraph {
                url: "https://graphs.example.com/g".into(),
                digest: digest.into(),
                etag: Some("\"v1\"".into()),
            }),
            error: None,
            refresh: None,
        }
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).expect("time")
    }

    #[test]
    fn applied_at_moves_only_with_a_new_graph() {
        let mut st = InferenceServiceStatus::default();
        let d1 = format!("sha256:{}", "ab".repeat(32));
        record(&mut st, &applied(&d1), at(0));
        let g = st.graph.clone().expect("graph");
        assert_eq!(g.short_digest.as_deref(), Some("abababababab"));
        assert_eq!(g.applied_at, Some(Time(at(0))));
        // The same graph again (a 304, or the same bytes): only lastFetchAt.
        record(&mut st, &applied(&d1), at(60));
        let g = st.graph.clone().expect("graph");
        assert_eq!(g.applied_at, Some(Time(at(0))));
        assert_eq!(g.last_fetch_at, Some(Time(at(60))));
        // A failed fetch keeps the applied graph and says why.
        let failed = GraphReport {
            fetched: true,
            error: Some("Timeout: too slow".into()),
            ..GraphReport::default()
        };
        record(&mut st, &failed, at(120));
        let g = st.graph.clone().expect("graph");
        assert_eq!(g.digest.as_deref(), Some(d1.as_str()));
        assert_eq!(g.last_fetch_error.as_deref(), Some("Timeout: too slow"));
        assert_eq!(g.last_fetch_at, Some(Time(at(120))));
        // A new graph: appliedAt moves, the error goes.
        let d2 = format!("sha256:{}", "cd".repeat(32));
        record(&mut st, &applied(&d2), at(180));
        let g = st.graph.clone().expect("graph");
        assert_eq!(g.applied_at, Some(Time(at(180))));
        assert_eq!(g.last_fetch_error, None);
        assert!(
            live_graph(Some(&st))
                .expect("live")
                .starts_with("sha256:cdcdcdcdcdcd from https://graphs.example.com/g, applied at ")
        );
    }

    fn refreshed(st: &mut InferenceServiceStatus, key: &str, s: i64) {
        let report = GraphReport {
            refresh: Some(key.to_owned()),
            ..GraphReport::default()
        };
        record(st, &report, at(s));
    }

    #[test]
    fn a_refresh_acts_once_per_value_ever_and_long_values_are_kept_as_digests() {
        let mut st = InferenceServiceStatus::default();
        assert_eq!(pending_refresh(None, Some(&st), &[]), None);
        assert_eq!(
            pending_refresh(Some("A"), Some(&st), &[]).as_deref(),
            Some("A")
        );
        refreshed(&mut st, "A", 0);
        assert_eq!(pending_refresh(Some("A"), Some(&st), &[]), None);
        assert_eq!(
            pending_refresh(Some("B"), Some(&st), &[]).as_deref(),
            Some("B")
        );
        refreshed(&mut st, "B", 1);
        // A, B, A: the second A is not acted on.
        assert_eq!(pending_refresh(Some("A"), Some(&st), &[]), None);
        let g = st.graph.clone().expect("graph");
        assert_eq!(g.refreshes_seen, ["A", "B"]);
        assert_eq!(g.last_refresh.as_deref(), Some("B"));
        // A value this process wrote a moment ago, not yet in the status read.
        assert_eq!(
            pending_refresh(Some("C"), Some(&st), &["C".to_owned()]),
            None
        );
        let long = "x".repeat(once::MAX_KEY + 1);
        let key = pending_refresh(Some(&long), Some(&st), &[]).expect("pending");
        assert!(key.starts_with("sha256:") && key.len() == 71, "{key}");
        refreshed(&mut st, &key, 2);
        assert_eq!(pending_refresh(Some(&long), Some(&st), &[]), None);
        // Sixteen kept, newest last.
        for i in 0..20 {
            refreshed(&mut st, &format!("v{i}"), 3 + i);
        }
        let g = st.graph.clone().expect("graph");
        assert_eq!(g.refreshes_seen.len(), once::KEEP);
        assert_eq!(g.refreshes_seen.last().map(String::as_str), Some("v19"));
        assert_eq!(g.refreshes_seen.first().map(String::as_str), Some("v4"));
    }

    #[test]
    fn a_status_from_before_the_list_keeps_its_last_value_seen() {
        let mut st = InferenceServiceStatus {
            graph: Some(GraphStatus {
                last_refresh: Some("old".into()),
                ..GraphStatus::default()
            }),
            ..InferenceServiceStatus::default()
        };
        assert_eq!(pending_refresh(Some("old"), Some(&st), &[]), None);
        refreshed(&mut st, "new", 0);
        let g = st.graph.expect("graph");
        assert_eq!(g.refreshes_seen, ["old", "new"]);
    }

    /// A reconcile of a Ray service whose graph `report` brought.
    fn ray_obs(report: GraphReport, ready: bool) -> crate::reconcile::status::Observation {
        use crate::reconcile::children::rayservice::RayServiceObserved;
        use crate::reconcile::status::{GraphUse, Observation, Outcome, PolicyResult, Routing};
        let mut obs = Observation::before_applying(
            Some(2),
            Outcome::RayServiceApplied {
                observed: RayServiceObserved {
                    ready,
                    reason: if ready {
                        "RayServiceReady"
                    } else {
                        "RayServiceNotReady"
                    }
                    .into(),
                    message: "RayService rag".into(),
                },
                nodes: 3,
                workers: Some((1, 1)),
                blocker: None,
                graph: GraphUse::Current,
                routing: Routing::NoGateway,
            },
            PolicyResult::Compliant,
        );
        obs.graph = Some(report);
        obs
    }

    #[test]
    fn a_fetch_that_brings_the_same_graph_writes_no_status_but_every_ten_minutes() {
        use crate::reconcile::status::compute;
        let d1 = format!("sha256:{}", "ab".repeat(32));
        let first = compute(None, &ray_obs(applied(&d1), true), at(0));
        let fetched_at =
            |st: &InferenceServiceStatus| st.graph.as_ref().and_then(|g| g.last_fetch_at.clone());
        assert_eq!(
            fetched_at(&first),
            Some(Time(at(0))),
            "the first fetch is written"
        );
        // The periodic fetch a minute later brings the same graph (a 304,
        // or the same bytes): the status is the same, nothing to write.
        let again = compute(Some(&first), &ray_obs(applied(&d1), true), at(60));
        assert_eq!(again, first, "a fetch time that moved is no change");
        // So for the next ten minutes.
        let later = compute(Some(&first), &ray_obs(applied(&d1), true), at(599));
        assert_eq!(later, first);
        // Ten minutes after the time written: it is written again.
        let due = compute(Some(&first), &ray_obs(applied(&d1), true), at(600));
        assert_ne!(due, first);
        assert_eq!(fetched_at(&due), Some(Time(at(600))));
        // Anything else that changes carries the new time with it: the
        // RayService no longer ready, a new graph.
        let not_ready = compute(Some(&first), &ray_obs(applied(&d1), false), at(120));
        assert_eq!(fetched_at(&not_ready), Some(Time(at(120))));
        let d2 = format!("sha256:{}", "cd".repeat(32));
        let new_graph = compute(Some(&first), &ray_obs(applied(&d2), true), at(180));
        assert_eq!(fetched_at(&new_graph), Some(Time(at(180))));
        assert_eq!(
            new_graph.graph.and_then(|g| g.applied_at),
            Some(Time(at(180)))
        );
        // A reconcile that fetched nothing keeps the time as it is.
        let none = GraphReport {
            fetched: false,
            ..applied(&d1)
        };
        assert_eq!(compute(Some(&first), &ray_obs(none, true), at(900)), first);
    }

    #[test]
    fn a_long_fetch_error_is_cut() {
        let mut st = InferenceServiceStatus::default();
        let report = GraphReport {
            fetched: true,
            error: Some("e".repeat(10_000)),
            ..GraphReport::default()
        };
        record(&mut st, &report, at(0));
        let err = st.graph.and_then(|g| g.last_fetch_error).expect("error");
        assert!(err.len() <= 1024, "{}", err.len());
    }
}
