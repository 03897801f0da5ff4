//! Scale benchmark of the reconciler (run by hand, not in CI):
//!
//! ```text
//! cargo bench --bench scale                       # 1000 services
//! INFERGATE_SCALE_SERVICES=200 cargo bench --bench scale
//! ```
//!
//! Starts the test control plane (etcd, kube-apiserver, kube-controller-manager
//! with the deployment, replicaset and garbage-collector controllers), installs
//! the CRDs and the minimal HTTPRoute CRD, starts the reconciler in a child
//! process (this binary re-executed), creates N InferenceServices across 10
//! namespaces (each with replicas 1, a canary at weight 10 and a gateway, so
//! every reconcile applies two Deployments, two Services and an HTTPRoute and
//! writes status), and reports:
//! - the time from the first create until every service has status for its
//!   generation with `Reconciled=True`;
//! - reconcile duration p50/p90/p99/max (from the reconciler's own trace events);
//! - API requests made by the reconciler per reconcile (counted in its client);
//! - the reconciler process's peak RSS (VmHWM).
//!
//! The test apiserver's service range is a /24, so the driver adds a
//! ServiceCIDR (10.100.0.0/20) for the 2,000 Services.
//!
//! Results (2 cores, Kubernetes 1.36.3 test control plane on the same machine,
//! with other cargo builds running; `cargo bench --bench scale`, 2026-11-21):
//!
//! | services | all reconciled | reconciles | p50 / p90 / p99 / max (ms) | API requests / reconcile | peak RSS |
//! |---|---|---|---|---|---|
//! | 50   | 3.6 s   | 171   | 102 / 900 / 1159 / 1376   | 6.15 | 21 MB |
//! | 300  | 49.7 s  | 941   | 423 / 2199 / 3608 / 3786  | 6.32 | 40 MB |
//! | 1000 | 188.4 s | 3,252 | 459 / 2017 / 5446 / 7422  | 6.28 | 94 MB |
//!
//! About 3.3 reconciles per service: creation, then the Deployments' status
//! updates from the deployment controller (which drive `status` and the
//! routed canary weight). Reconcile time is dominated by apiserver latency
//! under load (16 concurrent reconciles; the same 2 cores run etcd, the
//! apiserver, kube-controller-manager creating 2,000 ReplicaSets and pods, and
//! the driver). Requests per reconcile: the applies (2 Deployments, 2
//! Services, 1 HTTPRoute), the status apply when status changed, and events;
//! deletion checks and policy lookups are served from watch caches.

#[path = "../tests/support/mod.rs"]
mod support;

use std::io::{BufRead, Read, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::field::{Field, Visit};
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;

use infergate::api::v1beta1::InferenceService;

const CHILD_ENV: &str = "INFERGATE_SCALE_CHILD_KUBECONFIG";
const NAMESPACES: usize = 10;

fn main() {
    if std::env::args().any(|a| a == "--list") {
        // `cargo bench -- --list` / test discovery: nothing to list.
        return;
    }
    support::install_crypto_provider();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    match std::env::var(CHILD_ENV) {
        Ok(kubeconfig) => rt.block_on(child(kubeconfig.into())),
        Err(_) => rt.block_on(parent()),
    }
}

// --------------------------------------------------------------- the reconciler

/// Collects `elapsed_us` of the reconciler's "reconciled" events.
struct Durations(Arc<Mutex<Vec<u64>>>);

struct ElapsedVisitor(Option<u64>);

impl Visit for ElapsedVisitor {
    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "elapsed_us" {
            self.0 = Some(value);
        }
    }
    fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {}
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Durations {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let mut v = ElapsedVisitor(None);
        event.record(&mut v);
        if let (Some(us), Ok(mut d)) = (v.0, self.0.lock()) {
            d.push(us);
        }
    }
}

async fn child(kubeconfig: std::path::PathBuf) {
    let durations = Arc::new(Mutex::new(Vec::new()));
    tracing_subscriber::registry()
        .with(
            Durations(durations.clone()).with_filter(
                tracing_subscriber::filter::Targets::new()
                    .with_target("infergate::reconcile::controller", tracing::Level::DEBUG),
            ),
        )
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(tracing_subscriber::filter::LevelFilter::WARN),
        )
        .init();
    let requests = Arc::new(AtomicU64::new(0));
    let watches = Arc::new(AtomicU64::new(0));
    let (r, w) = (requests.clone(), watches.clone());
    let counting =
        tower::util::MapRequestLayer::new(move |req: http::Request<kube::client::Body>| {
            if req.uri().query().is_some_and(|q| q.contains("watch=true")) {
                w.fetch_add(1, Ordering::Relaxed);
            } else {
                r.fetch_add(1, Ordering::Relaxed);
            }
            req
        });
    let kc = kube::config::Kubeconfig::read_from(&kubeconfig).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("client config");
    let client = kube::client::ClientBuilder::try_from(config)
        .expect("client builder")
        .with_layer(&counting)
        .build();
    let token = CancellationToken::new();
    let config = support::reconcile_config("scale-bench");
    let run = tokio::spawn(infergate::reconcile::run(client, config, token.clone()));
    // The parent closes stdin when it has its numbers.
    tokio::task::spawn_blocking(|| {
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
    })
    .await
    .ok();
    token.cancel();
    let _ = run.await;
    let mut d = durations.lock().map(|d| d.clone()).unwrap_or_default();
    d.sort_unstable();
    let hwm = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .map(|l| l.trim_start_matches("VmHWM:").trim().to_owned())
        })
        .unwrap_or_default();
    let out = json!({
        "reconciles": d.len(),
        "durations_us": d,
        "requests": requests.load(Ordering::Relaxed),
        "watches": watches.load(Ordering::Relaxed),
        "vm_hwm": hwm,
    });
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{out}");
}

// ------------------------------------------------------------------ the driver

fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)] as f64 / 1000.0
}

async fn reconciled(client: &Client, ns: &str) -> usize {
    let Ok(list) = Api::<InferenceService>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
    else {
        return 0;
    };
    list.items
        .iter()
        .filter(|s| {
            s.status.as_ref().is_some_and(|st| {
                st.observed_generation == s.metadata.generation
                    && st
                        .conditions
                        .iter()
                        .any(|c| c.type_ == "Reconciled" && c.status == "True")
            })
        })
        .count()
}

async fn parent() {
    let n: usize = std::env::var("INFERGATE_SCALE_SERVICES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let cp = support::control_plane().await;
    cp.install_crds().await;
    cp.install_crd_file(support::httproute_crd()).await;
    // The test apiserver's service range is a /24: add a ServiceCIDR so
    // 2,000 Services get ClusterIPs.
    let out = cp.kubectl_stdin(
        &["apply", "-f", "-"],
        "apiVersion: networking.k8s.io/v1\nkind: ServiceCIDR\nmetadata: {name: scale-bench}\nspec: {cidrs: [10.100.0.0/20]}\n",
    );
    assert!(out.status.success(), "ServiceCIDR: {out:?}");
    let client = cp.client().await;
    cp.ensure_namespace(support::SYSTEM_NAMESPACE).await;
    let mut namespaces = Vec::new();
    for _ in 0..NAMESPACES {
        namespaces.push(cp.fresh_namespace("scale").await);
    }

    let exe = std::env::current_exe().expect("current exe");
    let mut reconciler = Command::new(exe)
        .env(CHILD_ENV, cp.kubeconfig())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting the reconciler process");
    // Let it take the lease and sync its caches on an empty cluster.
    tokio::time::sleep(Duration::from_secs(3)).await;

    println!("creating {n} InferenceServices in {NAMESPACES} namespaces");
    let start = Instant::now();
    let creates = futures::stream::iter(0..n)
        .map(|i| {
            let client = client.clone();
            let ns = namespaces[i % NAMESPACES].clone();
            async move {
                let svc: InferenceService = serde_json::from_value(json!({
                    "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
                    "metadata": {"name": format!("svc-{i}"), "namespace": ns},
                    "spec": {
                        "model": {"ref": format!("model-{i}")},
                        "engine": {"image": "registry.example.com/vllm:0.9"},
                        "replicas": 1,
                        "canary": {"model": {"ref": format!("model-{i}-next")}, "weight": 10},
                        "routing": {"gateway": {"name": "gw", "namespace": "gateways"}}
                    }
                }))
                .expect("service");
                Api::<InferenceService>::namespaced(client, &ns)
                    .create(&PostParams::default(), &svc)
                    .await
                    .map(|s| s.name_any())
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    let failed = creates.iter().filter(|r| r.is_err()).count();
    assert_eq!(failed, 0, "some creates failed: {creates:?}");
    let created_in = start.elapsed();
    println!("created in {created_in:.2?}");

    let deadline = Duration::from_secs(1800);
    let all_reconciled = loop {
        let mut done = 0;
        for ns in &namespaces {
            done += reconciled(&client, ns).await;
        }
        if done >= n {
            break start.elapsed();
        }
        assert!(
            start.elapsed() < deadline,
            "only {done}/{n} reconciled after {deadline:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    println!("all {n} reconciled {all_reconciled:.2?} after the first create");
    // Let trailing reconciles (Deployment status updates) settle before reading the counters.
    tokio::time::sleep(Duration::from_secs(10)).await;

    drop(reconciler.stdin.take());
    let mut line = String::new();
    if let Some(out) = reconciler.stdout.take() {
        let _ = std::io::BufReader::new(out).read_line(&mut line);
    }
    let _ = reconciler.wait();
    let stats: serde_json::Value = serde_json::from_str(&line).expect("reconciler stats");
    let durations: Vec<u64> = stats["durations_us"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_u64()).collect())
        .unwrap_or_default();
    let reconciles = durations.len().max(1);
    let requests = stats["requests"].as_u64().unwrap_or(0);
    println!("services:                    {n}");
    println!("time until all reconciled:   {all_reconciled:.2?} (creates took {created_in:.2?})");
    println!("reconciles:                  {}", durations.len());
    println!(
        "reconcile p50/p90/p99/max:   {:.1} / {:.1} / {:.1} / {:.1} ms",
        pct(&durations, 0.50),
        pct(&durations, 0.90),
        pct(&durations, 0.99),
        pct(&durations, 1.0)
    );
    println!(
        "API requests (non-watch):    {requests} total, {:.2} per reconcile (incl. caches' lists, lease renewals, events)",
        requests as f64 / reconciles as f64
    );
    println!("watch requests:              {}", stats["watches"]);
    println!(
        "reconciler peak RSS (VmHWM): {}",
        stats["vm_hwm"].as_str().unwrap_or("?")
    );
}
