//! The Prometheus gate: a failing gate rolls back, a query sees only its
//! namespace (other namespaces' matchers, regexes and bare selectors pinned
//! to it) and only such queries reach Prometheus, a gate without data fails
//! at the deadline asking once per interval, and a gate without a
//! Prometheus address says so in the status.

use crate::support;
use serde_json::json;

use crate::support::{Reconciler, WAIT, eventually};
use infergate::api::rollout::{RolloutPhase, RolloutStatus};
use infergate::reconcile::{Config, LeaseTiming};

use super::{Setup, canary_at_the_first_step, create, setup, wait_rollout, wait_route};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_prometheus_gate_rolls_back() {
    let s = setup("gate").await;
    let (client, ns, prometheus) = (s.client.clone(), s.ns.clone(), s.prometheus.clone());
    let query = "histogram_quantile(0.99, rate(latency{namespace=\"{{namespace}}\",pod=~\"{{canary}}-.*\"}[5m]))";
    create(
        &client,
        &ns,
        &[10, 30],
        "2s",
        json!({"analysis": {"prometheus": {"query": query, "threshold": {"max": 1.0}, "failureLimit": 2}}}),
    )
    .await;
    prometheus.set(&ns, 5.0);
    canary_at_the_first_step(&client, &ns).await;
    let st = rolled_back_by_the_gate(&client, &ns).await;
    assert!(
        st.message
            .unwrap_or_default()
            .contains("5 is above the maximum 1")
    );
    wait_route(&client, &ns, &[("chat", 100)]).await;
    // The query ran with its placeholders filled in, at least failureLimit times.
    let asked: Vec<String> = prometheus
        .queries
        .lock()
        .unwrap()
        .iter()
        .filter(|q| q.contains(&format!("namespace=\"{ns}\"")))
        .cloned()
        .collect();
    assert!(asked.len() >= 2, "{asked:?}");
    assert!(asked[0].contains("pod=~\"chat-canary-.*\""), "{asked:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_query_sees_only_its_namespace() {
    let s = setup("scope").await;
    let (client, ns, prometheus) = (s.client.clone(), s.ns.clone(), s.prometheus.clone());
    // Another namespace's matcher, a regex over every namespace, a negated
    // one and a selector with none, across a subquery and an on() join.
    let query = concat!(
        r#"max_over_time(sum(rate(errors{namespace="other-team",pod=~"{{canary}}-.*"}[1m]))[5m:1m])"#,
        r#" / on() group_left sum(rate(requests{namespace=~".*"}[1m] offset 1m))"#,
        r#" + 0 * count(up{namespace!="{{namespace}}"} or vector(0))"#,
    );
    create(&client, &ns, &[10, 30], "2s", at_most_one(query)).await;
    // Sent as written, the query would read other-team's failing value.
    prometheus.set("other-team", 5.0);
    canary_at_the_first_step(&client, &ns).await;
    let scoped = format!(
        r#"max_over_time(sum(rate(errors{{namespace="{ns}",pod=~"chat-canary-.*"}}[1m]))[5m:1m]) / on () group_left () sum(rate(requests{{namespace="{ns}"}}[1m] offset 1m)) + 0 * count(up{{namespace="{ns}"}} or vector(0))"#
    );
    eventually("the scoped query asked twice", WAIT, async || {
        let n = prometheus.queries.lock().unwrap().len();
        (n >= 2).then_some(()).ok_or(format!("{n} queries"))
    })
    .await;
    // Its own namespace has no sample yet: the gate holds at the first step.
    let st = wait_rollout(&client, &ns, "progressing", |_| true).await;
    assert_eq!(st.phase, RolloutPhase::Progressing, "{st:?}");
    assert_eq!(st.step, Some(0), "{st:?}");
    prometheus.set(&ns, 0.5);
    wait_route(&client, &ns, &[("chat", 70), ("chat-canary", 30)]).await;
    let asked = prometheus.queries.lock().unwrap().clone();
    assert!(asked.len() >= 3, "{asked:?}");
    for q in &asked {
        assert_eq!(q, &scoped);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gate_sends_only_queries_confined_to_the_namespace() {
    let s = setup("confined").await;
    let (client, ns, prometheus) = (s.client.clone(), s.ns.clone(), s.prometheus.clone());
    // Another namespace's matcher, a regex matcher, none at all, an
    // `on()` join and a subquery: every selector must reach Prometheus
    // pinned to the service's namespace.
    let query = "sum(rate(confined_latency{namespace=\"kube-system\"}[5m])) / on() \
                 sum(max_over_time(rate(confined_requests{namespace=~\".+\"}[1m])[5m:1m])) \
                 + ignoring(pod) count(confined_up)";
    create(&client, &ns, &[10, 30], "2s", at_most_one(query)).await;
    prometheus.set(&ns, 5.0);
    canary_at_the_first_step(&client, &ns).await;
    rolled_back_by_the_gate(&client, &ns).await;
    // The fake serves every test of this binary: this test's queries are
    // the ones naming its metrics.
    let asked: Vec<String> = prometheus
        .queries
        .lock()
        .unwrap()
        .iter()
        .filter(|q| q.contains("confined_"))
        .cloned()
        .collect();
    assert!(!asked.is_empty());
    let pinned = format!("namespace=\"{ns}\"");
    for q in &asked {
        assert!(!q.contains("kube-system") && !q.contains(".+"), "{q}");
        // Every selector carries exactly the service's namespace.
        let expr = promql_parser::parser::parse(q).expect("valid PromQL");
        let text = expr.to_string();
        assert_eq!(text.matches("namespace").count(), 3, "{q}");
        assert_eq!(text.matches(&pinned).count(), 3, "{q}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_without_data_fails_at_the_deadline_asking_once_per_interval() {
    let s = setup("nodata").await;
    let (client, ns, prometheus) = (s.client.clone(), s.ns.clone(), s.prometheus.clone());
    // No value set: every query answers no sample.
    gated_on_up_at_the_first_step(&client, &ns, "3s", "15s").await;
    wait_rollout(&client, &ns, "holding for data", |r| {
        r.reason.as_deref() == Some("AnalysisNoData")
    })
    .await;
    let st = wait_rollout(&client, &ns, "failed for want of data", |r| {
        r.phase == RolloutPhase::RolledBack
    })
    .await;
    assert_eq!(st.reason.as_deref(), Some("AnalysisNoData"));
    assert!(st.message.unwrap_or_default().len() <= 1024);
    // Asked at 3 s, 6 s, ... within the 15 s: once per interval, never faster.
    // The fake serves every test of this binary: count this namespace's.
    let mine = format!("namespace=\"{ns}\"");
    let asked = prometheus
        .queries
        .lock()
        .unwrap()
        .iter()
        .filter(|q| q.contains(&mine))
        .count();
    assert!((1..=6).contains(&asked), "{asked} queries");
    wait_route(&client, &ns, &[("chat", 100)]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_with_no_prometheus_address_says_so_in_status() {
    let Setup {
        client,
        ns,
        mut reconciler,
        kubeconfig,
        ..
    } = setup("noaddress").await;
    // This reconciler knows no Prometheus (and no policy names one).
    reconciler.take().expect("reconciler").stop();
    let config = Config {
        lease: LeaseTiming {
            duration_seconds: 6,
            grace_seconds: 2,
        },
        ..support::reconcile_config(&format!("{ns}-1"))
    };
    let _bare = Reconciler::start(kubeconfig, config);
    gated_on_up_at_the_first_step(&client, &ns, "2s", "30s").await;
    let st = wait_rollout(&client, &ns, "held for want of an address", |r| {
        r.reason.as_deref() == Some("NoPrometheusAddress")
    })
    .await;
    let message = st.message.unwrap_or_default();
    assert!(
        message.contains("no Prometheus address")
            && message.contains("defaults.rollout.analysis.prometheus.address"),
        "{message}"
    );
    assert_eq!(st.weight, Some(10));
}

/// A canary of steps 10 and 30 gated on `up >= 1`, asked every `interval`
/// until `deadline`, at its first step.
async fn gated_on_up_at_the_first_step(
    client: &kube::Client,
    ns: &str,
    interval: &str,
    deadline: &str,
) {
    create(
        client,
        ns,
        &[10, 30],
        interval,
        json!({"progressDeadline": deadline,
               "analysis": {"prometheus": {"query": "up", "threshold": {"min": 1.0}}}}),
    )
    .await;
    canary_at_the_first_step(client, ns).await;
}

/// A gate passing while `query` is at most 1.
fn at_most_one(query: &str) -> serde_json::Value {
    json!({"analysis": {"prometheus": {"query": query, "threshold": {"max": 1.0}}}})
}

/// The rollout, once its gate's analysis rolled it back.
async fn rolled_back_by_the_gate(client: &kube::Client, ns: &str) -> RolloutStatus {
    let st = wait_rollout(client, ns, "rolled back by the gate", |r| {
        r.phase == RolloutPhase::RolledBack
    })
    .await;
    assert_eq!(st.reason.as_deref(), Some("AnalysisFailed"));
    st
}
