//! Load driver for the webhook server, run by hand (not in CI):
//!
//! ```text
//! cargo bench --bench load                       # 10 s per scenario
//! LOAD_SECS=5 LOAD_CONNECTIONS=50 cargo bench --bench load -- mutate
//! ```
//!
//! The server runs in this process on 127.0.0.1 over TLS (the production
//! stack: rustls, hyper-util auto builder, axum router) with its own
//! runtime; the driver opens `LOAD_CONNECTIONS` HTTP/1.1 keep-alive
//! connections (the API server's protocol) and keeps one request in flight
//! on each. Scenarios: `fixed` (a handler that reads the body and answers
//! fixed bytes: the ceiling of the stack), `mutate`, `validate` and
//! `convert` (a ConversionReview of 100 objects). Reported: requests/s and
//! latency percentiles. Both sides share the machine's cores.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use infergate::api::{ClusterInferencePolicy, InferencePolicy};
use infergate::engine::{PolicySnapshot, ServerDefaults};
use infergate::metrics::Metrics;
use infergate::webhook::admission::Admission;
use infergate::webhook::cache::PolicyCache;
use infergate::webhook::certs;
use infergate::webhook::server::{self, AppState};
use infergate::webhook::tls::{self, CertResolver};
use rustls_pki_types::pem::PemObject;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A service as kubectl sends it: last-applied annotation, managed fields, labels.
fn service_object(i: usize, defaulted: bool) -> Value {
    let mut spec = json!({
        "model": {"ref": "llama3-8b-instruct-q4", "image": "registry.example.com/models/llama3:8b-q4"},
        "replicas": 2,
        "autoscaling": {"minReplicas": 2, "maxReplicas": 8},
        "resources": {"cpu": "4", "memory": "16Gi", "gpuMemory": "24Gi"},
        "accelerator": {"type": "nvidia"},
        "parallelism": {"tensor": 2},
        "canary": {"model": {"ref": "llama3-8b-instruct-q5"}, "weight": 10},
        "engine": {"args": ["--max-model-len=8192", "--enable-prefix-caching"], "env": [{"name": "VLLM_LOGGING_LEVEL", "value": "INFO"}]}
    });
    if defaulted {
        spec["engine"]["image"] = json!("registry.example.com/vllm:0.9");
        spec["engine"]["port"] = json!(8000);
        spec["backend"] = json!("Deployment");
        spec["parallelism"]["pipeline"] = json!(1);
        spec["autoscaling"]["targetCPUUtilizationPercent"] = json!(70);
        spec["healthCheck"] = json!({"path": "/healthz", "interval": "10s", "timeout": "1s"});
        spec["routing"] = json!({"pathTemplate": "/{.metadata.namespace}/{.metadata.name}", "requestTimeout": "10m", "gateway": {"name": "inference-gw", "namespace": "gateways"}});
    }
    let name = format!("chat-{i}");
    let last_applied = json!({"apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
        "metadata": {"name": name, "namespace": "team-a"}, "spec": spec.clone()})
    .to_string();
    json!({
        "apiVersion": "infergate.dev/v1beta1",
        "kind": "InferenceService",
        "metadata": {
            "name": name, "namespace": "team-a",
            "uid": format!("6f1e2a3b-0000-4000-8000-{i:012}"),
            "resourceVersion": format!("{}", 1000 + i), "generation": 1,
            "creationTimestamp": "2026-11-21T12:00:00Z",
            "labels": {"app.kubernetes.io/part-of": "chat", "team": "a"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": last_applied},
            "managedFields": [{"manager": "kubectl-client-side-apply", "operation": "Update",
                "apiVersion": "infergate.dev/v1beta1", "time": "2026-11-21T12:00:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}}, "f:labels": {}},
                             "f:spec": {".": {}, "f:model": {}, "f:replicas": {}, "f:autoscaling": {}, "f:resources": {}, "f:canary": {}}}}]
        },
        "spec": spec
    })
}

fn admission_review(object: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "infergate.dev", "version": "v1beta1", "kind": "InferenceService"},
            "resource": {"group": "infergate.dev", "version": "v1beta1", "resource": "inferenceservices"},
            "requestKind": {"group": "infergate.dev", "version": "v1beta1", "kind": "InferenceService"},
            "requestResource": {"group": "infergate.dev", "version": "v1beta1", "resource": "inferenceservices"},
            "name": "chat-0", "namespace": "team-a", "operation": "CREATE",
            "userInfo": {"username": "alice@example.com", "groups": ["system:authenticated", "team-a"]},
            "object": object, "oldObject": null, "dryRun": false,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": "kubectl-client-side-apply"}
        }
    }))
    .expect("review serializes")
}

fn conversion_review(n: usize) -> Vec<u8> {
    let objects: Vec<Value> = (0..n)
        .map(|i| {
            let mut o = service_object(i, true);
            o["status"] = json!({"observedGeneration": 1, "replicas": 2, "readyReplicas": 2,
                "routePath": format!("/team-a/chat-{i}"), "requestTimeout": "10m",
                "conditions": [{"type": "Ready", "status": "True", "reason": "Available", "message": "2/2 replicas ready",
                                "lastTransitionTime": "2026-11-21T12:01:00Z", "observedGeneration": 1}]});
            o
        })
        .collect();
    serde_json::to_vec(&json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": "0000c0de-0000-4000-8000-000000000005",
                    "desiredAPIVersion": "infergate.dev/v1alpha1", "objects": objects}
    }))
    .expect("review serializes")
}

fn policies() -> PolicySnapshot {
    let cluster: ClusterInferencePolicy = serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "ClusterInferencePolicy",
        "metadata": {"name": "platform"},
        "spec": {"defaults": {"engine": {"image": "registry.example.com/vllm:0.9", "port": 8000},
                              "healthCheck": {"path": "/healthz", "interval": "10s", "timeout": "1s"},
                              "routing": {"requestTimeout": "5m", "gateway": {"name": "inference-gw", "namespace": "gateways"}}},
                 "limits": {"maxReplicas": 16, "maxCanaryWeight": 50, "maxGPUsPerReplica": 8, "maxRequestTimeout": "30m",
                            "allowedImageRegistries": ["registry.example.com/"], "allowedAccelerators": ["nvidia", "amd"]}}
    }))
    .expect("policy");
    let ns: InferencePolicy = serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "InferencePolicy",
        "metadata": {"name": "defaults", "namespace": "team-a"},
        "spec": {"priority": 10, "defaults": {"replicas": 2, "autoscaling": {"targetCPUUtilizationPercent": 70}, "routing": {"requestTimeout": "10m"}},
                 "limits": {"maxReplicas": 8, "maxCanaryWeight": 25}}
    }))
    .expect("policy");
    PolicySnapshot {
        cluster: vec![cluster],
        namespaced: vec![ns],
    }
}

struct Result {
    name: &'static str,
    requests: usize,
    errors: usize,
    secs: f64,
    lat: Vec<u32>,
    body_len: usize,
}

fn pct(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    f64::from(sorted[idx]) / 1000.0
}

/// One scenario: what to send, how hard, how long.
struct Load {
    addr: std::net::SocketAddr,
    client: Arc<rustls::ClientConfig>,
    connections: usize,
    warmup: Duration,
    measure: Duration,
}

async fn drive(load: &Load, name: &'static str, path: &'static str, body: Bytes) -> Result {
    let Load {
        addr,
        ref client,
        connections,
        warmup,
        measure,
    } = *load;
    let start = Instant::now();
    let measure_from = start + warmup;
    let end = measure_from + measure;
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let (client, body) = (Arc::clone(client), body.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(1 << 16);
            let mut errors = 0usize;
            let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
            tcp.set_nodelay(true).expect("nodelay");
            let tls = tokio_rustls::TlsConnector::from(client)
                .connect(
                    rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name"),
                    tcp,
                )
                .await
                .expect("tls");
            let (mut sender, conn) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
                    .await
                    .expect("http1");
            tokio::spawn(conn);
            loop {
                let now = Instant::now();
                if now >= end {
                    break;
                }
                let req = Request::post(path)
                    .header("host", "127.0.0.1")
                    .header("content-type", "application/json")
                    .body(Full::new(body.clone()))
                    .expect("request");
                if sender.ready().await.is_err() {
                    errors += 1;
                    break;
                }
                let ok = match sender.send_request(req).await {
                    Ok(resp) => {
                        let status = resp.status();
                        resp.into_body().collect().await.is_ok() && status.is_success()
                    }
                    Err(_) => false,
                };
                let t = Instant::now();
                if now >= measure_from {
                    if ok {
                        lat.push(u32::try_from((t - now).as_micros()).unwrap_or(u32::MAX));
                    } else {
                        errors += 1;
                    }
                }
            }
            (lat, errors)
        }));
    }
    let mut lat = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (l, e) = t.await.expect("driver task");
        lat.extend(l);
        errors += e;
    }
    lat.sort_unstable();
    Result {
        name,
        requests: lat.len(),
        errors,
        secs: measure.as_secs_f64(),
        lat,
        body_len: body.len(),
    }
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let secs = env_u64("LOAD_SECS", 10);
    let connections = usize::try_from(env_u64("LOAD_CONNECTIONS", 50)).unwrap_or(50);
    let server_threads = usize::try_from(env_u64("LOAD_SERVER_THREADS", 2)).unwrap_or(2);

    // Server: its own runtime, like `infergate serve`.
    let ca = certs::generate_ca("load-ca", Duration::from_secs(3600)).expect("ca");
    let leaf = certs::issue_serving(
        &ca,
        &["localhost".to_owned()],
        &["127.0.0.1".parse().expect("ip")],
        Duration::from_secs(3600),
    )
    .expect("leaf");
    let resolver = Arc::new(CertResolver::new());
    resolver.set(
        tls::parse_pem_pair(leaf.cert.as_bytes(), leaf.key.as_bytes())
            .expect("pair")
            .key,
    );
    let state = Arc::new(AppState {
        admission: Admission {
            cache: Arc::new(PolicyCache::new(policies())),
            server: ServerDefaults::default(),
            metrics: Metrics::new(),
        },
        resolver: Arc::clone(&resolver),
        tls_bound: AtomicBool::new(true),
    });
    let fixed = Bytes::from_static(
        br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"705ab4f5-6393-11e8-b7cc-42010a800002","allowed":true}}"#,
    );
    let router = server::router(Arc::clone(&state)).route(
        "/fixed",
        axum::routing::post(move |body: Bytes| {
            let fixed = fixed.clone();
            async move {
                drop(body);
                fixed
            }
        }),
    );
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(server_threads)
        .thread_name("server")
        .enable_all()
        .build()
        .expect("server runtime");
    let shutdown = CancellationToken::new();
    let listener = server_rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let tls_cfg = tls::server_config(resolver).expect("tls config");
    server_rt.spawn(server::serve_tls(
        listener,
        tls_cfg,
        router,
        shutdown.clone(),
        Duration::from_secs(1),
    ));

    // Driver.
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls_pki_types::CertificateDer::from_pem_slice(ca.cert.as_bytes()).expect("ca pem"))
        .expect("root");
    let mut client = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    client.alpn_protocols = vec![b"http/1.1".to_vec()];
    let client = Arc::new(client);
    let driver_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("driver")
        .enable_all()
        .build()
        .expect("driver runtime");

    let mutate_body = Bytes::from(admission_review(service_object(0, false)));
    let validate_body = Bytes::from(admission_review(service_object(0, true)));
    let convert_body = Bytes::from(conversion_review(100));
    let scenarios: Vec<(&'static str, &'static str, Bytes)> = vec![
        ("fixed", "/fixed", mutate_body.clone()),
        ("mutate", "/mutate?timeout=10s", mutate_body),
        ("validate", "/validate?timeout=10s", validate_body),
        ("convert100", "/convert?timeout=30s", convert_body),
    ];
    println!(
        "webhook load: {connections} HTTP/1.1 keep-alive TLS connections, {secs}s per scenario after 2s warm-up, server threads {server_threads}, driver threads 2, {} cpus",
        std::thread::available_parallelism().map_or(0, std::num::NonZero::get)
    );
    println!(
        "{:<11} {:>9} {:>10} {:>9} {:>9} {:>9} {:>7} {:>9}",
        "scenario", "requests", "req/s", "p50 ms", "p99 ms", "p99.9 ms", "errors", "body B"
    );
    let load = Load {
        addr,
        client,
        connections,
        warmup: Duration::from_secs(2),
        measure: Duration::from_secs(secs),
    };
    let mut fixed_rps = None;
    for (name, path, body) in scenarios {
        if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        let r = driver_rt.block_on(drive(&load, name, path, body));
        let rps = r.requests as f64 / r.secs;
        if r.name == "fixed" {
            fixed_rps = Some(rps);
        }
        let ratio = fixed_rps
            .filter(|_| r.name != "fixed")
            .map(|f| format!("  ({:.0}% of fixed)", 100.0 * rps / f))
            .unwrap_or_default();
        println!(
            "{:<11} {:>9} {:>10.0} {:>9.3} {:>9.3} {:>9.3} {:>7} {:>9}{ratio}",
            r.name,
            r.requests,
            rps,
            pct(&r.lat, 0.50),
            pct(&r.lat, 0.99),
            pct(&r.lat, 0.999),
            r.errors,
            r.body_len,
        );
    }
    shutdown.cancel();
    drop(driver_rt);
    server_rt.shutdown_timeout(Duration::from_secs(2));
}
