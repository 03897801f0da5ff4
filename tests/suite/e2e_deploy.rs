//! End-to-end: infergate with only the permissions `deploy/` grants.
//!
//! The ServiceAccount and RBAC of `deploy/` are applied to a real apiserver,
//! infergate runs with a token of that ServiceAccount (TokenRequest), and the
//! flows a cluster relies on must succeed: the watch caches, admission, the
//! reconciler (children, status, events, lease) and, in self-signed mode, the
//! certificate Secret and the caBundle injection.

use crate::support;
use std::path::Path;
use std::time::Duration;

use crate::support::{
    ControlPlane, Hooks, SYSTEM_NAMESPACE, WAIT, binary, control_plane, conversion_ca_bundle,
    eventually, root, text,
};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;

/// The two tests both own the webhook registrations: one at a time.
static REGISTRATIONS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// CRDs, webhook configurations, namespace, ServiceAccount and RBAC as `deploy/`
/// has them; a kubeconfig with a token of that ServiceAccount.
async fn setup(cp: &ControlPlane) -> std::path::PathBuf {
    cp.install_crds().await;
    cp.deployed_service_account().await
}

/// A field of the service `ns/chat` as kubectl prints it (`jsonpath`).
fn chat_field(cp: &ControlPlane, ns: &str, jsonpath: &str) -> String {
    text(&cp.kubectl(&[
        "get",
        "infsvc",
        "chat",
        "-n",
        ns,
        "-o",
        &format!("jsonpath={jsonpath}"),
    ]))
}

/// No line of the log says infergate was denied.
fn assert_no_forbidden(log: &Path) {
    let log = std::fs::read_to_string(log).unwrap_or_default();
    let denied: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("forbidden") || l.contains("Forbidden"))
        .collect();
    assert!(
        denied.is_empty(),
        "infergate was denied by RBAC:\n{}",
        denied.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_and_reconciler_work_with_the_service_account_only() {
    let _registrations = REGISTRATIONS.lock().await;
    let cp = control_plane().await;
    let kubeconfig = setup(cp).await;
    let server = support::start_infergate_as(cp, binary(), &kubeconfig, &[], Hooks::All)
        .await
        .unwrap_or_else(|e| panic!("starting infergate as the ServiceAccount: {e:#}"));

    let ns = cp.fresh_namespace("rbac").await;
    let policy = format!(
        "apiVersion: infergate.dev/v1beta1\nkind: InferencePolicy\nmetadata:\n  name: defaults\n  namespace: {ns}\nspec:\n  defaults:\n    engine: {{image: registry.example.com/vllm:0.9}}\n  limits:\n    maxReplicas: 4\n"
    );
    let out = cp.kubectl_stdin(&["apply", "-f", "-"], &policy);
    assert!(out.status.success(), "{}", text(&out));
    let service = |replicas: i32| {
        format!(
            "apiVersion: infergate.dev/v1beta1\nkind: InferenceService\nmetadata:\n  name: chat\n  namespace: {ns}\nspec:\n  model: {{ref: llama3-8b-q4}}\n  replicas: {replicas}\n"
        )
    };

    // The policy reached the webhook's cache through the ServiceAccount's watch.
    let rejected = eventually("the policy limit applies", WAIT, async || {
        let out = cp.kubectl_stdin(&["apply", "-f", "-"], &service(9));
        let all = text(&out);
        (!out.status.success() && all.contains("must be at most 4")).then_some(all)
    })
    .await;
    assert!(rejected.contains("spec.replicas"), "{rejected}");

    let out = cp.kubectl_stdin(&["apply", "-f", "-"], &service(2));
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        chat_field(cp, &ns, "{.spec.engine.image}"),
        "registry.example.com/vllm:0.9"
    );

    // The reconciler (lease holder) creates the children and writes status.
    let client = cp.client().await;
    let deployments: Api<Deployment> = Api::namespaced(client, &ns);
    let deployment = eventually("the reconciler creates the Deployment", WAIT, async || {
        deployments.get_opt("chat").await.ok().flatten()
    })
    .await;
    let owner = deployment.metadata.owner_references.unwrap_or_default();
    assert!(
        owner
            .iter()
            .any(|o| o.kind == "InferenceService" && o.controller == Some(true))
    );
    eventually("status is written", WAIT, async || {
        let reconciled = r#"{.status.conditions[?(@.type=="Reconciled")].status}"#;
        (chat_field(cp, &ns, reconciled) == "True").then_some(())
    })
    .await;
    let out = cp.kubectl(&["get", "events.events.k8s.io", "-n", &ns, "-o", "name"]);
    assert!(
        !text(&out).trim().is_empty(),
        "events are recorded: {}",
        text(&out)
    );

    assert_no_forbidden(&server.log);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_signed_mode_works_with_the_service_account_only() {
    let _registrations = REGISTRATIONS.lock().await;
    let cp = control_plane().await;
    let kubeconfig = setup(cp).await;
    // The webhook configurations as `deploy/` installs them (Service references,
    // no caBundle), replacing any registration by URL from another test.
    for kind in [
        "mutatingwebhookconfiguration",
        "validatingwebhookconfiguration",
    ] {
        let out = cp.kubectl(&["delete", kind, "infergate", "--ignore-not-found"]);
        assert!(out.status.success(), "{}", text(&out));
    }
    let out = cp.kubectl(&[
        "apply",
        "-k",
        &root().join("webhooks").display().to_string(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let port = support::free_port().expect("port");
    let probe = support::free_port().expect("port");
    let log = cp.dir().join("infergate-self-signed.log");
    let mut serve = std::process::Command::new(binary());
    serve
        .args([
            "serve",
            "--self-signed",
            "--no-reconcile",
            "--namespace",
            SYSTEM_NAMESPACE,
            "--cert-ip",
            "127.0.0.1",
        ])
        .arg(format!("--listen=127.0.0.1:{port}"))
        .arg(format!("--probe-listen=127.0.0.1:{probe}"))
        .env("KUBECONFIG", &kubeconfig)
        .env("POD_NAME", "infergate-self-signed");
    let mut child = support::spawn_logged(serve, &log).expect("starting infergate");

    let client = cp.client().await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), SYSTEM_NAMESPACE);
    let ca = eventually("the certificate Secret is created", WAIT, async || {
        let secret = secrets
            .get_opt("infergate-webhook-tls")
            .await
            .ok()
            .flatten()?;
        secret.data?.get("ca.crt").map(|b| b.0.clone())
    })
    .await;
    let hooks: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    eventually(
        "the CA is injected into the webhook configuration and the CRD",
        WAIT,
        async || {
            let hook = hooks.get("infergate").await.ok()?;
            let injected = hook
                .webhooks
                .unwrap_or_default()
                .iter()
                .all(|w| w.client_config.ca_bundle.as_ref().map(|b| &b.0) == Some(&ca));
            let crd = crds.get("inferenceservices.infergate.dev").await.ok()?;
            let conversion = conversion_ca_bundle(crd).map(|b| b.0);
            (injected && conversion.as_ref() == Some(&ca)).then_some(())
        },
    )
    .await;
    assert!(
        child.try_wait().expect("status").is_none(),
        "infergate exited"
    );
    // Ready once the policy cache has synced too (the CA can be injected
    // before that on a loaded machine).
    support::eventually(
        "/readyz 200",
        Duration::from_secs(30),
        async || match support::http_get(probe, "/readyz").await {
            Ok((200, _)) => Ok(()),
            Ok((code, body)) => Err(format!("{code}: {body}")),
            Err(e) => Err(e.to_string()),
        },
    )
    .await;
    assert_no_forbidden(&log);
    let _ = child.kill();
}
