//! Load driver for the webhook server, run by hand (not in CI):
//!
//! ```text
//! cargo bench --bench load                  # 5 rounds x 3 s per scenario, then the open loop
//! LOAD_ROUNDS=3 LOAD_SECS=2 cargo bench --bench load -- fixed mutate
//! LOAD_RATE_FRACTION=0 LOAD_PROBE_SECS=0 cargo bench --bench load -- fixed mutate validate
//! LOAD_SOAK_SECS=600 cargo bench --bench load -- soak   # 10 minutes at 5,000 req/s
//! LOAD_PROBE_SECS=0 LOAD_ROUNDS=5 LOAD_SECS=8 cargo bench --bench load -- isolation
//! ```
//!
//! The server runs in this process on 127.0.0.1 over TLS (the production
//! stack: rustls, hyper-util auto builder, axum router, `serve_tls` with
//! `LOAD_SERVER_THREADS` connection workers, default 2: the cores the
//! webhook gets). The
//! driver, on a runtime of its own (`LOAD_DRIVER_THREADS`, default 1: a
//! light load generator), opens `LOAD_CONNECTIONS` (50) HTTP/1.1 keep-alive
//! connections, the API server's protocol, and keeps them for the whole run.
//!
//! Scenarios: `fixed` (a handler that takes the body and answers fixed
//! bytes: the ceiling of the stack), `mutate`, `validate`, `convert100` and
//! `convert1000` (ConversionReviews of 100 and 1,000 v1beta1 objects to
//! v1alpha1), `alpha1000` (1,000 v1alpha1 objects to v1beta1), and
//! `raw2mb`/`rawalpha` (the raw-I/O baseline of a conversion: the body of
//! `convert1000`/`alpha1000` received whole and not parsed, and answered
//! with as many bytes as the conversion answers, its answer computed once
//! before the run and sent as it is), `rawmutate`/`rawvalidate` (the same
//! for an admission review: `mutate`'s or `validate`'s body, answered with
//! that webhook's own answer), `scanmutate`/`scanvalidate` (the floor of
//! reading JSON: the same, with the body read through by serde_json, every
//! byte checked and nothing kept),
//! with kubectl-shaped bodies. Each
//! scenario reports the server's CPU per request from the process's own
//! counters (every thread but the driver's), the driver's beside it, and
//! the server's over the driver's: the driver does the same work per
//! request whatever the build, so that ratio compares builds run minutes
//! apart on a machine whose speed drifts (it moved by a fifth within an
//! hour on 2026-12-07).
//!
//! - **Closed loop**: one request in flight per connection, the next sent as
//!   soon as the answer is in. The scenarios take turns within each round,
//!   so each is measured under the same conditions as the ceiling (a shared
//!   2-core VM drifts by tens of percent within minutes); each admission
//!   scenario's share of the ceiling is the median over the rounds.
//! - **Open loop**: `fixed`, `mutate` and `validate` offered `LOAD_RATE_FRACTION`
//!   (0.5; a list such as `0.25,0.4,0.5` sweeps) of the measured ceiling at
//!   fixed times on the same 50 connections,
//!   the way the API server sends user traffic; latency counts from the
//!   scheduled send time, so queueing behind a slow answer is not hidden.
//!   How late the driver itself sent (tokio's 1 ms timer, its own
//!   scheduling, the previous answer on the connection) is reported beside.
//!
//! Reported: requests/s, p50/p99/p99.9 latency, and the share of CPU time
//! the hypervisor stole from the VM meanwhile (`steal` in /proc/stat). The
//! open loop runs `fixed` too, so each admission latency stands next to the
//! stack's own at the same offered rate.
//!
//! After the closed-loop table, the **latency bar** (when `fixed` ran): for
//! `mutate` and `validate`, each round's p99 beside `fixed`'s p99 of the
//! same round, `p99 / fixed p99` (goal at most 2x) and `req/s / fixed req/s`
//! (goal at least 0.6; the same figure as the table's share of fixed), each
//! the median over the rounds with min..max, marked `met` or `MISSED` on the
//! median.
//!
//! **Soak** (`-- soak`, nothing else runs but the stall probe): an open loop
//! at `LOAD_SOAK_RATE` requests/s (default 5,000, the target) for
//! `LOAD_SOAK_SECS` (600) over `LOAD_CONNECTIONS`
//! connections, each request at a fixed time; a mix of 4 in 10 `mutate`, 4
//! in 10 `validate` and 2 in 10 ConversionReviews of 1..10 objects (half
//! v1beta1 to v1alpha1, half back). The server runs in a
//! process of its own (this binary again, `LOAD_SERVER_THREADS` workers,
//! `LOAD_SERVER_CPUS` honoured), so its memory and descriptors are its own;
//! the driver's process is reported beside. Each answer is checked
//! (`"allowed":true`, or a `Success` conversion). Errors: `http` (non-2xx or
//! an unsuccessful review), `tmo` (no answer within `LOAD_SOAK_TIMEOUT_MS`,
//! default 10,000, of the scheduled time: the connection is then replaced),
//! `con` (connection errors, failed reconnects). One row per minute, by
//! scheduled send time: requests sent and answered, errors, p50/p99/max
//! latency from the scheduled send time (coordinated omission not hidden;
//! a request leaves on the driver's 1 ms timer tick at or just before its
//! time, and counts from the sending when that was earlier), how late the
//! driver sent (p99), the service time from the actual send (p99, max),
//! the server's VmRSS and open fds at the minute's end, its CPU (percent of
//! one core) and its threads' run-queue wait (from `schedstat`, summed over
//! threads, percent of the minute), the driver's RSS, CPU and wait, steal,
//! and `other`: the share of the machine's CPUs busy with other processes
//! (builds, other benches). Then the totals (goal 0 errors), the drift of
//! the server's RSS and fds from minute 2 to minute 10 (and to the last
//! minute of a longer run; goal under 10%), and the per-minute p99s with a
//! verdict (stable: no minute from the second on over twice their median; a
//! minute over the bar is listed with the driver's lateness, the longest
//! service time, the threads' CPU waits and the other processes' share,
//! which tell the machine's stalls and the driver's from the server's). The
//! driver keeps fixed-size histograms (log-linear buckets within 1.6%, the
//! quantiles their upper edges) for the minutes still in flight, whatever
//! the length of the run.
//!
//! **Isolation** (`-- isolation`, nothing else runs): small `/validate`
//! requests on fresh connections, 20 ms apart, for `LOAD_SECS` alone, then
//! for `LOAD_SECS` while two connections send 8,000-object ConversionReviews
//! (about 17 MB) back to back, `LOAD_ROUNDS` times; per round the p50/p99/max
//! of each and p99 during / p99 alone; at the end the medians, and p99
//! during against the 50 ms bound.
//!
//! Before the load, a probe spins one pinned thread per CPU for
//! `LOAD_PROBE_SECS` (3; 0 skips it) and reports the gaps in which it did
//! not run: the machine's own stalls, a floor under any tail latency.
//!
//! Driver and server share the machine's cores. `LOAD_SERVER_CPUS=0
//! LOAD_DRIVER_CPUS=1` pins them apart instead (the server then gets one
//! connection worker per CPU in its list unless `LOAD_SERVER_THREADS` says
//! otherwise).
//!
//! Results, with the command, commit and machine of each run, are in
//! `docs/performance.md`.

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use infergate::engine::ServerDefaults;
use infergate::state::ClusterState;
use infergate::webhook::tls;
use infergate::webhook::{listener, server};
use tokio_util::sync::CancellationToken;

mod common;
use common::reviews::{
    admission_review, alpha_conversion_review, conversion_review, policies, service_object,
};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Latencies of one run, in microseconds.
#[derive(Default)]
struct Sample {
    requests: usize,
    errors: usize,
    secs: f64,
    lat: Vec<u32>,
    /// Open loop: how late the driver sent each request (its own timer and
    /// scheduling, plus waiting for the previous answer on the connection).
    late: Vec<u32>,
    /// CPU time the hypervisor took from this VM's vCPUs meanwhile, seconds.
    steal: f64,
    /// CPU time the server used meanwhile (every thread but the driver's),
    /// from the process's own counters, seconds.
    server_cpu: f64,
    /// CPU time the driver's threads used meanwhile, seconds: the same work
    /// per request whatever the server does, so the machine's speed at the
    /// time (see [`Sample::cpu_per_request_us`]).
    driver_cpu: f64,
}

impl Sample {
    fn rate(&self) -> f64 {
        self.requests as f64 / self.secs
    }

    fn merge(&mut self, other: Sample) {
        self.requests += other.requests;
        self.errors += other.errors;
        self.secs += other.secs;
        self.lat.extend(other.lat);
        self.steal += other.steal;
        self.server_cpu += other.server_cpu;
        self.driver_cpu += other.driver_cpu;
    }

    /// Server CPU per answered request, microseconds.
    fn cpu_per_request_us(&self) -> f64 {
        1e6 * self.server_cpu / self.requests.max(1) as f64
    }

    /// The driver's CPU per answered request, microseconds. The server's
    /// over it compares builds run minutes apart on a machine whose speed
    /// drifts: the driver does the same work for each.
    fn driver_cpu_per_request_us(&self) -> f64 {
        1e6 * self.driver_cpu / self.requests.max(1) as f64
    }

    /// Steal as a share of the wall time of all CPUs.
    fn steal_share(&self, cpus: usize) -> f64 {
        self.steal / (self.secs * cpus.max(1) as f64)
    }
}

/// `LOAD_SERVER_CPUS` / `LOAD_DRIVER_CPUS`: a CPU list such as `0` or `0,1`.
fn env_cpus(name: &str) -> Option<Vec<usize>> {
    let v = std::env::var(name).ok()?;
    let cpus: Vec<usize> = v.split(',').filter_map(|c| c.trim().parse().ok()).collect();
    (!cpus.is_empty()).then_some(cpus)
}

/// Restrict the calling thread, and every thread it starts from now on, to `cpus`.
fn pin_current_thread(cpus: &[usize]) {
    // SAFETY: `set` is a plain bitmask owned by this frame; pid 0 is the
    // calling thread.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    assert_eq!(
        rc,
        0,
        "sched_setaffinity({cpus:?}): {}",
        std::io::Error::last_os_error()
    );
}

/// CPU time (user + system) of `/proc/self/stat` or a task's `stat`, seconds.
fn stat_cpu_secs(stat: &str) -> f64 {
    // pid (comm) state ... utime stime: fields 14 and 15, counted after the
    // closing parenthesis of comm (which may hold spaces).
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i).and_then(|f| f.parse::<u64>().ok()))
        .sum();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    ticks as f64 / hz
}

/// CPU time this process has used on everything but the load driver's
/// threads (named `driver`), and on the driver's threads, seconds: the
/// whole process's counter (which keeps the time of threads that have
/// ended) less the driver's threads, and those threads.
fn cpu_secs() -> (f64, f64) {
    let all = std::fs::read_to_string("/proc/self/stat").map_or(0.0, |s| stat_cpu_secs(&s));
    let mut driver = 0.0;
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for task in tasks.flatten() {
            let dir = task.path();
            let is_driver = std::fs::read_to_string(dir.join("comm"))
                .is_ok_and(|c| c.trim_end().starts_with("driver"));
            if is_driver {
                driver +=
                    std::fs::read_to_string(dir.join("stat")).map_or(0.0, |s| stat_cpu_secs(&s));
            }
        }
    }
    (all - driver, driver)
}

/// Time the hypervisor ran something else while a vCPU of this VM wanted
/// to run (`steal` in /proc/stat, all CPUs), in seconds; 0 where unknown.
fn steal_secs() -> f64 {
    let ticks = std::fs::read_to_string("/proc/stat").ok().and_then(|stat| {
        // cpu user nice system idle iowait irq softirq steal ...
        stat.lines()
            .next()?
            .split_whitespace()
            .nth(8)?
            .parse::<u64>()
            .ok()
    });
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    match ticks {
        Some(t) if hz > 0 => t as f64 / hz as f64,
        _ => 0.0,
    }
}

/// The machine's own stalls, before any load: one thread per CPU, pinned,
/// reads the clock in a loop for `secs` and records every gap over 100 µs
/// (the hypervisor or the kernel running something else). No request can
/// be faster than the stall it lands in, so these bound the tail from below.
fn probe_stalls(cpus: usize, secs: f64) -> Vec<Duration> {
    let threads: Vec<_> = (0..cpus)
        .map(|cpu| {
            std::thread::spawn(move || {
                pin_current_thread(&[cpu]);
                let mut gaps = Vec::new();
                let start = Instant::now();
                let mut last = start;
                while last - start < Duration::from_secs_f64(secs) {
                    let now = Instant::now();
                    if now - last > Duration::from_micros(100) {
                        gaps.push(now - last);
                    }
                    last = now;
                }
                gaps
            })
        })
        .collect();
    let mut gaps: Vec<Duration> = threads
        .into_iter()
        .flat_map(|t| t.join().expect("stall probe"))
        .collect();
    gaps.sort_unstable();
    gaps
}

fn pct(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    f64::from(sorted[idx]) / 1000.0
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The median of per-round figures, with their range.
struct Spread {
    median: f64,
    min: f64,
    max: f64,
}

impl Spread {
    fn of(v: &[f64]) -> Spread {
        Spread {
            median: median(v.to_vec()),
            min: v.iter().copied().fold(f64::INFINITY, f64::min),
            max: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        }
    }

    /// `1.234x (1.000..2.000)`.
    fn show(&self, decimals: usize, unit: &str) -> String {
        format!(
            "{:.decimals$}{unit} ({:.decimals$}..{:.decimals$})",
            self.median, self.min, self.max
        )
    }
}

/// Where and how: the server's address, the client TLS config, connections.
struct Target {
    addr: std::net::SocketAddr,
    client: Arc<rustls::ClientConfig>,
    connections: usize,
}

/// How each connection paces its requests.
#[derive(Clone, Copy)]
enum Pace {
    /// Closed loop: the next request as soon as the answer is in.
    Closed,
    /// Open loop: requests at fixed times, `interval` apart on each
    /// connection; latency counts from the scheduled time, so a slow answer
    /// also delays (and is charged to) the requests queued behind it.
    Open { interval: Duration },
}

type Sender = support::Conn;

/// One request; true when answered 2xx with a complete body.
async fn send(sender: &mut Sender, path: &str, body: &Bytes) -> bool {
    let req = Request::post(path)
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .body(Full::new(body.clone()))
        .expect("request");
    if sender.ready().await.is_err() {
        return false;
    }
    match sender.send_request(req).await {
        Ok(resp) => {
            let status = resp.status();
            resp.into_body().collect().await.is_ok() && status.is_success()
        }
        Err(_) => false,
    }
}

/// Drive `path` over the kept-alive `senders` for `measure`.
async fn drive(
    senders: &mut Vec<Sender>,
    path: &'static str,
    body: &Bytes,
    pace: Pace,
    measure: Duration,
) -> Sample {
    let start = Instant::now();
    let steal_start = steal_secs();
    let (cpu_start, driver_start) = cpu_secs();
    let end = start + measure;
    let n = senders.len();
    let mut tasks = Vec::with_capacity(n);
    for (i, mut sender) in senders.drain(..).enumerate() {
        let body = body.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(1 << 14);
            let mut late = Vec::new();
            let mut errors = 0usize;
            // Open loop: connections start staggered across one interval.
            let mut next = match pace {
                Pace::Closed => start,
                Pace::Open { interval } => start + interval.mul_f64(i as f64 / n as f64),
            };
            loop {
                if let Pace::Open { .. } = pace {
                    tokio::time::sleep_until(next.into()).await;
                }
                let sent = match pace {
                    Pace::Closed => Instant::now(),
                    Pace::Open { .. } => next,
                };
                if sent >= end {
                    break;
                }
                if let Pace::Open { .. } = pace {
                    late.push(u32::try_from(sent.elapsed().as_micros()).unwrap_or(u32::MAX));
                }
                if send(&mut sender, path, &body).await {
                    lat.push(u32::try_from(sent.elapsed().as_micros()).unwrap_or(u32::MAX));
                } else {
                    errors += 1;
                }
                if let Pace::Open { interval } = pace {
                    next += interval;
                }
            }
            (sender, lat, late, errors)
        }));
    }
    let mut sample = Sample::default();
    for t in tasks {
        let (sender, lat, late, errors) = t.await.expect("driver task");
        senders.push(sender);
        sample.requests += lat.len();
        sample.lat.extend(lat);
        sample.late.extend(late);
        sample.errors += errors;
    }
    // Until the last answer: an open loop that falls behind takes longer
    // than `measure` to send what was scheduled, and its rate shows it.
    sample.secs = start.elapsed().as_secs_f64().max(measure.as_secs_f64());
    sample.steal = steal_secs() - steal_start;
    let (cpu_end, driver_end) = cpu_secs();
    sample.server_cpu = cpu_end - cpu_start;
    sample.driver_cpu = driver_end - driver_start;
    sample
}

fn row(name: &str, s: &mut Sample, body_len: usize, cpus: usize, extra: &str) {
    s.lat.sort_unstable();
    println!(
        "{name:<16} {:>9} {:>10.0} {:>9.3} {:>9.3} {:>9.3} {:>7} {body_len:>9} {:>6.1}{extra}",
        s.requests,
        s.rate(),
        pct(&s.lat, 0.50),
        pct(&s.lat, 0.99),
        pct(&s.lat, 0.999),
        s.errors,
        100.0 * s.steal_share(cpus),
    );
}

/// The webhook server on a runtime of its own, like `infergate serve`, plus
/// the bench's `/fixed` route, and a `/raw/NAME` and a `/scan/NAME` route
/// for each of `raw`.
struct Server {
    rt: tokio::runtime::Runtime,
    addr: std::net::SocketAddr,
    shutdown: CancellationToken,
}

impl Server {
    fn stop(self) {
        self.shutdown.cancel();
        self.rt.shutdown_timeout(Duration::from_secs(2));
    }
}

/// Start the server on 127.0.0.1 with the serving pair `cert`/`key`. With
/// `server_cpus`, the calling thread is pinned to them first, so every
/// thread the server starts inherits the mask.
fn start_server(
    cert: &[u8],
    key: &[u8],
    server_threads: usize,
    server_cpus: Option<&[usize]>,
    raw: &[(&str, Bytes)],
) -> Server {
    let state = support::app_state(ClusterState::new(policies()), ServerDefaults::default());
    state
        .resolver
        .set(tls::parse_pem_pair(cert, key).expect("pair").key);
    state.tls_bound.store(true, Ordering::Release);
    let fixed = Bytes::from_static(
        br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"705ab4f5-6393-11e8-b7cc-42010a800002","allowed":true}}"#,
    );
    let mut router = server::router(Arc::clone(&state)).route(
        "/fixed",
        axum::routing::post(move |body: Bytes| {
            let fixed = fixed.clone();
            async move {
                drop(body);
                fixed
            }
        }),
    );
    // The raw-I/O baselines: the body received whole, not parsed, and
    // answered with the conversion's own answer, made before the run: the
    // same bytes each way as a conversion.
    for (name, answer) in raw {
        let scanned = answer.clone();
        let answer = answer.clone();
        router = router.route(
            &format!("/raw/{name}"),
            axum::routing::post(move |body: Bytes| {
                let answer = answer.clone();
                async move {
                    drop(body);
                    answer
                }
            })
            .layer(axum::extract::DefaultBodyLimit::max(
                server::CONVERSION_BODY_LIMIT,
            )),
        );
        // The floor of reading JSON: the same, the body read through first
        // (checked as JSON by serde_json, nothing kept).
        router = router.route(
            &format!("/scan/{name}"),
            axum::routing::post(move |body: Bytes| {
                let answer = scanned.clone();
                async move {
                    serde_json::from_slice::<serde::de::IgnoredAny>(&body)
                        .expect("the bench's bodies are JSON");
                    drop(body);
                    answer
                }
            })
            .layer(axum::extract::DefaultBodyLimit::max(
                server::CONVERSION_BODY_LIMIT,
            )),
        );
    }
    // The accept loop's runtime; connections are served by `server_threads`
    // workers of `serve_tls` (threads named `webhook-N`).
    if let Some(cpus) = server_cpus {
        pin_current_thread(cpus);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("server")
        .enable_all()
        .build()
        .expect("server runtime");
    let shutdown = CancellationToken::new();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let tls_cfg = tls::server_config(Arc::clone(&state.resolver)).expect("tls config");
    rt.spawn(listener::serve_tls(
        listener,
        tls_cfg,
        router,
        shutdown.clone(),
        Duration::from_secs(1),
        server_threads,
    ));
    Server { rt, addr, shutdown }
}

fn main() {
    support::install_crypto_provider();
    if std::env::var_os(SOAK_CHILD).is_some() {
        soak_server_child();
        return;
    }
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let secs = env_u64("LOAD_SECS", 3);
    let rounds = usize::try_from(env_u64("LOAD_ROUNDS", 5))
        .unwrap_or(5)
        .max(1);
    let connections = usize::try_from(env_u64("LOAD_CONNECTIONS", 50)).unwrap_or(50);
    let cpus = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let server_cpus = env_cpus("LOAD_SERVER_CPUS");
    let driver_cpus = env_cpus("LOAD_DRIVER_CPUS");
    let default_server_threads = server_cpus.as_ref().map_or(2, Vec::len) as u64;
    let server_threads =
        usize::try_from(env_u64("LOAD_SERVER_THREADS", default_server_threads)).unwrap_or(2);
    let driver_threads = usize::try_from(env_u64("LOAD_DRIVER_THREADS", 1)).unwrap_or(1);
    // Open-loop rates as shares of the ceiling: `0.5`, or a sweep `0.25,0.4,0.5`.
    let rate_fractions: Vec<f64> = std::env::var("LOAD_RATE_FRACTION")
        .ok()
        .map(|v| v.split(',').filter_map(|f| f.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![0.5]);

    // The machine's own stalls first, with nothing else running.
    let probe_secs = env_u64("LOAD_PROBE_SECS", 3);
    if probe_secs > 0 && cpus > 0 {
        let gaps = probe_stalls(cpus, probe_secs as f64);
        let lost: Duration = gaps.iter().sum();
        let over = |ms: u64| {
            gaps.iter()
                .filter(|g| **g >= Duration::from_millis(ms))
                .count()
        };
        let share = |d: Duration| 100.0 * d.as_secs_f64() / (cpus as f64 * probe_secs as f64);
        // A request arriving in a stall waits out the rest of it: the time in
        // which more than 5 ms of stall remain. Over 1%, no p99 on that CPU
        // can be under 5 ms, whatever the server does.
        let five = Duration::from_millis(5);
        let over_five: Duration = gaps.iter().map(|g| g.saturating_sub(five)).sum();
        println!(
            "machine stalls, no load ({cpus} cpus x {probe_secs}s of a thread reading the clock): {:.2}% of the time lost in {} gaps over 0.1 ms; {} over 1 ms, {} over 5 ms (more than 5 ms of stall ahead {:.2}% of the time), longest {:.2} ms",
            share(lost),
            gaps.len(),
            over(1),
            over(5),
            share(over_five),
            gaps.last().map_or(0.0, |g| g.as_secs_f64() * 1000.0),
        );
    }

    if filter.iter().any(|f| f == "soak") {
        soak(&Soak {
            secs: env_u64("LOAD_SOAK_SECS", 600).max(1),
            rate: env_u64("LOAD_SOAK_RATE", SOAK_DEFAULT_RATE).max(1) as f64,
            timeout: Duration::from_millis(env_u64("LOAD_SOAK_TIMEOUT_MS", 10_000))
                .clamp(Duration::from_millis(1), Duration::from_secs(30)),
            connections: connections.max(1),
            server_threads,
            driver_threads,
            driver_cpus,
            cpus,
        });
        return;
    }

    let mutate_body = Bytes::from(admission_review(service_object(0, false)));
    let validate_body = Bytes::from(admission_review(service_object(0, true)));
    let convert_body = Bytes::from(conversion_review(100));
    let convert1000_body = Bytes::from(conversion_review(1000));
    let alpha1000_body = Bytes::from(alpha_conversion_review(1000));
    // What the raw baselines answer: each conversion's own answer (checked
    // to be a success: a failure would be a short answer).
    let answer_of = |body: &Bytes| {
        let metrics = infergate::metrics::Metrics::default();
        let answer = infergate::webhook::conversion::convert_review(body, &metrics);
        let success = br#""result":{"status":"Success"}"#;
        assert!(
            answer.windows(success.len()).any(|w| w == success),
            "the bench's conversion failed: {}",
            String::from_utf8_lossy(&answer[..answer.len().min(500)])
        );
        Bytes::from(answer)
    };
    // And each admission webhook's own answer to its body (the same policies
    // as the server's): what answering costs with nothing parsed. Checked
    // to admit (and, for `/mutate`, to patch): a denial would be a short
    // answer.
    let admission_answer = |webhook, body: &Bytes| {
        let state = support::app_state(ClusterState::new(policies()), ServerDefaults::default());
        let answer = state
            .admission
            .handle(webhook, body)
            .expect("the bench's review")
            .to_json()
            .expect("an answer");
        let json: serde_json::Value = serde_json::from_slice(&answer).expect("JSON");
        assert_eq!(json["response"]["allowed"], true, "{json}");
        if webhook == infergate::metrics::Webhook::Mutate {
            assert!(json["response"]["patch"].is_string(), "{json}");
        }
        Bytes::from(answer)
    };
    let raw = [
        ("convert1000", answer_of(&convert1000_body)),
        ("alpha1000", answer_of(&alpha1000_body)),
        (
            "mutate",
            admission_answer(infergate::metrics::Webhook::Mutate, &mutate_body),
        ),
        (
            "validate",
            admission_answer(infergate::metrics::Webhook::Validate, &validate_body),
        ),
    ];

    // Server: its own runtime, like `infergate serve`.
    let (ca, leaf) = support::pki("load-ca");
    let server = start_server(
        leaf.cert.as_bytes(),
        leaf.key.as_bytes(),
        server_threads,
        server_cpus.as_deref(),
        &raw,
    );
    let addr = server.addr;

    // Driver: its own runtime (one thread by default: a light load generator
    // leaves the cores to the server and adds the least scheduling noise).
    let client = support::client_config(&[&ca], &[b"http/1.1"], false);
    let target = Target {
        addr,
        client,
        connections,
    };
    if let Some(cpus) = &driver_cpus {
        pin_current_thread(cpus);
    }
    let driver_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(driver_threads)
        .thread_name("driver")
        .enable_all()
        .build()
        .expect("driver runtime");

    if filter.iter().any(|f| f == "isolation") {
        isolation(&target, &driver_rt, rounds, secs);
        drop(driver_rt);
        server.stop();
        return;
    }

    let scenarios: Vec<(&'static str, &'static str, Bytes)> = vec![
        ("fixed", "/fixed", mutate_body.clone()),
        ("rawmutate", "/raw/mutate", mutate_body.clone()),
        ("scanmutate", "/scan/mutate", mutate_body.clone()),
        ("mutate", "/mutate?timeout=10s", mutate_body),
        ("rawvalidate", "/raw/validate", validate_body.clone()),
        ("scanvalidate", "/scan/validate", validate_body.clone()),
        ("validate", "/validate?timeout=10s", validate_body),
        ("convert100", "/convert?timeout=30s", convert_body),
        ("raw2mb", "/raw/convert1000", convert1000_body.clone()),
        ("convert1000", "/convert?timeout=30s", convert1000_body),
        ("rawalpha", "/raw/alpha1000", alpha1000_body.clone()),
        ("alpha1000", "/convert?timeout=30s", alpha1000_body),
    ]
    .into_iter()
    .filter(|(name, ..)| filter.is_empty() || filter.iter().any(|f| name.contains(f.as_str())))
    .collect();
    println!(
        "webhook load: {connections} HTTP/1.1 keep-alive TLS connections, server threads {server_threads}, driver threads {driver_threads}, {cpus} cpus; server on cpus {}, driver on cpus {}",
        server_cpus
            .as_ref()
            .map_or("any".to_owned(), |c| format!("{c:?}")),
        driver_cpus
            .as_ref()
            .map_or("any".to_owned(), |c| format!("{c:?}")),
    );
    println!(
        "closed loop: {rounds} rounds of {secs}s per scenario, scenarios interleaved in each round (after a 2s warm-up each)"
    );
    println!(
        "{:<16} {:>9} {:>10} {:>9} {:>9} {:>9} {:>7} {:>9} {:>6}",
        "scenario",
        "requests",
        "req/s",
        "p50 ms",
        "p99 ms",
        "p99.9 ms",
        "errors",
        "body B",
        "steal%"
    );

    let mut senders = driver_rt.block_on(async {
        let mut v = Vec::with_capacity(target.connections);
        for _ in 0..target.connections {
            let (sender, _) = support::connect(target.addr, Arc::clone(&target.client))
                .await
                .expect("connect");
            v.push(sender);
        }
        v
    });
    let measure = Duration::from_secs(secs);
    let mut totals: Vec<Sample> = scenarios.iter().map(|_| Sample::default()).collect();
    let mut ratios: Vec<Vec<f64>> = scenarios.iter().map(|_| Vec::new()).collect();
    // Each round's p99 per scenario, and the admission scenarios' p99 over
    // the fixed handler's p99 of the same round.
    let mut p99s: Vec<Vec<f64>> = scenarios.iter().map(|_| Vec::new()).collect();
    let mut p99_ratios: Vec<Vec<f64>> = scenarios.iter().map(|_| Vec::new()).collect();
    driver_rt.block_on(async {
        for (_, path, body) in &scenarios {
            drive(
                &mut senders,
                path,
                body,
                Pace::Closed,
                Duration::from_secs(2),
            )
            .await;
        }
        for _ in 0..rounds {
            let mut fixed_rate = None;
            let mut fixed_p99 = None;
            for (i, (name, path, body)) in scenarios.iter().enumerate() {
                let mut s = drive(&mut senders, path, body, Pace::Closed, measure).await;
                s.lat.sort_unstable();
                let p99 = pct(&s.lat, 0.99);
                p99s[i].push(p99);
                if *name == "fixed" {
                    fixed_rate = Some(s.rate());
                    fixed_p99 = Some(p99);
                } else if let (Some(f), Some(fp99)) = (
                    fixed_rate.filter(|_| name.ends_with("mutate") || name.ends_with("validate")),
                    fixed_p99,
                ) {
                    // A share of the ceiling for the admission scenarios and
                    // their baselines: a 100-object conversion is not one
                    // request's worth of work. The latency bar is the
                    // webhooks' own.
                    ratios[i].push(s.rate() / f);
                    if matches!(*name, "mutate" | "validate") {
                        p99_ratios[i].push(p99 / fp99);
                    }
                }
                totals[i].merge(s);
            }
        }
    });
    let mut fixed_rate = None;
    for (i, ((name, _, body), total)) in scenarios.iter().zip(totals.iter_mut()).enumerate() {
        if *name == "fixed" {
            fixed_rate = Some(total.rate());
        }
        let extra = if ratios[i].is_empty() {
            String::new()
        } else {
            let lo = ratios[i].iter().copied().fold(f64::INFINITY, f64::min);
            let hi = ratios[i].iter().copied().fold(0.0, f64::max);
            format!(
                "  {:.0}% of fixed (median of rounds; {:.0}..{:.0}%)",
                100.0 * median(ratios[i].clone()),
                100.0 * lo,
                100.0 * hi
            )
        };
        let (server, driver) = (
            total.cpu_per_request_us(),
            total.driver_cpu_per_request_us(),
        );
        let extra = format!(
            "{extra}  server cpu {server:.1} us/req (driver {driver:.1}, server/driver {:.2})",
            server / driver.max(0.001)
        );
        row(name, total, body.len(), cpus, &extra);
    }
    let cpu_of = |wanted: &str| {
        scenarios
            .iter()
            .zip(totals.iter())
            .find(|((name, ..), _)| *name == wanted)
            .map(|(_, t)| t.cpu_per_request_us())
    };
    for ((convert, raw), (_, answer)) in [
        ("convert1000", "raw2mb"),
        ("alpha1000", "rawalpha"),
        ("mutate", "rawmutate"),
        ("validate", "rawvalidate"),
    ]
    .into_iter()
    .zip(&raw)
    {
        if let (Some(c), Some(r)) = (cpu_of(convert), cpu_of(raw)) {
            println!(
                "{convert} costs {:.2}x the server CPU of {raw} (the same bytes in, not parsed, and the webhook's own {} bytes answered): {c:.1} vs {r:.1} us per request",
                c / r.max(1.0),
                answer.len()
            );
        }
    }
    for (webhook, raw, scan) in [
        ("mutate", "rawmutate", "scanmutate"),
        ("validate", "rawvalidate", "scanvalidate"),
    ] {
        if let (Some(w), Some(r), Some(s)) = (cpu_of(webhook), cpu_of(raw), cpu_of(scan)) {
            println!(
                "{webhook}: reading its body through as JSON costs {:.1} us of server CPU over {raw} ({s:.1} vs {r:.1}); the webhook's own work above that read, {:.1} us",
                s - r,
                w - s
            );
        }
    }

    // The latency bar: each admission scenario's p99 and rate against the
    // fixed handler's in the same round (the median over rounds, min..max).
    if let Some(fixed_i) = scenarios.iter().position(|(n, ..)| *n == "fixed") {
        let admission: Vec<usize> = (0..scenarios.len())
            .filter(|&i| !p99_ratios[i].is_empty())
            .collect();
        if !admission.is_empty() {
            println!(
                "latency bar, closed loop at {connections} connections: each round's p99 and req/s against fixed's in the same round; median of {rounds} rounds (min..max)"
            );
            println!(
                "{:<10} {:>24} {:>24} {:>30} {:>30}",
                "scenario",
                "p99 ms",
                "fixed p99 ms",
                "p99 / fixed p99 (goal <= 2x)",
                "req/s / fixed (goal >= 0.6)"
            );
        }
        for i in admission {
            let p99 = Spread::of(&p99s[i]);
            let fixed = Spread::of(&p99s[fixed_i]);
            let lat = Spread::of(&p99_ratios[i]);
            let rate = Spread::of(&ratios[i]);
            println!(
                "{:<10} {:>24} {:>24} {:>30} {:>30}",
                scenarios[i].0,
                p99.show(3, ""),
                fixed.show(3, ""),
                format!(
                    "{} {}",
                    lat.show(2, "x"),
                    if lat.median <= 2.0 { "met" } else { "MISSED" }
                ),
                format!(
                    "{} {}",
                    rate.show(3, ""),
                    if rate.median >= 0.6 { "met" } else { "MISSED" }
                ),
            );
        }
    }

    // Open loop: the fixed-bytes handler and the admission scenarios offered
    // a share of the ceiling measured above, spread over the same connections.
    let ceiling = fixed_rate.unwrap_or(0.0);
    for rate_fraction in rate_fractions
        .into_iter()
        .filter(|f| *f > 0.0 && ceiling > 0.0)
    {
        let offered = ceiling * rate_fraction;
        let interval = Duration::from_secs_f64(connections as f64 / offered);
        let open_secs = Duration::from_secs(secs * u64::try_from(rounds).unwrap_or(1));
        println!(
            "open loop: {offered:.0} req/s offered ({:.0}% of fixed), one request every {:.2} ms on each connection, {}s; latency from the scheduled send time",
            100.0 * rate_fraction,
            interval.as_secs_f64() * 1000.0,
            open_secs.as_secs()
        );
        for (name, path, body) in scenarios
            .iter()
            .filter(|(n, ..)| matches!(*n, "fixed" | "mutate" | "validate"))
        {
            let mut s = driver_rt.block_on(drive(
                &mut senders,
                path,
                body,
                Pace::Open { interval },
                open_secs,
            ));
            let achieved = 100.0 * s.rate() / offered;
            s.late.sort_unstable();
            let late = format!(
                "; sent late by p50 {:.3} ms, p99 {:.3} ms",
                pct(&s.late, 0.50),
                pct(&s.late, 0.99)
            );
            row(
                &format!("{name}@{:.0}%", 100.0 * rate_fraction),
                &mut s,
                body.len(),
                cpus,
                &format!("  {achieved:.0}% of offered served{late}"),
            );
        }
    }
    drop(senders);
    drop(driver_rt);
    server.stop();
}

// -------------------------------------------------------------- isolation

/// The p99 bound on small admission requests while large conversions run.
const ISOLATION_P99_BOUND_MS: f64 = 50.0;
/// Objects in each large conversion of the isolation scenario (about 17 MB).
const ISOLATION_OBJECTS: usize = 8_000;

/// Small `/validate` requests one after the other for `period` (at least
/// one), each on a fresh connection (placed on the server's next connection
/// worker), 20 ms apart: their latencies, connection included, in
/// microseconds, sorted; and how many failed.
async fn small_requests(target: &Target, body: &Bytes, period: Duration) -> (Vec<u32>, usize) {
    let mut lat = Vec::new();
    let mut errors = 0;
    let until = Instant::now() + period;
    loop {
        let started = Instant::now();
        let served = match support::connect(target.addr, Arc::clone(&target.client)).await {
            Ok((mut sender, _)) => send(&mut sender, "/validate", body).await,
            Err(_) => false,
        };
        if served {
            lat.push(u32::try_from(started.elapsed().as_micros()).unwrap_or(u32::MAX));
        } else {
            errors += 1;
        }
        if Instant::now() >= until {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    lat.sort_unstable();
    (lat, errors)
}

/// `-- isolation`: small admission requests while large conversions run,
/// against the same requests alone in the same round. Each round: `secs`
/// of small `/validate` requests alone (the baseline), then `secs` of them
/// while two connections send ConversionReviews of [`ISOLATION_OBJECTS`]
/// objects back to back (from a runtime of their own, so the driver's
/// encryption of the large bodies does not delay the small requests). The
/// figures: p99 during against the 50 ms bound, and p99 during / p99 alone,
/// medians over the rounds.
fn isolation(target: &Target, driver_rt: &tokio::runtime::Runtime, rounds: usize, secs: u64) {
    let small = Bytes::from(admission_review(service_object(0, true)));
    let large = Bytes::from(conversion_review(ISOLATION_OBJECTS));
    let large_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("large")
        .enable_all()
        .build()
        .expect("large runtime");
    let period = Duration::from_secs(secs);
    println!(
        "isolation: {rounds} rounds of {secs}s of small /validate requests on fresh connections 20 ms apart, alone, then while 2 connections convert {ISOLATION_OBJECTS} objects ({} bytes) back to back",
        large.len()
    );
    println!(
        "{:<6} {:>22} {:>30} {:>12} {:>12} {:>7}",
        "round", "alone p50/p99 ms", "during p50/p99/max ms", "p99 ratio", "conversions", "errors"
    );
    let mut during_p99s = Vec::new();
    let mut ratios = Vec::new();
    for round in 1..=rounds {
        let (alone, alone_errors) = driver_rt.block_on(small_requests(target, &small, period));
        let stop = CancellationToken::new();
        let converting: Vec<_> = (0..2)
            .map(|_| {
                let (stop, large) = (stop.clone(), large.clone());
                let (addr, client) = (target.addr, Arc::clone(&target.client));
                large_rt.spawn(async move {
                    let mut sender = support::connect(addr, Arc::clone(&client))
                        .await
                        .expect("connect")
                        .0;
                    let mut done = 0usize;
                    while !stop.is_cancelled() {
                        if send(&mut sender, "/convert", &large).await {
                            done += 1;
                        } else {
                            // Refused for lack of room (the server closes
                            // the connection after it) or failed: reconnect.
                            sender = support::connect(addr, Arc::clone(&client))
                                .await
                                .expect("connect")
                                .0;
                        }
                    }
                    done
                })
            })
            .collect();
        // The first conversions under way.
        driver_rt.block_on(async { tokio::time::sleep(Duration::from_millis(200)).await });
        let (during, during_errors) = driver_rt.block_on(small_requests(target, &small, period));
        stop.cancel();
        let conversions: usize = large_rt.block_on(async {
            let mut n = 0;
            for c in converting {
                n += c.await.expect("conversion task");
            }
            n
        });
        let (alone_p99, during_p99) = (pct(&alone, 0.99), pct(&during, 0.99));
        during_p99s.push(during_p99);
        ratios.push(during_p99 / alone_p99);
        println!(
            "{round:<6} {:>22} {:>30} {:>11.2}x {conversions:>12} {:>7}",
            format!("{:.2} / {alone_p99:.2}", pct(&alone, 0.5)),
            format!(
                "{:.2} / {during_p99:.2} / {:.2}",
                pct(&during, 0.5),
                pct(&during, 1.0)
            ),
            during_p99 / alone_p99,
            alone_errors + during_errors,
        );
    }
    let p99 = Spread::of(&during_p99s);
    println!(
        "small requests during large conversions, median of {rounds} rounds (min..max): p99 {} ms ({} against the {ISOLATION_P99_BOUND_MS} ms bound); p99 / p99 alone {}",
        p99.show(2, ""),
        if p99.median <= ISOLATION_P99_BOUND_MS {
            "met"
        } else {
            "MISSED"
        },
        Spread::of(&ratios).show(2, "x"),
    );
    large_rt.shutdown_timeout(Duration::from_secs(2));
}

// ------------------------------------------------------------------- soak

/// Set in the environment of the soak's server process (this binary again).
const SOAK_CHILD: &str = "LOAD_SOAK_CHILD";
/// The soak's offered rate unless `LOAD_SOAK_RATE` says otherwise.
const SOAK_DEFAULT_RATE: u64 = 5_000;
/// Minutes whose requests may still be in flight: a minute's counters are
/// read and cleared `timeout` + 2 s after it ends, long before its slot is
/// used again.
const SLOTS: usize = 4;
/// Latency buckets: exact below 128 µs, then 64 per power of two, up to 2^32 µs.
const BUCKETS: usize = 1728;

/// The soak's server: this binary again, in a process of its own so that
/// its memory and descriptors are its own. Prints its address and serves
/// until its stdin closes.
fn soak_server_child() {
    use std::io::{Read, Write};
    let cert = std::env::var("LOAD_SOAK_CERT").expect("LOAD_SOAK_CERT");
    let key = std::env::var("LOAD_SOAK_KEY").expect("LOAD_SOAK_KEY");
    let server_cpus = env_cpus("LOAD_SERVER_CPUS");
    let threads = usize::try_from(env_u64("LOAD_SERVER_THREADS", 2)).unwrap_or(2);
    let server = start_server(
        cert.as_bytes(),
        key.as_bytes(),
        threads,
        server_cpus.as_deref(),
        &[],
    );
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", server.addr).expect("stdout");
    out.flush().expect("stdout");
    drop(out);
    let mut rest = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut rest);
    server.stop();
}

/// Latencies in fixed log-linear buckets of microseconds (within 1.6%):
/// the same 14 KB however long the run.
struct Histogram {
    counts: Vec<AtomicU64>,
    max: AtomicU64,
}

impl Histogram {
    fn new() -> Histogram {
        Histogram {
            counts: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            max: AtomicU64::new(0),
        }
    }

    fn bucket(us: u64) -> usize {
        if us < 128 {
            return us as usize;
        }
        // 64 buckets per power of two: the top 7 bits of the value.
        let shift = 63 - us.leading_zeros() as usize - 6;
        let mantissa = (us >> shift) as usize;
        (128 + (shift - 1) * 64 + mantissa - 64).min(BUCKETS - 1)
    }

    /// The largest value that falls in bucket `i`.
    fn upper(i: usize) -> u64 {
        if i < 128 {
            return i as u64;
        }
        let shift = (i - 128) / 64 + 1;
        let mantissa = ((i - 128) % 64 + 64) as u64;
        ((mantissa + 1) << shift) - 1
    }

    fn record(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.counts[Self::bucket(us)].fetch_add(1, Ordering::Relaxed);
        self.max.fetch_max(us, Ordering::Relaxed);
    }

    /// The `q` quantile in milliseconds: the top of its bucket (at most the
    /// largest value seen), so never under the true figure.
    fn quantile_ms(&self, q: f64) -> f64 {
        let total: u64 = self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum();
        if total == 0 {
            return f64::NAN;
        }
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let max = self.max.load(Ordering::Relaxed);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c.load(Ordering::Relaxed);
            if seen >= rank {
                return Self::upper(i).min(max) as f64 / 1000.0;
            }
        }
        max as f64 / 1000.0
    }

    fn max_ms(&self) -> f64 {
        self.max.load(Ordering::Relaxed) as f64 / 1000.0
    }

    fn reset(&self) {
        for c in &self.counts {
            c.store(0, Ordering::Relaxed);
        }
        self.max.store(0, Ordering::Relaxed);
    }
}

/// One minute of the soak, by scheduled send time.
struct MinuteStats {
    /// Requests whose scheduled time fell in this minute.
    due: AtomicU64,
    /// Answered 2xx with an allowed review or a successful conversion.
    ok: AtomicU64,
    /// Answered otherwise (non-2xx, or a review that did not succeed).
    refused: AtomicU64,
    /// No answer within the timeout of the scheduled time (or already too
    /// late to send).
    timeout: AtomicU64,
    /// Connection errors, failed reconnects among them.
    conn: AtomicU64,
    /// Successful answers, from the scheduled send time.
    latency: Histogram,
    /// Successful answers, from the actual send: the server's (and the
    /// network's) share alone.
    service: Histogram,
    /// How late the driver sent (its timer, the previous answer on the connection).
    late: Histogram,
}

impl MinuteStats {
    fn new() -> MinuteStats {
        MinuteStats {
            due: AtomicU64::new(0),
            ok: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            timeout: AtomicU64::new(0),
            conn: AtomicU64::new(0),
            latency: Histogram::new(),
            service: Histogram::new(),
            late: Histogram::new(),
        }
    }

    fn reset(&self) {
        for c in [
            &self.due,
            &self.ok,
            &self.refused,
            &self.timeout,
            &self.conn,
        ] {
            c.store(0, Ordering::Relaxed);
        }
        self.latency.reset();
        self.service.reset();
        self.late.reset();
    }
}

/// One kind of request in the soak's mix.
struct SoakKind {
    path: &'static str,
    body: Bytes,
    /// In every successful answer.
    success: &'static [u8],
}

/// What the soak's connection tasks share.
struct SoakShared {
    kinds: Vec<SoakKind>,
    minutes: Vec<MinuteStats>,
    addr: std::net::SocketAddr,
    client: Arc<rustls::ClientConfig>,
    start: Instant,
    end: Instant,
    /// Seconds between two requests on one connection.
    period: f64,
    connections: usize,
    timeout: Duration,
}

/// The soak's settings.
struct Soak {
    secs: u64,
    rate: f64,
    timeout: Duration,
    connections: usize,
    server_threads: usize,
    driver_threads: usize,
    driver_cpus: Option<Vec<usize>>,
    cpus: usize,
}

/// The mix, by the request's global sequence number: 4 in 10 mutate, 4 in
/// 10 validate, 2 in 10 conversions cycling through 1..10 objects each way.
fn soak_pick(g: u64) -> usize {
    match g % 10 {
        0..=3 => 0,
        4..=7 => 1,
        r => 2 + ((g / 10 * 2 + (r - 8)) % 20) as usize,
    }
}

enum Outcome {
    Ok,
    Refused,
    Broken,
}

/// One request of the soak, its answer checked.
async fn send_checked(sender: &mut Sender, kind: &SoakKind) -> Outcome {
    let req = Request::post(kind.path)
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .body(Full::new(kind.body.clone()))
        .expect("request");
    if sender.ready().await.is_err() {
        return Outcome::Broken;
    }
    let Ok(resp) = sender.send_request(req).await else {
        return Outcome::Broken;
    };
    let status = resp.status();
    match resp.into_body().collect().await {
        Ok(body) => {
            let body = body.to_bytes();
            if status.is_success() && memchr::memmem::find(&body, kind.success).is_some() {
                Outcome::Ok
            } else {
                Outcome::Refused
            }
        }
        Err(_) => Outcome::Broken,
    }
}

/// Connection `i` of the soak: requests at fixed times until the end, each
/// charged to the minute of its scheduled time. A connection that breaks or
/// times out is replaced before the next request. Returns the connection,
/// so that it stays open until the last minute has been measured.
async fn soak_connection(
    i: usize,
    mut sender: Option<Sender>,
    sh: Arc<SoakShared>,
) -> Option<Sender> {
    let offset = i as f64 / sh.connections as f64;
    for j in 0u64.. {
        let scheduled = sh.start + Duration::from_secs_f64((offset + j as f64) * sh.period);
        if scheduled >= sh.end {
            break;
        }
        // Tokio's timer rounds a deadline up to its next 1 ms tick: aim just
        // under a millisecond early, so the request leaves on the tick at
        // (or just before) its time, not up to 1 ms after it.
        tokio::time::sleep_until((scheduled - Duration::from_micros(999)).into()).await;
        let minute = ((scheduled - sh.start).as_secs() / 60) as usize;
        let stats = &sh.minutes[minute % SLOTS];
        stats.due.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        stats.late.record(now.saturating_duration_since(scheduled));
        // Latency from the scheduled time, or from the sending when that was
        // earlier: a late send is charged to the request, an early one is not
        // credited to it.
        let sent = now.min(scheduled);
        let deadline = scheduled + sh.timeout;
        if now >= deadline {
            stats.timeout.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let kind = &sh.kinds[soak_pick(j * sh.connections as u64 + i as u64)];
        let attempt = tokio::time::timeout_at(deadline.into(), async {
            if sender.is_none() {
                match support::connect(sh.addr, Arc::clone(&sh.client)).await {
                    Ok((s, _)) => sender = Some(s),
                    Err(_) => return Outcome::Broken,
                }
            }
            match sender.as_mut() {
                Some(s) => send_checked(s, kind).await,
                None => Outcome::Broken,
            }
        })
        .await;
        match attempt {
            Ok(Outcome::Ok) => {
                stats.latency.record(sent.elapsed());
                stats.service.record(now.elapsed());
                stats.ok.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Outcome::Refused) => {
                stats.refused.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Outcome::Broken) => {
                stats.conn.fetch_add(1, Ordering::Relaxed);
                sender = None;
            }
            Err(_) => {
                stats.timeout.fetch_add(1, Ordering::Relaxed);
                sender = None;
            }
        }
    }
    sender
}

/// A process's resident memory, open descriptors, CPU time and the time its
/// threads waited for a CPU (`pid` a number or `self`).
struct ProcSample {
    rss_kb: u64,
    fds: usize,
    cpu: f64,
    /// Run-queue wait of the live threads (`/proc/PID/task/*/schedstat`), seconds.
    wait: f64,
}

fn proc_sample(pid: &str) -> ProcSample {
    let rss_kb = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count);
    let cpu =
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(0.0, |s| stat_cpu_secs(&s));
    let mut wait = 0.0;
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for task in tasks.flatten() {
            // run time, run-queue wait (ns), time slices
            wait += std::fs::read_to_string(task.path().join("schedstat"))
                .ok()
                .and_then(|v| v.split_whitespace().nth(1)?.parse::<f64>().ok())
                .map_or(0.0, |ns| ns / 1e9);
        }
    }
    ProcSample {
        rss_kb,
        fds,
        cpu,
        wait,
    }
}

/// What the summary needs of each minute.
struct MinuteRow {
    p99: f64,
    late_p99: f64,
    service_max: f64,
    /// Run-queue wait of the server's and the driver's threads, percent of the minute.
    server_wait: f64,
    driver_wait: f64,
    /// Share of the machine's CPUs busy with other processes, percent.
    other: f64,
    server: ProcSample,
    driver: ProcSample,
}

/// CPU time all CPUs spent busy (user, nice, system, irq, softirq in
/// /proc/stat), seconds.
fn machine_busy_secs() -> f64 {
    let ticks: u64 = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|stat| {
            let line = stat.lines().next()?.to_owned();
            let f: Vec<u64> = line
                .split_whitespace()
                .skip(1)
                .filter_map(|v| v.parse().ok())
                .collect();
            // user nice system idle iowait irq softirq
            Some([0, 1, 2, 5, 6].iter().filter_map(|&i| f.get(i)).sum())
        })
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    ticks as f64 / hz
}

fn drift(from: f64, to: f64) -> f64 {
    100.0 * (to - from) / from.max(1.0)
}

/// The soak: an open-loop mix at a fixed rate against the server in its own
/// process, one table row per minute, then drift, errors and p99 stability.
fn soak(cfg: &Soak) {
    use std::io::BufRead;
    let (ca, leaf) = support::pki("load-ca");
    let exe = std::env::current_exe().expect("own executable");
    let mut child = std::process::Command::new(exe)
        .env(SOAK_CHILD, "1")
        .env("LOAD_SOAK_CERT", &leaf.cert)
        .env("LOAD_SOAK_KEY", &leaf.key)
        .env("LOAD_SERVER_THREADS", cfg.server_threads.to_string())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("server process");
    let pid = child.id().to_string();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("server stdout"))
        .read_line(&mut line)
        .expect("server address");
    let addr: std::net::SocketAddr = line.trim().parse().expect("server address");
    let stop_child = |mut child: std::process::Child| {
        drop(child.stdin.take());
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
    };

    if let Some(cpus) = &cfg.driver_cpus {
        pin_current_thread(cpus);
    }
    let driver_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cfg.driver_threads)
        .thread_name("driver")
        .enable_all()
        .build()
        .expect("driver runtime");
    let client = support::client_config(&[&ca], &[b"http/1.1"], false);

    let admission_ok: &[u8] = br#""allowed":true"#;
    let conversion_ok: &[u8] = br#""status":"Success""#;
    let mut kinds = vec![
        SoakKind {
            path: "/mutate?timeout=10s",
            body: Bytes::from(admission_review(service_object(0, false))),
            success: admission_ok,
        },
        SoakKind {
            path: "/validate?timeout=10s",
            body: Bytes::from(admission_review(service_object(0, true))),
            success: admission_ok,
        },
    ];
    for n in 1..=10 {
        kinds.push(SoakKind {
            path: "/convert?timeout=30s",
            body: Bytes::from(conversion_review(n)),
            success: conversion_ok,
        });
    }
    for n in 1..=10 {
        kinds.push(SoakKind {
            path: "/convert?timeout=30s",
            body: Bytes::from(alpha_conversion_review(n)),
            success: conversion_ok,
        });
    }

    // Every kind answered successfully once before the clock starts.
    let senders = driver_rt.block_on(async {
        let mut senders = Vec::with_capacity(cfg.connections);
        for _ in 0..cfg.connections {
            let (sender, _) = support::connect(addr, Arc::clone(&client))
                .await
                .expect("connect");
            senders.push(sender);
        }
        let mut failed = Vec::new();
        for (k, kind) in kinds.iter().enumerate() {
            if !matches!(send_checked(&mut senders[0], kind).await, Outcome::Ok) {
                failed.push(k);
            }
        }
        (senders, failed)
    });
    let (senders, failed) = senders;
    if !failed.is_empty() {
        stop_child(child);
        panic!("soak: the server did not answer kinds {failed:?} of the mix successfully");
    }

    let period = cfg.connections as f64 / cfg.rate;
    let conv_sizes = kinds[2..]
        .iter()
        .map(|k| k.body.len())
        .fold((usize::MAX, 0), |(lo, hi), n| (lo.min(n), hi.max(n)));
    println!(
        "soak: open loop, {:.0} req/s offered for {}s on {} HTTP/1.1 keep-alive TLS connections (one request every {:.2} ms on each), {} cpus",
        cfg.rate,
        cfg.secs,
        cfg.connections,
        period * 1000.0,
        cfg.cpus
    );
    println!(
        "mix: 40% mutate ({} B), 40% validate ({} B), 20% ConversionReviews of 1..10 objects, half v1beta1->v1alpha1, half v1alpha1->v1beta1 ({}..{} B)",
        kinds[0].body.len(),
        kinds[1].body.len(),
        conv_sizes.0,
        conv_sizes.1
    );
    println!(
        "server: its own process (pid {pid}, {} connection workers), so RSS and fds are the server's alone; the driver's (this process, {} threads) beside. Latency from the scheduled send time (coordinated omission not hidden); errors: non-2xx or an unsuccessful review / no answer within {} ms of the scheduled time / connection errors",
        cfg.server_threads,
        cfg.driver_threads,
        cfg.timeout.as_millis()
    );
    println!(
        "{:>3} {:>7} {:>8} {:>6} {:>12} {:>7} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>4} {:>7} {:>8} {:>8} {:>7} {:>8} {:>5} {:>5}",
        "min",
        "sent",
        "answered",
        "errors",
        "http/tmo/con",
        "p50 ms",
        "p99 ms",
        "max ms",
        "late p99",
        "svc p99",
        "svc max",
        "srv RSS",
        "fds",
        "srv cpu",
        "srv wait",
        "drv RSS",
        "drv cpu",
        "drv wait",
        "steal",
        "other"
    );
    println!(
        "    (late: how late the driver sent; svc: from the actual send to the answer; cpu: percent of one core; wait: the threads' time waiting for a CPU, summed over threads, percent of the minute; steal and other: percent of all CPUs, taken by the hypervisor or other processes)"
    );

    let start = Instant::now() + Duration::from_millis(100);
    let shared = Arc::new(SoakShared {
        kinds,
        minutes: (0..SLOTS).map(|_| MinuteStats::new()).collect(),
        addr,
        client,
        start,
        end: start + Duration::from_secs(cfg.secs),
        period,
        connections: cfg.connections,
        timeout: cfg.timeout,
    });
    let tasks: Vec<_> = senders
        .into_iter()
        .enumerate()
        .map(|(i, s)| driver_rt.spawn(soak_connection(i, Some(s), Arc::clone(&shared))))
        .collect();

    let minutes = cfg.secs.div_ceil(60);
    let mut rows: Vec<MinuteRow> = Vec::with_capacity(usize::try_from(minutes).unwrap_or(0));
    let (mut due, mut ok, mut refused, mut timeouts, mut conn) = (0, 0, 0, 0, 0);
    let mut last_end = start;
    let (mut last_server_cpu, mut last_server_wait) = {
        let p = proc_sample(&pid);
        (p.cpu, p.wait)
    };
    let (mut last_driver_cpu, mut last_driver_wait) = {
        let p = proc_sample("self");
        (p.cpu, p.wait)
    };
    let mut last_steal = steal_secs();
    let mut last_busy = machine_busy_secs();
    let sleep_until = |t: Instant| std::thread::sleep(t.saturating_duration_since(Instant::now()));
    for m in 0..minutes {
        let minute_end = start + Duration::from_secs(((m + 1) * 60).min(cfg.secs));
        sleep_until(minute_end);
        let server = proc_sample(&pid);
        let driver = proc_sample("self");
        let steal = steal_secs();
        let busy = machine_busy_secs();
        let len = (minute_end - last_end).as_secs_f64();
        let machine = len * cfg.cpus.max(1) as f64;
        let server_cpu = 100.0 * (server.cpu - last_server_cpu) / len;
        let driver_cpu = 100.0 * (driver.cpu - last_driver_cpu) / len;
        let steal_pct = 100.0 * (steal - last_steal) / machine;
        // Everything else on the machine (builds, other benches), as a share
        // of all its CPUs.
        let other = 100.0
            * ((busy - last_busy)
                - (server.cpu - last_server_cpu)
                - (driver.cpu - last_driver_cpu))
                .max(0.0)
            / machine;
        (
            last_end,
            last_server_cpu,
            last_driver_cpu,
            last_steal,
            last_busy,
        ) = (minute_end, server.cpu, driver.cpu, steal, busy);
        let server_wait = 100.0 * (server.wait - last_server_wait) / len;
        let driver_wait = 100.0 * (driver.wait - last_driver_wait) / len;
        (last_server_wait, last_driver_wait) = (server.wait, driver.wait);
        // Every request of the minute is answered or timed out by now.
        sleep_until(minute_end + cfg.timeout + Duration::from_secs(2));
        let st = &shared.minutes[(m as usize) % SLOTS];
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let (d, o, r, t, c) = (
            get(&st.due),
            get(&st.ok),
            get(&st.refused),
            get(&st.timeout),
            get(&st.conn),
        );
        let p99 = st.latency.quantile_ms(0.99);
        let late_p99 = st.late.quantile_ms(0.99);
        let service_max = st.service.max_ms();
        println!(
            "{:>3} {d:>7} {o:>8} {:>6} {:>12} {:>7.3} {p99:>8.3} {:>8.3} {late_p99:>8.3} {:>8.3} {service_max:>8.3} {:>6.1}MB {:>4} {:>6.0}% {server_wait:>7.1}% {:>6.1}MB {:>6.0}% {driver_wait:>7.1}% {:>4.1}% {other:>4.0}%",
            m + 1,
            r + t + c,
            format!("{r}/{t}/{c}"),
            st.latency.quantile_ms(0.50),
            st.latency.max_ms(),
            st.service.quantile_ms(0.99),
            server.rss_kb as f64 / 1024.0,
            server.fds,
            server_cpu,
            driver.rss_kb as f64 / 1024.0,
            driver_cpu,
            steal_pct,
        );
        st.reset();
        (due, ok, refused, timeouts, conn) = (due + d, ok + o, refused + r, timeouts + t, conn + c);
        rows.push(MinuteRow {
            p99,
            late_p99,
            service_max,
            server_wait,
            driver_wait,
            other,
            server,
            driver,
        });
    }
    // The connections close only now, after the last minute's sample.
    let open: Vec<Option<Sender>> = tasks
        .into_iter()
        .map(|t| driver_rt.block_on(t).expect("soak connection"))
        .collect();
    drop(open);
    drop(driver_rt);
    stop_child(child);

    let errors = refused + timeouts + conn;
    println!(
        "soak summary: {due} sent, {ok} answered, {errors} errors ({refused} http, {timeouts} timeouts, {conn} connection) (goal 0: {})",
        if errors == 0 { "met" } else { "MISSED" }
    );
    // Drift from minute 2 (past the warm-up) to minute 10, and to the end
    // of a longer run.
    let n = rows.len();
    let from = 2.min(n);
    let mut tos = vec![10.min(n)];
    if n > 10 {
        tos.push(n);
    }
    for to in tos.into_iter().filter(|_| n > 0) {
        let (a, b) = (&rows[from - 1], &rows[to - 1]);
        let rss = drift(a.server.rss_kb as f64, b.server.rss_kb as f64);
        let fds = drift(a.server.fds as f64, b.server.fds as f64);
        let verdict = |d: f64| if d.abs() < 10.0 { "met" } else { "MISSED" };
        println!(
            "drift minute {from} -> {to}: server RSS {:.1} -> {:.1} MB ({rss:+.1}%, goal < 10%: {}), server fds {} -> {} ({fds:+.1}%, goal < 10%: {}); driver RSS {:.1} -> {:.1} MB ({:+.1}%)",
            a.server.rss_kb as f64 / 1024.0,
            b.server.rss_kb as f64 / 1024.0,
            verdict(rss),
            a.server.fds,
            b.server.fds,
            verdict(fds),
            a.driver.rss_kb as f64 / 1024.0,
            b.driver.rss_kb as f64 / 1024.0,
            drift(a.driver.rss_kb as f64, b.driver.rss_kb as f64),
        );
    }
    // Stable: from minute 2 on, no minute's p99 over twice their median.
    let p99s: Vec<f64> = rows.iter().map(|r| r.p99).collect();
    let steady: Vec<f64> = p99s.iter().copied().skip(usize::from(n > 1)).collect();
    let spread = Spread::of(&steady);
    println!(
        "p99 per minute (ms): {}; from minute {}: median {:.3}, min {:.3}, max {:.3} ({:.2}x the median; stable means at most 2x: {})",
        p99s.iter()
            .map(|p| format!("{p:.3}"))
            .collect::<Vec<_>>()
            .join(" "),
        if n > 1 { 2 } else { 1 },
        spread.median,
        spread.min,
        spread.max,
        spread.max / spread.median,
        if spread.max <= 2.0 * spread.median {
            "stable"
        } else {
            "NOT stable"
        }
    );
    // Whose tail. A connection sends its next request only once the answer
    // is in: while answers take longer than the time between its requests,
    // lateness piles up behind them; when none does, lateness is the
    // driver's own.
    let period_ms = period * 1000.0;
    for (m, r) in rows.iter().enumerate() {
        if r.p99 > 2.0 * spread.median {
            let whose = if r.service_max < period_ms && r.late_p99 >= r.p99 / 2.0 {
                "no answer took as long as the time between two requests on a connection: the time was lost in the driver before sending"
            } else {
                "answers took longer than the time between two requests on a connection, so the requests behind them queued"
            };
            println!(
                "  minute {}: p99 {:.3} ms, sent late by {:.3} ms (p99), longest answer {:.3} ms from its sending ({period_ms:.0} ms between requests on a connection); {whose}. Waiting for a CPU (summed over threads): server {:.1}%, driver {:.1}% of the minute; other processes used {:.0}% of the machine",
                m + 1,
                r.p99,
                r.late_p99,
                r.service_max,
                r.server_wait,
                r.driver_wait,
                r.other,
            );
        }
    }
}
