//! End-to-end: one tenant cannot use infergate against another, against a
//! real kube-apiserver and etcd, with the reconciler running as the
//! ServiceAccount of deploy/ with exactly deploy/rbac.yaml's permissions.
//!
//! - 30 services of one namespace point their graph at a tarpit (a TCP
//!   server that accepts and never answers): the fetch deadline, the limit
//!   of fetches in flight per namespace and the per-service backoff keep
//!   them from holding the reconciler, so a service in another namespace is
//!   reconciled within seconds;
//! - the ServiceAccount reads no Secret of a namespace that did not bind
//!   `infergate-graph-token-reader`.

mod support;

use std::io::Read;
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, PostParams};

use infergate::api::policy::{InferencePolicy, InferencePolicySpec, PolicyLimits};
use infergate::api::v1beta1::{
    Backend, EngineSpec, GraphSpec, InferenceService, InferenceServiceSpec, ModelSpec,
};
use support::{RAYSERVICE_CRD, Reconciler, WAIT, condition, wait_for};

const ENGINE: &str = "registry.example.com/vllm:0.9";
const TARPIT_SERVICES: usize = 30;

/// Accepts connections and never answers; counts them, at once and in all.
struct Tarpit {
    port: u16,
    open: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
    total: Arc<AtomicUsize>,
}

impl Tarpit {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind tarpit");
        let port = listener.local_addr().expect("addr").port();
        let open = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let total = Arc::new(AtomicUsize::new(0));
        let (o, m, t) = (open.clone(), most.clone(), total.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                t.fetch_add(1, Ordering::SeqCst);
                let now = o.fetch_add(1, Ordering::SeqCst) + 1;
                m.fetch_max(now, Ordering::SeqCst);
                let o = o.clone();
                // Read (the ClientHello) and say nothing until the peer gives up.
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    while matches!(stream.read(&mut buf), Ok(n) if n > 0) {}
                    o.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        Self {
            port,
            open,
            most,
            total,
        }
    }
}

fn service(name: &str, graph_url: Option<String>) -> InferenceService {
    InferenceService::new(
        name,
        InferenceServiceSpec {
            model: ModelSpec {
                r#ref: "llama3-8b".into(),
                image: None,
            },
            engine: Some(EngineSpec {
                image: Some(ENGINE.into()),
                ..EngineSpec::default()
            }),
            backend: graph_url.as_ref().map(|_| Backend::RayService),
            replicas: Some(1),
            graph: graph_url.map(|url| GraphSpec {
                url,
                bearer_token_secret_ref: None,
            }),
            ..InferenceServiceSpec::default()
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tarpit_graph_host_does_not_hold_up_other_tenants() {
    support::init_tracing();
    let cp = support::control_plane().await;
    cp.install_crds().await;
    cp.install_crd_file(RAYSERVICE_CRD).await;
    let client = cp.client().await;
    let sa_kubeconfig = cp.deployed_service_account().await;
    let slow = cp.fresh_namespace("tarpit").await;
    let other = cp.fresh_namespace("tenant").await;
    let tarpit = Tarpit::start();

    // The tarpit is on loopback: the slow namespace's own policy lists it
    // literally (the worst case: a tenant allowed to point anywhere).
    let policies: Api<InferencePolicy> = Api::namespaced(client.clone(), &slow);
    let mut policy = InferencePolicy::new(
        "graph-hosts",
        InferencePolicySpec {
            limits: Some(PolicyLimits {
                allowed_graph_hosts: Some(vec!["127.0.0.1".to_owned()]),
                ..PolicyLimits::default()
            }),
            ..InferencePolicySpec::default()
        },
    );
    policy.metadata.namespace = Some(slow.clone());
    policies
        .create(&PostParams::default(), &policy)
        .await
        .expect("create policy");

    // The reconciler with the shipped fetch limits (10 s deadline, 2 fetches
    // in flight per namespace, 8 in all, backoff from 5 s).
    let _reconciler = Reconciler::start(
        sa_kubeconfig.clone(),
        support::reconcile_config("tenancy-e2e"),
    );

    let slow_services: Api<InferenceService> = Api::namespaced(client.clone(), &slow);
    let url = format!("https://127.0.0.1:{}/graph", tarpit.port);
    for i in 0..TARPIT_SERVICES {
        slow_services
            .create(
                &PostParams::default(),
                &service(&format!("slow-{i}"), Some(url.clone())),
            )
            .await
            .expect("create tarpit service");
    }
    support::eventually("fetches stuck in the tarpit", WAIT, async || {
        let n = tarpit.open.load(Ordering::SeqCst);
        if n >= 2 {
            Ok(())
        } else {
            Err(format!("{n} open"))
        }
    })
    .await;

    // A service of another tenant, created while the tarpit holds fetches.
    let services: Api<InferenceService> = Api::namespaced(client.clone(), &other);
    let started = Instant::now();
    services
        .create(&PostParams::default(), &service("chat", None))
        .await
        .expect("create service");
    wait_for::<Deployment>(&client, &other, "chat", "the Deployment", WAIT, |_| true).await;
    wait_for::<InferenceService>(&client, &other, "chat", "Reconciled", WAIT, |s| {
        condition(s, "Reconciled").is_some_and(|c| c.status == "True")
    })
    .await;
    let took = started.elapsed();
    eprintln!(
        "a service of another namespace reconciled in {took:?} while {} tarpit fetches were open ({} so far)",
        tarpit.open.load(Ordering::SeqCst),
        tarpit.total.load(Ordering::SeqCst)
    );
    assert!(
        took < Duration::from_secs(5),
        "reconciling another tenant's service took {took:?}"
    );

    // The tarpit namespace never had more than its two fetches in flight,
    // and its services report the deadline.
    let timed_out = wait_for::<InferenceService>(&client, &slow, "slow-0", "Timeout", WAIT, |s| {
        condition(s, "GraphReady").is_some_and(|c| c.status == "False" && c.reason == "Timeout")
    })
    .await;
    let msg = condition(&timed_out, "GraphReady")
        .expect("GraphReady")
        .message;
    assert!(msg.contains("did not complete within 10s"), "{msg}");
    assert!(
        tarpit.most.load(Ordering::SeqCst) <= 2,
        "{} tarpit fetches at once",
        tarpit.most.load(Ordering::SeqCst)
    );

    // No Secret of a namespace that did not opt in is readable by the
    // deployed ServiceAccount.
    let admin_secrets: Api<Secret> = Api::namespaced(client.clone(), &other);
    admin_secrets
        .create(
            &PostParams::default(),
            &Secret {
                metadata: ObjectMeta {
                    name: Some("registry-password".into()),
                    ..ObjectMeta::default()
                },
                string_data: Some([("password".to_owned(), "hunter2".to_owned())].into()),
                ..Secret::default()
            },
        )
        .await
        .expect("create secret");
    let sa = support::client_from(&sa_kubeconfig)
        .await
        .expect("SA client");
    let as_infergate: Api<Secret> = Api::namespaced(sa, &other);
    match as_infergate.get("registry-password").await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 403, "{s:?}"),
        other => panic!("the ServiceAccount read a Secret: {other:?}"),
    }
}
