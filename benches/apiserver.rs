//! infergate's webhooks measured through a real API server (run by hand, not in CI):
//!
//! ```text
//! cargo bench --locked --bench apiserver                 # 6 rounds x 150 ops, 10,000 services
//! INFERGATE_APISERVER_SERVICES=500 INFERGATE_APISERVER_ROUNDS=2 \
//!   INFERGATE_APISERVER_OPS=40 cargo bench --locked --bench apiserver
//! INFERGATE_APISERVER_PARTS=E cargo bench --locked --bench apiserver   # part E alone
//! ```
//!
//! `INFERGATE_APISERVER_PARTS` (`ACDEB`, every part) names the parts to run,
//! in their order A, C, D, E, B.
//!
//! Starts the test control plane (etcd, kube-apiserver, kube-controller-manager
//! from `tests/support`), installs the CRDs, runs the built `infergate serve
//! --no-reconcile` as a process and registers its webhooks by URL as the
//! end-to-end tests do (`support::register_webhooks`: `webhooks/*.yaml` and the
//! CRD's conversion webhook). A trivial TLS webhook server in this process
//! (the "no-op": every AdmissionReview answered `allowed: true` with the
//! request's uid, nothing else) stands in for infergate when asked; a
//! second one (the "fixed" no-op) answers `/mutate` of an object not yet
//! defaulted with infergate's own patch for the small spec, computed once
//! from a dry run and sent as it is, so that it stores what infergate
//! stores while doing none of infergate's work.
//!
//! **A. Admission latency.** One client, sequential requests, in blocks
//! under four configurations that take turns within each of
//! `INFERGATE_APISERVER_ROUNDS` (6) rounds (the order rotates each round, so
//! each configuration is measured at each position equally often: other work
//! on a shared 2-core machine drifts within minutes):
//! - `none`: no webhook configuration registered;
//! - `infergate`: `webhooks/mutating.yaml` and `webhooks/validating.yaml`
//!   pointed at infergate;
//! - `noop`: the same two files pointed at the no-op server (the CRD's
//!   conversion webhook stays infergate's);
//! - `fixed`: the same, pointed at the fixed-patch no-op (the switch checks
//!   that it stores the spec and annotations infergate does).
//!
//! A block is `INFERGATE_APISERVER_OPS` (150) creates of a small v1beta1
//! InferenceService (`model`, `engine.image`, `replicas`) alternating with
//! as many creates of its pre-defaulted form (what infergate's mutating
//! webhook makes of it, taken from a dry run, so that every configuration
//! stores the same object and infergate's answer patches nothing), then as
//! many metadata-only updates of a pre-defaulted service (a JSON merge
//! patch adding, then removing, the finalizer `bench.infergate.dev/x`:
//! spec, labels and annotations unchanged, so the webhooks'
//! `matchConditions` skip the call). Each block starts with 10 unmeasured
//! operations of each kind; its services are deleted after it. After each
//! switch the driver waits until a server-side dry-run create shows the new
//! configuration in force (defaulted or not, and which server's counters
//! moved: `infergate_admission_requests_total` on infergate's `/metrics`,
//! the no-op's own counts), then 2 s more.
//!
//! Reported: p50/p90/p99 per configuration and operation, the latency added
//! at p50 over `none`, infergate's create p50 against the no-op's and the
//! fixed no-op's (pooled, and per round: each block against the other's
//! block of the same round), the
//! admission requests each server received during the update phases
//! (expected: 0), and where the time goes: CPU of infergate's process and of
//! the no-op's thread per operation, and infergate's own handling time per
//! request (`infergate_admission_duration_seconds`).
//!
//! **C. Access reviews** (run between A and B). With infergate's webhooks
//! registered, `INFERGATE_APISERVER_OPS` creates of each, alternating: the
//! small spec; the small spec with `engine.env` taking a value from a Secret
//! no create named before (one SubjectAccessReview each); and from the same
//! Secret every time (answered from the 60 s cache). Reported: p50/p90/p99
//! of each, the p50s over the plain create, and the reviews infergate sent
//! and answered from its cache (`infergate_access_reviews_total`).
//!
//! **D. GPU budgets** (run after C). Creates of a one-GPU service in a
//! namespace with `limits.maxGPUsPerNamespace` (each raises a charge: one
//! ledger write) alternating with the same creates in a namespace without
//! a budget, then spec updates of the budgeted services that leave their
//! charge alone. Reported: p50/p90/p99 of each, the budgeted create's p50
//! over the plain one, and the ledger writes infergate counted
//! (`infergate_budget_ledger_writes_total`: one per raising create, none
//! per update).
//!
//! **E. Model names** (run after D). `INFERGATE_APISERVER_NAMES` (1,000)
//! services routed by name (`routing.match: ModelName`) through one
//! Gateway, each serving a name of its own, are created with infergate's
//! webhooks, 16 at a time, so that the Gateway's names ledger (a ConfigMap
//! in infergate's namespace) holds that many entries. Then, in
//! `INFERGATE_APISERVER_ROUNDS` rounds, a block (as in A) under the
//! fixed-patch no-op pair and one under infergate take turns (the order
//! rotates each round) in A's namespace, whose services are routed by path
//! and hold no names; then, with infergate's webhooks, creates of a service
//! serving a new name through the same Gateway (one ledger write each)
//! alternate with the plain create in a namespace without names. Reported:
//! infergate's create p50 over the fixed pair's (pooled and per round), the
//! named create's p50 over the plain one, and the ledger's entries and size
//! before and after (the plain blocks write no ledger: its
//! resourceVersion is checked to stay as it was).
//!
//! **B. Conversion at scale.** With infergate's webhooks registered,
//! `INFERGATE_APISERVER_SERVICES` (10,000) v1beta1 services (the small spec,
//! defaulted by the mutating webhook) are created, 16 at a time, across 5
//! namespaces. Every version of a CRD has its own watch cache in the API
//! server, filled from etcd through the conversion webhook and kept current
//! by converting each write event: so a plain list of v1alpha1 calls no
//! webhook, and a list read from etcd converts every object. Both are timed,
//! each version `INFERGATE_APISERVER_GETS` (5) times, alternating, output
//! discarded (each checked once: it parses, holds every service, in the
//! version asked):
//! - B1: `kubectl get inferenceservices.VERSION.infergate.dev -A -o json`;
//! - B2: `kubectl get --raw /apis/infergate.dev/VERSION/inferenceservices?resourceVersion=RV&resourceVersionMatch=Exact`,
//!   RV the revision after the last create; the CRD's spec is changed first
//!   (`conversionReviewVersions`), which rebuilds the watch caches at a later
//!   revision, so the API server reads RV from etcd.
//!
//! Reported: the medians and their ratio (v1alpha1 / v1beta1), the objects
//! infergate converted per read (`infergate_conversion_objects_total`), the
//! ConversionReviews the API server sent and the time it waited for them
//! (`apiserver_crd_conversion_webhook_duration_seconds`), and the
//! conversions on the write path (during the creates, and the rebuild of
//! the v1alpha1 watch cache).
//!
//! Nothing is asserted about the figures; the output starts with the command,
//! the commit and the machine, and ends with a table.
//!
//! Results, with the command, commit and machine of each run, are in
//! `docs/performance.md` ("API-server bench").

#[path = "../tests/support/mod.rs"]
mod support;

mod common;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use infergate::api::v1beta1::InferenceService;
use infergate::state::names::{Gateway, NameBook, ledger_name};

/// The webhook configurations' name in `webhooks/*.yaml`.
const CONFIG_NAME: &str = "infergate";
const DEFAULTED_FROM: &str = "infergate.dev/defaulted-from";
const FINALIZER: &str = "bench.infergate.dev/x";
const WARMUP: usize = 10;
const CONVERSION_NAMESPACES: usize = 5;
const CONCURRENCY: usize = 16;
/// Pause after a configuration change is seen in force.
const SETTLE: Duration = Duration::from_secs(2);

fn main() {
    let Some(rt) = common::run::bench_runtime() else {
        return;
    };
    rt.block_on(run());
}

// -------------------------------------------------------------- settings

struct Settings {
    services: usize,
    rounds: usize,
    ops: usize,
    gets: usize,
    /// Part E's services routed by name.
    names: usize,
    /// The parts to run, upper-case letters.
    parts: String,
}

fn env_usize(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

impl Settings {
    fn from_env() -> Self {
        let ops = env_usize("INFERGATE_APISERVER_OPS", 150).max(2);
        Self {
            services: env_usize("INFERGATE_APISERVER_SERVICES", 10_000),
            rounds: env_usize("INFERGATE_APISERVER_ROUNDS", 6).max(1),
            // Updates come in add/remove pairs: an even count leaves no finalizer.
            ops: ops + ops % 2,
            gets: env_usize("INFERGATE_APISERVER_GETS", 5).max(1),
            names: env_usize("INFERGATE_APISERVER_NAMES", 1_000),
            parts: std::env::var("INFERGATE_APISERVER_PARTS")
                .unwrap_or_else(|_| "ACDEB".into())
                .to_uppercase(),
        }
    }

    /// Whether part `p` runs.
    fn part(&self, p: char) -> bool {
        self.parts.contains(p)
    }
}

// ------------------------------------------------------------ the machine

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "?".into())
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// (busy, steal, total) jiffies of all CPUs from /proc/stat.
fn cpu_jiffies() -> (u64, u64, u64) {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = text.lines().find(|l| l.starts_with("cpu ")) else {
        return (0, 0, 0);
    };
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let get = |i: usize| v.get(i).copied().unwrap_or(0);
    // user nice system idle iowait irq softirq steal
    let total: u64 = v.iter().take(8).sum();
    let idle = get(3) + get(4);
    (total - idle - get(7), get(7), total)
}

/// "busy X%, steal Y%" of the whole machine between two readings.
fn cpu_share(before: (u64, u64, u64), after: (u64, u64, u64)) -> String {
    let total = after.2.saturating_sub(before.2).max(1) as f64;
    format!(
        "machine busy {:.0}%, steal {:.1}%",
        100.0 * after.0.saturating_sub(before.0) as f64 / total,
        100.0 * after.1.saturating_sub(before.1) as f64 / total
    )
}

fn git_commit() -> String {
    let root = support::root();
    let out = Command::new("git")
        .arg("-C")
        .arg(&root)
        .args(["rev-parse", "--short", "HEAD"])
        .output();
    let Ok(out) = out else { return "?".into() };
    let commit = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let dirty = Command::new("git")
        .arg("-C")
        .arg(&root)
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .is_ok_and(|o| !o.stdout.is_empty());
    if dirty {
        format!("{commit} (with uncommitted changes)")
    } else {
        commit
    }
}

/// CPU time (user + system) so far of the process or thread whose `stat`
/// file is `path`, in ms (0 when unreadable).
fn cpu_ms(path: &str) -> u64 {
    let stat = std::fs::read_to_string(path).unwrap_or_default();
    // Fields after the command name (which may hold spaces): state is the
    // 3rd field, utime the 14th, stime the 15th.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0;
    };
    let fields: Vec<u64> = rest
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    let ticks = fields.get(10).copied().unwrap_or(0) + fields.get(11).copied().unwrap_or(0);
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    ticks * 1000 / hz
}

// ----------------------------------------------------------- statistics

/// Nearest-rank percentile of sorted microseconds, in milliseconds.
fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)] as f64 / 1000.0
}

fn median_secs(values: &[Duration]) -> f64 {
    let mut v: Vec<f64> = values.iter().map(Duration::as_secs_f64).collect();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

// ------------------------------------------------------- the no-op webhook

/// A TLS webhook server on 127.0.0.1 answering every AdmissionReview with
/// `allowed: true` and the request's uid; counts requests per path. With a
/// fixed patch, `/mutate` also answers that patch (as it is, computed
/// nothing) for an object not yet defaulted. On its own thread and runtime;
/// stops when dropped.
struct Noop {
    port: u16,
    ca_pem: String,
    mutate: Arc<AtomicU64>,
    validate: Arc<AtomicU64>,
    /// Its thread's id (for its CPU time).
    tid: i32,
    stop: CancellationToken,
}

#[derive(serde::Deserialize)]
struct Review {
    request: Option<ReviewRequest>,
}

#[derive(serde::Deserialize)]
struct ReviewRequest {
    uid: String,
    #[serde(default)]
    object: Option<ReviewObject>,
}

#[derive(serde::Deserialize)]
struct ReviewObject {
    #[serde(default)]
    metadata: ReviewMetadata,
}

#[derive(Default, serde::Deserialize)]
struct ReviewMetadata {
    #[serde(default)]
    annotations: Option<std::collections::BTreeMap<String, String>>,
}

impl ReviewRequest {
    /// Whether the object already carries infergate's defaults.
    fn defaulted(&self) -> bool {
        self.object
            .as_ref()
            .and_then(|o| o.metadata.annotations.as_ref())
            .is_some_and(|a| a.contains_key(DEFAULTED_FROM))
    }
}

impl Noop {
    /// `patch`: the base64 JSON Patch `/mutate` answers for an object not
    /// yet defaulted (none: never a patch).
    fn start(patch: Option<String>) -> Self {
        let (ca_pem, acceptor) = support::loopback_tls_acceptor("noop-webhook-ca");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the no-op webhook");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("addr").port();
        let mutate = Arc::new(AtomicU64::new(0));
        let validate = Arc::new(AtomicU64::new(0));
        let stop = CancellationToken::new();
        let thread = if patch.is_some() {
            "fixed-webhook"
        } else {
            "noop-webhook"
        };
        let (m, v) = (mutate.clone(), validate.clone());
        let patch: Arc<Option<String>> = Arc::new(patch);
        let tid = support::serve_https(thread, listener, acceptor, stop.clone(), move |req| {
            let (m, v, p) = (m.clone(), v.clone(), patch.clone());
            async move { allow(req, &m, &v, p.as_deref()).await }
        });
        Self {
            port,
            ca_pem,
            mutate,
            validate,
            tid,
            stop,
        }
    }
}

impl Drop for Noop {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn allow(
    req: Request<Incoming>,
    mutate: &AtomicU64,
    validate: &AtomicU64,
    patch: Option<&str>,
) -> Response<Full<Bytes>> {
    let mutating = req.uri().path() == "/mutate";
    match req.uri().path() {
        "/mutate" => mutate.fetch_add(1, Ordering::Relaxed),
        "/validate" => validate.fetch_add(1, Ordering::Relaxed),
        _ => 0,
    };
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let request = serde_json::from_slice::<Review>(&body)
        .ok()
        .and_then(|r| r.request);
    let uid = request.as_ref().map(|r| r.uid.clone()).unwrap_or_default();
    let mut answer = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": uid, "allowed": true}
    });
    if let Some(patch) = patch
        && mutating
        && request.is_some_and(|r| !r.defaulted())
    {
        answer["response"]["patchType"] = json!("JSONPatch");
        answer["response"]["patch"] = json!(patch);
    }
    let mut resp = Response::new(Full::new(Bytes::from(answer.to_string())));
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    resp
}

// ------------------------------------------------------------ counters

/// infergate's `/metrics` text.
async fn scrape(probe_port: u16) -> String {
    match support::http_get(probe_port, "/metrics").await {
        Ok((200, body)) => body,
        other => panic!("infergate /metrics: {other:?}"),
    }
}

/// Sum of the samples of `name` whose labels contain every one of `labels`.
fn metric_sum(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{'))
        })
        .filter(|l| labels.iter().all(|x| l.contains(x)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>()
}

/// Admission requests received so far by each server.
#[derive(Clone, Copy, Debug, Default)]
struct Calls {
    infergate_mutate: u64,
    infergate_validate: u64,
    noop_mutate: u64,
    noop_validate: u64,
    fixed_mutate: u64,
    fixed_validate: u64,
    /// Seconds infergate spent answering them (its own histogram's sum).
    infergate_seconds: f64,
}

impl Calls {
    fn since(self, before: Calls) -> Calls {
        Calls {
            infergate_mutate: self.infergate_mutate - before.infergate_mutate,
            infergate_validate: self.infergate_validate - before.infergate_validate,
            noop_mutate: self.noop_mutate - before.noop_mutate,
            noop_validate: self.noop_validate - before.noop_validate,
            fixed_mutate: self.fixed_mutate - before.fixed_mutate,
            fixed_validate: self.fixed_validate - before.fixed_validate,
            infergate_seconds: self.infergate_seconds - before.infergate_seconds,
        }
    }
    fn infergate(self) -> u64 {
        self.infergate_mutate + self.infergate_validate
    }
    fn noop(self) -> u64 {
        self.noop_mutate + self.noop_validate
    }
    fn fixed(self) -> u64 {
        self.fixed_mutate + self.fixed_validate
    }
}

struct Servers {
    infergate: support::Infergate,
    noop: Noop,
    /// The no-op that answers infergate's patch for the small spec, fixed.
    fixed: Noop,
    /// A client of the API server (for its own metrics).
    apiserver: Client,
}

impl Servers {
    async fn calls(&self) -> Calls {
        let text = scrape(self.infergate.probe_port).await;
        let name = "infergate_admission_requests_total";
        Calls {
            infergate_mutate: metric_sum(&text, name, &["webhook=\"mutate\""]) as u64,
            infergate_validate: metric_sum(&text, name, &["webhook=\"validate\""]) as u64,
            noop_mutate: self.noop.mutate.load(Ordering::Relaxed),
            noop_validate: self.noop.validate.load(Ordering::Relaxed),
            fixed_mutate: self.fixed.mutate.load(Ordering::Relaxed),
            fixed_validate: self.fixed.validate.load(Ordering::Relaxed),
            infergate_seconds: metric_sum(&text, "infergate_admission_duration_seconds_sum", &[]),
        }
    }

    /// CPU time (user + system) infergate's process has used, in ms.
    fn infergate_cpu_ms(&self) -> u64 {
        cpu_ms(&format!("/proc/{}/stat", self.infergate.child.id()))
    }

    /// CPU time the no-op servers' threads have used, in ms.
    fn noop_cpu_ms(&self) -> u64 {
        [&self.noop, &self.fixed]
            .iter()
            .map(|n| cpu_ms(&format!("/proc/self/task/{}/stat", n.tid)))
            .sum()
    }

    async fn converted(&self) -> u64 {
        let text = scrape(self.infergate.probe_port).await;
        metric_sum(&text, "infergate_conversion_objects_total", &[]) as u64
    }
}

// -------------------------------------------------------- configurations

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hooks {
    None,
    Infergate,
    Noop,
    Fixed,
}

const CONFIGS: [Hooks; 4] = [Hooks::None, Hooks::Infergate, Hooks::Noop, Hooks::Fixed];

impl Hooks {
    fn name(self) -> &'static str {
        match self {
            Hooks::None => "none",
            Hooks::Infergate => "infergate",
            Hooks::Noop => "noop",
            Hooks::Fixed => "fixed",
        }
    }
}

fn small_service(ns: &str, name: &str) -> InferenceService {
    serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "model": {"ref": "m"},
            "engine": {"image": "registry.example.com/vllm:0.9"},
            "replicas": 1
        }
    }))
    .expect("service")
}

/// Part C: creates of the small spec with no reference, with a reference
/// to a Secret no create named before (one SubjectAccessReview each), and
/// with the same Secret again (answered from the cache), alternating; their
/// latencies and the reviews infergate made, from its own counters.
async fn access_reviews(servers: &Servers, api: &Api<InferenceService>, ns: &str, ops: usize) {
    const KINDS: [&str; 3] = ["no reference", "new Secret", "same Secret"];
    let mut latency: [Vec<u64>; 3] = Default::default();
    let before = scrape(servers.infergate.probe_port).await;
    for i in 0..ops + WARMUP {
        for (k, samples) in latency.iter_mut().enumerate() {
            let mut svc = small_service(ns, &format!("access-{k}-{i}"));
            let secret = match k {
                0 => None,
                1 => Some(format!("token-{i}")),
                _ => Some("shared".to_owned()),
            };
            if let (Some(name), Some(engine)) = (secret, svc.spec.engine.as_mut()) {
                engine.env = vec![
                    serde_json::from_value(json!({
                        "name": "HF_TOKEN",
                        "valueFrom": {"secretKeyRef": {"name": name, "key": "token"}}
                    }))
                    .expect("env"),
                ];
            }
            let t = Instant::now();
            api.create(&PostParams::default(), &svc)
                .await
                .unwrap_or_else(|e| panic!("create access-{k}-{i}: {e}"));
            if i >= WARMUP {
                samples.push(u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX));
            }
        }
    }
    let after = scrape(servers.infergate.probe_port).await;
    let count = |result: &str| {
        let label = format!("result=\"{result}\"");
        metric_sum(&after, "infergate_access_reviews_total", &[&label])
            - metric_sum(&before, "infergate_access_reviews_total", &[&label])
    };
    let creates = (ops + WARMUP) as f64;
    for (k, samples) in latency.iter_mut().enumerate() {
        samples.sort_unstable();
        println!(
            "C {:<13} p50 {:6.2} ms  p90 {:6.2} ms  p99 {:6.2} ms",
            KINDS[k],
            pct(samples, 0.5),
            pct(samples, 0.9),
            pct(samples, 0.99)
        );
    }
    let base = pct(&latency[0], 0.5);
    println!(
        "C p50 over no reference: new Secret {:+.2} ms ({:.2}x), same Secret {:+.2} ms ({:.2}x)",
        pct(&latency[1], 0.5) - base,
        pct(&latency[1], 0.5) / base,
        pct(&latency[2], 0.5) - base,
        pct(&latency[2], 0.5) / base
    );
    println!(
        "C access reviews sent: {:.0} (allowed {:.0}, denied {:.0}, failed {:.0}, timeout {:.0}) for {creates:.0} creates with a new Secret; answered from the cache: {:.0} for {creates:.0} with the same one",
        count("allowed") + count("denied") + count("failed") + count("timeout"),
        count("allowed"),
        count("denied"),
        count("failed"),
        count("timeout"),
        count("cached")
    );
    let _ = api
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
}

/// Part D: GPU budgets. Creates of a one-GPU service in a namespace with a
/// budget (each raises a charge: one ledger write) alternating with the
/// same creates in a namespace without one (no ledger work), then as many
/// spec updates of the budgeted services that leave their charge alone
/// (an engine argument changed: the webhooks are called, nothing is
/// written); latencies and the ledger writes infergate counted.
async fn budgets(cp: &support::ControlPlane, servers: &Servers, client: &Client, ops: usize) {
    use infergate::api::InferencePolicy;
    // The ledgers live in infergate's own namespace.
    let _ = cp.kubectl(&["create", "namespace", "infergate-system"]);
    let budgeted = cp.fresh_namespace("budget").await;
    let plain = cp.fresh_namespace("nobudget").await;
    let policy = |gpus: i64| -> InferencePolicy {
        serde_json::from_value(json!({
            "apiVersion": "infergate.dev/v1beta1", "kind": "InferencePolicy",
            "metadata": {"name": "budget", "namespace": budgeted},
            "spec": {"limits": {"maxGPUsPerNamespace": gpus}}
        }))
        .expect("policy")
    };
    let policies = Api::<InferencePolicy>::namespaced(client.clone(), &budgeted);
    // A budget of 0 first: once a dry run is denied, the policy is cached;
    // then one no run reaches.
    policies
        .create(&PostParams::default(), &policy(0))
        .await
        .expect("budget policy");
    let gpu_service = |ns: &str, name: &str| {
        let mut svc = small_service(ns, name);
        svc.spec.accelerator =
            Some(serde_json::from_value(json!({"type": "nvidia"})).expect("accelerator"));
        svc
    };
    let api_b = Api::<InferenceService>::namespaced(client.clone(), &budgeted);
    let api_p = Api::<InferenceService>::namespaced(client.clone(), &plain);
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while api_b
        .create(&dry, &gpu_service(&budgeted, "probe"))
        .await
        .is_ok()
    {
        assert!(
            Instant::now() < deadline,
            "the budget policy never reached infergate"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut open = policies.get("budget").await.expect("policy");
    open.spec.limits = policy(1_000_000).spec.limits;
    policies
        .replace("budget", &PostParams::default(), &open)
        .await
        .expect("raise the budget");
    let deadline = Instant::now() + Duration::from_secs(30);
    while api_b
        .create(&dry, &gpu_service(&budgeted, "probe"))
        .await
        .is_err()
    {
        assert!(
            Instant::now() < deadline,
            "the raised budget never reached infergate"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let writes = |text: &str, result: &str| {
        metric_sum(
            text,
            "infergate_budget_ledger_writes_total",
            &[&format!("result=\"{result}\"")],
        )
    };
    let mut latency: [Vec<u64>; 3] = Default::default();
    let before = scrape(servers.infergate.probe_port).await;
    for i in 0..ops + WARMUP {
        for (k, api, ns) in [(0, &api_b, &budgeted), (1, &api_p, &plain)] {
            let t = Instant::now();
            api.create(
                &PostParams::default(),
                &gpu_service(ns, &format!("gpu-{i}")),
            )
            .await
            .unwrap_or_else(|e| panic!("create gpu-{i} in {ns}: {e}"));
            if i >= WARMUP {
                latency[k].push(u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX));
            }
        }
    }
    let created = scrape(servers.infergate.probe_port).await;
    for i in 0..ops + WARMUP {
        let patch = json!({"spec": {"engine": {"args": [format!("--seed={i}")]}}});
        let t = Instant::now();
        api_b
            .patch(
                &format!("gpu-{i}"),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .unwrap_or_else(|e| panic!("update gpu-{i}: {e}"));
        if i >= WARMUP {
            latency[2].push(u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX));
        }
    }
    let updated = scrape(servers.infergate.probe_port).await;
    const KINDS: [&str; 3] = ["create, budget", "create, none", "update, same"];
    for (k, samples) in latency.iter_mut().enumerate() {
        samples.sort_unstable();
        println!(
            "D {:<15} p50 {:6.2} ms  p90 {:6.2} ms  p99 {:6.2} ms",
            KINDS[k],
            pct(samples, 0.5),
            pct(samples, 0.9),
            pct(samples, 0.99)
        );
    }
    println!(
        "D p50 create with a budget / without: {:.2}x ({:+.2} ms)",
        pct(&latency[0], 0.5) / pct(&latency[1], 0.5),
        pct(&latency[0], 0.5) - pct(&latency[1], 0.5)
    );
    let n = (ops + WARMUP) as f64;
    println!(
        "D ledger writes: {:.0} written ({:.0} conflicts, {:.0} denied, {:.0} failed) for {n:.0} creates that raise a charge; {:.0} written for {n:.0} updates that leave it alone",
        writes(&created, "written") - writes(&before, "written"),
        writes(&created, "conflict") - writes(&before, "conflict"),
        writes(&created, "denied") - writes(&before, "denied"),
        writes(&created, "failed") - writes(&before, "failed"),
        writes(&updated, "written") - writes(&created, "written"),
    );
    for api in [&api_b, &api_p] {
        let _ = api
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await;
    }
}

/// The Gateway part E's services are routed by name through, one of this
/// run's own (the namespace `gateways` need not exist: nothing is routed).
fn names_gateway() -> Gateway {
    (
        "gateways".to_owned(),
        format!("bench-names-{}", std::process::id()),
    )
}

/// The small spec routed by name (`routing.match: ModelName`) through
/// `gateway`, serving `served`.
fn named_service(ns: &str, name: &str, gateway: &Gateway, served: &str) -> InferenceService {
    serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "model": {"ref": "m", "servedName": served},
            "engine": {"image": "registry.example.com/vllm:0.9"},
            "replicas": 1,
            "routing": {"match": "ModelName", "gateway": {"name": gateway.1, "namespace": gateway.0}}
        }
    }))
    .expect("service")
}

/// The names ledger of `gateway` as the API server holds it: its entries,
/// the bytes of its data, and its resourceVersion (all empty without one).
async fn names_ledger(client: &Client, gateway: &Gateway) -> (usize, usize, String) {
    let api = Api::<ConfigMap>::namespaced(client.clone(), support::SYSTEM_NAMESPACE);
    let cm = api
        .get_opt(&ledger_name(gateway))
        .await
        .unwrap_or_else(|e| panic!("reading the names ledger: {e}"));
    let Some(cm) = cm else {
        return (0, 0, String::new());
    };
    let bytes = cm
        .data
        .as_ref()
        .map_or(0, |d| d.iter().map(|(k, v)| k.len() + v.len()).sum());
    let entries = NameBook::parse(cm.data.as_ref()).entries.len();
    (
        entries,
        bytes,
        cm.metadata.resource_version.unwrap_or_default(),
    )
}

/// Part E: model names. `s.names` services routed by name through one
/// Gateway, each serving a name of its own, fill its names ledger; then
/// blocks (as in A) under the fixed-patch no-op pair and under infergate
/// take turns in `ns`, whose services hold no names; then creates of a
/// service serving a new name through the same Gateway (one ledger write
/// each) alternate with the plain create in a namespace without names.
async fn model_names(
    cp: &support::ControlPlane,
    servers: &Servers,
    client: &Client,
    ns: &str,
    defaulted: &Defaulted,
    s: &Settings,
) {
    let gateway = names_gateway();
    switch(cp, servers, client, ns, Hooks::Infergate, None).await;
    let held = cp.fresh_namespace("names").await;
    let (took, retries) = create_many(client, std::slice::from_ref(&held), s.names, |ns, i| {
        named_service(ns, &format!("named-{i}"), &gateway, &format!("model-{i}"))
    })
    .await;
    let (entries, bytes, rv) = names_ledger(client, &gateway).await;
    println!(
        "E created {} services routed by name through Gateway {}/{} in {took:.1?} ({:.0}/s, concurrency {CONCURRENCY}, {retries} retries); its names ledger: {entries} entries, {:.1} KiB of data",
        s.names,
        gateway.0,
        gateway.1,
        s.names as f64 / took.as_secs_f64(),
        bytes as f64 / 1024.0
    );
    assert_eq!(entries, s.names, "the names ledger's entries");

    // (a) infergate against the fixed-patch pair, in a namespace without names.
    const E_CONFIGS: [Hooks; 2] = [Hooks::Fixed, Hooks::Infergate];
    let api = Api::<InferenceService>::namespaced(client.clone(), ns);
    let mut samples: [Samples; 2] = Default::default();
    let mut block_p50 = vec![[[0.0; 3]; 2]; s.rounds];
    let cpu = cpu_jiffies();
    for (round, round_p50) in block_p50.iter_mut().enumerate() {
        for k in 0..E_CONFIGS.len() {
            let idx = (round + k) % E_CONFIGS.len();
            let cfg = E_CONFIGS[idx];
            switch(cp, servers, client, ns, cfg, Some(defaulted)).await;
            let tag = format!("e{round}-{}", cfg.name());
            let p50 = block(servers, &api, ns, defaulted, &tag, s.ops, &mut samples[idx]).await;
            round_p50[idx] = p50;
            println!(
                "E round {round} {:<9}  p50: create {:6.2} ms, create pre-defaulted {:6.2} ms, update {:6.2} ms   (load {})",
                cfg.name(),
                p50[0],
                p50[1],
                p50[2],
                loadavg()
            );
        }
    }
    let share = cpu_share(cpu, cpu_jiffies());
    let (_, _, rv_after) = names_ledger(client, &gateway).await;
    for smp in &mut samples {
        for v in &mut smp.ops {
            v.sort_unstable();
        }
    }
    let [fixed, ig] = &samples;
    for (op, name) in OPS.iter().enumerate() {
        for (cfg, smp) in E_CONFIGS.iter().zip(&samples) {
            let v = &smp.ops[op];
            println!(
                "E {:<9} {name:<28} n {:4}  p50 {:6.2} ms  p90 {:6.2} ms  p99 {:6.2} ms",
                cfg.name(),
                v.len(),
                pct(v, 0.5),
                pct(v, 0.9),
                pct(v, 0.99)
            );
        }
    }
    for (op, name) in OPS.iter().enumerate().take(2) {
        let mut per_round: Vec<f64> = block_p50.iter().map(|b| b[1][op] / b[0][op]).collect();
        per_round.sort_by(f64::total_cmp);
        println!(
            "E {name} beside {} names: p50 infergate / fixed {:.3}x (goal <= 1.1x); per round {} (median {:.2}); {share}",
            s.names,
            pct(&ig.ops[op], 0.5) / pct(&fixed.ops[op], 0.5),
            per_round
                .iter()
                .map(|x| format!("{x:.2}"))
                .collect::<Vec<_>>()
                .join(" "),
            per_round[per_round.len() / 2]
        );
    }
    println!(
        "E the names ledger during the plain blocks: {}",
        if rv_after == rv {
            format!("not written (resourceVersion {rv} as before)")
        } else {
            format!("WRITTEN (resourceVersion {rv} -> {rv_after})")
        }
    );

    // (b) a create that records a new name, against the plain create.
    switch(cp, servers, client, ns, Hooks::Infergate, None).await;
    let named = cp.fresh_namespace("names-new").await;
    let plain = cp.fresh_namespace("nonames").await;
    let api_n = Api::<InferenceService>::namespaced(client.clone(), &named);
    let api_p = Api::<InferenceService>::namespaced(client.clone(), &plain);
    let mut latency: [Vec<u64>; 2] = Default::default();
    for i in 0..s.ops + WARMUP {
        for (k, api) in [(0, &api_n), (1, &api_p)] {
            let svc = if k == 0 {
                named_service(
                    &named,
                    &format!("new-{i}"),
                    &gateway,
                    &format!("new-model-{i}"),
                )
            } else {
                small_service(&plain, &format!("plain-{i}"))
            };
            let t = Instant::now();
            api.create(&PostParams::default(), &svc)
                .await
                .unwrap_or_else(|e| panic!("create {}: {e}", svc.name_any()));
            if i >= WARMUP {
                latency[k].push(u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX));
            }
        }
    }
    let (entries_after, bytes_after, _) = names_ledger(client, &gateway).await;
    const KINDS: [&str; 2] = ["create, new name", "create, no name"];
    for (k, samples) in latency.iter_mut().enumerate() {
        samples.sort_unstable();
        println!(
            "E {:<16} p50 {:6.2} ms  p90 {:6.2} ms  p99 {:6.2} ms",
            KINDS[k],
            pct(samples, 0.5),
            pct(samples, 0.9),
            pct(samples, 0.99)
        );
    }
    println!(
        "E p50 create recording a name in a ledger of {entries} / without a name: {:.2}x ({:+.2} ms)",
        pct(&latency[0], 0.5) / pct(&latency[1], 0.5),
        pct(&latency[0], 0.5) - pct(&latency[1], 0.5)
    );
    println!(
        "E the names ledger: {entries} -> {entries_after} entries ({} for {} creates that record a name), {:.1} -> {:.1} KiB of data",
        entries_after.saturating_sub(entries),
        s.ops + WARMUP,
        bytes as f64 / 1024.0,
        bytes_after as f64 / 1024.0
    );
    for api in [&api_n, &api_p] {
        let _ = api
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await;
    }
    let _ = Api::<InferenceService>::namespaced(client.clone(), &held)
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
}

async fn delete_if_present<K>(api: Api<K>)
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    match api.delete(CONFIG_NAME, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => panic!("deleting webhook configuration {CONFIG_NAME}: {e}"),
    }
}

/// Register `to`, then wait until a server-side dry-run create shows it in
/// force (both webhook configurations), then [`SETTLE`] more.
async fn switch(
    cp: &support::ControlPlane,
    servers: &Servers,
    client: &Client,
    ns: &str,
    to: Hooks,
    want: Option<&Defaulted>,
) {
    let ig = &servers.infergate;
    match to {
        Hooks::None => {
            delete_if_present(Api::<MutatingWebhookConfiguration>::all(client.clone())).await;
            delete_if_present(Api::<ValidatingWebhookConfiguration>::all(client.clone())).await;
        }
        Hooks::Infergate => support::register_webhooks(cp, ig.port, &ig.ca_pem)
            .await
            .unwrap_or_else(|e| panic!("registering infergate's webhooks: {e:#}")),
        Hooks::Noop | Hooks::Fixed => {
            let server = if to == Hooks::Noop {
                &servers.noop
            } else {
                &servers.fixed
            };
            support::register_webhooks(cp, server.port, &server.ca_pem)
                .await
                .unwrap_or_else(|e| panic!("registering the {} webhooks: {e:#}", to.name()));
            // register_webhooks also points the CRD's conversion at the server:
            // conversion stays infergate's.
            support::register_conversion(cp, ig.port, &ig.ca_pem)
                .await
                .unwrap_or_else(|e| panic!("registering the conversion webhook: {e:#}"));
        }
    }
    let api = Api::<InferenceService>::namespaced(client.clone(), ns);
    let probe = small_service(ns, "switch-probe");
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    support::eventually(
        &format!("webhook configuration {} in force", to.name()),
        support::WAIT,
        async || {
            let before = servers.calls().await;
            let created = api
                .create(&dry_run, &probe)
                .await
                .map_err(|e| e.to_string())?;
            let d = servers.calls().await.since(before);
            let defaulted = created.annotations().contains_key(DEFAULTED_FROM);
            let others = |n: u64| d.infergate() + d.noop() + d.fixed() == n;
            let ok = match to {
                Hooks::None => !defaulted && others(0),
                Hooks::Infergate => {
                    defaulted
                        && d.infergate_mutate > 0
                        && d.infergate_validate > 0
                        && others(d.infergate())
                }
                Hooks::Noop => {
                    !defaulted && d.noop_mutate > 0 && d.noop_validate > 0 && others(d.noop())
                }
                // Stored as infergate stores it: the same spec and annotations.
                Hooks::Fixed => {
                    let same = want.is_none_or(|w| {
                        let v = serde_json::to_value(&created).unwrap_or_default();
                        v["spec"] == w.spec && v["metadata"]["annotations"] == w.annotations
                    });
                    same && d.fixed_mutate > 0 && d.fixed_validate > 0 && others(d.fixed())
                }
            };
            if ok {
                Ok(())
            } else {
                Err(format!("defaulted: {defaulted}, calls: {d:?}"))
            }
        },
    )
    .await;
    tokio::time::sleep(SETTLE).await;
}

// ------------------------------------------------------------- A: blocks

/// What infergate's mutating webhook makes of [`small_service`]: its spec
/// and annotations, taken from a server-side dry run. Created as it is, a
/// service is stored the same under every configuration (defaulting is
/// idempotent: infergate's answer changes nothing).
#[derive(Clone)]
struct Defaulted {
    spec: serde_json::Value,
    annotations: serde_json::Value,
}

impl Defaulted {
    async fn from_dry_run(api: &Api<InferenceService>, ns: &str) -> Self {
        let dry_run = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        let svc = api
            .create(&dry_run, &small_service(ns, "defaulted-probe"))
            .await
            .unwrap_or_else(|e| panic!("dry-run create: {e}"));
        let value = serde_json::to_value(&svc).expect("service JSON");
        assert!(
            svc.annotations().contains_key(DEFAULTED_FROM),
            "the dry run was not defaulted: {value}"
        );
        Self {
            spec: value["spec"].clone(),
            annotations: value["metadata"]["annotations"].clone(),
        }
    }

    /// The JSON Patch from [`small_service`] to this form (what infergate's
    /// mutating webhook answers for it; the same for every name), and its
    /// base64, as the fixed-patch no-op answers it.
    fn patch_from_small(&self, ns: &str) -> (json_patch::Patch, String) {
        use base64::Engine as _;
        let small = serde_json::to_value(small_service(ns, "x")).expect("small JSON");
        let full = serde_json::to_value(self.service(ns, "x")).expect("defaulted JSON");
        let patch = json_patch::diff(&small, &full);
        let bytes = serde_json::to_vec(&patch).expect("patch JSON");
        let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
        (patch, b64)
    }

    fn service(&self, ns: &str, name: &str) -> InferenceService {
        serde_json::from_value(json!({
            "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
            "metadata": {"name": name, "namespace": ns, "annotations": self.annotations},
            "spec": self.spec
        }))
        .expect("defaulted service")
    }
}

/// The operations of a block.
const OPS: [&str; 3] = [
    "create (small spec)",
    "create (pre-defaulted spec)",
    "metadata-only update",
];

#[derive(Default)]
struct Samples {
    /// Microseconds per operation, by [`OPS`] index.
    ops: [Vec<u64>; 3],
    /// Admission requests each server received during the update phases.
    update_calls: Calls,
    /// ... and during the create phases.
    create_calls: Calls,
    /// CPU ms infergate's process used during the create and update phases.
    infergate_cpu_creates: u64,
    infergate_cpu_updates: u64,
    /// CPU ms the no-op server's thread used during the create phases.
    noop_cpu_creates: u64,
    /// The API server's webhook calls during the create phases and the
    /// seconds it waited for them, mutating then validating.
    create_waits: [(f64, f64); 2],
}

/// One block: warm-up, `ops` timed creates of [`small_service`] alternating
/// with `ops` of the pre-defaulted service, `ops` timed metadata-only
/// updates of a pre-defaulted service (finalizer added, then removed), then
/// the block's services deleted. The p50 of each kind.
async fn block(
    servers: &Servers,
    api: &Api<InferenceService>,
    ns: &str,
    defaulted: &Defaulted,
    tag: &str,
    ops: usize,
    into: &mut Samples,
) -> [f64; 3] {
    let pp = PostParams::default();
    let target = format!("{tag}-target");
    api.create(&pp, &defaulted.service(ns, &target))
        .await
        .unwrap_or_else(|e| panic!("create {target}: {e}"));
    let add = json!({"metadata": {"finalizers": [FINALIZER]}});
    let remove = json!({"metadata": {"finalizers": null}});
    let patch = async |i: usize| {
        let body = if i.is_multiple_of(2) { &add } else { &remove };
        api.patch(&target, &PatchParams::default(), &Patch::Merge(body))
            .await
            .unwrap_or_else(|e| panic!("patch {target}: {e}"));
    };
    let create = async |svc: InferenceService| {
        let t = Instant::now();
        let r = api.create(&pp, &svc).await;
        let us = t.elapsed().as_micros() as u64;
        r.unwrap_or_else(|e| panic!("create {}: {e}", svc.name_any()));
        us
    };
    for i in 0..WARMUP {
        create(small_service(ns, &format!("{tag}-w{i}"))).await;
        create(defaulted.service(ns, &format!("{tag}-wd{i}"))).await;
        patch(i).await;
    }

    let mut times: [Vec<u64>; 3] = Default::default();
    let before = servers.calls().await;
    let waits = apiserver_webhook_waits(&servers.apiserver).await;
    let cpu = servers.infergate_cpu_ms();
    let noop_cpu = servers.noop_cpu_ms();
    for i in 0..ops {
        times[0].push(create(small_service(ns, &format!("{tag}-{i}"))).await);
        times[1].push(create(defaulted.service(ns, &format!("{tag}-d{i}"))).await);
    }
    into.infergate_cpu_creates += servers.infergate_cpu_ms() - cpu;
    into.noop_cpu_creates += servers.noop_cpu_ms() - noop_cpu;
    let waited = apiserver_webhook_waits(&servers.apiserver).await;
    for (k, (calls, secs)) in waited.iter().enumerate() {
        into.create_waits[k].0 += calls - waits[k].0;
        into.create_waits[k].1 += secs - waits[k].1;
    }
    let after = servers.calls().await;
    into.create_calls = sum_calls(into.create_calls, after.since(before));

    let before = servers.calls().await;
    let cpu = servers.infergate_cpu_ms();
    for i in 0..ops {
        let t = Instant::now();
        patch(i).await;
        times[2].push(t.elapsed().as_micros() as u64);
    }
    into.infergate_cpu_updates += servers.infergate_cpu_ms() - cpu;
    let after = servers.calls().await;
    into.update_calls = sum_calls(into.update_calls, after.since(before));

    api.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("deleting the block's services: {e}"));
    support::eventually("the block's services deleted", support::WAIT, async || {
        let left = api
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?
            .items
            .len();
        if left == 0 {
            Ok(())
        } else {
            Err(format!("{left} left"))
        }
    })
    .await;

    let mut p50 = [0.0; 3];
    for (k, mut t) in times.into_iter().enumerate() {
        into.ops[k].extend_from_slice(&t);
        t.sort_unstable();
        p50[k] = pct(&t, 0.5);
    }
    p50
}

fn sum_calls(a: Calls, b: Calls) -> Calls {
    Calls {
        infergate_mutate: a.infergate_mutate + b.infergate_mutate,
        infergate_validate: a.infergate_validate + b.infergate_validate,
        noop_mutate: a.noop_mutate + b.noop_mutate,
        noop_validate: a.noop_validate + b.noop_validate,
        fixed_mutate: a.fixed_mutate + b.fixed_mutate,
        fixed_validate: a.fixed_validate + b.fixed_validate,
        infergate_seconds: a.infergate_seconds + b.infergate_seconds,
    }
}

// -------------------------------------------------------- B: conversion

/// Wait until infergate has converted `want` objects since its counter read
/// `base` and then converts nothing for [`SETTLE`] (or nothing for 30 s, or
/// 10 minutes pass): the objects converted since `base`, and when the last
/// of them was.
async fn wait_conversions(servers: &Servers, base: u64, want: u64) -> (u64, Instant) {
    let start = Instant::now();
    let (mut last, mut last_change) = (0, Instant::now());
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let n = servers.converted().await - base;
        if n != last {
            (last, last_change) = (n, Instant::now());
        }
        let quiet = last_change.elapsed();
        if (n >= want && quiet > SETTLE)
            || quiet > Duration::from_secs(30)
            || start.elapsed() > Duration::from_secs(600)
        {
            return (last, last_change);
        }
    }
}

/// `kubectl ARGS` with its output discarded; how long it took.
fn timed_kubectl(cp: &support::ControlPlane, args: &[&str]) -> Duration {
    let start = Instant::now();
    let out = Command::new(cp.bin_dir().join("kubectl"))
        .arg("--kubeconfig")
        .arg(cp.kubeconfig())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("running kubectl");
    let took = start.elapsed();
    assert!(
        out.status.success(),
        "kubectl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

fn list_args(version: &str) -> Vec<String> {
    let resource = format!("inferenceservices.{version}.infergate.dev");
    ["get", &resource, "-A", "-o", "json"]
        .map(str::to_owned)
        .to_vec()
}

/// A list read from etcd at exactly `rv` (older than the watch cache's
/// first snapshot, so the cache cannot serve it).
fn exact_rv_args(version: &str, rv: &str) -> Vec<String> {
    vec![
        "get".to_owned(),
        "--raw".to_owned(),
        format!(
            "/apis/infergate.dev/{version}/inferenceservices?resourceVersion={rv}&resourceVersionMatch=Exact"
        ),
    ]
}

/// `kubectl ARGS` (a list of services) parsed: the items in `namespaces`,
/// each checked to be of `version`.
fn checked_items(
    cp: &support::ControlPlane,
    args: &[String],
    version: &str,
    namespaces: &[String],
) -> usize {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = cp.kubectl(&args);
    assert!(
        out.status.success(),
        "kubectl {}: {}",
        args.join(" "),
        support::text(&out)
    );
    let list: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("kubectl output parses");
    let items = list["items"].as_array().expect("items");
    let want = format!("infergate.dev/{version}");
    for item in items {
        assert_eq!(item["apiVersion"], want.as_str(), "an item of {args:?}");
    }
    items
        .iter()
        .filter(|i| {
            namespaces
                .iter()
                .any(|n| i["metadata"]["namespace"] == n.as_str())
        })
        .count()
}

/// The API server's conversion webhook calls so far: (requests, seconds),
/// from `apiserver_crd_conversion_webhook_duration_seconds`.
async fn apiserver_conversions(client: &Client) -> (f64, f64) {
    let req = http::Request::get("/metrics")
        .body(Vec::new())
        .expect("request");
    let text = client.request_text(req).await.unwrap_or_default();
    let name = "apiserver_crd_conversion_webhook_duration_seconds";
    let labels = ["crd_name=\"inferenceservices.infergate.dev\""];
    (
        metric_sum(&text, &format!("{name}_count"), &labels),
        metric_sum(&text, &format!("{name}_sum"), &labels),
    )
}

/// The API server's calls to admission webhooks so far, by type (`admit`,
/// then `validating`): (calls, seconds it waited), from its own
/// `apiserver_admission_webhook_admission_duration_seconds`.
async fn apiserver_webhook_waits(client: &Client) -> [(f64, f64); 2] {
    let req = http::Request::get("/metrics")
        .body(Vec::new())
        .expect("request");
    let text = client.request_text(req).await.unwrap_or_default();
    let name = "apiserver_admission_webhook_admission_duration_seconds";
    ["type=\"admit\"", "type=\"validating\""].map(|t| {
        (
            metric_sum(&text, &format!("{name}_count"), &[t]),
            metric_sum(&text, &format!("{name}_sum"), &[t]),
        )
    })
}

/// One way of reading every service in both versions, `gets` times each,
/// alternating; the times and the objects infergate converted per read.
struct Reads {
    alpha: Vec<Duration>,
    beta: Vec<Duration>,
    converted_alpha: Vec<u64>,
    converted_beta: Vec<u64>,
    /// ConversionReviews the API server sent per v1alpha1 read, and the
    /// seconds it waited for them.
    reviews_alpha: Vec<(f64, f64)>,
    /// CPU ms infergate's process used per v1alpha1 read.
    cpu_alpha: Vec<u64>,
    share: String,
}

async fn alternate_reads(
    cp: &support::ControlPlane,
    client: &Client,
    servers: &Servers,
    gets: usize,
    args: impl Fn(&str) -> Vec<String>,
) -> Reads {
    let cpu = cpu_jiffies();
    let mut r = Reads {
        alpha: Vec::new(),
        beta: Vec::new(),
        converted_alpha: Vec::new(),
        converted_beta: Vec::new(),
        reviews_alpha: Vec::new(),
        cpu_alpha: Vec::new(),
        share: String::new(),
    };
    for i in 0..gets {
        for version in ["v1alpha1", "v1beta1"] {
            let argv = args(version);
            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
            let before = servers.converted().await;
            let reviews = apiserver_conversions(client).await;
            let cpu = servers.infergate_cpu_ms();
            let took = timed_kubectl(cp, &argv);
            let cpu = servers.infergate_cpu_ms() - cpu;
            let converted = servers.converted().await - before;
            let after = apiserver_conversions(client).await;
            if version == "v1alpha1" {
                r.alpha.push(took);
                r.converted_alpha.push(converted);
                r.reviews_alpha
                    .push((after.0 - reviews.0, after.1 - reviews.1));
                r.cpu_alpha.push(cpu);
            } else {
                r.beta.push(took);
                r.converted_beta.push(converted);
            }
        }
        println!(
            "read {i}: v1alpha1 {:.2?} ({} converted in {} ConversionReviews, {:.2} s in the webhook, infergate CPU {} ms)   v1beta1 {:.2?} ({} converted)   (load {})",
            r.alpha[i],
            r.converted_alpha[i],
            r.reviews_alpha[i].0,
            r.reviews_alpha[i].1,
            r.cpu_alpha[i],
            r.beta[i],
            r.converted_beta[i],
            loadavg()
        );
    }
    r.share = cpu_share(cpu, cpu_jiffies());
    r
}

/// Create `n` services, `make(namespace, i)`, across `namespaces`,
/// [`CONCURRENCY`] at a time (each retried up to 3 times); how long it took
/// and the retries.
async fn create_many(
    client: &Client,
    namespaces: &[String],
    n: usize,
    make: impl Fn(&str, usize) -> InferenceService,
) -> (Duration, usize) {
    let start = Instant::now();
    let retries = Arc::new(AtomicU64::new(0));
    let results = futures::stream::iter(0..n)
        .map(|i| {
            let ns = namespaces[i % namespaces.len()].clone();
            let api = Api::<InferenceService>::namespaced(client.clone(), &ns);
            let retries = retries.clone();
            let svc = make(&ns, i);
            async move {
                let name = svc.name_any();
                let mut attempt = 0;
                loop {
                    match api.create(&PostParams::default(), &svc).await {
                        Ok(_) => return Ok(()),
                        // A retried create that had gone through.
                        Err(kube::Error::Api(e)) if e.code == 409 && attempt > 0 => return Ok(()),
                        Err(e) if attempt < 3 => {
                            attempt += 1;
                            retries.fetch_add(1, Ordering::Relaxed);
                            eprintln!("create {ns}/{name} (retrying): {e}");
                            tokio::time::sleep(Duration::from_millis(500)).await;
                        }
                        Err(e) => return Err(format!("{ns}/{name}: {e}")),
                    }
                }
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<_>>()
        .await;
    let failed: Vec<_> = results.into_iter().filter_map(Result::err).collect();
    assert!(
        failed.is_empty(),
        "{} creates failed: {:?}",
        failed.len(),
        &failed[..failed.len().min(5)]
    );
    (start.elapsed(), retries.load(Ordering::Relaxed) as usize)
}

// ------------------------------------------------------------------ run

async fn run() {
    let s = Settings::from_env();
    let argv: Vec<String> = std::env::args().collect();
    println!("== infergate apiserver bench");
    println!(
        "command:  {}{}",
        argv.join(" "),
        if argv.iter().any(|a| a == "--bench") {
            "  (cargo bench --bench apiserver)"
        } else {
            ""
        }
    );
    println!(
        "settings: INFERGATE_APISERVER_SERVICES={} INFERGATE_APISERVER_ROUNDS={} INFERGATE_APISERVER_OPS={} INFERGATE_APISERVER_GETS={} INFERGATE_APISERVER_NAMES={} INFERGATE_APISERVER_PARTS={}",
        s.services, s.rounds, s.ops, s.gets, s.names, s.parts
    );
    println!("commit:   {}", git_commit());
    println!(
        "machine:  nproc {}, {}, load average {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model(),
        loadavg()
    );

    let cp = support::control_plane().await;
    cp.install_crds().await;
    let client = cp.client().await;
    let k8s = client
        .apiserver_version()
        .await
        .map(|v| v.git_version)
        .unwrap_or_else(|_| "?".into());
    println!("apiserver: {k8s} (test control plane on this machine)");

    let infergate = support::start_infergate(
        cp,
        support::binary(),
        &["--no-reconcile"],
        support::Hooks::All,
    )
    .await
    .unwrap_or_else(|e| panic!("starting infergate: {e:#}"));
    println!(
        "infergate: {} serve --no-reconcile on 127.0.0.1:{} (log {})",
        support::binary().display(),
        infergate.port,
        infergate.log.display()
    );
    // ------------------------------------------------------------- A
    let ns = cp.fresh_namespace("admission").await;
    let api = Api::<InferenceService>::namespaced(client.clone(), &ns);
    // infergate's webhooks are registered (start_infergate): its defaults.
    let defaulted = Defaulted::from_dry_run(&api, &ns).await;
    println!(
        "small spec: {}\npre-defaulted spec ({} bytes with its annotations): {}",
        serde_json::to_string(&small_service(&ns, "x").spec).unwrap_or_default(),
        defaulted.spec.to_string().len() + defaulted.annotations.to_string().len(),
        defaulted.spec
    );
    let fixed_patch = defaulted.patch_from_small(&ns);
    let servers = Servers {
        infergate,
        noop: Noop::start(None),
        fixed: Noop::start(Some(fixed_patch.1)),
        apiserver: client.clone(),
    };
    println!(
        "no-op webhook: 127.0.0.1:{}; fixed-patch no-op webhook: 127.0.0.1:{}, its patch for the small spec ({} operations): {}",
        servers.noop.port,
        servers.fixed.port,
        fixed_patch.0.0.len(),
        serde_json::to_string(&fixed_patch.0).unwrap_or_default()
    );
    let mut samples: [Samples; 4] = Default::default();
    // Each block's p50s, by round and configuration.
    let mut block_p50 = vec![[[0.0; 3]; 4]; s.rounds];
    let mut a_share = String::new();
    if s.part('A') {
        println!(
            "\n-- A: admission latency, {} rounds x {} configurations, per block {} creates of each spec (alternating) then {} metadata-only updates (sequential, one client)",
            s.rounds,
            CONFIGS.len(),
            s.ops,
            s.ops
        );
        let a_cpu = cpu_jiffies();
        for (round, round_p50) in block_p50.iter_mut().enumerate() {
            for k in 0..CONFIGS.len() {
                let idx = (round + k) % CONFIGS.len();
                let cfg = CONFIGS[idx];
                switch(cp, &servers, &client, &ns, cfg, Some(&defaulted)).await;
                let tag = format!("r{round}-{}", cfg.name());
                let p50 = block(
                    &servers,
                    &api,
                    &ns,
                    &defaulted,
                    &tag,
                    s.ops,
                    &mut samples[idx],
                )
                .await;
                round_p50[idx] = p50;
                println!(
                    "round {round} {:<9}  p50: create {:6.2} ms, create pre-defaulted {:6.2} ms, update {:6.2} ms   (load {})",
                    cfg.name(),
                    p50[0],
                    p50[1],
                    p50[2],
                    loadavg()
                );
            }
        }
        a_share = cpu_share(a_cpu, cpu_jiffies());
        for smp in &mut samples {
            for v in &mut smp.ops {
                v.sort_unstable();
            }
        }
    }

    // ------------------------------------------------------------- C
    if s.part('C') {
        println!(
            "\n-- C: access reviews, {} creates of each kind (alternating, one client, infergate's webhooks)",
            s.ops
        );
        switch(cp, &servers, &client, &ns, Hooks::Infergate, None).await;
        access_reviews(&servers, &api, &ns, s.ops).await;
    }

    // ------------------------------------------------------------- D
    if s.part('D') {
        println!(
            "\n-- D: GPU budgets, {} creates in a namespace with a budget and without, alternating; {} updates that keep the charge",
            s.ops, s.ops
        );
        budgets(cp, &servers, &client, s.ops).await;
    }

    // ------------------------------------------------------------- E
    if s.part('E') {
        println!(
            "\n-- E: model names, {} services routed by name through one Gateway; {} rounds x 2 configurations (fixed, infergate) in a namespace without names, per block {} creates of each spec then {} metadata-only updates; {} creates recording a new name and without one, alternating",
            s.names, s.rounds, s.ops, s.ops, s.ops
        );
        model_names(cp, &servers, &client, &ns, &defaulted, &s).await;
    }

    // ------------------------------------------------------------- B
    let conversion = if s.part('B') {
        println!("\n-- B: conversion at scale, {} services", s.services);
        switch(cp, &servers, &client, &ns, Hooks::Infergate, None).await;
        let mut namespaces = Vec::new();
        for _ in 0..CONVERSION_NAMESPACES {
            namespaces.push(cp.fresh_namespace("conversion").await);
        }
        let converted_before = servers.converted().await;
        let (created_in, retries) = create_many(&client, &namespaces, s.services, |ns, i| {
            small_service(ns, &format!("svc-{i}"))
        })
        .await;
        println!(
            "created {} v1beta1 services (defaulted by infergate) in {created_in:.1?} ({:.0}/s, concurrency {CONCURRENCY}, {CONVERSION_NAMESPACES} namespaces, {retries} retries)",
            s.services,
            s.services as f64 / created_in.as_secs_f64()
        );
        // The last write to any resource: the exact-RV reads below read this state.
        let rv = Api::<InferenceService>::all(client.clone())
            .list_metadata(&ListParams::default().limit(1))
            .await
            .expect("list")
            .metadata
            .resource_version
            .expect("list resourceVersion");
        // The v1alpha1 watch cache converts each write event, and may lag.
        let created = Instant::now();
        let (converted_on_write, last) =
            wait_conversions(&servers, converted_before, s.services as u64).await;
        let caught_up = last.saturating_duration_since(created);
        println!(
            "objects infergate converted for the v1alpha1 watch cache meanwhile: {converted_on_write}, the last {caught_up:.2?} after the last create"
        );
        for version in ["v1alpha1", "v1beta1"] {
            let items = checked_items(cp, &list_args(version), version, &namespaces);
            println!(
                "check: kubectl get {version} -A -o json: {items} items (want {})",
                s.services
            );
            assert_eq!(items, s.services, "{version} items");
        }
        println!("B1. kubectl get -A -o json (served from each version's watch cache)");
        let cached = alternate_reads(cp, &client, &servers, s.gets, list_args).await;

        // A change of the CRD's spec makes the API server rebuild its storage
        // and watch caches for every version: the v1alpha1 cache is listed
        // again, through the conversion webhook, at a revision after `rv`.
        let before = servers.converted().await;
        let start = Instant::now();
        Api::<CustomResourceDefinition>::all(client.clone())
            .patch(
                "inferenceservices.infergate.dev",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"conversion": {"webhook": {"conversionReviewVersions": ["v1", "v1beta1"]}}}})),
            )
            .await
            .expect("patching the CRD");
        let (last, last_change) = wait_conversions(&servers, before, s.services as u64).await;
        let rebuilt = last_change.saturating_duration_since(start);
        println!(
            "after a CRD spec change: {last} objects converted, the last {rebuilt:.2?} after the change (the v1alpha1 watch cache re-listed)"
        );
        for version in ["v1alpha1", "v1beta1"] {
            let items = checked_items(cp, &exact_rv_args(version, &rv), version, &namespaces);
            println!(
                "check: {version} list at resourceVersion {rv} (Exact): {items} items (want {})",
                s.services
            );
            assert_eq!(items, s.services, "{version} items at {rv}");
        }
        println!(
            "B2. list at an exact resourceVersion older than the watch caches (read from etcd)"
        );
        let uncached =
            alternate_reads(cp, &client, &servers, s.gets, |v| exact_rv_args(v, &rv)).await;
        Some((
            cached,
            uncached,
            converted_on_write,
            caught_up,
            last,
            rebuilt,
        ))
    } else {
        None
    };

    // --------------------------------------------------------- table
    println!(
        "\n== results (commit {}, {} CPUs, {})",
        git_commit(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model()
    );
    if s.part('A') {
        let [none, ig, noop, fixed] = &samples;
        println!(
            "A. admission latency, ms ({} rounds x {} ops per block; {a_share})",
            s.rounds, s.ops
        );
        println!("| configuration | operation | n | p50 | p90 | p99 |");
        println!("|---|---|---|---|---|---|");
        for (op, name) in OPS.iter().enumerate() {
            for (cfg, smp) in CONFIGS.iter().zip(&samples) {
                let v = &smp.ops[op];
                println!(
                    "| {} | {name} | {} | {:.2} | {:.2} | {:.2} |",
                    cfg.name(),
                    v.len(),
                    pct(v, 0.5),
                    pct(v, 0.9),
                    pct(v, 0.99)
                );
            }
        }
        let p50 = |x: &Samples, op: usize| pct(&x.ops[op], 0.5);
        let added = |x: &Samples, op: usize| p50(x, op) - p50(none, op);
        println!("added at p50 over none, ms:");
        for (op, name) in OPS.iter().enumerate() {
            println!(
                "  {name:<28} infergate {:+.2}, noop {:+.2}, fixed {:+.2}",
                added(ig, op),
                added(noop, op),
                added(fixed, op)
            );
        }
        // Per round, each block against the other's block of the same round.
        let per_round = |op: usize, other: usize| {
            let mut r: Vec<f64> = block_p50.iter().map(|b| b[1][op] / b[other][op]).collect();
            r.sort_by(f64::total_cmp);
            r
        };
        let show = |r: &[f64]| {
            r.iter()
                .map(|x| format!("{x:.2}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        for (op, name) in OPS.iter().enumerate().take(2) {
            let (vs_noop, vs_fixed) = (per_round(op, 2), per_round(op, 3));
            println!(
                "{name}: p50 infergate / noop {:.3}x, infergate / fixed {:.3}x (goal <= 1.1x); per round / noop {} (median {:.2}), / fixed {} (median {:.2}); added latency infergate / noop {:.2}x",
                p50(ig, op) / p50(noop, op),
                p50(ig, op) / p50(fixed, op),
                show(&vs_noop),
                vs_noop[vs_noop.len() / 2],
                show(&vs_fixed),
                vs_fixed[vs_fixed.len() / 2],
                added(ig, op) / added(noop, op)
            );
        }
        println!(
            "admission requests received during the metadata-only update phases ({} updates per configuration): infergate {} (mutate {}, validate {}), noop {} (mutate {}, validate {})",
            ig.ops[2].len(),
            ig.update_calls.infergate(),
            ig.update_calls.infergate_mutate,
            ig.update_calls.infergate_validate,
            noop.update_calls.noop(),
            noop.update_calls.noop_mutate,
            noop.update_calls.noop_validate
        );
        println!(
            "  (fixed: {} during its update phases)",
            fixed.update_calls.fixed()
        );
        println!(
            "  (during the create phases: infergate {} for {} creates, noop {} for {}, fixed {} for {})",
            ig.create_calls.infergate(),
            ig.ops[0].len() + ig.ops[1].len(),
            noop.create_calls.noop(),
            noop.ops[0].len() + noop.ops[1].len(),
            fixed.create_calls.fixed(),
            fixed.ops[0].len() + fixed.ops[1].len()
        );
        println!(
            "infergate's process CPU per operation, ms (create phases / update phases; in every configuration it also converts each write for the v1alpha1 watch cache):"
        );
        for (cfg, smp) in CONFIGS.iter().zip(&samples) {
            let creates = (smp.ops[0].len() + smp.ops[1].len()).max(1) as f64;
            let updates = smp.ops[2].len().max(1) as f64;
            println!(
                "  {:<9} {:.3} / {:.3}",
                cfg.name(),
                smp.infergate_cpu_creates as f64 / creates,
                smp.infergate_cpu_updates as f64 / updates
            );
        }
        println!(
            "no-op server thread CPU per create (noop / fixed configuration): {:.3} / {:.3} ms; infergate's own handling time per admission request (its histogram, create phases): {:.3} ms mean over {} requests",
            noop.noop_cpu_creates as f64 / (noop.ops[0].len() + noop.ops[1].len()).max(1) as f64,
            fixed.noop_cpu_creates as f64 / (fixed.ops[0].len() + fixed.ops[1].len()).max(1) as f64,
            1000.0 * ig.create_calls.infergate_seconds / ig.create_calls.infergate().max(1) as f64,
            ig.create_calls.infergate()
        );
        println!(
            "the API server's wait per webhook call during the create phases, mean ms (its own histogram; mutating / validating):"
        );
        for (cfg, smp) in CONFIGS.iter().zip(&samples).skip(1) {
            let [(mc, ms), (vc, vs)] = smp.create_waits;
            println!(
                "  {:<9} {:.3} / {:.3}   ({mc:.0} / {vc:.0} calls)",
                cfg.name(),
                1000.0 * ms / mc.max(1.0),
                1000.0 * vs / vc.max(1.0),
            );
        }
    }
    if let Some((cached, uncached, converted_on_write, caught_up, last, rebuilt)) = conversion {
        let runs = |v: &[Duration]| {
            v.iter()
                .map(|d| format!("{:.2}", d.as_secs_f64()))
                .collect::<Vec<_>>()
                .join(" ")
        };
        println!(
            "B. every service read in each version, {} services, median of {} reads each, alternating",
            s.services, s.gets
        );
        println!("| read | version | median s | runs s | objects converted per read |");
        println!("|---|---|---|---|---|");
        for (name, r) in [
            ("B1 kubectl get -A -o json (watch cache)", &cached),
            ("B2 get --raw ?resourceVersionMatch=Exact (etcd)", &uncached),
        ] {
            println!(
                "| {name} | v1alpha1 | {:.2} | {} | {:?} |",
                median_secs(&r.alpha),
                runs(&r.alpha),
                r.converted_alpha
            );
            println!(
                "| {name} | v1beta1 (storage) | {:.2} | {} | {:?} |",
                median_secs(&r.beta),
                runs(&r.beta),
                r.converted_beta
            );
        }
        for (name, r) in [("B1", &cached), ("B2", &uncached)] {
            let reviews: f64 = r.reviews_alpha.iter().map(|x| x.0).sum();
            let waited: f64 = r.reviews_alpha.iter().map(|x| x.1).sum();
            let cpu: u64 = r.cpu_alpha.iter().sum();
            let reads = r.alpha.len().max(1) as f64;
            println!(
                "{name} v1alpha1 / v1beta1: {:.2}x (goal < 2x; {}); per v1alpha1 read the API server sent {:.0} ConversionReviews and waited {:.2} s for them ({:.3} ms each); infergate's CPU {:.0} ms per read",
                median_secs(&r.alpha) / median_secs(&r.beta),
                r.share,
                reviews / reads,
                waited / reads,
                if reviews > 0.0 {
                    1000.0 * waited / reviews
                } else {
                    0.0
                },
                cpu as f64 / reads
            );
        }
        println!(
            "conversions outside the reads: {converted_on_write} for the v1alpha1 watch cache as the services were created (caught up {caught_up:.2?} after the last create), {last} when the watch caches were rebuilt ({rebuilt:.2?})"
        );
    }
    println!("load average at the end: {}", loadavg());

    let mut servers = servers;
    let _ = servers.infergate.child.kill();
    let _ = servers.infergate.child.wait();
}
