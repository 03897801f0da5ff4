//! `make dev`: a local control plane (etcd, kube-apiserver,
//! kube-controller-manager on loopback) with infergate's CRDs installed.
//! It stays up until Ctrl-C, then tears everything down.
//!
//! Built as a cargo example so it shares the end-to-end tests' harness.

#[path = "../tests/support/mod.rs"]
mod support;

#[tokio::main]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    eprintln!("starting etcd, kube-apiserver and kube-controller-manager on 127.0.0.1 ...");
    let cp = support::control_plane().await;
    cp.install_crds().await;
    eprintln!("control plane ready at {}", cp.apiserver_url());
    eprintln!("infergate CRDs installed");
    eprintln!();
    eprintln!("point kubectl at it:");
    eprintln!("  export KUBECONFIG={}", cp.kubeconfig().display());
    eprintln!("  export PATH={}:$PATH", cp.bin_dir().display());
    eprintln!("  kubectl get crds");
    eprintln!();
    eprintln!("Ctrl-C stops everything.");
    if let Err(e) = tokio::signal::ctrl_c().await {
        eprintln!("error waiting for Ctrl-C: {e}");
    }
    eprintln!("stopping the control plane");
}
