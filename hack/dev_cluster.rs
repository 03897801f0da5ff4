//! `make dev`: the main job on one machine.
//!
//! Starts a local control plane (etcd, kube-apiserver, kube-controller-manager
//! on loopback), installs infergate's CRDs and the published Gateway API,
//! Prometheus Operator and KubeRay CRDs, runs the KubeRay operator and
//! `infergate serve` (webhooks and reconciler) with certificates from
//! `infergate certs`, registers the webhooks by URL, applies the example
//! policies and one service of each backend (the RayService's graph from a
//! local HTTPS server), and shows a denied spec, a defaulted one with its
//! provenance, and the children the reconciler made. GPU node pools are
//! kwok Nodes under the real kube-scheduler: the example AcceleratorClasses,
//! a tensor-parallel service scheduled onto its pool, a model larger than a
//! node running as LeaderWorkerSet groups of two nodes each (the real
//! LeaderWorkerSet controller), and one that no Node can hold, with the
//! scheduler's reason in its status. It stays up until Ctrl-C, then tears
//! everything down.
//!
//! Built as a cargo example so it shares the end-to-end tests' harness.

#[path = "../tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

const NAMESPACE: &str = "team-a";

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn say(text: &str) {
    eprintln!("\n\x1b[1m==> {text}\x1b[0m");
}

fn show(out: &std::process::Output) {
    eprint!("{}", String::from_utf8_lossy(&out.stdout));
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
}

/// The `infergate` binary next to this example (`make dev` builds both).
fn infergate_binary() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|dir| dir.join("infergate"))
        .ok_or("cannot locate the target directory")?;
    if bin.exists() {
        Ok(bin)
    } else {
        Err(format!(
            "{} is missing: run `make dev` (it builds the binary first)",
            bin.display()
        ))
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    support::install_crypto_provider();
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The namespace of the RayService example: no `tier` label, so the
/// platform policy (whose graph hosts are `graphs.example.com`) does not
/// apply, and its own policy allows the local graph server.
const RAY_NAMESPACE: &str = "ml-dev";

/// Node pools as a cloud has them: kwok Nodes (a CPU pool, an H100 pool of
/// one 8-GPU Node, a second H100 pool of four for replicas that span nodes,
/// and an L4 pool, the GPU pools tainted and labelled like GKE's) under the
/// real kube-scheduler, the example AcceleratorClasses, the example service
/// scheduled onto the H100 pool, the two-node example filling the second
/// pool with two groups, and one that no Node can hold, with the
/// scheduler's reason in its status; then the example ModelProfiles, a 70B
/// service fitted to the H100 class (a dry run) and one denied.
async fn gpu_pools(cp: &support::ControlPlane) -> Result<(), String> {
    use support::scheduler::kwok_node;
    say(
        "node pools: kube-scheduler and kwok Nodes (a CPU pool; two H100 pools and an L4 pool, all tainted)",
    );
    let sched = support::scheduler::scheduling(cp).await;
    let client = cp.client().await;
    let taint = || k8s_openapi::api::core::v1::Taint {
        key: "nvidia.com/gpu".into(),
        value: Some("present".into()),
        effect: "NoSchedule".into(),
        ..Default::default()
    };
    sched
        .create_node(
            &client,
            kwok_node(
                "gke-cpu-pool-0",
                &[("cloud.google.com/gke-nodepool", "cpu-pool")],
                vec![],
                &[],
            ),
        )
        .await;
    sched
        .create_node(
            &client,
            kwok_node(
                "gke-h100-serving-0",
                &[
                    ("cloud.google.com/gke-accelerator", "nvidia-h100-80gb"),
                    ("cloud.google.com/gke-nodepool", "h100-serving"),
                    ("topology.kubernetes.io/zone", "us-central1-a"),
                ],
                vec![taint()],
                &[("nvidia.com/gpu", "8")],
            ),
        )
        .await;
    // The pool of examples/good/multi-node.yaml: a replica is two of these.
    for i in 0..MULTI_NODE_POOL {
        sched
            .create_node(
                &client,
                kwok_node(
                    &format!("gke-h100-multi-node-{i}"),
                    &[
                        ("cloud.google.com/gke-accelerator", "nvidia-h100-80gb"),
                        ("cloud.google.com/gke-nodepool", "h100-multi-node"),
                        ("topology.kubernetes.io/zone", "us-central1-a"),
                    ],
                    vec![taint()],
                    &[("nvidia.com/gpu", "8")],
                ),
            )
            .await;
    }
    sched
        .create_node(
            &client,
            kwok_node(
                "gke-l4-pool-0",
                &[
                    ("cloud.google.com/gke-accelerator", "nvidia-l4"),
                    ("cloud.google.com/gke-nodepool", "l4-pool"),
                    ("topology.kubernetes.io/zone", "us-central1-b"),
                ],
                vec![taint()],
                &[("nvidia.com/gpu", "1")],
            ),
        )
        .await;
    show(&cp.kubectl(&["get", "nodes", "-L", "cloud.google.com/gke-accelerator"]));
    let classes = repo("examples/good/accelerator-classes.yaml");
    eprintln!("$ kubectl apply -f {}", classes.display());
    show(&cp.kubectl(&["apply", "-f", &classes.to_string_lossy()]));
    // What the example service refers to: its PriorityClass and Secrets.
    show(&cp.kubectl_stdin(
        &["apply", "-f", "-"],
        &format!(
            "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {{name: inference-high}}\nvalue: 100000\n---\napiVersion: v1\nkind: Secret\nmetadata: {{name: hf-token, namespace: {NAMESPACE}}}\nstringData: {{token: not-a-real-token}}\n---\napiVersion: v1\nkind: Secret\nmetadata: {{name: registry-creds, namespace: {NAMESPACE}}}\ntype: kubernetes.io/dockerconfigjson\nstringData: {{.dockerconfigjson: '{{\"auths\":{{}}}}'}}\n"
        ),
    ));
    tokio::time::sleep(Duration::from_secs(2)).await;

    say("a tensor-parallel service on the H100 class: scheduled onto the H100 pool");
    let example = repo("examples/good/gpu-node-pool.yaml");
    eprintln!("$ kubectl apply -f {}", example.display());
    show(&cp.kubectl(&["apply", "-f", &example.to_string_lossy()]));
    let ready = wait_ready_reason(cp, "chat-27b", &["Available"], READY_WAIT).await;
    eprintln!("chat-27b: Ready {ready}");

    multi_node(cp).await;

    say("one that no Node can hold: 8 GPUs per replica where 4 are left");
    let big = format!(
        "apiVersion: infergate.dev/v1beta1\nkind: InferenceService\nmetadata: {{name: chat-405b, namespace: {NAMESPACE}}}\nspec:\n  model: {{ref: meta-llama/llama-3.1-405b-instruct-fp8}}\n  engine: {{image: registry.example.com/vllm:0.9}}\n  accelerator: {{class: h100-80gb}}\n  parallelism: {{tensor: 8}}\n"
    );
    show(&cp.kubectl_stdin(&["apply", "-f", "-"], &big));
    let ready = wait_ready_reason(cp, "chat-405b", &["Unschedulable"], READY_WAIT).await;
    eprintln!(
        "$ kubectl get infsvc chat-405b -n {NAMESPACE} -o jsonpath='{{.status.conditions[?(@.type==\"Ready\")]}}'"
    );
    eprintln!("{ready}");

    say(
        "capacity: with the example ModelProfiles, a 70B model without a tensor size is fitted to the H100 class",
    );
    let profiles = repo("examples/good/model-profiles.yaml");
    eprintln!("$ kubectl apply -f {}", profiles.display());
    show(&cp.kubectl(&["apply", "-f", &profiles.to_string_lossy()]));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let fitted = repo("examples/good/fitted-70b.yaml");
    let jsonpath = "-o=jsonpath={.spec.parallelism}{\"\\n\"}{.metadata.annotations.infergate\\.dev/defaulted-from}{\"\\n\"}";
    eprintln!(
        "$ kubectl apply --dry-run=server -f {} '{jsonpath}'",
        fitted.display()
    );
    show(&cp.kubectl(&[
        "apply",
        "--dry-run=server",
        "-f",
        &fitted.to_string_lossy(),
        jsonpath,
    ]));
    say("and the same model on two GPUs with its full context is denied with the numbers");
    let misfit = repo("examples/bad/model-context-does-not-fit.yaml");
    eprintln!("$ kubectl apply -f {}", misfit.display());
    show(&cp.kubectl(&["apply", "-f", &misfit.to_string_lossy()]));
    Ok(())
}

/// Nodes of the H100 pool for replicas that span nodes: two groups of two.
const MULTI_NODE_POOL: usize = 4;

/// How long a service may take to reach the Ready reason shown.
const READY_WAIT: Duration = Duration::from_secs(60);

/// A model larger than a node: `examples/good/multi-node.yaml` (tensor 8 x
/// pipeline 2 on 8-GPU nodes, 2 replicas) under the example platform
/// policy's `maxNodesPerReplica: 2` runs as LeaderWorkerSet `llama-405b-lws`
/// of two groups of two pods, on the four Nodes of pool `h100-multi-node`:
/// the LeaderWorkerSet, its pods with their nodes and flags, and the
/// service's Ready condition.
async fn multi_node(cp: &support::ControlPlane) {
    say(
        "a model larger than a node: tensor 8 x pipeline 2 on 8-GPU nodes, each replica a LeaderWorkerSet group of 2 pods",
    );
    let example = repo("examples/good/multi-node.yaml");
    eprintln!("$ kubectl apply -f {}", example.display());
    show(&cp.kubectl(&["apply", "-f", &example.to_string_lossy()]));
    // Four pods to schedule, start and report through LWS's StatefulSets.
    let ready = wait_ready_reason(cp, "llama-405b", &["Available"], Duration::from_secs(180)).await;
    let selector = "infergate.dev/service=llama-405b";
    for args in [
        vec!["get", "leaderworkersets", "-n", NAMESPACE, "-o", "wide"],
        vec![
            "get",
            "pods",
            "-n",
            NAMESPACE,
            "-l",
            selector,
            "-L",
            "leaderworkerset.sigs.k8s.io/group-index,leaderworkerset.sigs.k8s.io/worker-index",
            "-o",
            "wide",
        ],
        vec![
            "get",
            "pods",
            "-n",
            NAMESPACE,
            "-l",
            selector,
            "-o",
            // What LWS's pod webhook injected, and the flags built from it.
            "jsonpath={range .items[*]}{.metadata.name}:{range .spec.containers[0].env[?(@.value)]} {.name}={.value}{end}{\"\\n\"}  {.spec.containers[0].args}{\"\\n\"}{end}",
        ],
        // infergate's Service selects the leaders; LWS's headless one
        // gives each leader the name LWS_LEADER_ADDRESS holds.
        vec![
            "get",
            "services",
            "llama-405b",
            "llama-405b-lws",
            "-n",
            NAMESPACE,
            "-o",
            "wide",
        ],
    ] {
        eprintln!("$ kubectl {}", shell_words(&args));
        show(&cp.kubectl(&args));
    }
    eprintln!(
        "$ kubectl get infsvc llama-405b -n {NAMESPACE} -o jsonpath='{{.status.conditions[?(@.type==\"Ready\")]}}'"
    );
    eprintln!("{ready}");
}

/// `args` as a shell would take them: a word with a character the shell
/// reads (a jsonpath's braces, quotes or spaces) in single quotes.
fn shell_words(args: &[&str]) -> String {
    args.iter()
        .map(|a| {
            if a.chars().any(|c| " {}[]()?*\"'$".contains(c)) {
                format!("'{}'", a.replace('\'', "'\\''"))
            } else {
                (*a).to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The Ready condition of `name` once its reason is one of `reasons` (or
/// whatever it is after `wait`), as JSON.
async fn wait_ready_reason(
    cp: &support::ControlPlane,
    name: &str,
    reasons: &[&str],
    wait: Duration,
) -> String {
    let deadline = std::time::Instant::now() + wait;
    loop {
        let out = cp.kubectl(&[
            "get",
            "infsvc",
            name,
            "-n",
            NAMESPACE,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")]}",
        ]);
        let ready = String::from_utf8_lossy(&out.stdout).into_owned();
        let reason = serde_json::from_str::<serde_json::Value>(&ready)
            .ok()
            .and_then(|v| v["reason"].as_str().map(str::to_owned))
            .unwrap_or_default();
        if reasons.contains(&reason.as_str()) || std::time::Instant::now() > deadline {
            return ready;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn run() -> Result<(), String> {
    let infergate = infergate_binary()?;

    say("starting etcd, kube-apiserver and kube-controller-manager on 127.0.0.1");
    let cp = support::control_plane().await;
    cp.install_crds().await;
    eprintln!("control plane ready at {}", cp.apiserver_url());
    say("installing the published Gateway API, Prometheus Operator and KubeRay CRDs");
    cp.apply_crds(&support::gateway_api_dir().display().to_string(), true);
    cp.apply_crds(support::podmonitor_crd(), true);
    for args in [
        vec!["create", "namespace", NAMESPACE],
        vec!["label", "namespace", NAMESPACE, "tier=prod"],
        vec!["create", "namespace", RAY_NAMESPACE],
    ] {
        show(&cp.kubectl(&args));
    }
    say(&format!(
        "starting the KubeRay operator (built from its Go module), watching {RAY_NAMESPACE}"
    ));
    let _kuberay = cp.start_kuberay(RAY_NAMESPACE);
    say(
        "starting the LeaderWorkerSet controller (built from its Go module): replicas that span nodes run as its groups",
    );
    let lws = cp.start_lws().await;
    eprintln!(
        "its webhooks on https://127.0.0.1:{}, its log in {}",
        lws.port,
        lws.log.display()
    );

    // A local HTTPS server for the RayService example's serving graph.
    let graphs = support::GraphServer::start();
    graphs.set_graph(support::read_fixture("graph/rag.pb"), "\"v1\"");
    let graph_ca = cp.dir().join("graph-ca.crt");
    std::fs::write(&graph_ca, &graphs.ca_pem).map_err(|e| e.to_string())?;

    say("starting `infergate serve` (webhooks and reconciler) and registering its webhooks");
    let ca_arg = format!("--graph-ca-file={}", graph_ca.display());
    let mut server = support::start_infergate(cp, &infergate, &[&ca_arg], support::Hooks::All)
        .await
        .map_err(|e| format!("{e:#}"))?;
    let (port, probe, log) = (server.port, server.probe_port, server.log.clone());
    eprintln!(
        "serving webhooks on https://127.0.0.1:{port}, probes and metrics on http://127.0.0.1:{probe}"
    );

    say(&format!(
        "namespace {NAMESPACE} (tier=prod) with the example policies"
    ));
    for policy in [
        "examples/good/cluster-policy.yaml",
        "examples/good/namespace-policy.yaml",
    ] {
        show(&cp.kubectl(&["apply", "-f", &repo(policy).to_string_lossy()]));
    }
    // The policy cache is a watch: give it a moment to see the new policies.
    tokio::time::sleep(Duration::from_secs(2)).await;

    say("a spec that breaks the namespace policy is denied (422 Invalid, every field named)");
    let bad = repo("examples/bad/replicas-over-policy-limit.yaml");
    eprintln!("$ kubectl apply -f {}", bad.display());
    show(&cp.kubectl(&["apply", "-f", &bad.to_string_lossy()]));

    say("backend Deployment: a minimal spec is admitted with every default filled in");
    let good = repo("examples/good/minimal.yaml");
    eprintln!("$ kubectl apply -f {}", good.display());
    show(&cp.kubectl(&["apply", "-f", &good.to_string_lossy()]));
    eprintln!("$ kubectl get infsvc chat -n {NAMESPACE} -o yaml");
    show(&cp.kubectl(&["get", "infsvc", "chat", "-n", NAMESPACE, "-o", "yaml"]));

    gpu_pools(cp).await?;

    say(&format!(
        "backend RayService: examples/good/rayservice.yaml in {RAY_NAMESPACE}, its graph served locally"
    ));
    let example = std::fs::read_to_string(repo("examples/good/rayservice.yaml"))
        .map_err(|e| e.to_string())?
        .replace(
            "https://graphs.example.com/v1/graphs/rag",
            &graphs.url("/graph"),
        )
        .replace(
            &format!("namespace: {NAMESPACE}"),
            &format!("namespace: {RAY_NAMESPACE}"),
        );
    let policy = format!(
        "apiVersion: infergate.dev/v1beta1\nkind: InferencePolicy\nmetadata: {{name: dev, namespace: {RAY_NAMESPACE}}}\nspec:\n  defaults:\n    engine: {{image: registry.example.com/vllm:0.9}}\n  limits:\n    allowedGraphHosts: [\"127.0.0.1\"]\n"
    );
    show(&cp.kubectl_stdin(&["apply", "-f", "-"], &policy));
    show(&cp.kubectl(&[
        "create",
        "secret",
        "generic",
        "graph-token",
        "-n",
        RAY_NAMESPACE,
        &format!("--from-literal=token={}", support::GRAPH_TOKEN),
    ]));
    show(&cp.kubectl(&[
        "annotate",
        "secret",
        "graph-token",
        "-n",
        RAY_NAMESPACE,
        "infergate.dev/graph-token-hosts=127.0.0.1",
    ]));
    tokio::time::sleep(Duration::from_secs(2)).await;
    show(&cp.kubectl_stdin(&["apply", "-f", "-"], &example));

    say("what the reconciler made");
    tokio::time::sleep(Duration::from_secs(5)).await;
    for args in [
        vec!["get", "infergate", "-A"],
        vec![
            "get",
            "deployments,leaderworkersets,services,hpa,httproute,podmonitor",
            "-n",
            NAMESPACE,
            "-l",
            "app.kubernetes.io/managed-by=infergate",
        ],
        vec!["get", "rayservice,raycluster", "-n", RAY_NAMESPACE],
        vec!["get", "pods", "-n", NAMESPACE, "-o", "wide"],
    ] {
        eprintln!("$ kubectl {}", args.join(" "));
        show(&cp.kubectl(&args));
    }

    say("infergate is running; point kubectl at it and look around");
    eprintln!("  export KUBECONFIG={}", cp.kubeconfig().display());
    eprintln!("  export PATH={}:$PATH", cp.bin_dir().display());
    eprintln!(
        "  kubectl get infergate -A                   # services and policies, with Ready and the routed path"
    );
    eprintln!(
        "  kubectl apply -f examples/bad/canary-weight-over-limit.yaml   # denied: (Invalid), each field named"
    );
    eprintln!(
        "  kubectl get httproute,podmonitor -n {NAMESPACE} -o yaml     # the route and the scrape config"
    );
    eprintln!(
        "  kubectl get rayservice,raycluster -n {RAY_NAMESPACE}          # the graph, built into a Ray cluster"
    );
    eprintln!(
        "  kubectl describe infsvc rag-pipeline -n {RAY_NAMESPACE}       # GraphReady and the events"
    );
    eprintln!(
        "  kubectl get accel,nodes                                    # the GPU pools and their classes"
    );
    eprintln!(
        "  kubectl get infsvc chat-405b -n {NAMESPACE} -o yaml          # Ready=False, Unschedulable, the scheduler's words"
    );
    eprintln!(
        "  kubectl get lws,pods -n {NAMESPACE} -l infergate.dev/service=llama-405b -o wide   # two groups of two nodes"
    );
    eprintln!(
        "  kubectl get modelprofiles; kubectl get infsvc -A            # the profiles; each service's GPUs"
    );
    eprintln!("  kubectl apply -f examples/good/canary.yaml");
    eprintln!("  curl -s http://127.0.0.1:{probe}/metrics | grep infergate_");
    eprintln!("infergate's log: {}", log.display());
    eprintln!("\nCtrl-C stops everything.");
    tokio::signal::ctrl_c()
        .await
        .map_err(|e| format!("waiting for Ctrl-C: {e}"))?;
    eprintln!("stopping infergate, KubeRay, LeaderWorkerSet and the control plane");
    // The processes die with this one (PR_SET_PDEATHSIG).
    let _ = server.child.kill();
    drop(graphs);
    Ok(())
}
