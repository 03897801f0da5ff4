//! Scale benchmark of the reconciler against the API server's own write
//! rate (run by hand, not in CI):
//!
//! ```text
//! cargo bench --locked --bench scale                          # 1,000 services
//! INFERGATE_SCALE_SERVICES=5000 INFERGATE_SCALE_BASELINE=0 cargo bench --locked --bench scale
//! INFERGATE_SCALE_NAMES=1 cargo bench --locked --bench scale  # each service holding a name
//! ```
//!
//! Starts the test control plane (etcd, kube-apiserver with an audit log,
//! kube-controller-manager with the deployment, replicaset and
//! garbage-collector controllers), the CRDs and the minimal HTTPRoute CRD,
//! and runs three phases in one run:
//!
//! 1. **infergate**: the reconciler in a child process (this binary
//!    re-executed) as `deploy/`'s ServiceAccount; N InferenceServices are
//!    created across 10 namespaces (each with replicas 1, a canary at weight
//!    10 and a gateway, so every service has two Deployments, two Services
//!    and an HTTPRoute, and status) 16 at a time; timed from the first create
//!    until every service reports `Reconciled=True` for its generation (one
//!    watch of all services tells the driver). The
//!    phase ends once all 2N pods exist (no scheduler runs: they stay
//!    Pending, and each status says its pods are starting) and 15 s more.
//! 2. **restart**: the reconciler stopped and started again (a new process,
//!    a new leadership term) with nothing changed; after it has reconciled
//!    every service, the API server's audit log must show no write of it but
//!    its Lease.
//! 3. **baseline**: the same children (the objects phase 1 made, re-pointed
//!    at new services in 10 new namespaces) and the same status, server-side
//!    applied by a plain client: services created 16 at a time, each one's
//!    children and status applied as soon as it exists, 16 services at a
//!    time: what the API server itself takes to store what infergate writes.
//!    `INFERGATE_SCALE_BASELINE=0` skips it.
//!
//! It reports the ratio of phase 1's time to the baseline's (goal: at most
//! 1.1x), reconcile p50/p90/p99 (the reconciler's trace events), the
//! reconciler's requests by verb and resource from the audit log (per
//! reconcile and per service), its writes in the restart phase, and its
//! peak RSS (VmHWM) in both phases.
//!
//! The test API server's service range is a /24, so the driver adds a
//! ServiceCIDR (10.100.0.0/16) for the Services. Today's figures are in
//! `docs/performance.md`.

#[path = "../tests/support/mod.rs"]
mod support;

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracing::field::{Field, Visit};
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;

use infergate::api::v1beta1::InferenceService;

// The allocator of the infergate binary: the reconciler's memory is
// measured as it runs in production.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const CHILD_ENV: &str = "INFERGATE_SCALE_CHILD_KUBECONFIG";
const NAMESPACES: usize = 10;
const CONCURRENCY: usize = 16;
/// The reconciler's user in the audit log.
const RECONCILER_USER: &str = "system:serviceaccount:infergate-system:infergate";

fn main() {
    let Some(rt) = common::run::bench_runtime() else {
        return;
    };
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

/// The reconciler process: runs until stdin closes, then prints its figures
/// as one JSON line. Every second it prints the number of reconciles so far
/// on stdout (`progress N`).
async fn child(kubeconfig: std::path::PathBuf) {
    let durations = Arc::new(Mutex::new(Vec::new()));
    tracing_subscriber::registry()
        .with(
            Durations(durations.clone()).with_filter(
                tracing_subscriber::filter::Targets::new()
                    .with_target("infergate::reconcile", tracing::Level::DEBUG),
            ),
        )
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(tracing_subscriber::filter::LevelFilter::WARN),
        )
        .init();
    let client = support::client_from(&kubeconfig)
        .await
        .expect("reconciler client");
    let token = CancellationToken::new();
    let mut config = support::reconcile_config("scale-bench");
    if names_on() {
        // As `serve` runs it: the names ledgers, which the leader corrects
        // from the services it sees.
        config = config.with_names(infergate::state::names::NamesLedger::start(
            client.clone(),
            support::SYSTEM_NAMESPACE,
            infergate::state::Scope::All,
            token.clone(),
        ));
    }
    let run = tokio::spawn(infergate::reconcile::run(client, config, token.clone()));
    let progress = {
        let durations = durations.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let n = durations.lock().map(|d| d.len()).unwrap_or(0);
                let mut stdout = std::io::stdout().lock();
                let _ = writeln!(stdout, "progress {n}");
                let _ = stdout.flush();
            }
        })
    };
    // The parent closes stdin when it has its numbers.
    tokio::task::spawn_blocking(|| {
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
    })
    .await
    .ok();
    progress.abort();
    token.cancel();
    let _ = run.await;
    let mut d = durations.lock().map(|d| d.clone()).unwrap_or_default();
    d.sort_unstable();
    let out = json!({
        "durations_us": d,
        "vm_hwm": proc_status("VmHWM:"),
        "vm_rss": proc_status("VmRSS:"),
    });
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{out}");
}

fn proc_status(field: &str) -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .map(|l| l.trim_start_matches(field).trim().to_owned())
        })
        .unwrap_or_default()
}

/// A running reconciler process and the reconcile count it last reported.
struct ReconcilerProcess {
    child: Child,
    progress: Arc<Mutex<usize>>,
    stats: Arc<Mutex<Option<Value>>>,
    reader: Option<std::thread::JoinHandle<()>>,
    /// (seconds since start, VmRSS in kB, reconciles so far), every 250 ms.
    rss: Arc<Mutex<Vec<(f64, u64, usize)>>>,
}

/// VmRSS of process `pid` in kB.
fn rss_of(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

impl ReconcilerProcess {
    fn start(kubeconfig: &std::path::Path) -> Self {
        let exe = std::env::current_exe().expect("current exe");
        let mut child = Command::new(exe)
            .env(CHILD_ENV, kubeconfig)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting the reconciler process");
        let progress = Arc::new(Mutex::new(0));
        let stats = Arc::new(Mutex::new(None));
        let out = child.stdout.take().expect("stdout");
        let (p, s) = (progress.clone(), stats.clone());
        let reader = std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines() {
                let Ok(line) = line else { return };
                if let Some(n) = line.strip_prefix("progress ") {
                    if let (Ok(n), Ok(mut p)) = (n.parse(), p.lock()) {
                        *p = n;
                    }
                } else if let (Ok(v), Ok(mut s)) = (serde_json::from_str(&line), s.lock()) {
                    *s = Some(v);
                }
            }
        });
        let rss = Arc::new(Mutex::new(Vec::new()));
        let (samples, pid, p) = (rss.clone(), child.id(), progress.clone());
        let start = Instant::now();
        std::thread::spawn(move || {
            while let Some(kb) = rss_of(pid) {
                let n = p.lock().map(|p| *p).unwrap_or(0);
                if let Ok(mut s) = samples.lock() {
                    s.push((start.elapsed().as_secs_f64(), kb, n));
                }
                std::thread::sleep(Duration::from_millis(250));
            }
        });
        ReconcilerProcess {
            child,
            progress,
            stats,
            reader: Some(reader),
            rss,
        }
    }

    /// Where its RSS peaked: `peak kB at T s (N reconciles so far)`.
    fn rss_peak(&self) -> String {
        let samples = self.rss.lock().map(|s| s.clone()).unwrap_or_default();
        samples
            .iter()
            .max_by_key(|(_, kb, _)| *kb)
            .map(|(t, kb, n)| format!("{} MB at {t:.1} s ({n} reconciles so far)", kb / 1024))
            .unwrap_or_default()
    }

    fn reconciles(&self) -> usize {
        self.progress.lock().map(|p| *p).unwrap_or(0)
    }

    /// Stop it and return its figures.
    fn stop(mut self) -> Value {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        self.stats
            .lock()
            .ok()
            .and_then(|s| s.clone())
            .expect("reconciler stats")
    }
}

// ------------------------------------------------------------------ the driver

fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)] as f64 / 1000.0
}

fn reconciled_ok(s: &InferenceService) -> bool {
    s.status.as_ref().is_some_and(|st| {
        st.observed_generation == s.metadata.generation
            && st
                .conditions
                .iter()
                .any(|c| c.type_ == "Reconciled" && c.status == "True")
    })
}

/// Resolves when `n` services report `Reconciled=True` for their
/// generation, as one watch of all namespaces tells it: the driver's own
/// load on the API server stays one watch, as the baseline's is none.
fn all_reconciled(client: &Client, n: usize) -> tokio::task::JoinHandle<()> {
    use kube::runtime::{WatchStreamExt, watcher};
    let api = Api::<InferenceService>::all(client.clone());
    tokio::spawn(async move {
        let mut done = std::collections::HashSet::new();
        let mut events = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
        while let Some(event) = events.next().await {
            let (Ok(watcher::Event::Apply(s)) | Ok(watcher::Event::InitApply(s))) = event else {
                continue;
            };
            let key = (s.namespace().unwrap_or_default(), s.name_any());
            if reconciled_ok(&s) {
                done.insert(key);
            } else {
                done.remove(&key);
            }
            if done.len() >= n {
                return;
            }
        }
    })
}

/// `INFERGATE_SCALE_NAMES=1`: every service routed by path and by its own
/// served name (`model-<i>`) through the one Gateway, so the names ledger
/// of that Gateway holds one entry per service.
fn names_on() -> bool {
    std::env::var("INFERGATE_SCALE_NAMES").is_ok_and(|v| v == "1")
}

fn service_spec(i: usize) -> Value {
    let mut spec = json!({
        "model": {"ref": format!("model-{i}")},
        "engine": {"image": "registry.example.com/vllm:0.9"},
        "replicas": 1,
        "canary": {"model": {"ref": format!("model-{i}-next")}, "weight": 10},
        "routing": {"gateway": {"name": "gw", "namespace": "gateways"}}
    });
    if names_on() {
        spec["model"]["servedName"] = json!(format!("model-{i}"));
        spec["routing"]["match"] = json!("Both");
    }
    spec
}

async fn create_service(client: &Client, ns: &str, i: usize) -> kube::Result<InferenceService> {
    let svc: InferenceService = serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
        "metadata": {"name": format!("svc-{i}"), "namespace": ns},
        "spec": service_spec(i),
    }))
    .expect("service");
    Api::<InferenceService>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &svc)
        .await
}

/// Requests in the audit log from byte `from` on: (user, verb, resource) -> count.
fn audit_counts(path: &std::path::Path, from: u64) -> BTreeMap<(String, String, String), u64> {
    let mut counts = BTreeMap::new();
    let Ok(mut file) = std::fs::File::open(path) else {
        return counts;
    };
    use std::io::Seek;
    if file.seek(std::io::SeekFrom::Start(from)).is_err() {
        return counts;
    }
    for line in std::io::BufReader::new(file).lines() {
        let Ok(line) = line else { break };
        let Ok(v) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        // One record per request: the stage the response completed in.
        if v["stage"] != "ResponseComplete" {
            continue;
        }
        let user = v["user"]["username"].as_str().unwrap_or("").to_owned();
        let verb = v["verb"].as_str().unwrap_or("").to_owned();
        let mut resource = v["objectRef"]["resource"].as_str().unwrap_or("").to_owned();
        if let Some(sub) = v["objectRef"]["subresource"].as_str() {
            resource = format!("{resource}/{sub}");
        }
        *counts.entry((user, verb, resource)).or_insert(0) += 1;
    }
    counts
}

fn audit_len(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

const WRITE_VERBS: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

/// The reconciler's requests of a phase, summed.
#[derive(Default)]
struct Requests {
    /// Every request.
    all: u64,
    /// Writes (create, update, patch, delete), the Lease's among them.
    writes: u64,
    /// Writes of the Lease (leader election: not per service).
    lease_writes: u64,
    /// Discovery (non-resource URLs, `/apis/...`): the optional CRDs'
    /// watchers ask every few seconds, whatever the number of services.
    discovery: u64,
    /// Requests for services: all but the Lease's, the watches and discovery.
    for_services: u64,
    /// Of those, reads (get and list).
    reads: u64,
}

/// Print the reconciler's requests by verb and resource; return their sums.
fn print_requests(
    counts: &BTreeMap<(String, String, String), u64>,
    per: &[(&str, usize)],
) -> Requests {
    let mut sum = Requests::default();
    println!("  {:<10} {:<40} {:>8}  per", "verb", "resource", "requests");
    for ((user, verb, resource), n) in counts {
        if user != RECONCILER_USER {
            continue;
        }
        sum.all += n;
        let write = WRITE_VERBS.contains(&verb.as_str());
        if write {
            sum.writes += n;
        }
        if resource == "leases" {
            if write {
                sum.lease_writes += n;
            }
        } else if resource.is_empty() {
            sum.discovery += n;
        } else if verb != "watch" {
            sum.for_services += n;
            if !write {
                sum.reads += n;
            }
        }
        let ratios: Vec<String> = per
            .iter()
            .map(|(what, d)| format!("{:.2}/{what}", *n as f64 / (*d).max(1) as f64))
            .collect();
        println!("  {verb:<10} {resource:<40} {n:>8}  {}", ratios.join(" "));
    }
    sum
}

/// A child phase 1 made, as the object to apply in `new_ns` for `owner`.
fn retarget(
    ar: &ApiResource,
    obj: &DynamicObject,
    new_ns: &str,
    owner: &InferenceService,
) -> Value {
    let mut v = serde_json::to_value(obj).expect("object");
    // List items come without their type.
    v["apiVersion"] = json!(ar.api_version);
    v["kind"] = json!(ar.kind);
    let meta = v["metadata"].as_object_mut().expect("metadata");
    for field in [
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "managedFields",
    ] {
        meta.remove(field);
    }
    meta.insert("namespace".into(), json!(new_ns));
    meta.insert(
        "ownerReferences".into(),
        json!([{
            "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
            "name": owner.name_any(), "uid": owner.uid(),
            "controller": true, "blockOwnerDeletion": true,
        }]),
    );
    if let Some(o) = v.as_object_mut() {
        o.remove("status");
    }
    // Services: the cluster IP is the API server's to pick.
    if v["kind"] == "Service"
        && let Some(spec) = v["spec"].as_object_mut()
    {
        for field in ["clusterIP", "clusterIPs"] {
            spec.remove(field);
        }
    }
    v
}

struct Kinds {
    deployments: ApiResource,
    services: ApiResource,
    routes: ApiResource,
}

impl Kinds {
    fn new() -> Self {
        let gvk = |g: &str, v: &str, k: &str, p: &str| {
            ApiResource::from_gvk_with_plural(&kube::api::GroupVersionKind::gvk(g, v, k), p)
        };
        Kinds {
            deployments: gvk("apps", "v1", "Deployment", "deployments"),
            services: gvk("", "v1", "Service", "services"),
            routes: gvk("gateway.networking.k8s.io", "v1", "HTTPRoute", "httproutes"),
        }
    }
}

/// What the baseline writes for one service: its children and its status.
struct Prepared {
    index: usize,
    children: Vec<(ApiResource, DynamicObject)>,
    status: Value,
}

async fn prepare_baseline(client: &Client, namespaces: &[String]) -> Vec<Prepared> {
    let kinds = Kinds::new();
    let mut out = Vec::new();
    let mut by_service: BTreeMap<String, Vec<(ApiResource, DynamicObject)>> = BTreeMap::new();
    for ns in namespaces {
        for ar in [&kinds.deployments, &kinds.services, &kinds.routes] {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, ar);
            let lp = ListParams::default().labels("app.kubernetes.io/managed-by=infergate");
            for obj in api.list(&lp).await.expect("list children").items {
                let owner = obj
                    .labels()
                    .get("infergate.dev/service")
                    .cloned()
                    .unwrap_or_default();
                by_service
                    .entry(format!("{ns}/{owner}"))
                    .or_default()
                    .push((ar.clone(), obj));
            }
        }
        for svc in Api::<InferenceService>::namespaced(client.clone(), ns)
            .list(&ListParams::default())
            .await
            .expect("list services")
            .items
        {
            let index: usize = svc
                .name_any()
                .trim_start_matches("svc-")
                .parse()
                .expect("svc-N");
            let children = by_service
                .remove(&format!("{ns}/{}", svc.name_any()))
                .unwrap_or_default();
            out.push(Prepared {
                index,
                children,
                status: serde_json::to_value(&svc.status).expect("status"),
            });
        }
    }
    out.sort_by_key(|p| p.index);
    out
}

/// Phase 3: create the services and apply what phase 1 wrote for them.
async fn baseline(client: &Client, namespaces: &[String], prepared: Vec<Prepared>) -> Duration {
    let params = PatchParams::apply("scale-baseline").force();
    let n = prepared.len();
    let start = Instant::now();
    let (tx, rx) = futures::channel::mpsc::unbounded::<(Prepared, InferenceService)>();
    let creates = {
        let client = client.clone();
        let namespaces = namespaces.to_vec();
        async move {
            futures::stream::iter(prepared)
                .map(|p| {
                    let client = client.clone();
                    let ns = namespaces[p.index % NAMESPACES].clone();
                    async move {
                        let svc = create_service(&client, &ns, p.index)
                            .await
                            .expect("baseline create");
                        (p, svc)
                    }
                })
                .buffer_unordered(CONCURRENCY)
                .for_each(|pair| {
                    let _ = tx.unbounded_send(pair);
                    async {}
                })
                .await;
            drop(tx);
        }
    };
    let applies = rx
        .map(|(p, svc)| {
            let client = client.clone();
            let params = params.clone();
            async move {
                let ns = svc.namespace().unwrap_or_default();
                for (ar, o) in &p.children {
                    let body = retarget(ar, o, &ns, &svc);
                    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, ar);
                    if let Err(e) = api
                        .patch(&o.name_any(), &params, &Patch::Apply(&body))
                        .await
                    {
                        panic!("baseline apply: {e}");
                    }
                }
                let status = json!({
                    "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
                    "status": p.status,
                });
                Api::<InferenceService>::namespaced(client, &ns)
                    .patch_status(&svc.name_any(), &params, &Patch::Apply(&status))
                    .await
                    .expect("baseline status");
            }
        })
        .buffer_unordered(CONCURRENCY)
        .count();
    let ((), applied) = tokio::join!(creates, applies);
    assert_eq!(applied, n, "every service's children applied");
    start.elapsed()
}

async fn parent() {
    let n: usize = std::env::var("INFERGATE_SCALE_SERVICES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let run_baseline = std::env::var("INFERGATE_SCALE_BASELINE").map_or(true, |v| v != "0");
    let commit = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_default();
    println!(
        "scale bench: INFERGATE_SCALE_SERVICES={n} cargo bench --bench scale; commit {commit}; {} CPUs ({cpu})",
        std::thread::available_parallelism().map_or(0, |p| p.get())
    );
    // SAFETY: set before any other thread of this process reads the environment.
    unsafe { std::env::set_var(support::AUDIT_ENV, "1") };
    let cp = support::control_plane().await;
    cp.install_crds().await;
    cp.install_crd_file(support::httproute_crd()).await;
    // The test apiserver's service range is a /24: add a ServiceCIDR for
    // the Services.
    let out = cp.kubectl_stdin(
        &["apply", "-f", "-"],
        "apiVersion: networking.k8s.io/v1\nkind: ServiceCIDR\nmetadata: {name: scale-bench}\nspec: {cidrs: [10.100.0.0/16]}\n",
    );
    assert!(out.status.success(), "ServiceCIDR: {out:?}");
    let client = cp.client().await;
    let kubeconfig = cp.deployed_service_account().await;
    let audit = cp.audit_log();
    let mut namespaces = Vec::new();
    for _ in 0..NAMESPACES {
        namespaces.push(cp.fresh_namespace("scale").await);
    }

    // ---------------------------------------------------------- 1. infergate
    let reconciler = ReconcilerProcess::start(&kubeconfig);
    // Let it take the lease and sync its caches on an empty cluster.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let from = audit_len(&audit);
    println!("1. infergate: creating {n} InferenceServices in {NAMESPACES} namespaces");
    let reconciled = all_reconciled(&client, n);
    let start = Instant::now();
    let creates = futures::stream::iter(0..n)
        .map(|i| {
            let client = client.clone();
            let ns = namespaces[i % NAMESPACES].clone();
            async move { create_service(&client, &ns, i).await.map(|s| s.name_any()) }
        })
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<_>>()
        .await;
    let failed = creates.iter().filter(|r| r.is_err()).count();
    assert_eq!(failed, 0, "some creates failed: {creates:?}");
    let created_in = start.elapsed();
    let deadline = Duration::from_secs(3600);
    let infergate_time = match tokio::time::timeout(deadline, reconciled).await {
        Ok(joined) => {
            joined.expect("the watch of services");
            start.elapsed()
        }
        Err(_) => panic!("not every service reconciled after {deadline:?}"),
    };
    println!("   all {n} reconciled {infergate_time:.2?} after the first create");
    // The ReplicaSet controller makes the pods at its own pace (the
    // controller manager's client rate): wait until every service has its
    // two, so the statuses that say why they do not start are written
    // before the restart, then let trailing reconciles settle.
    let pods_api: Api<k8s_openapi::api::core::v1::Pod> = Api::all(client.clone());
    let all_pods = loop {
        let pods = pods_api
            .list_metadata(&ListParams::default().labels("app.kubernetes.io/managed-by=infergate"))
            .await
            .map_or(0, |l| l.items.len());
        if pods >= 2 * n || start.elapsed() > deadline {
            break start.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    println!(
        "   all {} pods exist {all_pods:.2?} after the first create",
        2 * n
    );
    tokio::time::sleep(Duration::from_secs(15)).await;
    let phase1_rss = reconciler.rss_peak();
    let stats = reconciler.stop();
    let phase1 = audit_counts(&audit, from);
    let durations: Vec<u64> = stats["durations_us"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    let reconciles = durations.len();

    // ------------------------------------------------------------ 2. restart
    let from = audit_len(&audit);
    let reconciler = ReconcilerProcess::start(&kubeconfig);
    let restart_start = Instant::now();
    while reconciler.reconciles() < n && restart_start.elapsed() < Duration::from_secs(600) {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let restart_reconciled = restart_start.elapsed();
    // A few more seconds: anything it would write would be written by now.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let restart_rss = reconciler.rss_peak();
    let restart_stats = reconciler.stop();
    let restart_reconciles = restart_stats["durations_us"].as_array().map_or(0, Vec::len);
    let phase2 = audit_counts(&audit, from);

    // ----------------------------------------------------------- 3. baseline
    let baseline_time = if run_baseline {
        let prepared = prepare_baseline(&client, &namespaces).await;
        assert_eq!(prepared.len(), n, "phase 1's services");
        let mut base_ns = Vec::new();
        for _ in 0..NAMESPACES {
            base_ns.push(cp.fresh_namespace("base").await);
        }
        println!("3. baseline: the same objects applied by a plain client");
        let t = baseline(&client, &base_ns, prepared).await;
        println!("   done in {t:.2?}");
        Some(t)
    } else {
        None
    };

    // --------------------------------------------------------------- report
    println!();
    println!("services:                     {n} (creates took {created_in:.2?})");
    println!("1. infergate, all reconciled: {infergate_time:.2?}");
    if let Some(b) = baseline_time {
        println!("3. baseline, all applied:     {b:.2?}");
        println!(
            "   ratio infergate/baseline:  {:.2}x (goal <= 1.1x)",
            infergate_time.as_secs_f64() / b.as_secs_f64()
        );
    }
    println!(
        "reconciles: {reconciles} ({:.2} per service); p50/p90/p99/max {:.1} / {:.1} / {:.1} / {:.1} ms",
        reconciles as f64 / n.max(1) as f64,
        pct(&durations, 0.50),
        pct(&durations, 0.90),
        pct(&durations, 0.99),
        pct(&durations, 1.0)
    );
    println!("reconciler requests in phase 1 (audit log, user {RECONCILER_USER}):");
    let p1 = print_requests(&phase1, &[("reconcile", reconciles), ("service", n)]);
    println!(
        "  all {} ({:.2}/reconcile), writes {} ({:.2}/service)",
        p1.all,
        p1.all as f64 / reconciles.max(1) as f64,
        p1.writes,
        p1.writes as f64 / n.max(1) as f64
    );
    println!(
        "  per service, the Lease, watches and discovery aside: {:.2} requests (goal <= 7), of them {:.2} reads; discovery {} in all",
        p1.for_services as f64 / n.max(1) as f64,
        p1.reads as f64 / n.max(1) as f64,
        p1.discovery
    );
    println!(
        "  reconciles per service: {:.2} (goal <= 1.2)",
        reconciles as f64 / n.max(1) as f64
    );
    println!(
        "2. restart: {restart_reconciles} reconciles, every service reconciled {restart_reconciled:.2?} after the start; requests:"
    );
    let p2 = print_requests(&phase2, &[("service", n)]);
    println!(
        "   writes other than the Lease: {} (goal 0); reads per service: {:.2} (goal <= 1)",
        p2.writes - p2.lease_writes,
        p2.reads as f64 / n.max(1) as f64
    );
    println!(
        "reconciler peak RSS (VmHWM): phase 1 {}, restart {}; RSS at the end (VmRSS): phase 1 {}, restart {}",
        stats["vm_hwm"].as_str().unwrap_or("?"),
        restart_stats["vm_hwm"].as_str().unwrap_or("?"),
        stats["vm_rss"].as_str().unwrap_or("?"),
        restart_stats["vm_rss"].as_str().unwrap_or("?")
    );
    println!("RSS sampled every 250 ms: phase 1 peak {phase1_rss}; restart peak {restart_rss}");
}
