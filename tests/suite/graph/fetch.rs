//! The HTTPS fetcher against a local TLS graph server (rcgen certificates):
//! bearer token and ETag, errors by category that never show the token,
//! redirects and the deadline, backoff and refresh per service, fetches in
//! flight bounded per namespace and in all and served in the order they
//! asked, an untrusted certificate, `--graph-ca-file`.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::support::{GRAPH_TOKEN, GraphServer, read_fixture};
use infergate::graph::GraphError;
use infergate::graph::fetch::{BearerToken, FetchOptions, FetchRequest, GraphFetcher};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

use super::{quick, rag};

fn token() -> BearerToken {
    BearerToken::new(GRAPH_TOKEN.as_bytes()).expect("token")
}

/// A fetch for the service `key` (`namespace/name`) of the local graph
/// server: loopback, so as if a policy listed 127.0.0.1 literally.
fn req<'a>(key: &'a str, url: &'a str, token: Option<&'a BearerToken>) -> FetchRequest<'a> {
    FetchRequest {
        cache_key: key,
        namespace: key.split('/').next().unwrap_or_default(),
        url,
        token,
        internal_allowed: true,
    }
}

#[tokio::test]
async fn fetch_over_tls_with_bearer_and_etag() {
    let server = GraphServer::start();
    server.set_graph(rag(), "\"v1\"");
    let fetcher = GraphFetcher::new(quick(), vec![server.ca.clone()]).expect("fetcher");
    let url = server.url("/graph");
    let t = token();

    let first = fetcher
        .fetch(req("team-a/rag", &url, Some(&t)))
        .await
        .expect("fetch");
    assert!(!first.not_modified);
    assert_eq!(first.etag.as_deref(), Some("\"v1\""));
    assert_eq!(first.graph.ingress, "router");
    assert!(
        server.state.h2.load(Ordering::SeqCst) >= 1,
        "HTTP/2 over ALPN"
    );

    // Unchanged: a conditional request answered 304 from the cache.
    let second = fetcher
        .fetch(req("team-a/rag", &url, Some(&t)))
        .await
        .expect("fetch");
    assert!(second.not_modified);
    assert_eq!(second.graph, first.graph);
    assert_eq!(server.state.full.load(Ordering::SeqCst), 1);
    assert_eq!(server.state.not_modified.load(Ordering::SeqCst), 1);

    // Another service with the same URL has its own cache entry.
    let other = fetcher
        .fetch(req("team-b/rag", &url, Some(&t)))
        .await
        .expect("fetch");
    assert!(!other.not_modified);
    assert_eq!(server.state.full.load(Ordering::SeqCst), 2);

    // An update is picked up.
    server.set_graph(read_fixture("graph/rag-v2.pb"), "\"v2\"");
    let third = fetcher
        .fetch(req("team-a/rag", &url, Some(&t)))
        .await
        .expect("fetch");
    assert!(!third.not_modified);
    assert!(third.graph.nodes.iter().any(|n| n.name == "reranker"));

    // Forgetting a service drops its ETag: the next fetch downloads again.
    fetcher.forget("team-a/rag");
    let fourth = fetcher
        .fetch(req("team-a/rag", &url, Some(&t)))
        .await
        .expect("fetch");
    assert!(!fourth.not_modified);
    assert_eq!(server.state.referer.load(Ordering::SeqCst), 0, "no Referer");
}

#[tokio::test]
async fn fetch_errors_are_reported_by_category_and_never_show_the_token() {
    let server = GraphServer::start();
    server.set_graph(rag(), "\"v1\"");
    let fetcher = GraphFetcher::new(quick(), vec![server.ca.clone()]).expect("fetcher");
    let wrong = BearerToken::new(b"wrong-token-value").expect("token");
    let t = token();

    let check = |e: &GraphError, reason: &str| {
        assert_eq!(e.reason(), reason, "{e}");
        for text in [e.to_string(), format!("{e:?}")] {
            assert!(
                !text.contains(GRAPH_TOKEN) && !text.contains("wrong-token-value"),
                "{text}"
            );
        }
    };
    // Each case is its own service: a failure backs its service off.
    let before = server.state.requests.load(Ordering::SeqCst);
    let url = server.url("/graph");
    let e = fetcher
        .fetch(req("a/1", &url, Some(&wrong)))
        .await
        .unwrap_err();
    check(&e, "HTTPStatus");
    assert!(
        e.to_string().contains("401") && e.to_string().contains("refused"),
        "{e}"
    );
    assert_eq!(
        server.state.requests.load(Ordering::SeqCst) - before,
        1,
        "one request"
    );
    let e = fetcher.fetch(req("a/2", &url, None)).await.unwrap_err();
    check(&e, "HTTPStatus");

    let cases: [(&str, &str, &str); 6] = [
        ("a/3", "/nothing", "HTTPStatus"),
        ("a/4", "/garbage", "InvalidGraph"),
        ("a/5", "/large", "TooLarge"),
        ("a/6", "/large-chunked", "TooLarge"),
        ("a/7", "/redirect-http", "HTTPStatus"),
        ("a/8", "/redirect-other", "HTTPStatus"),
    ];
    for (key, path, reason) in cases {
        let url = server.url(path);
        let e = fetcher.fetch(req(key, &url, Some(&t))).await.unwrap_err();
        check(&e, reason);
    }
    // Redirects: never to another host (not even a name for the same
    // address), never to http; within the host they are followed.
    assert_eq!(server.state.via_localhost.load(Ordering::SeqCst), 0);
    let url = server.url("/redirect-same");
    let same = fetcher
        .fetch(req("a/9", &url, Some(&t)))
        .await
        .expect("same host");
    assert_eq!(same.graph.ingress, "router");
    assert_eq!(server.state.referer.load(Ordering::SeqCst), 0, "no Referer");

    // One deadline for the whole fetch.
    let started = std::time::Instant::now();
    let url = server.url("/slow");
    let e = fetcher
        .fetch(req("a/10", &url, Some(&t)))
        .await
        .unwrap_err();
    check(&e, "Timeout");
    assert!(e.to_string().contains("within 0.8s"), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the deadline bounds the fetch"
    );

    let url = format!("http://{}/graph", server.addr);
    let e = fetcher
        .fetch(req("a/11", &url, Some(&t)))
        .await
        .unwrap_err();
    check(&e, "DestinationNotAllowed");

    // Nothing listening.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = closed.local_addr().expect("addr").port();
    drop(closed);
    let url = format!("https://127.0.0.1:{port}/graph");
    let e = fetcher
        .fetch(req("a/12", &url, Some(&t)))
        .await
        .unwrap_err();
    check(&e, "ConnectFailure");

    // Loopback without a literal policy entry: refused before connecting.
    let before = server.state.requests.load(Ordering::SeqCst);
    let url = server.url("/graph");
    let e = fetcher
        .fetch(FetchRequest {
            internal_allowed: false,
            ..req("a/13", &url, Some(&t))
        })
        .await
        .unwrap_err();
    check(&e, "DestinationNotAllowed");
    assert!(
        e.to_string().contains("127.0.0.1, a loopback address"),
        "{e}"
    );
    assert_eq!(server.state.requests.load(Ordering::SeqCst), before);
}

#[tokio::test]
async fn failing_fetches_back_off_per_service() {
    let server = GraphServer::start();
    server.set_graph(rag(), "\"v1\"");
    let fetcher = GraphFetcher::new(quick(), vec![server.ca.clone()]).expect("fetcher");
    let t = token();
    server.state.flaky_failures.store(2, Ordering::SeqCst);
    let url = server.url("/flaky");
    let before = server.state.requests.load(Ordering::SeqCst);
    let e = fetcher
        .fetch(req("a/flaky", &url, Some(&t)))
        .await
        .unwrap_err();
    assert_eq!(e.reason(), "HTTPStatus");
    assert!(e.to_string().contains("503"), "{e}");
    // Within the backoff: no request, a deferral the reconciler does not report.
    let wait = fetcher.retry_in("a/flaky", &url).expect("backing off");
    assert!(wait <= Duration::from_millis(200), "{wait:?}");
    let e = fetcher
        .fetch(req("a/flaky", &url, Some(&t)))
        .await
        .unwrap_err();
    assert!(e.is_deferral(), "{e}");
    assert_eq!(server.state.requests.load(Ordering::SeqCst) - before, 1);
    // Another service is not held back by this one's failures.
    let graph = server.url("/graph");
    fetcher
        .fetch(req("a/other", &graph, Some(&t)))
        .await
        .expect("other service");
    // The second failure doubles the wait.
    tokio::time::sleep(wait).await;
    fetcher
        .fetch(req("a/flaky", &url, Some(&t)))
        .await
        .unwrap_err();
    let wait = fetcher.retry_in("a/flaky", &url).expect("backing off");
    assert!(
        wait > Duration::from_millis(200) && wait <= Duration::from_millis(400),
        "{wait:?}"
    );
    // A new URL starts afresh; success clears the backoff.
    assert!(fetcher.retry_in("a/flaky", &graph).is_none());
    tokio::time::sleep(wait).await;
    let got = fetcher
        .fetch(req("a/flaky", &url, Some(&t)))
        .await
        .expect("third attempt");
    assert_eq!(got.graph.ingress, "router");
    assert!(fetcher.retry_in("a/flaky", &url).is_none());
}

#[tokio::test]
async fn a_refresh_waits_for_the_interval_and_for_the_backoff() {
    let server = GraphServer::start();
    server.set_graph(rag(), "\"v1\"");
    let options = quick();
    let interval = options.refresh_interval;
    let fetcher = GraphFetcher::new(options, vec![server.ca.clone()]).expect("fetcher");
    let t = token();
    let url = server.url("/flaky");
    // Never fetched: a refresh may fetch at once.
    assert_eq!(fetcher.refresh_in("a/r", &url), None);
    fetcher
        .fetch(req("a/r", &url, Some(&t)))
        .await
        .expect("first fetch");
    // Right after a fetch: not before the interval has passed since it ended.
    let wait = fetcher.refresh_in("a/r", &url).expect("waits");
    assert!(
        wait > interval - Duration::from_millis(500) && wait <= interval,
        "{wait:?}"
    );
    assert!(
        fetcher
            .fresh("a/r", &url, Duration::from_secs(60))
            .is_some()
    );
    // Another service is not held back by this one's refreshes.
    assert_eq!(fetcher.refresh_in("a/other", &url), None);
    tokio::time::sleep(wait).await;
    assert_eq!(fetcher.refresh_in("a/r", &url), None);
    // A failed fetch: the backoff holds a refresh too, and the graph at
    // hand is no longer reused as fresh (the retry comes after the backoff).
    server.state.flaky_failures.store(20, Ordering::SeqCst);
    fetcher.fetch(req("a/r", &url, Some(&t))).await.unwrap_err();
    assert!(
        fetcher
            .fresh("a/r", &url, Duration::from_secs(60))
            .is_none()
    );
    let retry = fetcher.retry_in("a/r", &url).expect("backing off");
    let refresh = fetcher.refresh_in("a/r", &url).expect("waits");
    assert!(refresh >= retry, "{refresh:?} < {retry:?}");
    // Failing again and again: a refresh never comes sooner than the
    // backoff, which grows to its longest.
    for _ in 0..4 {
        tokio::time::sleep(fetcher.retry_in("a/r", &url).unwrap_or_default()).await;
        fetcher.fetch(req("a/r", &url, Some(&t))).await.unwrap_err();
        let retry = fetcher.retry_in("a/r", &url).expect("backing off");
        assert!(fetcher.refresh_in("a/r", &url) >= Some(retry));
    }
    assert!(
        fetcher.retry_in("a/r", &url) > Some(Duration::from_millis(600)),
        "the backoff doubled to its longest"
    );
}

#[tokio::test]
async fn fetches_in_flight_are_bounded_per_namespace_and_in_all() {
    let server = GraphServer::start();
    server.set_graph(rag(), "\"v1\"");
    let fetcher = std::sync::Arc::new(
        GraphFetcher::new(
            FetchOptions {
                in_flight: 3,
                ..quick()
            },
            vec![server.ca.clone()],
        )
        .expect("fetcher"),
    );
    let (turns_tx, mut turns) = tokio::sync::mpsc::unbounded_channel();
    fetcher.notify_turns(turns_tx);
    let slow = server.url("/slow");
    // Two slow fetches of namespace a hold its two slots...
    let mut held = Vec::new();
    for name in ["a/s1", "a/s2"] {
        let (f, u) = (fetcher.clone(), slow.clone());
        held.push(tokio::spawn(async move {
            f.fetch(req(name, &u, Some(&token()))).await.map(|_| ())
        }));
    }
    tokio::time::sleep(Duration::from_millis(150)).await;
    // ... so a third of a takes its place in line at once, without a request,
    let started = std::time::Instant::now();
    let requests = server.state.requests.load(Ordering::SeqCst);
    let url = server.url("/graph");
    let t = token();
    let e = fetcher
        .fetch(req("a/s3", &url, Some(&t)))
        .await
        .unwrap_err();
    assert_eq!(e.reason(), "FetchQueued");
    assert!(
        e.is_deferral() && e.to_string().contains("first in namespace a's line"),
        "{e}"
    );
    assert!(started.elapsed() < Duration::from_millis(100));
    assert_eq!(server.state.requests.load(Ordering::SeqCst), requests);
    // ... while namespace b still fetches (the third slot in all),
    fetcher
        .fetch(req("b/s1", &url, Some(&t)))
        .await
        .expect("b is not held back");
    // ... and with all slots taken, anyone waits.
    let (f, u) = (fetcher.clone(), slow.clone());
    held.push(tokio::spawn(async move {
        f.fetch(req("c/s1", &u, Some(&token()))).await.map(|_| ())
    }));
    tokio::time::sleep(Duration::from_millis(150)).await;
    let e = fetcher
        .fetch(req("d/s1", &url, Some(&t)))
        .await
        .unwrap_err();
    assert!(
        e.reason() == "FetchQueued" && e.to_string().contains("3 in all"),
        "{e}"
    );
    for h in held {
        let e = h.await.expect("join").unwrap_err();
        assert_eq!(e.reason(), "Timeout");
    }
    // Slots are given back to those in line, in turn, and they are told.
    let mut told = vec![
        turns.recv().await.expect("a turn"),
        turns.recv().await.expect("a turn"),
    ];
    told.sort();
    assert_eq!(told, ["a/s3", "d/s1"]);
    for key in ["a/s3", "d/s1"] {
        fetcher
            .fetch(req(key, &url, Some(&t)))
            .await
            .expect("its turn");
    }
}

#[tokio::test]
async fn waiting_fetches_are_served_in_the_order_they_asked() {
    // Six services of one namespace whose fetches all time out (800 ms),
    // two at a time, each retrying after its backoff (200 ms), as the
    // reconciler does: wait out a backoff, take a slot or a place in line,
    // come back when told it is its turn.
    let server = GraphServer::start();
    let fetcher =
        std::sync::Arc::new(GraphFetcher::new(quick(), vec![server.ca.clone()]).expect("fetcher"));
    let (turns_tx, mut turns) = tokio::sync::mpsc::unbounded_channel::<String>();
    fetcher.notify_turns(turns_tx);
    let names: Vec<String> = (0..6).map(|i| format!("q/s{i}")).collect();
    let bells: std::collections::HashMap<String, std::sync::Arc<tokio::sync::Notify>> = names
        .iter()
        .map(|n| (n.clone(), std::sync::Arc::new(tokio::sync::Notify::new())))
        .collect();
    let ring = bells.clone();
    tokio::spawn(async move {
        while let Some(key) = turns.recv().await {
            if let Some(bell) = ring.get(&key) {
                bell.notify_one();
            }
        }
    });
    let slots = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let began = std::time::Instant::now();
    let mut services = Vec::new();
    for name in &names {
        let (f, slots, bell, name) = (
            fetcher.clone(),
            slots.clone(),
            bells[name].clone(),
            name.clone(),
        );
        let url = server.url("/slow");
        services.push(tokio::spawn(async move {
            loop {
                if slots.lock().expect("lock").len() >= 8 {
                    return;
                }
                if let Some(wait) = f.retry_in(&name, &url) {
                    tokio::time::sleep(wait).await;
                    continue;
                }
                match f.slot(&name, "q") {
                    Ok(slot) => {
                        slots
                            .lock()
                            .expect("lock")
                            .push((name.clone(), began.elapsed()));
                        let t = token();
                        let e = f
                            .fetch_in(slot, req(&name, &url, Some(&t)))
                            .await
                            .unwrap_err();
                        assert_eq!(e.reason(), "Timeout");
                    }
                    Err(e) => {
                        assert_eq!(e.reason(), "FetchQueued", "{e}");
                        // Told when it is its turn; asks again now and then anyway.
                        let _ = tokio::time::timeout(Duration::from_secs(2), bell.notified()).await;
                    }
                }
            }
        }));
        // They ask in this order.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for s in services {
        s.await.expect("service");
    }
    let slots = slots.lock().expect("lock").clone();
    let order: Vec<&str> = slots.iter().map(|(n, _)| n.as_str()).collect();
    // Every one is tried once, in the order they asked, before any retry;
    // then the first two, whose retries joined the end of the line.
    assert_eq!(
        order[..8],
        [
            "q/s0", "q/s1", "q/s2", "q/s3", "q/s4", "q/s5", "q/s0", "q/s1"
        ],
        "{slots:?}"
    );
    // Six fetches of 800 ms, two at a time: the sixth starts after about 1.6 s.
    assert!(slots[5].1 < Duration::from_millis(2400), "{slots:?}");
}

#[tokio::test]
async fn untrusted_certificate_is_a_tls_failure() {
    let server = GraphServer::start();
    server.set_graph(rag(), "\"v1\"");
    let other_ca = infergate::webhook::tls::certs::generate_ca("other", Duration::from_secs(3600))
        .expect("ca");
    let other = CertificateDer::from_pem_slice(other_ca.cert.as_bytes()).expect("der");
    let fetcher = GraphFetcher::new(quick(), vec![other]).expect("fetcher");
    let url = server.url("/graph");
    let t = token();
    let e = fetcher.fetch(req("k/k", &url, Some(&t))).await.unwrap_err();
    assert_eq!(e.reason(), "TLSFailure", "{e}");
    assert!(e.to_string().contains("UnknownIssuer"), "{e}");
    assert!(e.to_string().contains("--graph-ca-file"), "{e}");
    assert_eq!(
        server.state.requests.load(Ordering::SeqCst),
        0,
        "no request without a trusted handshake"
    );
}

#[tokio::test]
async fn ca_file_flag_is_honoured() {
    let server = GraphServer::start();
    server.set_graph(rag(), "\"v1\"");
    let dir = tempfile::tempdir().expect("tempdir");
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &server.ca_pem).expect("write");
    let fetcher = GraphFetcher::from_ca_file(quick(), Some(&ca_file)).expect("fetcher");
    let url = server.url("/graph");
    let t = token();
    let got = fetcher
        .fetch(req("k/k", &url, Some(&t)))
        .await
        .expect("fetch");
    assert_eq!(got.graph.name, "rag");
}
