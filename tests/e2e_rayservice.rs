//! End-to-end: `backend: RayService` against a real kube-apiserver with the
//! minimal ray.io/v1 RayService CRD and a local HTTPS graph server (bearer
//! check, ETag). The reconciler runs in-process on its own thread and
//! runtime, trusting the graph server's CA through its fetcher, as the
//! ServiceAccount of deploy/ with only deploy/rbac.yaml's permissions.

mod support;

use std::convert::Infallible;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use infergate::api::v1beta1::{
    Backend, EngineSpec, GraphSpec, InferenceService, InferenceServiceSpec, ModelSpec, SecretKeyRef,
};
use infergate::engine::ServerDefaults;
use infergate::graph::fetch::{FetchOptions, GraphFetcher};
use infergate::graph::rayservice::RayService;
use infergate::graph::serve_config::ServeConfig;
use infergate::metrics::Metrics;
use infergate::reconcile::Config;

const TOKEN: &str = "tok-e2e-51c0d9a2";
const LEASE_NS: &str = "infergate-system";
const WAIT: Duration = Duration::from_secs(60);

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/graph")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

// ------------------------------------------------------------- graph server

type Body = BoxBody<Bytes, Infallible>;

fn reply(status: StatusCode, body: impl Into<Bytes>, etag: Option<&str>) -> Response<Body> {
    let mut r = Response::new(Full::new(body.into()).boxed());
    *r.status_mut() = status;
    if let Some(tag) = etag {
        r.headers_mut()
            .insert(hyper::header::ETAG, tag.parse().expect("etag"));
    }
    r
}

/// The served graph and its ETag.
type Served = Arc<Mutex<(Vec<u8>, String)>>;

fn handle(served: &Served, req: &Request<Incoming>) -> Response<Body> {
    let authorized = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .is_some_and(|v| v.as_bytes() == format!("Bearer {TOKEN}").as_bytes());
    if !authorized {
        return reply(StatusCode::UNAUTHORIZED, "wrong bearer token", None);
    }
    if req.uri().path() != "/graph" {
        return reply(StatusCode::NOT_FOUND, "no such graph", None);
    }
    let (body, etag) = served.lock().expect("lock").clone();
    let inm = req
        .headers()
        .get(hyper::header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok());
    if inm == Some(etag.as_str()) {
        return reply(StatusCode::NOT_MODIFIED, "", Some(&etag));
    }
    reply(StatusCode::OK, body, Some(&etag))
}

struct GraphServer {
    port: u16,
    ca: CertificateDer<'static>,
    served: Served,
}

impl GraphServer {
    fn url(&self) -> String {
        format!("https://127.0.0.1:{}/graph", self.port)
    }

    fn set(&self, bytes: Vec<u8>, etag: &str) {
        *self.served.lock().expect("lock") = (bytes, etag.to_owned());
    }
}

/// Start the HTTPS graph server on its own thread and runtime (it outlives
/// any one test's runtime).
fn start_graph_server() -> GraphServer {
    let (ca_pem, acceptor) = support::loopback_tls_acceptor("graph-e2e-ca");
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    std_listener.set_nonblocking(true).expect("nonblocking");
    let port = std_listener.local_addr().expect("addr").port();
    let served: Served = Arc::new(Mutex::new((Vec::new(), String::new())));
    let st = served.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("graph server runtime");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(std_listener).expect("listener");
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let acceptor = acceptor.clone();
                let st = st.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(move |req| {
                        let r = handle(&st, &req);
                        async move { Ok::<_, Infallible>(r) }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
    });
    GraphServer {
        port,
        ca: CertificateDer::from_pem_slice(ca_pem.as_bytes()).expect("ca der"),
        served,
    }
}

// --------------------------------------------------------------- reconciler

/// The reconciler on its own thread and runtime, stopped on drop.
struct Reconciler {
    token: CancellationToken,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Reconciler {
    fn start(kubeconfig: PathBuf, fetcher: Arc<GraphFetcher>) -> Self {
        let token = CancellationToken::new();
        let run_token = token.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("reconciler runtime");
            rt.block_on(async move {
                let client = support::client_from(&kubeconfig)
                    .await
                    .expect("reconciler client");
                let config = Config {
                    graph_resync: Duration::from_secs(2),
                    ..Config::new(
                        ServerDefaults::default(),
                        Metrics::new(),
                        LEASE_NS,
                        "rayservice-e2e",
                    )
                    .with_graph_fetcher(fetcher)
                };
                if let Err(e) = infergate::reconcile::run(client, config, run_token).await {
                    eprintln!("reconciler failed: {e}");
                }
            });
        });
        Self {
            token,
            thread: Some(thread),
        }
    }
}

impl Drop for Reconciler {
    fn drop(&mut self) {
        self.token.cancel();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

// ------------------------------------------------------------------ helpers

async fn install_rayservice_crd(cp: &support::ControlPlane) {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(infergate::graph::rayservice::TEST_CRD_PATH);
    let out = cp.kubectl(&[
        "apply",
        "--server-side",
        "-f",
        path.to_str().expect("utf-8"),
    ]);
    assert!(
        out.status.success(),
        "installing the RayService CRD: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cp.kubectl(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/rayservices.ray.io",
    ]);
    assert!(
        out.status.success(),
        "RayService CRD not Established: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn condition(svc: &InferenceService, type_: &str) -> Option<Condition> {
    svc.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .cloned()
}

/// Poll the service until `pred` holds; panic with the last status otherwise.
async fn wait_service(
    api: &Api<InferenceService>,
    name: &str,
    what: &str,
    pred: impl Fn(&InferenceService) -> bool,
) -> InferenceService {
    let start = Instant::now();
    loop {
        let svc = api.get(name).await.expect("get service");
        if pred(&svc) {
            return svc;
        }
        assert!(
            start.elapsed() < WAIT,
            "timed out waiting for {what}; status: {:#?}",
            svc.status
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn wait_rayservice(
    api: &Api<RayService>,
    name: &str,
    what: &str,
    pred: impl Fn(&RayService) -> bool,
) -> RayService {
    let start = Instant::now();
    loop {
        if let Some(rs) = api.get_opt(name).await.expect("get rayservice")
            && pred(&rs)
        {
            return rs;
        }
        assert!(start.elapsed() < WAIT, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn graph_condition(reason: &'static str) -> impl Fn(&InferenceService) -> bool {
    move |s| {
        condition(s, "GraphReady").is_some_and(|c| c.status == "False" && c.reason == reason)
            && condition(s, "Reconciled").is_some_and(|c| c.reason == reason)
    }
}

fn serve_config(rs: &RayService) -> ServeConfig {
    serde_saphyr::from_str(&rs.spec.serve_config_v2).expect("serveConfigV2 parses")
}

async fn set_token(secrets: &Api<Secret>, value: &str) {
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("graph-token".into()),
            ..ObjectMeta::default()
        },
        data: Some(
            [("token".to_owned(), ByteString(value.as_bytes().to_vec()))]
                .into_iter()
                .collect(),
        ),
        ..Secret::default()
    };
    secrets
        .patch(
            "graph-token",
            &PatchParams::apply("infergate-tests").force(),
            &Patch::Apply(&secret),
        )
        .await
        .expect("apply secret");
}

// -------------------------------------------------------------------- test

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rayservice_follows_the_graph_and_graph_failures_leave_it_alone() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .try_init();
    let cp = support::control_plane().await;
    cp.install_crds().await;
    install_rayservice_crd(cp).await;
    let client = cp.client().await;
    let _ = Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some(LEASE_NS.into()),
                    ..ObjectMeta::default()
                },
                ..Namespace::default()
            },
        )
        .await;
    let root = env!("CARGO_MANIFEST_DIR");
    let out = cp.kubectl(&[
        "apply",
        "-n",
        LEASE_NS,
        "-f",
        &format!("{root}/deploy/serviceaccount.yaml"),
        "-f",
        &format!("{root}/deploy/rbac.yaml"),
    ]);
    assert!(
        out.status.success(),
        "applying deploy/ RBAC: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sa_kubeconfig = support::service_account_kubeconfig(cp, LEASE_NS, "infergate")
        .unwrap_or_else(|e| panic!("ServiceAccount kubeconfig: {e:#}"));
    let ns = cp.fresh_namespace("ray").await;

    let server = start_graph_server();
    server.set(fixture("rag.pb"), "\"v1\"");
    let options = FetchOptions {
        connect_timeout: Duration::from_secs(2),
        timeout: Duration::from_secs(3),
        attempts: 2,
        backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(100),
        ..FetchOptions::default()
    };
    let fetcher =
        Arc::new(GraphFetcher::new(options, vec![server.ca.clone()]).expect("graph fetcher"));
    let _reconciler = Reconciler::start(sa_kubeconfig, fetcher);

    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    set_token(&secrets, TOKEN).await;
    let services: Api<InferenceService> = Api::namespaced(client.clone(), &ns);
    let rayservices: Api<RayService> = Api::namespaced(client.clone(), &ns);
    let svc = services
        .create(
            &PostParams::default(),
            &InferenceService::new(
                "rag",
                InferenceServiceSpec {
                    model: ModelSpec {
                        r#ref: "llama3-8b".into(),
                        image: None,
                    },
                    engine: Some(EngineSpec {
                        image: Some("registry.example.com/ray-vllm:2.40".into()),
                        ..EngineSpec::default()
                    }),
                    backend: Some(Backend::RayService),
                    replicas: Some(1),
                    graph: Some(GraphSpec {
                        url: server.url(),
                        bearer_token_secret_ref: Some(SecretKeyRef {
                            name: "graph-token".into(),
                            key: "token".into(),
                        }),
                    }),
                    ..InferenceServiceSpec::default()
                },
            ),
        )
        .await
        .expect("create service");
    let route = infergate::engine::render_route_path(&svc).expect("route path");

    // Created: serveConfigV2 from the graph, routed at the rendered path,
    // owned by the service, applied by the infergate field manager.
    let rs = wait_rayservice(&rayservices, "rag", "the RayService", |_| true).await;
    let config = serve_config(&rs);
    assert_eq!(config.applications[0].route_prefix, route);
    assert_eq!(config.applications[0].import_path, "rag.app:app");
    assert!(!rs.spec.serve_config_v2.contains("reranker"));
    let owner = &rs.metadata.owner_references.as_ref().expect("owner")[0];
    assert_eq!(owner.uid, svc.metadata.uid.clone().expect("uid"));
    assert_eq!(owner.controller, Some(true));
    assert!(
        rs.metadata
            .managed_fields
            .iter()
            .flatten()
            .any(|m| m.manager.as_deref() == Some("infergate")
                && m.operation.as_deref() == Some("Apply")),
        "server-side applied by infergate"
    );
    let svc_now = wait_service(&services, "rag", "GraphReady=True", |s| {
        condition(s, "GraphReady").is_some_and(|c| c.status == "True")
    })
    .await;
    // No KubeRay runs: the RayService has no status yet.
    let ready = condition(&svc_now, "Ready").expect("Ready");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "RayServicePending")
    );
    assert_eq!(
        svc_now.status.as_ref().and_then(|s| s.route_path.clone()),
        Some(route.clone())
    );

    // KubeRay reports the service ready: reflected in Ready.
    rayservices
        .patch_status(
            "rag",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"serviceStatus": "Running"}})),
        )
        .await
        .expect("patch RayService status");
    wait_service(&services, "rag", "Ready=True from the RayService", |s| {
        condition(s, "Ready").is_some_and(|c| c.status == "True" && c.reason == "RayServiceReady")
    })
    .await;

    // A graph update on the server is picked up without touching the service.
    server.set(fixture("rag-v2.pb"), "\"v2\"");
    let rs = wait_rayservice(&rayservices, "rag", "the updated graph", |rs| {
        rs.spec.serve_config_v2.contains("name: reranker")
    })
    .await;
    assert_eq!(serve_config(&rs).applications[0].route_prefix, route);

    // Each failure sets its condition and leaves the RayService as it was.
    let unchanged = |before: &RayService, after: &RayService| {
        assert_eq!(
            after.metadata.resource_version,
            before.metadata.resource_version
        );
        assert_eq!(after.spec, before.spec);
    };

    // A wrong token.
    set_token(&secrets, "wrong-token-value").await;
    let s = wait_service(
        &services,
        "rag",
        "GraphUnauthorized",
        graph_condition("GraphUnauthorized"),
    )
    .await;
    let msg = condition(&s, "GraphReady").expect("GraphReady").message;
    assert!(msg.contains("401"), "{msg}");
    assert!(!msg.contains("wrong-token-value"), "{msg}");
    // Ready keeps what the RayService last said.
    assert_eq!(
        condition(&s, "Ready").map(|c| c.status),
        Some("True".into())
    );
    unchanged(&rs, &rayservices.get("rag").await.expect("get"));
    set_token(&secrets, TOKEN).await;
    wait_service(&services, "rag", "GraphReady=True again", |s| {
        condition(s, "GraphReady").is_some_and(|c| c.status == "True")
    })
    .await;
    let rs = rayservices.get("rag").await.expect("get");

    // A cyclic graph.
    server.set(fixture("cyclic.pb"), "\"cyclic\"");
    let s = wait_service(
        &services,
        "rag",
        "GraphInvalid",
        graph_condition("GraphInvalid"),
    )
    .await;
    let msg = condition(&s, "GraphReady").expect("GraphReady").message;
    assert!(msg.contains("planner -> critic -> planner"), "{msg}");
    unchanged(&rs, &rayservices.get("rag").await.expect("get"));

    // An unreachable URL (a port nobody listens on).
    server.set(fixture("rag-v2.pb"), "\"v2\"");
    wait_service(&services, "rag", "GraphReady=True again", |s| {
        condition(s, "GraphReady").is_some_and(|c| c.status == "True")
    })
    .await;
    let rs = rayservices.get("rag").await.expect("get");
    let closed = support::free_port().expect("free port");
    services
        .patch(
            "rag",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"graph": {
                "url": format!("https://127.0.0.1:{closed}/graph")
            }}})),
        )
        .await
        .expect("patch graph url");
    let s = wait_service(
        &services,
        "rag",
        "GraphUnreachable",
        graph_condition("GraphUnreachable"),
    )
    .await;
    let msg = condition(&s, "GraphReady").expect("GraphReady").message;
    assert!(msg.contains(&closed.to_string()), "{msg}");
    unchanged(&rs, &rayservices.get("rag").await.expect("get"));
}
