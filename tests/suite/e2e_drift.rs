//! End-to-end: drift made while infergate was stopped is put back when it
//! starts again, and a restart with nothing drifted writes nothing but the
//! Lease, counted in the API server's own audit log.
//!
//! The reconciler runs as infergate's ServiceAccount with the RBAC and
//! admission policy of `deploy/` (so its requests are told apart in the
//! audit log); the changes are made the way the cluster's other users make
//! them, with `kubectl set image`, `kubectl scale`, `kubectl patch` and
//! `kubectl delete`.

use std::collections::BTreeMap;
use std::io::{BufRead, Seek};
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Service;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::support::{self, ControlPlane, WAIT, control_plane, eventually, get, wait_exists};
use infergate::reconcile::children::httproute::HTTPRoute;

const ENGINE: &str = "registry.example.com/vllm:0.9";
/// infergate's user in the audit log.
const INFERGATE_USER: &str = "system:serviceaccount:infergate-system:infergate";
const WRITE_VERBS: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

/// `identity` holds the Lease.
async fn wait_leader(client: &Client, identity: &str) {
    eventually(&format!("{identity} leads"), WAIT, || async {
        (support::lease_holder(client).await.as_deref() == Some(identity)).then_some(())
    })
    .await;
}

/// infergate's requests in the audit log from byte `from` on, as
/// (verb, resource) -> count.
fn requests_since(log: &Path, from: u64) -> BTreeMap<(String, String), u64> {
    let mut counts = BTreeMap::new();
    let mut file = std::fs::File::open(log).expect("the audit log");
    file.seek(std::io::SeekFrom::Start(from)).expect("seek");
    for line in std::io::BufReader::new(file).lines() {
        let Ok(line) = line else { break };
        let Ok(v) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if v["stage"] != "ResponseComplete" || v["user"]["username"] != INFERGATE_USER {
            continue;
        }
        let mut resource = v["objectRef"]["resource"].as_str().unwrap_or("").to_owned();
        if let Some(sub) = v["objectRef"]["subresource"].as_str() {
            resource = format!("{resource}/{sub}");
        }
        let verb = v["verb"].as_str().unwrap_or("").to_owned();
        *counts.entry((verb, resource)).or_insert(0) += 1;
    }
    counts
}

fn audit_len(log: &Path) -> u64 {
    std::fs::metadata(log).map(|m| m.len()).unwrap_or(0)
}

fn kubectl(cp: &ControlPlane, args: &[&str]) {
    let out = cp.kubectl(args);
    assert!(
        out.status.success(),
        "kubectl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn image(d: &Deployment) -> Option<String> {
    d.spec
        .as_ref()?
        .template
        .spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == "engine")?
        .image
        .clone()
}

/// Every child of the two services as infergate made them.
async fn as_made(client: &Client, ns: &str) -> Option<()> {
    let chat: Deployment = get(client, ns, "chat").await?;
    let canary: Deployment = get(client, ns, "chat-canary").await?;
    let service: Service = get(client, ns, "chat").await?;
    let canary_service: Service = get(client, ns, "chat-canary").await?;
    let route: HTTPRoute = get(client, ns, "chat").await?;
    let hpa: HorizontalPodAutoscaler = get(client, ns, "scaled").await?;
    let port = |s: &Service| s.spec.as_ref()?.ports.as_ref()?.first().map(|p| p.port);
    (image(&chat).as_deref() == Some(ENGINE)
        && chat.spec.as_ref()?.replicas == Some(2)
        && canary.spec.as_ref()?.replicas == Some(1)
        && port(&service) == Some(8000)
        && port(&canary_service) == Some(8000)
        && support::route_weights(&route)
            == [
                ("chat".to_owned(), Some(80)),
                ("chat-canary".to_owned(), Some(20)),
            ]
        && hpa.spec.max_replicas == 4)
        .then_some(())
}

/// Stop infergate, change or delete a child of every kind, start it again:
/// all is put back within 60 s of the new leader starting. Before that, a
/// restart with nothing drifted writes nothing but the Lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_made_while_infergate_was_stopped_is_put_back_and_a_clean_restart_writes_nothing() {
    support::init_tracing();
    let cp = control_plane().await;
    cp.install_crds().await;
    cp.install_crd_file(support::httproute_crd()).await;
    let client = cp.client().await;
    let kubeconfig: PathBuf = cp.deployed_service_account().await;
    let ns = cp.fresh_namespace("drift").await;
    let log = cp.audit_log();

    let first = support::short_lease_reconciler(&kubeconfig, "drift-first");
    wait_leader(&client, "drift-first").await;
    support::create_service_json(
        &client,
        &ns,
        "chat",
        json!({
            "model": {"ref": "m"}, "engine": {"image": ENGINE}, "replicas": 2,
            "canary": {"model": {"ref": "m2"}, "weight": 20, "replicas": 1},
            "routing": {"gateway": {"name": "gw", "namespace": "gateways"}}
        }),
    )
    .await;
    support::create_service_json(
        &client,
        &ns,
        "scaled",
        json!({
            "model": {"ref": "m"}, "engine": {"image": ENGINE},
            "autoscaling": {"minReplicas": 1, "maxReplicas": 4, "targetCPUUtilizationPercent": 70}
        }),
    )
    .await;
    // No kubelet runs: the canary's pod is marked Ready, so its weight is
    // routed.
    support::mark_pods_ready(&client, &ns, "chat", "canary", 1).await;
    eventually("every child made", WAIT, || as_made(&client, &ns)).await;
    let _: Deployment = wait_exists(&client, &ns, "scaled").await;
    // Let the first reconciles' echoes and the deployment controller settle.
    tokio::time::sleep(Duration::from_secs(5)).await;
    first.stop();

    // A restart with nothing drifted: the new leader reads, and writes
    // nothing but its Lease.
    let from = audit_len(&log);
    let second = support::short_lease_reconciler(&kubeconfig, "drift-second");
    wait_leader(&client, "drift-second").await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    let requests = requests_since(&log, from);
    let writes: BTreeMap<_, _> = requests
        .iter()
        .filter(|((verb, resource), _)| {
            WRITE_VERBS.contains(&verb.as_str()) && resource != "leases"
        })
        .collect();
    assert!(
        writes.is_empty(),
        "a restart with nothing drifted wrote {writes:?} (all requests: {requests:?})"
    );
    // It did start and read: its watches listed the children.
    assert!(
        requests.contains_key(&("list".to_owned(), "deployments".to_owned()))
            && requests
                .keys()
                .any(|(verb, r)| WRITE_VERBS.contains(&verb.as_str()) && r == "leases"),
        "{requests:?}"
    );
    second.stop();

    // Drift while infergate is stopped, made as the cluster's users make it.
    let n = ns.as_str();
    kubectl(
        cp,
        &["-n", n, "set", "image", "deployment/chat", "engine=evil:1"],
    );
    kubectl(
        cp,
        &["-n", n, "scale", "deployment/chat-canary", "--replicas=3"],
    );
    kubectl(
        cp,
        &[
            "-n",
            n,
            "patch",
            "hpa",
            "scaled",
            "--type=merge",
            "-p",
            r#"{"spec":{"maxReplicas":9}}"#,
        ],
    );
    kubectl(
        cp,
        &[
            "-n",
            n,
            "patch",
            "httproute",
            "chat",
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/spec/rules/0/backendRefs/0/weight","value":50}]"#,
        ],
    );
    kubectl(
        cp,
        &[
            "-n",
            n,
            "patch",
            "service",
            "chat",
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/spec/ports/0/port","value":8080}]"#,
        ],
    );
    let deleted: Service = get(&client, n, "chat-canary")
        .await
        .expect("canary Service");
    kubectl(
        cp,
        &["-n", n, "delete", "service", "chat-canary", "--wait=true"],
    );
    // Every change took.
    let chat: Deployment = get(&client, n, "chat").await.expect("chat");
    assert_eq!(image(&chat).as_deref(), Some("evil:1"));
    assert!(as_made(&client, n).await.is_none());

    let third = support::short_lease_reconciler(&kubeconfig, "drift-third");
    wait_leader(&client, "drift-third").await;
    eventually(
        "every child put back within 60 s of the leader starting",
        Duration::from_secs(60),
        || as_made(&client, n),
    )
    .await;
    let recreated: Service = get(&client, n, "chat-canary").await.expect("recreated");
    assert_ne!(recreated.uid(), deleted.uid());
    third.stop();
}
