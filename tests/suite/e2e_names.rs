//! End-to-end: one owner per served name on a Gateway (section 16),
//! against a real kube-apiserver.
//!
//! Two infergate servers (one of them with the reconciler) serve the
//! webhooks behind a round-robin proxy, as in `e2e_budget`: both record
//! names in the names ledgers in `infergate-system`; the reconciler
//! corrects them. Each test uses Gateways of its own, so the tests'
//! ledgers never meet. The forty parallel creates are in [`races`].

#[path = "e2e_names/races.rs"]
mod races;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::support;
use crate::support::{
    ControlPlane, SYSTEM_NAMESPACE, Serve, WAIT, client_config, control_plane, eventually, pki,
    serve_args, write_pair,
};
use infergate::api::v1beta1::InferenceService;
use infergate::state::names::book::{NameBook, key};
use infergate::state::names::ledger_name;
use infergate::webhook::tls::certs::PemPair;
use k8s_openapi::api::core::v1::{ConfigMap, ResourceQuota};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::json;
use tokio::sync::OnceCell;

/// The two servers behind the proxy.
struct Env {
    _servers: [Serve; 2],
}

static ENV: OnceCell<Env> = OnceCell::const_new();

/// Connections the proxy handed to each server.
static HANDED: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

/// The namespace every test's Gateways are in.
const GATEWAYS: &str = "gateways";

async fn env() -> (&'static ControlPlane, Client) {
    support::init_tracing();
    let cp = control_plane().await;
    ENV.get_or_init(|| async {
        support::install_crypto_provider();
        cp.install_crds().await;
        cp.install_crd_file(support::httproute_crd()).await;
        let kubeconfig = cp.deployed_service_account().await;
        let cert_dir = cp.dir().join("names-certs");
        std::fs::create_dir_all(&cert_dir).unwrap();
        let (ca, leaf) = pki("infergate-names-ca");
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
        Env { _servers: servers }
    })
    .await;
    (cp, cp.client().await)
}

/// The round-robin proxy (its own thread and runtime: it outlives every
/// test's runtime); its port. HTTP/1.1 only, so the API server opens a
/// connection per concurrent call.
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
        .name("names-proxy".into())
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

/// A service routed by name through `gateway` (in [`GATEWAYS`]) serving
/// `served` and `adapters`, for `hostnames` (none: every hostname).
fn by_name(
    name: &str,
    gateway: &str,
    served: &str,
    adapters: &[&str],
    hostnames: &[&str],
) -> InferenceService {
    let adapters: Vec<_> = adapters
        .iter()
        .map(|a| json!({"name": a, "source": format!("org/{a}")}))
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": {
            "model": {"ref": "llama-3-70b", "servedName": served, "adapters": adapters},
            "engine": {"image": "registry.example.com/vllm:0.9"},
            "replicas": 1,
            "routing": {"match": "ModelName", "hostnames": hostnames,
                        "gateway": {"name": gateway, "namespace": GATEWAYS}},
        }
    }))
    .unwrap()
}

/// A Gateway name of this test run's own.
fn gateway(prefix: &str) -> String {
    format!("{prefix}-{}", std::process::id())
}

/// Create `svc` in `ns`: `Ok` when admitted, the API server's message
/// otherwise.
async fn create(client: &Client, ns: &str, svc: &InferenceService) -> Result<(), String> {
    let api: Api<InferenceService> = Api::namespaced(client.clone(), ns);
    match api.create(&PostParams::default(), svc).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) => Err(s.message),
        Err(e) => panic!("{e}"),
    }
}

/// The book of `gateway`'s names ledger as the API server holds it.
async fn ledger(client: &Client, gateway: &str) -> Option<NameBook> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), SYSTEM_NAMESPACE);
    let name = ledger_name(&(GATEWAYS.to_owned(), gateway.to_owned()));
    let cm = api.get_opt(&name).await.unwrap()?;
    Some(NameBook::parse(cm.data.as_ref()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_service_serving_a_name_on_one_gateway_is_denied_naming_only_a_holder_in_its_namespace()
 {
    let (cp, client) = env().await;
    let a = cp.fresh_namespace("names-a").await;
    let b = cp.fresh_namespace("names-b").await;
    let gw = gateway("gw-one");
    create(
        &client,
        &a,
        &by_name("holder-svc", &gw, "llama-3-70b", &[], &[]),
    )
    .await
    .unwrap();
    // The same namespace: the holder is named.
    let err = create(
        &client,
        &a,
        &by_name("second", &gw, "llama-3-70b", &[], &[]),
    )
    .await
    .unwrap_err();
    assert!(
        err.contains(&format!(
            "spec.model.servedName: Duplicate value: \"llama-3-70b\": served through Gateway {GATEWAYS}/{gw} by {a}/holder-svc"
        )),
        "{err}"
    );
    // Another namespace: no name of the holder's leaks.
    let err = create(&client, &b, &by_name("third", &gw, "llama-3-70b", &[], &[]))
        .await
        .unwrap_err();
    assert!(
        err.contains(&format!(
            "spec.model.servedName: Duplicate value: \"llama-3-70b\": served through Gateway {GATEWAYS}/{gw} by a service in another namespace"
        )),
        "{err}"
    );
    assert!(!err.contains(&a) && !err.contains("holder-svc"), "{err}");
    // An adapter named like another service's base name.
    let lora = by_name("lora", &gw, "base-b", &["sql-lora", "llama-3-70b"], &[]);
    let err = create(&client, &b, &lora).await.unwrap_err();
    assert!(
        err.contains("spec.model.adapters[1].name: Duplicate value: \"llama-3-70b\""),
        "{err}"
    );
    assert!(!err.contains(&a) && !err.contains("holder-svc"), "{err}");
    // A base name equal to an admitted service's adapter.
    create(
        &client,
        &b,
        &by_name("lora", &gw, "base-b", &["sql-lora"], &[]),
    )
    .await
    .unwrap();
    let err = create(&client, &a, &by_name("sql", &gw, "sql-lora", &[], &[]))
        .await
        .unwrap_err();
    assert!(err.contains("by a service in another namespace"), "{err}");
    // Through another Gateway: admitted.
    let other = gateway("gw-other");
    create(
        &client,
        &b,
        &by_name("elsewhere", &other, "llama-3-70b", &[], &[]),
    )
    .await
    .unwrap();
    // Disjoint hostnames: both admitted; every hostname meets both.
    let hosts = gateway("gw-hosts");
    create(
        &client,
        &a,
        &by_name("h1", &hosts, "m", &[], &["a.example.com"]),
    )
    .await
    .unwrap();
    create(
        &client,
        &b,
        &by_name("h2", &hosts, "m", &[], &["b.example.com"]),
    )
    .await
    .unwrap();
    let err = create(&client, &b, &by_name("h3", &hosts, "m", &[], &[]))
        .await
        .unwrap_err();
    assert!(err.contains("Duplicate value: \"m\""), "{err}");
    // An UPDATE that takes a held name is denied with its field; one that
    // keeps its names is admitted.
    let lora_api: Api<InferenceService> = Api::namespaced(client.clone(), &b);
    let add = |adapters: serde_json::Value| {
        Patch::Merge(json!({"spec": {"model": {"adapters": adapters}}}))
    };
    let err = lora_api
        .patch(
            "lora",
            &PatchParams::default(),
            &add(json!([{"name": "sql-lora", "source": "org/sql-lora"},
                        {"name": "llama-3-70b", "source": "org/x"}])),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("spec.model.adapters[1].name: Duplicate value: \"llama-3-70b\""),
        "{err}"
    );
    lora_api
        .patch(
            "lora",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .unwrap();
    // Recorded in the Gateway's ledger.
    let book = ledger(&client, &gw).await.expect("a names ledger");
    assert!(
        book.entries.contains_key(&key(&a, "holder-svc")),
        "{book:?}"
    );
    assert!(book.entries.contains_key(&key(&b, "lora")), "{book:?}");
    assert_eq!(book.entries.len(), 2, "{book:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_services_names_are_free_within_five_seconds_and_a_dry_run_records_nothing() {
    let (cp, client) = env().await;
    let a = cp.fresh_namespace("names-del-a").await;
    let b = cp.fresh_namespace("names-del-b").await;
    let gw = gateway("gw-delete");
    // A dry run is judged, records nothing.
    let api: Api<InferenceService> = Api::namespaced(client.clone(), &a);
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    api.create(&dry, &by_name("dry", &gw, "qwen", &[], &[]))
        .await
        .unwrap();
    create(&client, &b, &by_name("real", &gw, "qwen", &[], &[]))
        .await
        .expect("a dry run holds no name");
    let err = api
        .create(&dry, &by_name("dry", &gw, "qwen", &[], &[]))
        .await
        .unwrap_err();
    assert!(format!("{err}").contains("Duplicate value"), "{err}");
    assert!(
        !ledger(&client, &gw)
            .await
            .unwrap()
            .entries
            .contains_key(&key(&a, "dry"))
    );
    // Deleted: free within 5 s.
    let bapi: Api<InferenceService> = Api::namespaced(client.clone(), &b);
    bapi.delete("real", &DeleteParams::default()).await.unwrap();
    let deleted = Instant::now();
    eventually(
        "the deleted service's name to be free",
        Duration::from_secs(5),
        async || {
            create(&client, &a, &by_name("next", &gw, "qwen", &[], &[]))
                .await
                .ok()
        },
    )
    .await;
    eprintln!("free after {:?}", deleted.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_recorded_for_a_create_the_api_server_refused_is_free_within_thirty_seconds() {
    let (cp, client) = env().await;
    let ns = cp.fresh_namespace("names-refused").await;
    let other = cp.fresh_namespace("names-refused-b").await;
    let gw = gateway("gw-refused");
    // The ResourceQuota plugin runs after the webhooks: one service only.
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), &ns);
    let quota: ResourceQuota = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "one"},
        "spec": {"hard": {"count/inferenceservices.infergate.dev": "1"}}
    }))
    .unwrap();
    quotas.create(&PostParams::default(), &quota).await.unwrap();
    let counted = json!({"status": {
        "hard": {"count/inferenceservices.infergate.dev": "1"},
        "used": {"count/inferenceservices.infergate.dev": "0"}
    }});
    quotas
        .patch_status("one", &PatchParams::default(), &Patch::Merge(&counted))
        .await
        .unwrap();
    create(&client, &ns, &by_name("kept", &gw, "kept-name", &[], &[]))
        .await
        .unwrap();
    let err = create(&client, &ns, &by_name("refused", &gw, "phi-4", &[], &[]))
        .await
        .unwrap_err();
    let refused = Instant::now();
    assert!(err.contains("exceeded quota"), "{err}");
    // Recorded before the quota refused it: held for now.
    let book = ledger(&client, &gw).await.unwrap();
    assert!(book.entries.contains_key(&key(&ns, "refused")), "{book:?}");
    let err = create(&client, &other, &by_name("taker", &gw, "phi-4", &[], &[]))
        .await
        .unwrap_err();
    assert!(err.contains("Duplicate value"), "{err}");
    eventually(
        "the refused create's name to be free",
        Duration::from_secs(30),
        async || {
            create(&client, &other, &by_name("taker", &gw, "phi-4", &[], &[]))
                .await
                .ok()
        },
    )
    .await;
    eprintln!("free after {:?}", refused.elapsed());
    let book = ledger(&client, &gw).await.unwrap();
    assert!(!book.entries.contains_key(&key(&ns, "refused")), "{book:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_written_route_matching_a_served_name_on_the_gateway_is_named_in_a_warning() {
    let (cp, _client) = env().await;
    let routes_ns = cp.fresh_namespace("names-route").await;
    let ns = cp.fresh_namespace("names-warned").await;
    let gw = gateway("gw-foreign");
    let route = json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "by-hand", "namespace": routes_ns},
        "spec": {
            "parentRefs": [{"name": gw, "namespace": GATEWAYS}],
            "rules": [{
                "matches": [{"headers": [{"name": "x-gateway-model-name", "value": "mistral-7b"}]}],
                "backendRefs": [{"name": "somewhere", "port": 8000}]
            }]
        }
    });
    let out = cp.kubectl_stdin(&["create", "-f", "-"], &route.to_string());
    assert!(out.status.success(), "{}", support::text(&out));
    let svc = serde_json::to_string(&by_name("mistral", &gw, "mistral-7b", &[], &[])).unwrap();
    let wanted = format!("HTTPRoute {routes_ns}/by-hand on Gateway {GATEWAYS}/{gw}");
    // Both servers' caches hold the route: a dry run warns twice in a row.
    eventually("both servers to see the route", WAIT, async || {
        for _ in 0..4 {
            let out = cp.kubectl_stdin(&["create", "--dry-run=server", "-n", &ns, "-f", "-"], &svc);
            let text = support::text(&out);
            if !(out.status.success() && text.contains(&wanted)) {
                return None;
            }
        }
        Some(())
    })
    .await;
    let out = cp.kubectl_stdin(&["create", "-n", &ns, "-f", "-"], &svc);
    let text = support::text(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(&format!(
            "Warning: spec.model.servedName: {wanted} also matches X-Gateway-Model-Name: \"mistral-7b\""
        )),
        "{text}"
    );
}
