//! Load driver for the webhook server, run by hand (not in CI):
//!
//! ```text
//! cargo bench --bench load                  # 5 rounds x 3 s per scenario, then the open loop
//! LOAD_ROUNDS=3 LOAD_SECS=2 cargo bench --bench load -- fixed mutate
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
//! `raw2mb`/`rawalpha` (the bodies of `convert1000`/`alpha1000` received
//! whole and sent back unparsed: the raw-I/O baseline of a conversion),
//! with kubectl-shaped bodies. Each
//! scenario reports the server's CPU per request from the process's own
//! counters (every thread but the driver's).
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
//! Before the load, a probe spins one pinned thread per CPU for
//! `LOAD_PROBE_SECS` (3; 0 skips it) and reports the gaps in which it did
//! not run: the machine's own stalls, a floor under any tail latency.
//!
//! Driver and server share the machine's cores. `LOAD_SERVER_CPUS=0
//! LOAD_DRIVER_CPUS=1` pins them apart instead (the server then gets one
//! connection worker per CPU in its list unless `LOAD_SERVER_THREADS` says
//! otherwise).

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
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
    }

    /// Server CPU per answered request, microseconds.
    fn cpu_per_request_us(&self) -> f64 {
        1e6 * self.server_cpu / self.requests.max(1) as f64
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
/// threads (named `driver`), seconds: the whole process's counter, which
/// keeps the time of threads that have ended, less the driver's threads.
fn server_cpu_secs() -> f64 {
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
    all - driver
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
    let cpu_start = server_cpu_secs();
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
    sample.server_cpu = server_cpu_secs() - cpu_start;
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

fn main() {
    support::install_crypto_provider();
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

    // Server: its own runtime, like `infergate serve`.
    let (ca, leaf) = support::pki("load-ca");
    let state = support::app_state(ClusterState::new(policies()), ServerDefaults::default());
    state.resolver.set(
        tls::parse_pem_pair(leaf.cert.as_bytes(), leaf.key.as_bytes())
            .expect("pair")
            .key,
    );
    state.tls_bound.store(true, Ordering::Release);
    let fixed = Bytes::from_static(
        br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"705ab4f5-6393-11e8-b7cc-42010a800002","allowed":true}}"#,
    );
    let router = server::router(Arc::clone(&state))
        .route(
            "/fixed",
            axum::routing::post(move |body: Bytes| {
                let fixed = fixed.clone();
                async move {
                    drop(body);
                    fixed
                }
            }),
        )
        // The raw-I/O baseline: the body received whole and sent back, the
        // same bytes each way as a conversion, nothing parsed.
        .route(
            "/raw",
            axum::routing::post(|body: Bytes| async move { body }).layer(
                axum::extract::DefaultBodyLimit::max(server::CONVERSION_BODY_LIMIT),
            ),
        );
    // The accept loop's runtime; connections are served by `server_threads`
    // workers of `serve_tls` (threads named `webhook-N`).
    if let Some(cpus) = &server_cpus {
        pin_current_thread(cpus);
    }
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("server")
        .enable_all()
        .build()
        .expect("server runtime");
    let shutdown = CancellationToken::new();
    let listener = server_rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let tls_cfg = tls::server_config(Arc::clone(&state.resolver)).expect("tls config");
    server_rt.spawn(listener::serve_tls(
        listener,
        tls_cfg,
        router,
        shutdown.clone(),
        Duration::from_secs(1),
        server_threads,
    ));

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

    let mutate_body = Bytes::from(admission_review(service_object(0, false)));
    let validate_body = Bytes::from(admission_review(service_object(0, true)));
    let convert_body = Bytes::from(conversion_review(100));
    let convert1000_body = Bytes::from(conversion_review(1000));
    let alpha1000_body = Bytes::from(alpha_conversion_review(1000));
    let scenarios: Vec<(&'static str, &'static str, Bytes)> = vec![
        ("fixed", "/fixed", mutate_body.clone()),
        ("mutate", "/mutate?timeout=10s", mutate_body),
        ("validate", "/validate?timeout=10s", validate_body),
        ("convert100", "/convert?timeout=30s", convert_body),
        ("raw2mb", "/raw", convert1000_body.clone()),
        ("convert1000", "/convert?timeout=30s", convert1000_body),
        ("rawalpha", "/raw", alpha1000_body.clone()),
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
            for (i, (name, path, body)) in scenarios.iter().enumerate() {
                let s = drive(&mut senders, path, body, Pace::Closed, measure).await;
                if *name == "fixed" {
                    fixed_rate = Some(s.rate());
                } else if let Some(f) =
                    fixed_rate.filter(|_| matches!(*name, "mutate" | "validate"))
                {
                    // A share of the ceiling for the admission scenarios: a
                    // 100-object conversion is not one request's worth of work.
                    ratios[i].push(s.rate() / f);
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
        let extra = format!(
            "{extra}  server cpu {:.0} us/req",
            total.cpu_per_request_us()
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
    for (convert, raw) in [("convert1000", "raw2mb"), ("alpha1000", "rawalpha")] {
        if let (Some(c), Some(r)) = (cpu_of(convert), cpu_of(raw)) {
            println!(
                "{convert} costs {:.2}x the server CPU of {raw} (the same bytes in, unparsed, sent back): {c:.0} vs {r:.0} us per request",
                c / r.max(1.0)
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
    shutdown.cancel();
    drop(driver_rt);
    server_rt.shutdown_timeout(Duration::from_secs(2));
}
