//! End-to-end: the webhook server against a real kube-apiserver and etcd.
//!
//! The server runs in this process (its own thread and runtime) on
//! 127.0.0.1 with a certificate carrying the IP SAN 127.0.0.1; the webhook
//! configurations from `webhooks/` are registered with
//! `url: https://127.0.0.1:PORT/...` and `caBundle`, and the CRD's
//! conversion webhook is pointed at `/convert`. Assertions are made the way
//! a user sees them: through kubectl.
//!
//! The shared server and the kubectl helpers are here; the tests, a module
//! per concern:
//!
//! - [`access`]: no privilege through infergate: impersonated users who may
//!   not read what a service references are denied, naming the field, the
//!   object and the verb.
//! - [`admission`]: the hooks as kubectl shows them: every bad example
//!   rejected with its field's message, a minimal service stored with every
//!   default and its provenance, updates that leave spec, labels and
//!   annotations alone skipping the hooks, a `Warn` policy's warning,
//!   v1alpha1 reads converted, a policy change applied without a restart.
//! - [`capacity`]: the fit at the API server: the tensor size (and
//!   `maxModelLen`) chosen from the example classes and profiles.
//! - [`certificates`]: the serving certificate: rotation under load loses no
//!   request; self-signed mode shares one Secret, repairs it, rotates the CA
//!   with an overlap and injects every `caBundle`.

#[path = "e2e_webhook/access.rs"]
mod access;
#[path = "e2e_webhook/admission.rs"]
mod admission;
#[path = "e2e_webhook/capacity.rs"]
mod capacity;
#[path = "e2e_webhook/certificates.rs"]
mod certificates;

use crate::support;
use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use crate::support::{
    ControlPlane, Serve, WAIT, control_plane, eventually, pki, root, serve_args, service_yaml,
    text, write_pair,
};
use infergate::webhook::tls::certs::PemPair;
use serde_json::Value;

const ENGINE_IMAGE: &str = "registry.example.com/vllm:0.9";

/// The webhook server shared by the tests of this binary.
struct Webhook {
    port: u16,
    /// The plain-HTTP port of `/healthz`, `/readyz` and `/metrics`.
    probe: u16,
    cert_dir: PathBuf,
    ca: PemPair,
    _serve: Serve,
}

static WEBHOOK: tokio::sync::OnceCell<Webhook> = tokio::sync::OnceCell::const_new();

/// Start (once) the webhook server and wait until the apiserver calls it.
async fn webhook() -> &'static Webhook {
    WEBHOOK
        .get_or_init(|| async {
            support::install_crypto_provider();
            let cp = control_plane().await;
            cp.install_crds().await;
            let cert_dir = cp.dir().join("webhook-certs");
            std::fs::create_dir_all(&cert_dir).unwrap();
            let (ca, leaf) = pki("infergate-e2e-ca");
            write_pair(&cert_dir, &leaf);
            let port = support::free_port().unwrap();
            let probe = support::free_port().unwrap();
            // infergate's own namespace holds the GPU budget ledgers.
            cp.ensure_namespace(support::SYSTEM_NAMESPACE).await;
            let args = serve_args(port, probe, &cert_dir, vec![]);
            let serve = Serve::start(args, Some(cp.kubeconfig().to_owned()));
            support::wait_readyz(probe, WAIT).await;
            support::register_webhooks(cp, port, &ca.cert)
                .await
                .unwrap_or_else(|e| panic!("registering the webhooks: {e:#}"));
            // New registrations take effect after a short delay: probe with dry-run.
            support::wait_webhooks_active(cp, "default").await;
            Webhook {
                port,
                probe,
                cert_dir,
                ca,
                _serve: serve,
            }
        })
        .await
}

/// An InferencePolicy in `ns` that supplies the engine image (the e2e
/// server has no --default-engine-image) plus `extra` defaults.
fn image_policy(ns: &str, name: &str, extra: &str) -> String {
    format!(
        "apiVersion: infergate.dev/v1beta1\nkind: InferencePolicy\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  defaults:\n    engine: {{image: {ENGINE_IMAGE}}}\n{extra}"
    )
}

fn apply(cp: &ControlPlane, manifest: &str) -> Output {
    cp.kubectl_stdin(&["apply", "-f", "-"], manifest)
}

fn must_apply(cp: &ControlPlane, manifest: &str) -> String {
    let out = apply(cp, manifest);
    assert!(
        out.status.success(),
        "kubectl apply failed: {}\n{manifest}",
        text(&out)
    );
    text(&out)
}

/// Apply [`image_policy`] `defaults` in `ns` and wait until the webhook's cache has it.
async fn apply_image_policy(cp: &ControlPlane, ns: &str) {
    must_apply(cp, &image_policy(ns, "defaults", ""));
    dry_run_until(
        cp,
        &service_yaml(ns, "probe", "  model: {ref: m}\n"),
        "policy cached",
        |v, _| {
            (v["spec"]["engine"]["image"] == ENGINE_IMAGE)
                .then_some(())
                .ok_or_else(|| v.to_string())
        },
    )
    .await;
}

/// Dry-run `manifest` on the server until `check` accepts the stored object
/// (the policy cache follows a watch: a change shows up within moments).
async fn dry_run_until(
    cp: &ControlPlane,
    manifest: &str,
    what: &str,
    check: impl Fn(&Value, &str) -> Result<(), String>,
) {
    eventually(what, Duration::from_secs(15), || {
        let out = cp.kubectl_stdin(
            &["apply", "--dry-run=server", "-o", "json", "-f", "-"],
            manifest,
        );
        let all = text(&out);
        let result = if out.status.success() {
            serde_json::from_slice::<Value>(&out.stdout)
                .map_err(|e| format!("{e}: {all}"))
                .and_then(|v| check(&v, &all))
        } else {
            Err(all)
        };
        async move { result }
    })
    .await;
}
