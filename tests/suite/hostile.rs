//! Hostile input over real TLS against the `infergate` binary: oversized,
//! slow, idle and malformed traffic, many connections at a low open-files
//! limit, many large bodies at once, deep and wide JSON, huge strings.
//! Each test starts its own `infergate serve` (policies from a file, no
//! cluster) and checks that it stays up, answers with the right status,
//! and stays within its memory limit (read from `/proc`).
//!
//! The server and what every test needs of it are here; the tests, a module
//! per concern:
//!
//! - [`oversized`]: bodies over the limit, announced, written whole before
//!   reading, chunked without end, posted by hyper and reqwest over HTTP/1.1
//!   and HTTP/2: the 413, and a refused body read away only within its
//!   bounds.
//! - [`connections`]: silent, slow and half-open connections are cut,
//!   idle keep-alive connections outlive the API server's idle timeout,
//!   thousands of idle connections at a low open-files limit.
//! - [`load`]: many large bodies at once within the memory limit, one
//!   request's peak at most four times its body, small requests not
//!   stalled by large conversions.
//! - [`payloads`]: deep and wide JSON, huge strings, invalid UTF-8 and
//!   rollout gate queries far past their bounds get clear, bounded answers.

#[path = "hostile/connections.rs"]
mod connections;
#[path = "hostile/load.rs"]
mod load;
#[path = "hostile/oversized.rs"]
mod oversized;
#[path = "hostile/payloads.rs"]
mod payloads;

use crate::reviews;
use crate::support;

use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

use crate::support::{
    binary, client_config, connect, free_port, http_get, install_crypto_provider, pki,
    readyz_within, write_pair,
};
use infergate::webhook::tls::certs::PemPair;
use rustls::pki_types::ServerName;
use serde_json::json;
use tokio::net::TcpStream;

const MIB: u64 = 1024 * 1024;
/// The memory limit the server is told it has (as `deploy/` gives it).
const MEMORY_LIMIT: u64 = 256 * MIB;

/// Held by the tests that load the CPU or time answers, so no two of them
/// run at once (the idle ones run beside them).
static HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn heavy() -> std::sync::MutexGuard<'static, ()> {
    HEAVY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One `infergate serve` process.
struct Server {
    child: Child,
    port: u16,
    probe: u16,
    ca: PemPair,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Server {
    /// Start `infergate serve` with `open_files` as its hard and soft
    /// `RLIMIT_NOFILE` (none: inherited), and wait until it is ready.
    fn start(open_files: Option<u64>) -> Server {
        install_crypto_provider();
        let dir = tempfile::tempdir().unwrap();
        let (ca, leaf) = pki("hostile-ca");
        write_pair(dir.path(), &leaf);
        let policy = dir.path().join("policy.yaml");
        std::fs::write(
            &policy,
            "apiVersion: infergate.dev/v1beta1\nkind: ClusterInferencePolicy\nmetadata: {name: platform}\nspec: {defaults: {engine: {image: registry.example.com/vllm:0.9}}}\n",
        )
        .unwrap();
        let (port, probe) = (free_port().unwrap(), free_port().unwrap());
        let mut cmd = match open_files {
            Some(n) => {
                let mut c = std::process::Command::new("prlimit");
                c.arg(format!("--nofile={n}:{n}")).arg("--").arg(binary());
                c
            }
            None => std::process::Command::new(binary()),
        };
        let serve = support::serve_command_line(port, probe, dir.path(), &policy);
        cmd.args(serve)
            .arg("--memory-limit")
            .arg(MEMORY_LIMIT.to_string())
            .args(["--drain-period", "0s"])
            .env("RUST_LOG", "info");
        let log = dir.path().join("serve.log");
        let child = support::spawn_logged(cmd, &log).unwrap();
        let server = Server {
            child,
            port,
            probe,
            ca,
            log,
            _dir: dir,
        };
        let rt = tokio::runtime::Runtime::new().unwrap();
        let ready = rt.block_on(readyz_within(probe, Duration::from_secs(10)));
        assert!(ready, "not ready: {}", server.log());
        server
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// A field of `/proc/PID/status` in bytes (`VmRSS`, `VmHWM`).
    fn memory(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = status
            .lines()
            .find(|l| l.starts_with(field))
            .unwrap_or_else(|| panic!("{field} not in /proc status"));
        let kib: u64 = line
            .split_whitespace()
            .nth(1)
            .and_then(|n| n.parse().ok())
            .unwrap();
        kib * 1024
    }

    /// The server is still running and answers its probes within 1 s.
    async fn assert_alive(&mut self) {
        assert!(
            self.child.try_wait().unwrap().is_none(),
            "the server exited: {}",
            self.log()
        );
        for path in ["/healthz", "/readyz"] {
            let started = Instant::now();
            let answer =
                tokio::time::timeout(Duration::from_secs(1), http_get(self.probe, path)).await;
            assert!(
                matches!(answer, Ok(Ok((200, _)))),
                "{path} did not answer 200 within 1 s ({:?}): {answer:?}",
                started.elapsed()
            );
        }
    }

    fn assert_within_memory_limit(&self) {
        let peak = self.memory("VmHWM");
        assert!(
            peak < MEMORY_LIMIT,
            "peak RSS {} MiB is over the {} MiB limit",
            peak / MIB,
            MEMORY_LIMIT / MIB
        );
    }

    /// A TLS stream to the webhook port with `alpn`.
    async fn tls(&self, alpn: &[u8]) -> tokio_rustls::client::TlsStream<TcpStream> {
        tls_to(self.port, &self.ca, alpn).await
    }

    async fn http1(&self) -> support::Conn {
        connect(
            ([127, 0, 0, 1], self.port).into(),
            client_config(&[&self.ca], &[b"http/1.1"], false),
        )
        .await
        .unwrap()
        .0
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn status_of(response: &[u8]) -> u16 {
    let text = String::from_utf8_lossy(response);
    text.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {text:?}"))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// An AdmissionReview of an InferenceService carrying an annotation of
/// `pad` bytes.
fn padded_admission(pad: usize) -> Vec<u8> {
    let mut object = reviews::service_object(0, false);
    object["metadata"]["annotations"]["example.com/pad"] = json!("p".repeat(pad));
    reviews::admission_review(object)
}

/// A TLS stream to `port` trusting `ca`, offering `alpn`.
async fn tls_to(
    port: u16,
    ca: &PemPair,
    alpn: &[u8],
) -> tokio_rustls::client::TlsStream<TcpStream> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    tokio_rustls::TlsConnector::from(client_config(&[ca], &[alpn], false))
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await
        .unwrap()
}
