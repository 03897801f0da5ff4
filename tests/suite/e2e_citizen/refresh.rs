//! Tenants toggling `infergate.dev/graph-refresh` as often as they like:
//! infergate fetches no more often for it (at most once per 30 s per
//! service, a failing source keeps its backoff) and takes no more of the
//! fetch slots than waiting would (docs/security.md, "A tenant: the
//! reconciler as a confused deputy").

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use kube::api::{Api, Patch, PatchParams, PostParams};

use infergate::api::v1beta1::{GraphSpec, InferenceService};
use infergate::graph::fetch::FetchOptions;
use infergate::reconcile::Config;

use super::{TURN, uninstall_admission};
use crate::support::tarpit::{Spans, Tarpit, most_at_once};
use crate::support::{
    self, GRAPH_TOKEN, GraphServer, Reconciler, WAIT, condition, read_fixture, wait_for,
};

const ENGINE: &str = "registry.example.com/vllm:0.9";

/// How many fetch slots the refresh test's tarpit services fill: the shipped
/// 2 per namespace in 4 namespaces, the shipped 8 in all.
const TOGGLING_NAMESPACES: usize = 4;
const TOGGLING_PER_NAMESPACE: usize = 2;

/// How many fetches a service whose every fetch fails may have started
/// `elapsed` after its first: each waits the fetch deadline and then its
/// backoff (`backoff`, doubling up to `max_backoff`) before the next. (A
/// second of slack: the tarpit notes a connection a moment after the fetch
/// began, and that moment varies.)
fn fetches_allowed(options: &FetchOptions, elapsed: Duration) -> usize {
    let (mut n, mut at, mut wait) = (1, Duration::ZERO, options.backoff);
    loop {
        at += options.deadline + wait;
        if at > elapsed + Duration::from_secs(1) {
            return n;
        }
        n += 1;
        wait = (wait * 2).min(options.max_backoff);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn toggled_refreshes_against_tarpits_leave_a_new_tenant_its_graph() {
    let _turn = TURN.lock().await;
    // Registrations an earlier test of this module left call nobody now
    // (the admission policy is applied again below).
    uninstall_admission(support::control_plane().await);
    let (cp, client, sa_kubeconfig) = support::reconciler_setup(&[support::rayservice_crd()]).await;
    // The shipped limits: 10 s deadline, 2 fetches per namespace and 8 in
    // all, backoff from 5 s, a refresh at most once per 30 s per service.
    let server = support::GraphServer::start();
    server.set_graph(support::read_fixture("graph/rag.pb"), "\"v1\"");
    let options = FetchOptions::default();
    assert_eq!(
        (options.per_namespace, options.in_flight, options.deadline),
        (
            TOGGLING_PER_NAMESPACE,
            TOGGLING_NAMESPACES * TOGGLING_PER_NAMESPACE,
            Duration::from_secs(10)
        )
    );
    // Four namespaces for the tarpits and a fifth for the new service; the
    // reconciler watches only these (services the other tests of this file
    // left behind would take fetch slots too).
    let mut namespaces = Vec::new();
    for n in 0..TOGGLING_NAMESPACES {
        namespaces.push(cp.fresh_namespace(&format!("toggle{n}")).await);
    }
    let fifth = cp.fresh_namespace("toggle-new").await;
    let scope =
        infergate::state::Scope::from_list(&[namespaces.clone(), vec![fifth.clone()]].concat());
    let _reconciler = Reconciler::start(
        sa_kubeconfig,
        support::reconcile_config("toggle-e2e")
            .with_graph_fetcher(server.fetcher_with(options.clone()))
            .with_scope(scope),
    );

    // Eight services, two in each of four namespaces, each with a tarpit
    // of its own (connections at once counted across all of them).
    let spans = Spans::default();
    let mut toggled: Vec<(Api<InferenceService>, String, Tarpit)> = Vec::new();
    for ns in &namespaces {
        support::allow_graph_host(&client, ns, "127.0.0.1").await;
        let services: Api<InferenceService> = Api::namespaced(client.clone(), ns);
        for i in 0..TOGGLING_PER_NAMESPACE {
            let tarpit = Tarpit::sharing(Arc::clone(&spans));
            let name = format!("slow-{i}");
            let url = format!("https://127.0.0.1:{}/graph", tarpit.port);
            services
                .create(
                    &PostParams::default(),
                    &support::llama_service(
                        &name,
                        ENGINE,
                        Some(GraphSpec {
                            url,
                            bearer_token_secret_ref: None,
                        }),
                    ),
                )
                .await
                .expect("create tarpit service");
            toggled.push((services.clone(), name, tarpit));
        }
    }
    // Every second, a new refresh value on each of them.
    let writes: Vec<(Api<InferenceService>, String)> = toggled
        .iter()
        .map(|(api, name, _)| (api.clone(), name.clone()))
        .collect();
    let toggler = tokio::spawn(async move {
        for round in 0u64.. {
            for (api, name) in &writes {
                let patch = serde_json::json!({"metadata": {"annotations": {
                    "infergate.dev/graph-refresh": format!("t{round}")
                }}});
                let _ = api
                    .patch(name, &PatchParams::default(), &Patch::Merge(patch))
                    .await;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    let all = TOGGLING_NAMESPACES * TOGGLING_PER_NAMESPACE;
    support::eventually("every fetch slot held by a tarpit", WAIT, async || {
        let open = toggled
            .iter()
            .map(|(_, _, t)| t.open.load(Ordering::SeqCst))
            .sum::<usize>();
        (open >= all).then_some(()).ok_or(format!("{open} open"))
    })
    .await;

    // A fifth namespace's new Ray service, while every slot is held.
    let ns = fifth;
    support::allow_graph_host(&client, &ns, "127.0.0.1").await;
    support::set_graph_token(&client, &ns, support::GRAPH_TOKEN).await;
    cp.bind_graph_token_reader(&ns);
    let services: Api<InferenceService> = Api::namespaced(client.clone(), &ns);
    let started = Instant::now();
    services
        .create(&PostParams::default(), &server.service("rag"))
        .await
        .expect("create service");
    wait_for::<InferenceService>(&client, &ns, "rag", "GraphReady=True", WAIT, |s| {
        condition(s, "GraphReady").is_some_and(|c| c.status == "True")
    })
    .await;
    let took = started.elapsed();

    // Toggling on for 40 s after the first tarpit connection at least,
    // long enough for a service that refetched on every refresh to have
    // started more fetches than its backoff allows.
    let first = toggled
        .iter()
        .filter_map(|(_, _, t)| t.first())
        .min()
        .expect("a tarpit connection");
    let until = first + Duration::from_secs(40);
    if let Some(left) = until.checked_duration_since(Instant::now()) {
        tokio::time::sleep(left).await;
    }
    toggler.abort();
    let counts: Vec<(usize, usize)> = toggled
        .iter()
        .map(|(_, _, t)| {
            let since = t.first().map_or(Duration::ZERO, |f| f.elapsed());
            (t.total(), fetches_allowed(&options, since))
        })
        .collect();
    eprintln!(
        "a fifth namespace's service had its graph {took:?} after it was created, with all {all} slots held by tarpits; tarpit fetches per service (made, allowed by the backoff): {counts:?}; at most {} at once",
        most_at_once(&spans)
    );
    assert!(
        took < Duration::from_secs(20),
        "GraphReady=True took {took:?}"
    );
    assert!(
        counts.iter().all(|(made, allowed)| made <= allowed),
        "toggling the refresh made a tarpit service fetch more often than its backoff allows: {counts:?}"
    );
    assert!(
        most_at_once(&spans) <= all,
        "{} at once",
        most_at_once(&spans)
    );
}

/// Ten refresh values in ten seconds, with the shipped limits (a refresh
/// fetches at most once per 30 s per service; the resync every 60 s): the
/// first fetches at once, the others wait for the end of the 30 s and are
/// answered by one fetch, the last value's. At most one fetch more than
/// the resync alone would make.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_refresh_values_in_ten_seconds_fetch_at_most_once_more_than_the_resync() {
    let _turn = TURN.lock().await;
    // Registrations an earlier test of this module left call nobody now
    // (the admission policy is applied again below).
    uninstall_admission(support::control_plane().await);
    let (cp, client, sa_kubeconfig) = support::reconciler_setup(&[support::rayservice_crd()]).await;
    let ns = cp.fresh_namespace("ray-burst").await;
    let server = GraphServer::start();
    server.set_graph(read_fixture("graph/rag.pb"), "\"v1\"");
    let options = FetchOptions {
        deadline: Duration::from_secs(3),
        ..FetchOptions::default()
    };
    let interval = options.refresh_interval;
    let fetcher = server.fetcher_with(options);
    let config = Config {
        graph_resync: infergate::reconcile::config::GRAPH_RESYNC,
        ..support::reconcile_config("ray-burst-e2e").with_graph_fetcher(fetcher.clone())
    };
    let resync = config.graph_resync;
    assert_eq!(
        (interval, resync),
        (Duration::from_secs(30), Duration::from_secs(60))
    );
    let _reconciler = Reconciler::start(sa_kubeconfig, config);
    support::allow_graph_host(&client, &ns, "127.0.0.1").await;
    support::set_graph_token(&client, &ns, GRAPH_TOKEN).await;
    cp.bind_graph_token_reader(&ns);
    let services: Api<InferenceService> = Api::namespaced(client.clone(), &ns);
    services
        .create(&PostParams::default(), &server.service("rag"))
        .await
        .expect("create service");
    let graph_of = |s: &InferenceService| s.status.as_ref().and_then(|st| st.graph.clone());
    wait_for(&client, &ns, "rag", "the first graph", WAIT, |s| {
        condition(s, "GraphReady").is_some_and(|c| c.status == "True")
    })
    .await;
    // The first fetch ended by now (a moment ago: the resync's next fetch
    // is due within 60 s of here).
    let first_fetch = Instant::now();
    // The burst starts once a refresh may fetch at once (its worst case).
    let key = format!("{ns}/rag");
    let url = server.url("/graph");
    while let Some(w) = fetcher.refresh_in(&key, &url) {
        tokio::time::sleep(w).await;
    }
    let asked = server.state.requests.load(Ordering::SeqCst);
    let burst = Instant::now();
    for i in 0..10 {
        support::refresh_graph(&services, "rag", &format!("b{i}")).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // The last value is acted on once the 30 s after the burst's first
    // fetch have passed.
    let s = wait_for(
        &client,
        &ns,
        "rag",
        "b9 acted on",
        WAIT,
        |s: &InferenceService| {
            graph_of(s).is_some_and(|g| g.refreshes_seen.iter().any(|r| r == "b9"))
        },
    )
    .await;
    let acted = burst.elapsed();
    // A moment more: nothing else fetches.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let fetches = server.state.requests.load(Ordering::SeqCst) - asked;
    let end = first_fetch.elapsed();
    let start = burst.duration_since(first_fetch);
    // Resync fetches in [start, end] after the first fetch, had nothing
    // been refreshed: one at each multiple of 60 s (the first fetch ended
    // a moment before `first_fetch`, so its multiples come a moment sooner:
    // counted generously).
    let multiples = |d: Duration| (d.as_secs_f64() / resync.as_secs_f64()).floor() as usize;
    let resync_alone = multiples(end + Duration::from_secs(1)) - multiples(start);
    let seen = graph_of(&s).expect("status.graph").refreshes_seen;
    eprintln!(
        "ten values from {start:?} after the first fetch: b9 acted on after {acted:?}; {fetches} fetches by {end:?} (the resync alone: {resync_alone}); acted on: {seen:?}"
    );
    assert!(
        fetches <= resync_alone + 1,
        "{fetches} fetches, the resync alone {resync_alone}"
    );
    assert!(
        acted >= interval - Duration::from_secs(2),
        "b9 acted on after {acted:?}, within 30 s of the burst's first fetch"
    );
    // Each value acted on once at most, the last among them, newest last.
    assert_eq!(seen.last().map(String::as_str), Some("b9"));
    let mut unique = seen.clone();
    unique.dedup();
    assert_eq!(unique, seen);
}
