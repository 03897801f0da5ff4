//! Serving graphs: the text examples against the committed binary fixtures,
//! `infergate graph` through the binary, and the HTTPS fetcher against a
//! local TLS graph server (rcgen certificates, bearer check, ETag, errors).

use crate::support;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::support::{
    GRAPH_TOKEN, GraphServer, binary, fixture, infergate, read_fixture, root, run,
};
use infergate::graph::fetch::{
    BearerToken, FetchOptions, FetchRequest, GraphFetcher, TOKEN_HOSTS_ANNOTATION,
};
use infergate::graph::{self, GraphError, ServingGraph};
use prost_reflect::{DescriptorPool, DynamicMessage};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

/// Encode a text-format graph through the compiled descriptors.
fn encode_text(path: &Path) -> Vec<u8> {
    let pool = DescriptorPool::decode(graph::FILE_DESCRIPTOR_SET).expect("descriptor set");
    let desc = pool
        .get_message_by_name(graph::GRAPH_MESSAGE)
        .expect("ServingGraph in the descriptors");
    let text = std::fs::read_to_string(path).expect("read example");
    let dynamic = DynamicMessage::parse_text_format(desc, &text)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let typed: ServingGraph = dynamic.transcode_to().expect("transcode");
    graph::encode(&typed)
}

fn examples() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("examples/graphs"))
        .expect("examples/graphs")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "txtpb"))
        .collect();
    files.sort();
    files
}

#[test]
fn fixtures_match_the_text_examples() {
    let files = examples();
    assert!(files.len() >= 4, "expected the example graphs");
    let update = std::env::var_os("INFERGATE_UPDATE_FIXTURES").is_some();
    for path in files {
        let stem = path.file_stem().and_then(|s| s.to_str()).expect("stem");
        let encoded = encode_text(&path);
        let target = fixture(&format!("graph/{stem}.pb"));
        if update {
            std::fs::write(&target, &encoded).expect("write fixture");
        }
        let committed = std::fs::read(&target).unwrap_or_default();
        assert!(
            committed == encoded,
            "{} is stale: run INFERGATE_UPDATE_FIXTURES=1 cargo test --test graph fixtures",
            target.display()
        );
    }
}

#[test]
fn descriptors_and_generated_types_agree_field_by_field() {
    // Every field the .proto declares survives a trip through the generated
    // struct: encode with the descriptors, decode with prost, re-encode, compare.
    let bytes = encode_text(&root().join("examples/graphs/rag.txtpb"));
    let typed = graph::decode(&bytes).expect("decode");
    let pool = DescriptorPool::decode(graph::FILE_DESCRIPTOR_SET).expect("descriptor set");
    let desc = pool
        .get_message_by_name(graph::GRAPH_MESSAGE)
        .expect("message");
    let dynamic = DynamicMessage::decode(desc, graph::encode(&typed).as_slice()).expect("decode");
    assert_eq!(
        dynamic.transcode_to::<ServingGraph>().expect("transcode"),
        typed
    );
    assert_eq!(typed.nodes.len(), 4);
    assert_eq!(
        typed.nodes[3]
            .actor_options
            .as_ref()
            .and_then(|o| o.num_gpus),
        Some(0.25)
    );
    assert_eq!(
        typed.nodes[1]
            .actor_options
            .as_ref()
            .and_then(|o| o.memory_bytes),
        Some(2_147_483_648)
    );
    let fields: Vec<String> = pool
        .get_message_by_name("infergate.graph.v1.Node")
        .expect("Node")
        .fields()
        .map(|f| f.name().to_owned())
        .collect();
    assert_eq!(
        fields,
        [
            "name",
            "import_path",
            "dependencies",
            "num_replicas",
            "autoscaling",
            "actor_options",
            "user_config_json"
        ]
    );
}

#[test]
fn graph_command_prints_the_dag_and_serve_config() {
    let file = fixture("graph/rag.pb");
    let out = infergate(&[
        "graph",
        file.to_str().expect("utf-8"),
        "--route-prefix",
        "/team-a/rag",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "router [rag.app:app, replicas 2, cpus 0.5]",
        "├── retriever [rag.retrieve:Retriever, autoscaling 1..4, cpus 1, memory 2147483648]",
        "│   └── embedder [",
        "└── generator [rag.generate:Generator, autoscaling 1..2, cpus 4, gpus 8]",
        "# serveConfigV2",
        "route_prefix: /team-a/rag",
        "import_path: rag.app:app",
        "target_ongoing_requests: 4",
        "top_k: 8",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in\n{stdout}");
    }
    // The YAML after the marker is a Ray Serve config.
    let yaml = stdout.split("# serveConfigV2\n").nth(1).expect("yaml part");
    let config: infergate::graph::serve_config::ServeConfig =
        serde_saphyr::from_str(yaml).expect("serve config parses");
    let names: Vec<_> = config.applications[0]
        .deployments
        .iter()
        .map(|d| d.name.as_str())
        .collect();
    assert_eq!(names, ["embedder", "retriever", "generator", "router"]);
}

/// Every example graph does what its README says under `infergate graph`,
/// and the RayService example's graph fits the workers of its service (as
/// defaulted by the example policies); a service whose workers are too small
/// gets the reconciler's `Unschedulable` finding offline.
#[test]
fn example_graphs_work_and_fit_the_example_service() {
    let ex = |p: &str| root().join(p).display().to_string();
    for (graph, code) in [("rag", 0), ("rag-v2", 0), ("cyclic", 1), ("invalid", 1)] {
        let file = fixture(&format!("graph/{graph}.pb"));
        let out = infergate(&["graph", file.to_str().expect("utf-8")]);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{graph}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let policies = [
        "--policy".to_owned(),
        ex("examples/good/cluster-policy.yaml"),
        "--policy".to_owned(),
        ex("examples/good/namespace-policy.yaml"),
        // The service names the H100 class (team-a's policy allows GPUs
        // only through its classes).
        "--policy".to_owned(),
        ex("examples/good/accelerator-classes.yaml"),
        "--namespace-labels".to_owned(),
        "tier=prod".to_owned(),
    ];
    let rag = fixture("graph/rag.pb").display().to_string();
    let with_service = |service: &str| {
        let mut args = vec![
            "graph".to_owned(),
            rag.clone(),
            "--service".to_owned(),
            service.to_owned(),
        ];
        args.extend(policies.iter().cloned());
        infergate(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let out = with_service(&ex("examples/good/rayservice.yaml"));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The same service with 2 GPUs and 2 CPUs per worker.
    let dir = tempfile::tempdir().expect("tempdir");
    let small = dir.path().join("small.yaml");
    let text = std::fs::read_to_string(root().join("examples/good/rayservice.yaml"))
        .expect("example")
        .replace("tensor: 4", "tensor: 2")
        .replace("pipeline: 2", "pipeline: 1")
        .replace("cpu: \"8\"", "cpu: \"2\"");
    std::fs::write(&small, text).expect("write");
    let out = with_service(&small.display().to_string());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot be placed on the workers of InferenceService team-a/rag-pipeline (Unschedulable)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("deployment \"generator\" asks num_gpus 8 but a worker offers 2 GPU(s) (tensor 2 x pipeline 1), num_cpus 4 but a worker offers 2 CPU(s) (spec.resources.cpu)"),
        "{stderr}"
    );
}

#[test]
fn graph_command_reads_stdin() {
    let out = run(
        Command::new(binary()).args(["graph", "-"]),
        Some(&read_fixture("graph/rag-v2.pb")),
    );
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("reranker [rag.rerank:Reranker"), "{stdout}");
    assert!(stdout.contains("route_prefix: /\n"), "default route prefix");
}

#[test]
fn graph_command_reports_every_violation_with_exit_1() {
    for name in ["cyclic", "invalid"] {
        let text = std::fs::read_to_string(root().join(format!("examples/graphs/{name}.txtpb")))
            .expect("example");
        let expected: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# expect: "))
            .collect();
        assert!(!expected.is_empty(), "{name} has expect lines");
        let file = fixture(&format!("graph/{name}.pb"));
        let out = infergate(&["graph", file.to_str().expect("utf-8")]);
        assert_eq!(out.status.code(), Some(1), "{name}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        for e in expected {
            assert!(stderr.contains(e), "{name}: missing {e:?} in\n{stderr}");
        }
        assert!(
            out.stdout.is_empty(),
            "nothing printed on stdout for an invalid graph"
        );
    }
}

#[test]
fn graph_command_exit_2_for_unreadable_or_undecodable_input() {
    let out = infergate(&["graph", "/nonexistent/graph.pb"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read /nonexistent/graph.pb"));

    let dir = tempfile::tempdir().expect("tempdir");
    let junk = dir.path().join("junk.pb");
    std::fs::write(&junk, b"\x0a\xff\xff\xff\xff\xff").expect("write");
    let out = infergate(&["graph", junk.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("not a valid infergate.graph.v1.ServingGraph")
    );
}

// ---------------------------------------------------------------------------
// The HTTPS fetcher against a local graph server.

fn quick() -> FetchOptions {
    FetchOptions {
        deadline: Duration::from_millis(800),
        max_bytes: 1024 * 1024,
        per_namespace: 2,
        in_flight: 8,
        queued_after: Duration::from_secs(10),
        backoff: Duration::from_millis(200),
        max_backoff: Duration::from_millis(800),
        refresh_interval: Duration::from_millis(1500),
    }
}

fn token() -> BearerToken {
    BearerToken::new(GRAPH_TOKEN.as_bytes()).expect("token")
}

fn rag() -> Vec<u8> {
    read_fixture("graph/rag.pb")
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

// ---------------------------------------------------------------------------
// Against the real control plane: Secret lookups, and the built RayService
// accepted by the apiserver with the minimal ray.io/v1 CRD installed.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolve_reads_the_secret_and_the_rayservice_is_accepted() {
    use infergate::api::v1beta1::InferenceService;
    use infergate::reconcile::children::rayservice::RayService;
    use infergate::reconcile::graph::resolve;
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{Api, Patch, PatchParams, PostParams};

    let cp = support::control_plane().await;
    cp.install_crds().await;
    cp.install_crd_file(support::rayservice_crd()).await;
    let client = cp.client().await;
    let ns = cp.fresh_namespace("graph").await;

    let server = GraphServer::start();
    server.set_graph(rag(), "\"v1\"");
    let fetcher = GraphFetcher::new(quick(), vec![server.ca.clone()]).expect("fetcher");

    let services: Api<InferenceService> = Api::namespaced(client.clone(), &ns);
    let svc = services
        .create(&PostParams::default(), &server.service("rag"))
        .await
        .expect("create service");
    let route = infergate::engine::render_route_path(&svc).expect("route");
    assert_eq!(route, format!("/{ns}/rag"));

    let access = infergate::reconcile::graph::Access {
        internal_allowed: true,
        service_account: "infergate-system:infergate",
        class: None,
        refresh: false,
        // Every call below asks the server, but the one on reuse.
        max_age: Duration::ZERO,
    };
    let key = format!("{ns}/rag");
    // A failed fetch backs the service off; the test waits it out.
    let settle = || async {
        if let Some(w) = fetcher.retry_in(&key, &server.url("/graph")) {
            tokio::time::sleep(w).await;
        }
    };

    // No Secret yet.
    let e = resolve(&client, &fetcher, &svc, &route, access)
        .await
        .unwrap_err();
    assert_eq!(e.reason(), "SecretNotFound", "{e}");
    assert!(e.to_string().contains(&format!("{ns}/graph-token")));

    // A Secret without the key, and without the hosts annotation.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let secret = |value: Option<&str>, hosts: Option<&str>| Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("graph-token".into()),
            annotations: hosts.map(|h| {
                [(TOKEN_HOSTS_ANNOTATION.to_owned(), h.to_owned())]
                    .into_iter()
                    .collect()
            }),
            ..Default::default()
        },
        data: Some(
            [(
                if value.is_some() { "token" } else { "other" }.to_owned(),
                ByteString(value.unwrap_or("x").as_bytes().to_vec()),
            )]
            .into_iter()
            .collect(),
        ),
        ..Secret::default()
    };
    let apply = PatchParams::apply("infergate-tests").force();
    let put = |s: Secret| {
        let secrets = secrets.clone();
        let apply = apply.clone();
        async move {
            secrets
                .patch("graph-token", &apply, &Patch::Apply(&s))
                .await
                .expect("secret");
        }
    };
    // The right token, but the Secret's owner never said where it may go:
    // no request is made.
    put(secret(Some(GRAPH_TOKEN), None)).await;
    let before = server.state.requests.load(Ordering::SeqCst);
    let e = resolve(&client, &fetcher, &svc, &route, access)
        .await
        .unwrap_err();
    assert_eq!(e.reason(), "SecretNotAllowed", "{e}");
    assert!(e.to_string().contains(TOKEN_HOSTS_ANNOTATION), "{e}");
    // ... or said another host.
    put(secret(
        Some(GRAPH_TOKEN),
        Some("graphs.example.com, *.example.org"),
    ))
    .await;
    let e = resolve(&client, &fetcher, &svc, &route, access)
        .await
        .unwrap_err();
    assert_eq!(e.reason(), "SecretNotAllowed", "{e}");
    assert_eq!(
        server.state.requests.load(Ordering::SeqCst),
        before,
        "nothing sent"
    );

    let here = format!("127.0.0.1:{}", server.addr.port());
    put(secret(None, Some(&here))).await;
    let e = resolve(&client, &fetcher, &svc, &route, access)
        .await
        .unwrap_err();
    assert_eq!(e.reason(), "SecretNotFound", "{e}");
    assert!(e.to_string().contains("has no key"), "{e}");

    // A wrong token: refused by the graph server, never echoed.
    put(secret(Some("wrong-token-value\n"), Some(&here))).await;
    let e = resolve(&client, &fetcher, &svc, &route, access)
        .await
        .unwrap_err();
    assert_eq!(e.reason(), "HTTPStatus", "{e}");
    assert!(!format!("{e} {e:?}").contains("wrong-token-value"));
    settle().await;

    // The right token: the RayService is built and the apiserver stores it.
    put(secret(Some(GRAPH_TOKEN), Some(&here))).await;
    let resolved = resolve(&client, &fetcher, &svc, &route, access)
        .await
        .expect("resolved");
    let rayservices: Api<RayService> = Api::namespaced(client.clone(), &ns);
    let ssa = PatchParams::apply("infergate").force();
    let stored = rayservices
        .patch("rag", &ssa, &Patch::Apply(&resolved.rayservice))
        .await
        .expect("apiserver accepts the RayService");
    let config: infergate::graph::serve_config::ServeConfig =
        serde_saphyr::from_str(&stored.spec.serve_config_v2).expect("serveConfigV2");
    assert_eq!(config.applications[0].route_prefix, route);
    assert_eq!(config.applications[0].import_path, "rag.app:app");
    let owner = &stored.metadata.owner_references.as_ref().expect("owner")[0];
    assert_eq!(owner.uid, svc.metadata.uid.clone().expect("uid"));
    let group = &stored.spec.ray_cluster_config.worker_group_specs[0];
    assert_eq!(group.replicas, Some(1));
    assert!(
        group.template.spec.is_some(),
        "pod templates survive the preserve-unknown-fields schema"
    );

    // Unchanged graph: answered from the ETag cache.
    let again = resolve(&client, &fetcher, &svc, &route, access)
        .await
        .expect("resolved");
    assert!(again.not_modified && again.fetched);
    assert_eq!(again.rayservice, resolved.rayservice);

    // Within the resync the server is not asked at all, even if its graph
    // changed; a refresh asks it.
    let asked = server.state.requests.load(Ordering::SeqCst);
    server.set_graph(read_fixture("graph/rag-v2.pb"), "\"v2\"");
    let within = infergate::reconcile::graph::Access {
        max_age: Duration::from_secs(3600),
        ..access
    };
    let reused = resolve(&client, &fetcher, &svc, &route, within)
        .await
        .expect("resolved");
    assert!(reused.not_modified && !reused.fetched);
    assert_eq!(reused.rayservice, resolved.rayservice);
    assert_eq!(server.state.requests.load(Ordering::SeqCst), asked);
    let refreshed = resolve(
        &client,
        &fetcher,
        &svc,
        &route,
        infergate::reconcile::graph::Access {
            refresh: true,
            ..within
        },
    )
    .await
    .expect("resolved");
    assert!(refreshed.fetched && !refreshed.not_modified);
    assert_ne!(refreshed.digest, resolved.digest);
    assert_eq!(server.state.requests.load(Ordering::SeqCst), asked + 1);

    // A cyclic graph: an InvalidGraph error naming the cycle.
    server.set_graph(read_fixture("graph/cyclic.pb"), "\"cyclic\"");
    let e = resolve(&client, &fetcher, &svc, &route, access)
        .await
        .unwrap_err();
    assert_eq!(e.reason(), "InvalidGraph");
    assert!(
        e.to_string().contains("planner -> critic -> planner"),
        "{e}"
    );

    // An update is picked up and applied.
    server.set_graph(read_fixture("graph/rag-v2.pb"), "\"v2\"");
    let updated = resolve(&client, &fetcher, &svc, &route, access)
        .await
        .expect("resolved");
    assert!(!updated.not_modified);
    let stored = rayservices
        .patch("rag", &ssa, &Patch::Apply(&updated.rayservice))
        .await
        .expect("apply update");
    assert!(stored.spec.serve_config_v2.contains("name: reranker"));
}
