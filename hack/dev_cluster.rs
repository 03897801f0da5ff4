//! `make dev`: the main job on one machine.
//!
//! Starts a local control plane (etcd, kube-apiserver, kube-controller-manager
//! on loopback), installs infergate's CRDs, runs `infergate serve` (webhooks and
//! reconciler) with certificates from `infergate certs`, registers the webhooks
//! by URL, applies the example policies and services, and shows a rejected
//! spec, a defaulted one with its provenance, and the children the reconciler
//! made. It stays up until Ctrl-C, then tears everything down.
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

async fn run() -> Result<(), String> {
    let infergate = infergate_binary()?;

    say("starting etcd, kube-apiserver and kube-controller-manager on 127.0.0.1");
    let cp = support::control_plane().await;
    cp.install_crds().await;
    eprintln!("control plane ready at {}", cp.apiserver_url());

    say("starting `infergate serve` (webhooks and reconciler) and registering its webhooks");
    let mut server = support::start_infergate(cp, &infergate, &[], support::Hooks::All)
        .await
        .map_err(|e| format!("{e:#}"))?;
    let (port, probe, log) = (server.port, server.probe_port, server.log.clone());
    eprintln!(
        "serving webhooks on https://127.0.0.1:{port}, probes and metrics on http://127.0.0.1:{probe}"
    );

    say(&format!(
        "namespace {NAMESPACE} (tier=prod) with the example policies"
    ));
    for args in [
        vec!["create", "namespace", NAMESPACE],
        vec!["label", "namespace", NAMESPACE, "tier=prod"],
    ] {
        show(&cp.kubectl(&args));
    }
    for policy in [
        "examples/good/cluster-policy.yaml",
        "examples/good/namespace-policy.yaml",
    ] {
        show(&cp.kubectl(&["apply", "-f", &repo(policy).to_string_lossy()]));
    }
    // The policy cache is a watch: give it a moment to see the new policies.
    tokio::time::sleep(Duration::from_secs(2)).await;

    say("a spec that breaks the namespace policy is rejected");
    let bad = repo("examples/bad/replicas-over-policy-limit.yaml");
    eprintln!("$ kubectl apply -f {}", bad.display());
    show(&cp.kubectl(&["apply", "-f", &bad.to_string_lossy()]));

    say("a minimal spec is admitted with every default filled in");
    let good = repo("examples/good/minimal.yaml");
    eprintln!("$ kubectl apply -f {}", good.display());
    show(&cp.kubectl(&["apply", "-f", &good.to_string_lossy()]));
    eprintln!("$ kubectl get infsvc chat -n {NAMESPACE} -o yaml");
    show(&cp.kubectl(&["get", "infsvc", "chat", "-n", NAMESPACE, "-o", "yaml"]));

    say("the children the reconciler made");
    tokio::time::sleep(Duration::from_secs(3)).await;
    eprintln!(
        "$ kubectl get deployments,services,hpa -n {NAMESPACE} -l app.kubernetes.io/managed-by=infergate"
    );
    show(&cp.kubectl(&[
        "get",
        "deployments,services,hpa",
        "-n",
        NAMESPACE,
        "-l",
        "app.kubernetes.io/managed-by=infergate",
    ]));
    eprintln!("$ kubectl get infsvc -n {NAMESPACE}");
    show(&cp.kubectl(&["get", "infsvc", "-n", NAMESPACE]));

    say("infergate is running; point kubectl at it");
    eprintln!("  export KUBECONFIG={}", cp.kubeconfig().display());
    eprintln!("  export PATH={}:$PATH", cp.bin_dir().display());
    eprintln!("  kubectl get infergate -A");
    eprintln!("  kubectl apply -f examples/good/canary.yaml");
    eprintln!("  curl -s http://127.0.0.1:{probe}/metrics | grep infergate_");
    eprintln!("infergate's log: {}", log.display());
    eprintln!("\nCtrl-C stops everything.");
    tokio::signal::ctrl_c()
        .await
        .map_err(|e| format!("waiting for Ctrl-C: {e}"))?;
    eprintln!("stopping infergate and the control plane");
    // The processes die with this one (PR_SET_PDEATHSIG).
    let _ = server.child.kill();
    Ok(())
}
