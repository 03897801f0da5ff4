//! End-to-end: `kubectl infergate why NAME`, run through kubectl's plugin
//! mechanism against services the real kube-scheduler and kwok make
//! unready (as `tests/suite/e2e_scheduling.rs` does): one no Node can hold, one
//! whose engine keeps crashing. The human output is compared with its
//! recorded expectation (`tests/fixtures/plugin/why-*.txt`), the JSON
//! output parsed, and the exit status checked (0 ready, 1 not, 2 no such
//! service).

use crate::support;
use std::process::Output;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::OnceCell;

use crate::support::plugin::assert_recorded;
use crate::support::scheduler::{
    RUN_WAIT, Scheduling, accelerator_class, container_not_ready, crash_loop, gpu_node, kwok_node,
    scheduling, write_pod_status,
};
use crate::support::{ControlPlane, control_plane, eventually};
use infergate::api::AcceleratorClass;
use infergate::api::v1beta1::InferenceService;

/// The L4 pool's accelerator label value.
const L4: &str = "nvidia-l4";

/// The control plane, a client, the scheduler and kwok, and the name of
/// the L4 class: it claims 2 GPUs per node while its one Node offers 1, so
/// a 2-GPU replica is admitted and fits nowhere.
type Env = (&'static ControlPlane, Client, &'static Scheduling, String);

static CLASS: OnceCell<String> = OnceCell::const_new();

async fn setup() -> Env {
    support::init_tracing();
    let cp = control_plane().await;
    let client = cp.client().await;
    let sched = scheduling(cp).await;
    let class = CLASS
        .get_or_init(|| async {
            let run = std::process::id();
            sched
                .create_node(
                    &client,
                    kwok_node(&format!("why-cpu-{run}"), &[], vec![], &[]),
                )
                .await;
            sched
                .create_node(&client, gpu_node(&format!("why-l4-{run}"), L4, "1"))
                .await;
            cp.install_crds().await;
            let name = format!("l4-{run}");
            Api::<AcceleratorClass>::all(client.clone())
                .create(&PostParams::default(), &accelerator_class(&name, L4, 2))
                .await
                .unwrap_or_else(|e| panic!("creating AcceleratorClass {name}: {e}"));
            name
        })
        .await
        .clone();
    cp.shared_reconciler().await;
    (cp, client, sched, class)
}

/// Create the InferenceService `name` in `ns` with `spec` (model and engine added).
async fn create_service(client: &Client, ns: &str, name: &str, mut spec: serde_json::Value) {
    spec["model"] = json!({"ref": "llama3-70b"});
    spec["engine"] = json!({"image": "registry.example.com/vllm:0.9"});
    support::create_service_json(client, ns, name, spec).await;
}

/// Wait until the service's Ready condition has `reason`.
async fn ready_reason(client: &Client, sched: &Scheduling, ns: &str, name: &str, reason: &str) {
    eventually(
        &format!("service {ns}/{name} Ready with reason {reason}"),
        RUN_WAIT,
        async || {
            sched.ensure_running();
            let svc = support::get::<InferenceService>(client, ns, name)
                .await
                .ok_or("not found")?;
            match support::condition(&svc, "Ready") {
                Some(c) if c.reason == reason => Ok(()),
                other => Err(format!("Ready {other:?}; {}", sched.logs(5))),
            }
        },
    )
    .await;
}

/// `why NAME -n NS ARGS`: the exit code and standard output.
fn why(cp: &ControlPlane, ns: &str, name: &str, args: &[&str]) -> (Option<i32>, String) {
    let mut all = vec!["why", name, "-n", ns];
    all.extend_from_slice(args);
    let Output {
        status,
        stdout,
        stderr,
    } = cp.kubectl_infergate(&all);
    let out = String::from_utf8_lossy(&stdout).into_owned();
    eprintln!(
        "kubectl infergate {}: {status}\n{out}{}",
        all.join(" "),
        String::from_utf8_lossy(&stderr)
    );
    (status.code(), out)
}

/// The JSON findings of `why -o json`.
fn why_json(cp: &ControlPlane, ns: &str, name: &str) -> serde_json::Value {
    let (code, out) = why(cp, ns, name, &["-o", "json"]);
    assert_eq!(code, Some(1), "not ready: exit 1\n{out}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("why -o json: {e}\n{out}"))
}

/// A tensor-parallel service on the L4 class: no Node can take its pod;
/// `why` quotes the scheduler and names the class.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn why_an_unschedulable_service_quotes_the_scheduler() {
    let (cp, client, sched, class) = setup().await;
    let ns = cp.fresh_namespace("why-sched").await;
    create_service(
        &client,
        &ns,
        "chat",
        json!({"accelerator": {"class": class}, "parallelism": {"tensor": 2}}),
    )
    .await;
    ready_reason(&client, sched, &ns, "chat", "Unschedulable").await;

    let (code, text) = why(cp, &ns, "chat", &[]);
    assert_eq!(code, Some(1), "not ready: exit 1");
    assert!(
        text.contains("The scheduler says: \"0/") && text.contains("Insufficient nvidia.com/gpu"),
        "{text}"
    );
    assert_recorded(
        "why-unschedulable",
        &text,
        &[(ns.as_str(), "NAMESPACE"), (class.as_str(), "CLASS")],
    );

    let v = why_json(cp, &ns, "chat");
    assert_eq!(v["ready"], false, "{v}");
    assert_eq!(v["namespace"], ns.as_str());
    let top = &v["findings"][0];
    assert_eq!(top["reason"], "Unschedulable", "{v}");
    assert_eq!(top["severity"], "blocking");
    assert_eq!(top["track"], "primary");
    assert_eq!(
        top["next"],
        format!("kubectl get acceleratorclass {class} -o yaml").as_str()
    );
}

/// A service that ran, then whose engine keeps exiting (the container
/// status a kubelet writes, on the pod kwok runs): `why` gives the last
/// exit code and the command for the previous run's logs. Before that,
/// ready, `why` says so and exits 0; on a service that does not exist it
/// exits 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn why_a_crash_looping_service_gives_the_exit_code() {
    let (cp, client, sched, _) = setup().await;
    let ns = cp.fresh_namespace("why-crash").await;
    create_service(&client, &ns, "chat", json!({"resources": {"cpu": "1"}})).await;
    ready_reason(&client, sched, &ns, "chat", "Available").await;

    let (code, text) = why(cp, &ns, "chat", &[]);
    assert_eq!(code, Some(0), "ready: exit 0\n{text}");
    assert_eq!(
        text,
        format!("InferenceService {ns}/chat is ready: 1/1 primary replicas ready.\n")
    );
    let (code, _) = why(cp, &ns, "absent", &[]);
    assert_eq!(code, Some(2), "no such service: exit 2");

    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pods = api
        .list(&ListParams::default().labels("infergate.dev/service=chat"))
        .await
        .expect("listing pods")
        .items;
    let (waiting, last) = crash_loop();
    let status = container_not_ready("registry.example.com/vllm:0.9", waiting, last);
    write_pod_status(&client, &ns, &pods[0].name_any(), status).await;
    ready_reason(&client, sched, &ns, "chat", "CrashLooping").await;

    let (code, text) = why(cp, &ns, "chat", &[]);
    assert_eq!(code, Some(1), "not ready: exit 1");
    assert!(text.contains("it last exited with code 137"), "{text}");
    assert_recorded("why-crash-looping", &text, &[(ns.as_str(), "NAMESPACE")]);

    let v = why_json(cp, &ns, "chat");
    let top = &v["findings"][0];
    assert_eq!(top["reason"], "CrashLooping", "{v}");
    assert_eq!(
        top["next"],
        format!("kubectl logs -l infergate.dev/service=chat,infergate.dev/track=primary --previous -n {ns}")
            .as_str()
    );
}
