//! End-to-end: infergate restarted under a stream of writes loses none.
//!
//! Two `infergate serve` processes (the binary) stand behind one address,
//! as two pods behind a Service: the test plays kube-proxy (a TCP balancer
//! that sends each new connection to a ready replica and leaves open ones
//! alone, as conntrack does), the endpoint controller (which replicas are
//! ready, learnt a second late as in a cluster) and the kubelet of a
//! rolling restart (SIGTERM, start again, ready), once per replica, while
//! writers create InferenceServices through the real API server without
//! pause. The webhook configurations of `webhooks/` are registered by URL
//! at the balancer. No write may fail.

use crate::support;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::{WAIT, control_plane, eventually, pki, spawn_logged, write_pair};
use infergate::api::v1beta1::InferenceService;
use kube::api::{Api, PostParams};
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};

const ENGINE_IMAGE: &str = "registry.example.com/vllm:0.9";
/// What each replica keeps answering for after SIGTERM.
const DRAIN_PERIOD: &str = "3s";
/// How long an endpoint change takes to reach the balancer.
const ENDPOINT_LAG: Duration = Duration::from_secs(1);

/// The replicas' ports and whether each is ready: the Service's endpoints.
type Endpoints = Arc<Mutex<Vec<(u16, bool)>>>;

/// kube-proxy's part: each accepted connection goes to the next ready
/// endpoint and is relayed byte for byte until either side closes.
async fn balance(listener: TcpListener, endpoints: Endpoints) {
    let mut next = 0usize;
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        let ready: Vec<u16> = endpoints
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, ready)| *ready)
            .map(|(port, _)| *port)
            .collect();
        if ready.is_empty() {
            continue;
        }
        let port = ready[next % ready.len()];
        next = next.wrapping_add(1);
        tokio::spawn(async move {
            let mut client = client;
            if let Ok(mut backend) = TcpStream::connect(("127.0.0.1", port)).await {
                let _ = tokio::io::copy_bidirectional(&mut client, &mut backend).await;
            }
        });
    }
}

/// One replica: an `infergate serve` process.
struct Replica {
    port: u16,
    probe: u16,
    dir: std::path::PathBuf,
    child: Option<std::process::Child>,
    starts: usize,
}

impl Replica {
    fn start(&mut self) {
        let log = self
            .dir
            .join(format!("serve-{}-{}.log", self.port, self.starts));
        self.starts += 1;
        let mut cmd = std::process::Command::new(support::binary());
        cmd.args(["serve", "--no-reconcile"])
            .arg(format!("--listen=127.0.0.1:{}", self.port))
            .arg(format!("--probe-listen=127.0.0.1:{}", self.probe))
            .arg(format!(
                "--tls-cert-file={}",
                self.dir.join("tls.crt").display()
            ))
            .arg(format!(
                "--tls-key-file={}",
                self.dir.join("tls.key").display()
            ))
            .arg(format!(
                "--policy-file={}",
                self.dir.join("policy.yaml").display()
            ))
            .arg(format!("--drain-period={DRAIN_PERIOD}"));
        self.child = Some(spawn_logged(cmd, &log).unwrap());
    }

    /// SIGTERM, then wait for the exit (drain period plus in-flight work).
    async fn terminate(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let killed = std::process::Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                assert!(
                    status.success(),
                    "replica {} exited with {status}",
                    self.port
                );
                return;
            }
            assert!(
                Instant::now() < deadline,
                "replica {} did not exit",
                self.port
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn service(ns: &str, name: &str) -> InferenceService {
    serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"model": {"ref": "llama3-8b"}},
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_under_writes_loses_none() {
    support::install_crypto_provider();
    let cp = control_plane().await;
    cp.install_crds().await;
    let client = cp.client().await;
    let dir = cp.dir().join("drain");
    std::fs::create_dir_all(&dir).unwrap();
    let (ca, leaf) = pki("infergate-drain-ca");
    write_pair(&dir, &leaf);
    std::fs::write(
        dir.join("policy.yaml"),
        format!("apiVersion: infergate.dev/v1beta1\nkind: ClusterInferencePolicy\nmetadata: {{name: platform}}\nspec: {{defaults: {{engine: {{image: {ENGINE_IMAGE}}}}}}}\n"),
    )
    .unwrap();

    let mut replicas: Vec<Replica> = (0..2)
        .map(|_| Replica {
            port: support::free_port().unwrap(),
            probe: support::free_port().unwrap(),
            dir: dir.clone(),
            child: None,
            starts: 0,
        })
        .collect();
    for r in &mut replicas {
        r.start();
        support::wait_readyz(r.probe, WAIT).await;
    }
    let endpoints: Endpoints = Arc::new(Mutex::new(
        replicas.iter().map(|r| (r.port, true)).collect(),
    ));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let service_port = listener.local_addr().unwrap().port();
    let balancer = tokio::spawn(balance(listener, Arc::clone(&endpoints)));
    support::register_webhooks(cp, service_port, &ca.cert)
        .await
        .unwrap_or_else(|e| panic!("registering the webhooks: {e:#}"));

    let ns = cp.fresh_namespace("drain").await;
    let api: Api<InferenceService> = Api::namespaced(client.clone(), &ns);
    // Registration takes effect after a moment: wait for a defaulted write.
    eventually("the webhooks to be called", WAIT, async || {
        let dry_run = PostParams {
            dry_run: true,
            ..Default::default()
        };
        let created = api
            .create(&dry_run, &service(&ns, "probe"))
            .await
            .map_err(|e| e.to_string())?;
        let image = created.spec.engine.as_ref().and_then(|e| e.image.clone());
        (image.as_deref() == Some(ENGINE_IMAGE))
            .then_some(())
            .ok_or_else(|| format!("not defaulted: {image:?}"))
    })
    .await;

    // Writers: create services without pause until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicUsize::new(0));
    let mut writers = Vec::new();
    for w in 0..4 {
        let api = api.clone();
        let ns = ns.clone();
        let stop = Arc::clone(&stop);
        let written = Arc::clone(&written);
        writers.push(tokio::spawn(async move {
            let mut failures = Vec::new();
            let mut i = 0;
            while !stop.load(Ordering::Acquire) {
                let name = format!("svc-{w}-{i}");
                i += 1;
                match api
                    .create(&PostParams::default(), &service(&ns, &name))
                    .await
                {
                    Ok(_) => {
                        written.fetch_add(1, Ordering::AcqRel);
                    }
                    Err(e) => failures.push(format!("{name}: {e}")),
                }
            }
            failures
        }));
    }

    tokio::time::sleep(Duration::from_secs(2)).await;
    for (i, replica) in replicas.iter_mut().enumerate() {
        let before = written.load(Ordering::Acquire);
        // The kubelet sends SIGTERM; the endpoint update reaches the
        // balancer a second later, as it reaches kube-proxy and the API
        // servers after the endpoint controller, the informers and the
        // proxy's sync have each taken their turn.
        tokio::join!(replica.terminate(), async {
            tokio::time::sleep(ENDPOINT_LAG).await;
            endpoints.lock().unwrap()[i].1 = false;
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        replica.start();
        support::wait_readyz(replica.probe, WAIT).await;
        endpoints.lock().unwrap()[i].1 = true;
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(
            written.load(Ordering::Acquire) > before,
            "writes went on while replica {i} restarted"
        );
    }
    stop.store(true, Ordering::Release);
    let mut failures = Vec::new();
    for w in writers {
        failures.extend(w.await.unwrap());
    }
    balancer.abort();
    let written = written.load(Ordering::Acquire);
    eprintln!(
        "{written} writes through two rolling restarts, {} failed",
        failures.len()
    );
    assert!(written > 50, "only {written} writes");
    assert!(failures.is_empty(), "writes failed: {failures:#?}");
}
