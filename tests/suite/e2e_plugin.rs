//! End-to-end: the kubectl plugin (`kubectl infergate`, found by kubectl's
//! own plugin mechanism) against a real kube-apiserver with the reconciler
//! running as deploy/'s ServiceAccount:
//!
//! - `status` prints one screen (compared with a recorded expectation), the
//!   same facts as JSON, follows `--context` and its namespace, and with
//!   `-w` redraws on every watch event, not on a timer;
//! - `budget` prints the namespace's budget and each service's charge;
//! - `fit` reads the cluster's ModelProfile and AcceleratorClass and gives
//!   the numbers the reconciler writes into `status.capacity`.

use crate::support;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::support::{Reconciler, WAIT, assert_recorded, condition, text, wait_for};
use infergate::api::GatewayRef;
use infergate::api::v1beta1::{AcceleratorSpec, InferenceService, ParallelismSpec, RoutingSpec};

const MODEL: &str = "meta-llama/Llama-3.1-70B-Instruct";

/// The tests share one reconciler and one namespace setup at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A namespace with a 16-GPU budget and service `chat` (Llama 3.1 70B on
/// H100s, tensor 4, one replica, routed through gateway `infra/public`),
/// reconciled; the reconciler keeps running while the guard lives.
async fn setup(
    prefix: &str,
) -> (
    &'static support::ControlPlane,
    kube::Client,
    String,
    Reconciler,
) {
    let (cp, client, sa_kubeconfig) = support::reconciler_setup(&[support::httproute_crd()]).await;
    let ns = cp.fresh_namespace(prefix).await;
    for file in [
        "examples/good/accelerator-classes.yaml",
        "examples/good/model-profiles.yaml",
    ] {
        let path = format!("{}/{file}", env!("CARGO_MANIFEST_DIR"));
        let out = cp.kubectl(&["apply", "--server-side", "-f", &path]);
        assert!(out.status.success(), "{}", text(&out));
    }
    let policy = format!(
        "apiVersion: infergate.dev/v1beta1
kind: InferencePolicy
metadata: {{name: budget, namespace: {ns}}}
spec:
  limits: {{maxGPUsPerNamespace: 16}}
"
    );
    let out = cp.kubectl_stdin(&["apply", "-f", "-"], &policy);
    assert!(out.status.success(), "{}", text(&out));
    let reconciler = Reconciler::start(
        sa_kubeconfig,
        support::reconcile_config(&format!("{prefix}-e2e")),
    );
    let mut svc = support::llama_service("chat", "registry.example.com/vllm:0.9", None);
    svc.spec.model.r#ref = MODEL.into();
    svc.spec.accelerator = Some(AcceleratorSpec {
        r#type: None,
        class: Some("h100-80gb".into()),
    });
    svc.spec.parallelism = Some(ParallelismSpec {
        tensor: Some(4),
        pipeline: Some(1),
    });
    svc.spec.replicas = Some(1);
    svc.spec.routing = Some(RoutingSpec {
        gateway: Some(GatewayRef {
            name: "public".into(),
            namespace: Some("infra".into()),
        }),
        ..RoutingSpec::default()
    });
    Api::<InferenceService>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &svc)
        .await
        .expect("create service");
    wait_for::<InferenceService>(
        &client,
        &ns,
        "chat",
        "reconciled with capacity",
        WAIT,
        |s| {
            condition(s, "Reconciled").is_some_and(|c| c.status == "True")
                && condition(s, "RoutingReady").is_some_and(|c| c.status == "True")
                && s.status
                    .as_ref()
                    .and_then(|st| st.capacity.as_ref())
                    .is_some_and(|c| c.kv_cache_tokens.is_some())
        },
    )
    .await;
    (cp, client, ns, reconciler)
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_prints_one_screen_json_for_scripts_and_follows_the_context() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let (cp, client, ns, _reconciler) = setup("plugin-status").await;

    let out = cp.kubectl_infergate(&["status", "chat", "-n", &ns]);
    assert!(out.status.success(), "{}", text(&out));
    assert_recorded("status-chat", &stdout(&out), &[(ns.as_str(), "NS")]);

    // The same facts for scripts.
    let out = cp.kubectl_infergate(&["status", "chat", "-n", &ns, "-o", "json"]);
    assert!(out.status.success(), "{}", text(&out));
    let facts: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let svc: InferenceService = Api::namespaced(client.clone(), &ns)
        .get("chat")
        .await
        .expect("get");
    let cap = svc.status.and_then(|s| s.capacity).expect("capacity");
    assert_eq!(facts["tracks"][0]["track"], "primary");
    assert_eq!(facts["tracks"][0]["desired"], 1);
    assert_eq!(facts["tracks"][0]["model"], MODEL);
    assert_eq!(facts["route"]["path"], format!("/{ns}/chat"));
    assert_eq!(
        facts["route"]["backends"],
        json!([{"name": "chat", "weight": 100}])
    );
    assert_eq!(facts["capacity"]["maxGPUs"], 4);
    assert_eq!(
        facts["capacity"]["kvCacheTokens"],
        cap.kv_cache_tokens.expect("kv tokens")
    );
    assert_eq!(facts["budget"]["maxGpus"], 16);
    assert_eq!(facts["budget"]["usedGpus"], 4);
    let ready = facts["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .expect("Ready");
    assert_eq!(ready["status"], "False", "no kubelet runs the pods here");
    let yaml = cp.kubectl_infergate(&["status", "chat", "-n", &ns, "-o", "yaml"]);
    assert!(yaml.status.success(), "{}", text(&yaml));
    let from_yaml: Value = serde_saphyr::from_slice(&yaml.stdout).expect("YAML");
    assert_eq!(from_yaml, facts, "YAML and JSON carry the same facts");

    // --context picks a context, and its namespace, as kubectl does.
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::copy(cp.kubeconfig(), &kubeconfig).expect("copy kubeconfig");
    let kc = kubeconfig.to_string_lossy().into_owned();
    let view = |path: &str| {
        let out = cp.kubectl(&[
            "--kubeconfig",
            &kc,
            "config",
            "view",
            "--minify",
            "-o",
            &format!("jsonpath={path}"),
        ]);
        stdout(&out)
    };
    let (cluster, user) = (
        view("{.contexts[0].context.cluster}"),
        view("{.contexts[0].context.user}"),
    );
    let out = cp.kubectl(&[
        "--kubeconfig",
        &kc,
        "config",
        "set-context",
        "team",
        "--cluster",
        &cluster,
        "--user",
        &user,
        "--namespace",
        &ns,
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let out = cp.kubectl_infergate(&[
        "status",
        "chat",
        "--kubeconfig",
        &kc,
        "--context",
        "team",
        "-o",
        "json",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let via_context: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(via_context["namespace"], ns.as_str());
    // A service that does not exist: a clear error, exit 1.
    let out = cp.kubectl_infergate(&["status", "nope", "-n", &ns]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains(&format!("InferenceService {ns}/nope not found")),
        "{}",
        text(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_w_redraws_on_watch_events_only() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let (cp, client, ns, _reconciler) = setup("plugin-watch").await;

    // `kubectl infergate status -w` piped: each frame whole, no control codes.
    let mut child = Command::new(cp.bin_dir().join("kubectl"))
        .args(["infergate", "status", "chat", "-w", "-n", &ns])
        .env("KUBECONFIG", cp.kubeconfig())
        .env("PATH", support::plugin_path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start kubectl infergate status -w");
    let lines = BufReader::new(child.stdout.take().expect("stdout"));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in lines.lines().map_while(Result::ok) {
            if tx.send((Instant::now(), line)).is_err() {
                return;
            }
        }
    });
    let frames_after = |rx: &mpsc::Receiver<(Instant, String)>, wait: Duration| {
        let mut frames = Vec::new();
        let deadline = Instant::now() + wait;
        while let Ok((at, line)) =
            rx.recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            assert!(!line.contains('\x1b'), "a control code on a pipe: {line:?}");
            if line.starts_with("InferenceService ") {
                frames.push((at, Vec::new()));
            }
            if let Some((_, f)) = frames.last_mut() {
                f.push(line);
            }
        }
        frames
    };
    let first = frames_after(&rx, Duration::from_secs(15));
    assert!(!first.is_empty(), "no first frame");
    // Nothing changes: nothing is drawn (no timer).
    let idle = frames_after(&rx, Duration::from_secs(6));
    assert!(
        idle.is_empty(),
        "{} frames drawn with nothing changed",
        idle.len()
    );
    // A change is drawn at once.
    let changed_at = Instant::now();
    Api::<InferenceService>::namespaced(client.clone(), &ns)
        .patch(
            "chat",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .expect("scale");
    let later = frames_after(&rx, Duration::from_secs(20));
    let _ = child.kill();
    let _ = child.wait();
    let two = later
        .iter()
        .find(|(_, lines)| {
            lines
                .iter()
                .any(|l| l.starts_with("primary") && l.ends_with("0/2"))
        })
        .unwrap_or_else(|| panic!("no frame with 0/2 replicas: {later:#?}"));
    assert!(two.0.duration_since(changed_at) < Duration::from_secs(15));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budget_and_fit_read_the_cluster() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let (cp, client, ns, _reconciler) = setup("plugin-budget").await;

    let out = cp.kubectl_infergate(&["budget", "-n", &ns]);
    assert!(out.status.success(), "{}", text(&out));
    assert_recorded(
        "budget-one-namespace",
        &stdout(&out),
        &[(ns.as_str(), "NS")],
    );
    let out = cp.kubectl_infergate(&["budget", "-A", "-o", "json"]);
    assert!(out.status.success(), "{}", text(&out));
    let all: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let mine = all
        .as_array()
        .and_then(|a| a.iter().find(|b| b["namespace"] == ns.as_str()))
        .expect("the namespace in -A");
    assert_eq!(mine["usedGpus"], 4);
    assert_eq!(mine["maxGpus"], 16);
    assert_eq!(
        mine["services"],
        json!([{"name": "chat", "gpus": 4, "costPerHour": "16.40"}])
    );

    // fit from the cluster's objects agrees with what the reconciler wrote.
    let out = cp.kubectl_infergate(&["fit", MODEL, "--class", "h100-80gb", "-o", "json"]);
    assert!(out.status.success(), "{}", text(&out));
    let fit: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let svc: InferenceService = Api::namespaced(client.clone(), &ns)
        .get("chat")
        .await
        .expect("get");
    let cap = svc.status.and_then(|s| s.capacity).expect("capacity");
    let at4 = fit["rows"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["tensor"] == 4))
        .expect("tensor 4");
    assert_eq!(at4["kvTokens"], cap.kv_cache_tokens.expect("kv tokens"));
    assert_eq!(
        fit["rows"].as_array().map(Vec::len),
        Some(4),
        "1, 2, 4, 8 devices"
    );
    let out = cp.kubectl_infergate(&["fit", MODEL, "--class", "h100-80gb"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_recorded("fit-llama-70b-h100", &stdout(&out), &[]);
    // A model no profile lists: exit 2, said plainly.
    let out = cp.kubectl_infergate(&["fit", "no/such-model", "--class", "h100-80gb"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn krew_installs_the_plugin_and_kubectl_completes_it() {
    let cp = support::control_plane().await;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().expect("tempdir");
    let dist = dir.path().join("dist");
    let run = |cmd: &mut Command| {
        let out = cmd.output().expect("run");
        assert!(out.status.success(), "{cmd:?}: {}", text(&out));
        stdout(&out)
    };
    // The release archive and its krew manifest, as krew/ makes them.
    let archive = run(Command::new(root.join("krew/package.sh"))
        .arg(support::binary())
        .args(["v0.1.0", "linux", "amd64"])
        .arg(&dist));
    let archive = archive.trim();
    let manifest = run(Command::new(root.join("krew/manifest.sh")).args([
        "v0.1.0",
        "https://releases.example.com/v0.1.0",
        archive,
    ]));
    let manifest_path = dir.path().join("infergate.yaml");
    std::fs::write(&manifest_path, &manifest).expect("manifest");
    // krew itself installs it (checking the archive's sha256).
    let krew_root = dir.path().join("krew");
    run(Command::new(support::go_tool("krew"))
        .arg("install")
        .arg(format!("--manifest={}", manifest_path.display()))
        .arg(format!("--archive={archive}"))
        .env("KREW_ROOT", &krew_root));
    let bin = krew_root.join("bin");
    assert!(
        bin.join("kubectl-infergate").exists(),
        "krew linked the plugin"
    );
    let path = std::env::join_paths(std::iter::once(bin.clone()).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .expect("PATH");
    let kubectl = |args: &[&str]| {
        run(Command::new(cp.bin_dir().join("kubectl"))
            .args(args)
            .env("PATH", &path)
            .env("KUBECONFIG", cp.kubeconfig()))
    };
    let help = kubectl(&["infergate", "--help"]);
    for command in ["status", "rollout", "why", "fit", "budget", "completion"] {
        assert!(
            help.contains(&format!("  {command} "))
                && help.contains(&format!("kubectl infergate {command}")),
            "--help lists {command} with an example:\n{help}"
        );
    }
    // kubectl completes the plugin through kubectl_complete-infergate.
    std::os::unix::fs::symlink(
        bin.join("kubectl-infergate"),
        bin.join("kubectl_complete-infergate"),
    )
    .expect("link the completion");
    let completed = kubectl(&["__complete", "infergate", "st"]);
    assert!(completed.lines().any(|l| l == "status"), "{completed}");
    let completed = kubectl(&["__complete", "infergate", "rollout", "pro"]);
    assert!(completed.lines().any(|l| l == "promote"), "{completed}");
    // Shell completion scripts: bash parses its own; zsh and fish name every command.
    let bash = kubectl(&["infergate", "completion", "bash"]);
    let script = dir.path().join("completion.bash");
    std::fs::write(&script, &bash).expect("write");
    run(Command::new("bash").arg("-n").arg(&script));
    assert!(
        bash.contains("complete -F") && bash.contains("kubectl-infergate"),
        "{bash}"
    );
    for shell in ["zsh", "fish"] {
        let s = kubectl(&["infergate", "completion", shell]);
        for command in ["status", "rollout", "why", "fit", "budget"] {
            assert!(s.contains(command), "{shell} completion lacks {command}");
        }
    }
}

/// `status` lists the names a service routed by name serves: waiting while
/// no gateway has reported on its HTTPRoute, routed once the gateway has
/// accepted it (the test plays the gateway controller).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_the_served_names_and_whether_the_gateway_routes_them() {
    use infergate::api::common::AdapterSpec;
    use infergate::api::upstream::gateway_api::HTTPRoute;
    use infergate::api::v1beta1::RouteMatch;

    let _serial = ONE_AT_A_TIME.lock().await;
    let (cp, client, ns, _reconciler) = setup("plugin-names").await;
    let mut svc = support::llama_service("names", "registry.example.com/vllm:0.11.1", None);
    svc.spec.model.served_name = Some("llama-3-8b".into());
    svc.spec.model.adapters = vec![AdapterSpec {
        name: "sql-lora".into(),
        source: "org/sql-lora".into(),
    }];
    svc.spec.routing = Some(RoutingSpec {
        gateway: Some(GatewayRef {
            name: "public".into(),
            namespace: Some("infra".into()),
        }),
        r#match: Some(RouteMatch::ModelName),
        ..RoutingSpec::default()
    });
    Api::<InferenceService>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &svc)
        .await
        .expect("create service");
    wait_for::<InferenceService>(&client, &ns, "names", "routed", WAIT, |s| {
        condition(s, "RoutingReady").is_some_and(|c| c.status == "True")
    })
    .await;
    let facts = |cp: &support::ControlPlane| -> Value {
        let out = cp.kubectl_infergate(&["status", "names", "-n", &ns, "-o", "json"]);
        assert!(out.status.success(), "{}", text(&out));
        serde_json::from_slice(&out.stdout).expect("JSON")
    };
    let f = facts(cp);
    let names = &f["modelNames"];
    assert_eq!(names["match"], "ModelName", "{f}");
    assert_eq!(names["gateway"], "infra/public");
    assert_eq!(names["names"][0]["name"], "llama-3-8b");
    assert_eq!(names["names"][1]["name"], "sql-lora");
    assert_eq!(names["names"][1]["adapterSource"], "org/sql-lora");
    for n in names["names"].as_array().expect("names") {
        assert_eq!(
            n["route"], "Waiting",
            "no gateway controller runs here: {n}"
        );
        assert_eq!(n["routed"], false);
    }

    // The gateway accepts the route.
    let parent = json!({"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "public", "namespace": "infra"});
    let accepted = json!({"status": {"parents": [{
        "parentRef": parent,
        "controllerName": "example.com/gateway",
        "conditions": [{
            "type": "Accepted", "status": "True", "reason": "Accepted", "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1,
        }],
    }]}});
    Api::<HTTPRoute>::namespaced(client.clone(), &ns)
        .patch_status("names", &PatchParams::default(), &Patch::Merge(&accepted))
        .await
        .expect("the gateway's status");
    let f = facts(cp);
    for n in f["modelNames"]["names"].as_array().expect("names") {
        assert_eq!(n["route"], "Routed", "{n}");
        assert_eq!(n["routed"], true);
    }
    let out = cp.kubectl_infergate(&["status", "names", "-n", &ns]);
    let screen = stdout(&out);
    assert!(
        screen.contains(
            "Names       match ModelName, header X-Gateway-Model-Name, gateway infra/public"
        ),
        "{screen}"
    );
    assert!(
        screen.lines().any(|l| l.starts_with("sql-lora ")
            && l.contains("adapter org/sql-lora")
            && l.ends_with("yes")),
        "{screen}"
    );
}
