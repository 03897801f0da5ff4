//! End-to-end: per-namespace GPU budgets against a real kube-apiserver.
//!
//! Two infergate servers (one of them with the reconciler) serve the
//! webhooks from this process behind a small round-robin proxy: it ends
//! TLS with the same serving certificate the servers hold, offers only
//! HTTP/1.1 (so the API server opens a connection per concurrent call) and
//! hands each connection to the next server over TLS. The registrations
//! point at the proxy. Both servers charge the ledgers in
//! `infergate-system`; the reconciler corrects them.
//!
//! The races of section 13 (delete and create again, a budget that first
//! applies to a namespace with services) are in [`races`].

#[path = "e2e_budget/races.rs"]
mod races;

use crate::support;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::support::{
    ControlPlane, SYSTEM_NAMESPACE, Serve, WAIT, client_config, control_plane, eventually,
    http_get, pki, serve_args, write_pair,
};
use infergate::api::AcceleratorClass;
use infergate::api::policy::InferencePolicy;
use infergate::api::v1beta1::InferenceService;
use infergate::state::ledger::book::Book;
use infergate::state::ledger::ledger_name;
use infergate::webhook::tls::certs::PemPair;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, ResourceQuota};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::json;
use tokio::sync::OnceCell;

/// The two servers, the proxy in front of them, and the class the tests use.
struct Env {
    /// The probe ports of both servers (their `/metrics`).
    probes: [u16; 2],
    /// An AcceleratorClass at 4.10 per device and hour.
    class: String,
    _servers: [Serve; 2],
}

static ENV: OnceCell<Env> = OnceCell::const_new();

/// Connections the proxy handed to each server.
static HANDED: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

async fn env() -> (&'static ControlPlane, Client, &'static Env) {
    support::init_tracing();
    let cp = control_plane().await;
    let env = ENV
        .get_or_init(|| async {
            support::install_crypto_provider();
            cp.install_crds().await;
            let kubeconfig = cp.deployed_service_account().await;
            let cert_dir = cp.dir().join("budget-certs");
            std::fs::create_dir_all(&cert_dir).unwrap();
            let (ca, leaf) = pki("infergate-budget-ca");
            write_pair(&cert_dir, &leaf);
            let mut ports = [0u16; 2];
            let mut probes = [0u16; 2];
            let servers = [true, false].map(|reconcile| {
                let i = usize::from(!reconcile);
                ports[i] = support::free_port().unwrap();
                probes[i] = support::free_port().unwrap();
                let mut args = serve_args(ports[i], probes[i], &cert_dir, vec![]);
                args.reconcile = reconcile;
                Serve::start(args, Some(kubeconfig.clone()))
            });
            for probe in probes {
                support::wait_readyz(probe, WAIT).await;
            }
            let proxy = start_proxy(&leaf, &ca, ports);
            support::register_webhooks(cp, proxy, &ca.cert)
                .await
                .unwrap_or_else(|e| panic!("registering the webhooks: {e:#}"));
            support::wait_webhooks_active(cp, "default").await;
            let class = format!("budget-gpu-{}", std::process::id());
            let classes: Api<AcceleratorClass> = Api::all(cp.client().await);
            let c: AcceleratorClass = serde_json::from_value(json!({
                "apiVersion": "infergate.dev/v1beta1", "kind": "AcceleratorClass",
                "metadata": {"name": class},
                "spec": {"vendor": "nvidia", "memoryPerDevice": "80Gi", "devicesPerNode": 8,
                         "costPerDeviceHour": "4.10"}
            }))
            .unwrap();
            classes.create(&PostParams::default(), &c).await.unwrap();
            // Both servers' watch caches hold the class before a test
            // names it (a dry run goes through the webhooks, charges nothing).
            let probe: Api<InferenceService> = Api::namespaced(cp.client().await, "default");
            let dry = PostParams {
                dry_run: true,
                ..PostParams::default()
            };
            eventually(
                "both servers to know the AcceleratorClass",
                WAIT,
                async || {
                    for _ in 0..4 {
                        probe
                            .create(&dry, &service("class-probe", 1, Some(&class)))
                            .await
                            .map_err(|e| e.to_string())?;
                    }
                    Ok::<(), String>(())
                },
            )
            .await;
            Env {
                probes,
                class,
                _servers: servers,
            }
        })
        .await;
    (cp, cp.client().await, env)
}

/// The round-robin proxy (its own thread and runtime: it outlives every
/// test's runtime); its port.
fn start_proxy(leaf: &PemPair, ca: &PemPair, backends: [u16; 2]) -> u16 {
    let chain = CertificateDer::pem_slice_iter(leaf.cert.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(leaf.key.as_bytes()).unwrap();
    let mut server = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .unwrap();
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
    let connector = tokio_rustls::TlsConnector::from(client_config(&[ca], &[b"http/1.1"], false));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::Builder::new()
        .name("budget-proxy".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let next = AtomicUsize::new(0);
                loop {
                    let Ok((tcp, _)) = listener.accept().await else {
                        continue;
                    };
                    let i = next.fetch_add(1, Ordering::Relaxed) % 2;
                    HANDED[i].fetch_add(1, Ordering::Relaxed);
                    let (acceptor, connector) = (acceptor.clone(), connector.clone());
                    tokio::spawn(async move {
                        let Ok(mut front) = acceptor.accept(tcp).await else {
                            return;
                        };
                        let Ok(back) =
                            tokio::net::TcpStream::connect(("127.0.0.1", backends[i])).await
                        else {
                            return;
                        };
                        let name = ServerName::try_from("127.0.0.1").unwrap();
                        let Ok(mut back) = connector.connect(name, back).await else {
                            return;
                        };
                        let _ = tokio::io::copy_bidirectional(&mut front, &mut back).await;
                    });
                }
            });
        })
        .unwrap();
    port
}

/// A service of `replicas` replicas of one GPU each (on `class` when given).
fn service(name: &str, replicas: i32, class: Option<&str>) -> InferenceService {
    let mut spec = json!({
        "model": {"ref": "llama3-8b"},
        "engine": {"image": "registry.example.com/vllm:0.9"},
        "replicas": replicas,
        "accelerator": {"type": "nvidia"},
    });
    if let Some(class) = class {
        spec["accelerator"]["class"] = json!(class);
    }
    serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
        "metadata": {"name": name}, "spec": spec
    }))
    .unwrap()
}

/// Set the namespace's budget to `gpus` (InferencePolicy `budget`, Deny),
/// and wait until a service of `gpus + 1` GPUs is refused on a dry run.
async fn set_budget(client: &Client, ns: &str, gpus: i64) {
    let policies: Api<InferencePolicy> = Api::namespaced(client.clone(), ns);
    let policy: InferencePolicy = serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "InferencePolicy",
        "metadata": {"name": "budget"},
        "spec": {"enforcement": "Deny", "limits": {"maxGPUsPerNamespace": gpus}}
    }))
    .unwrap();
    policies
        .patch(
            "budget",
            &PatchParams::apply("budget-test").force(),
            &Patch::Apply(&policy),
        )
        .await
        .unwrap();
    let services: Api<InferenceService> = Api::namespaced(client.clone(), ns);
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let probe = service("budget-probe", i32::try_from(gpus).unwrap() + 1, None);
    eventually("the budget to reach both servers", WAIT, async || {
        // Every server that answers must know the budget: several in a row.
        for _ in 0..6 {
            match services.create(&dry, &probe).await {
                Err(kube::Error::Api(s)) if s.message.contains("GPUs") => {}
                other => return Err(format!("{other:?}")),
            }
        }
        Ok(())
    })
    .await;
}

/// The ledger of `ns` as the API server holds it.
async fn ledger(client: &Client, ns: &str) -> Option<Book> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), SYSTEM_NAMESPACE);
    let cm = api.get_opt(&ledger_name(ns)).await.unwrap()?;
    Some(Book::parse(cm.data.as_ref()))
}

/// The GPUs each service is charged in `ns`'s ledger.
async fn charges(client: &Client, ns: &str) -> BTreeMap<String, i64> {
    ledger(client, ns)
        .await
        .unwrap_or_default()
        .entries
        .into_iter()
        .map(|(n, e)| (n, e.charge.gpus))
        .collect()
}

/// `infergate_budget_ledger_writes_total{result}` of the server on `probe`.
async fn ledger_writes(probe: u16, result: &str) -> u64 {
    let (_, text) = http_get(probe, "/metrics").await.unwrap();
    let prefix = format!("infergate_budget_ledger_writes_total{{result=\"{result}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |v| v.trim().parse().unwrap())
}

/// Whether `err` says the ledger could not record the charge in time (the
/// fail-safe denial that asks the client to try again).
fn not_recorded_in_time(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.message.contains("could not record") && s.message.contains("try again"))
}

/// Whether `err` is a budget denial (anything else fails the test).
fn budget_denial(err: &kube::Error, budget: i64) -> bool {
    match err {
        kube::Error::Api(s) if s.message.contains(&format!("of {budget} GPUs")) => true,
        other => panic!("not a budget denial: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forty_parallel_creates_against_sixteen_gpus_admit_exactly_sixteen_five_times_out_of_five()
{
    let (cp, client, env) = env().await;
    let written_before = [
        ledger_writes(env.probes[0], "written").await,
        ledger_writes(env.probes[1], "written").await,
    ];
    for run in 0..5 {
        let ns = cp.fresh_namespace("budget-race").await;
        set_budget(&client, &ns, 16).await;
        let started = Instant::now();
        let creates = (0..40).map(|i| {
            let api: Api<InferenceService> = Api::namespaced(client.clone(), &ns);
            tokio::spawn(async move {
                let svc = service(&format!("svc-{i:02}"), 1, None);
                // A charge the ledger could not record in time is denied
                // with "try again" (a loaded machine); a client tries again.
                let mut tries = 0;
                loop {
                    match api.create(&PostParams::default(), &svc).await {
                        Err(e) if tries < 5 && not_recorded_in_time(&e) => tries += 1,
                        other => break other.map(|s| s.name_any()),
                    }
                }
            })
        });
        let mut admitted = Vec::new();
        for create in futures::future::join_all(creates).await {
            match create.unwrap() {
                Ok(name) => admitted.push(name),
                Err(e) => assert!(budget_denial(&e, 16)),
            }
        }
        admitted.sort();
        eprintln!(
            "run {run}: {} of 40 admitted in {:?}",
            admitted.len(),
            started.elapsed()
        );
        assert_eq!(admitted.len(), 16, "run {run}: admitted {admitted:?}");
        let book = ledger(&client, &ns).await.expect("a ledger");
        assert_eq!(book.gpus(), 16, "run {run}: {book:?}");
        assert_eq!(
            book.entries.keys().cloned().collect::<Vec<_>>(),
            admitted,
            "run {run}"
        );
        let listed: Api<InferenceService> = Api::namespaced(client.clone(), &ns);
        assert_eq!(
            listed
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .len(),
            16
        );
    }
    // Both servers charged the ledgers.
    for (i, before) in written_before.into_iter().enumerate() {
        let after = ledger_writes(env.probes[i], "written").await;
        eprintln!(
            "server {i}: {} connections, {} charges written",
            HANDED[i].load(Ordering::Relaxed),
            after - before
        );
        assert!(after > before, "server {i} wrote no charge");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_goes_through_the_ledger_and_a_deleted_service_frees_its_charge() {
    let (cp, client, _) = env().await;
    let ns = cp.fresh_namespace("budget-update").await;
    set_budget(&client, &ns, 4).await;
    let api: Api<InferenceService> = Api::namespaced(client.clone(), &ns);
    let pp = PostParams::default();
    api.create(&pp, &service("chat", 2, None)).await.unwrap();
    api.create(&pp, &service("embed", 1, None)).await.unwrap();
    assert_eq!(
        charges(&client, &ns).await,
        BTreeMap::from([("chat".to_owned(), 2), ("embed".to_owned(), 1)])
    );
    // A dry run is judged the same way and charges nothing.
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    api.create(&dry, &service("extra", 1, None)).await.unwrap();
    let err = api
        .create(&dry, &service("extra", 2, None))
        .await
        .unwrap_err();
    assert!(budget_denial(&err, 4));
    assert_eq!(charges(&client, &ns).await.len(), 2);
    // An UPDATE that raises the charge is recorded before it is allowed.
    let replicas = |n: i32| Patch::Merge(json!({"spec": {"replicas": n}}));
    api.patch("chat", &PatchParams::default(), &replicas(3))
        .await
        .unwrap();
    assert_eq!(charges(&client, &ns).await["chat"], 3);
    let err = api
        .patch("chat", &PatchParams::default(), &replicas(4))
        .await
        .unwrap_err();
    assert!(budget_denial(&err, 4));
    let kube::Error::Api(s) = &err else {
        unreachable!()
    };
    assert!(
        s.message.contains(&format!(
            "{ns} uses 1 of 4 GPUs: embed 1; this service needs 4"
        )),
        "{}",
        s.message
    );
    // A deleted service's charge is free again within 5 s.
    api.delete("embed", &DeleteParams::default()).await.unwrap();
    let deleted = Instant::now();
    eventually(
        "embed's charge to be released",
        Duration::from_secs(5),
        async || (!charges(&client, &ns).await.contains_key("embed")).then_some(()),
    )
    .await;
    eprintln!("embed's charge released after {:?}", deleted.elapsed());
    api.patch("chat", &PatchParams::default(), &replicas(4))
        .await
        .unwrap();
    assert_eq!(
        charges(&client, &ns).await,
        BTreeMap::from([("chat".to_owned(), 4)])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_charge_whose_create_the_api_server_refused_is_released_within_thirty_seconds() {
    let (cp, client, _) = env().await;
    let ns = cp.fresh_namespace("budget-refused").await;
    set_budget(&client, &ns, 8).await;
    // The ResourceQuota plugin runs after the webhooks: one service only.
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), &ns);
    let quota: ResourceQuota = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "one"},
        "spec": {"hard": {"count/inferenceservices.infergate.dev": "1"}}
    }))
    .unwrap();
    quotas.create(&PostParams::default(), &quota).await.unwrap();
    // No quota controller runs: its first count is written here (the
    // quota plugin keeps it from there).
    let counted = json!({"status": {
        "hard": {"count/inferenceservices.infergate.dev": "1"},
        "used": {"count/inferenceservices.infergate.dev": "0"}
    }});
    quotas
        .patch_status("one", &PatchParams::default(), &Patch::Merge(&counted))
        .await
        .unwrap();
    let api: Api<InferenceService> = Api::namespaced(client.clone(), &ns);
    let pp = PostParams::default();
    api.create(&pp, &service("kept", 2, None)).await.unwrap();
    let err = api
        .create(&pp, &service("refused", 3, None))
        .await
        .unwrap_err();
    let refused = Instant::now();
    match &err {
        kube::Error::Api(s) => assert!(s.message.contains("exceeded quota"), "{s:?}"),
        other => panic!("{other:?}"),
    }
    // infergate was asked and charged it before the quota refused it.
    assert_eq!(
        charges(&client, &ns).await,
        BTreeMap::from([("kept".to_owned(), 2), ("refused".to_owned(), 3)])
    );
    eventually(
        "the refused create's charge to be released",
        Duration::from_secs(30),
        async || (!charges(&client, &ns).await.contains_key("refused")).then_some(()),
    )
    .await;
    eprintln!("released after {:?}", refused.elapsed());
    assert_eq!(
        charges(&client, &ns).await,
        BTreeMap::from([("kept".to_owned(), 2)])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lowered_budget_denies_new_charges_and_marks_the_youngest_services_left_running() {
    let (cp, client, env) = env().await;
    let ns = cp.fresh_namespace("budget-lowered").await;
    set_budget(&client, &ns, 16).await;
    let api: Api<InferenceService> = Api::namespaced(client.clone(), &ns);
    for name in ["first", "second", "third"] {
        api.create(&PostParams::default(), &service(name, 4, Some(&env.class)))
            .await
            .unwrap();
        // creationTimestamp has a resolution of a second.
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let shape = async || {
        let mut out = BTreeMap::new();
        for d in deployments.list(&ListParams::default()).await.unwrap() {
            let spec = serde_json::to_value(d.spec.as_ref().unwrap()).unwrap();
            out.insert(d.name_any(), (d.metadata.generation, spec));
        }
        out
    };
    let before = eventually("the three Deployments", WAIT, async || {
        let s = shape().await;
        (s.len() == 3).then_some(s)
    })
    .await;
    // status.capacity: 4 replicas of 1 GPU at 4.10.
    let first = eventually("first's capacity", WAIT, async || {
        api.get("first").await.ok()?.status?.capacity
    })
    .await;
    assert_eq!(first.gpus_per_replica, Some(1));
    assert_eq!(first.max_gpus, Some(4));
    assert_eq!(first.cost_per_hour.as_deref(), Some("16.40"));

    set_budget(&client, &ns, 8).await;
    let compliance = async |name: &str| {
        let svc = api.get(name).await.ok()?;
        let c = support::condition(&svc, "PolicyCompliant")?;
        Some((c.status, c.reason, c.message))
    };
    let third = eventually("third to be over the budget", WAIT, async || {
        compliance("third")
            .await
            .filter(|(s, r, _)| s == "False" && r == "OverBudget")
    })
    .await;
    assert!(
        third.2.contains(&format!(
            "{ns} uses 8 of 8 GPUs: first 4, second 4; this service needs 4"
        )),
        "{}",
        third.2
    );
    for name in ["first", "second"] {
        let (status, reason, _) = compliance(name).await.unwrap();
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("True", "Compliant"),
            "{name}"
        );
    }
    // A new charge is denied; the running workloads are left alone.
    let err = api
        .create(&PostParams::default(), &service("fourth", 1, None))
        .await
        .unwrap_err();
    assert!(budget_denial(&err, 8));
    assert_eq!(shape().await, before);

    // Deleting an older service makes room: the mark clears without any
    // change to the marked service itself.
    api.delete("first", &Default::default()).await.unwrap();
    eventually("third to fit again", Duration::from_secs(15), async || {
        compliance("third")
            .await
            .filter(|(s, r, _)| s == "True" && r == "Compliant")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_without_a_budget_has_no_ledger() {
    let (cp, client, _) = env().await;
    let ns = cp.fresh_namespace("budget-none").await;
    let api: Api<InferenceService> = Api::namespaced(client.clone(), &ns);
    api.create(&PostParams::default(), &service("free", 64, None))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(ledger(&client, &ns).await.is_none());
}
