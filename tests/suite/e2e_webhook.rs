//! End-to-end: the webhook server against a real kube-apiserver and etcd.
//!
//! The server runs in this process (its own thread and runtime) on
//! 127.0.0.1 with a certificate carrying the IP SAN 127.0.0.1; the webhook
//! configurations from `webhooks/` are registered with
//! `url: https://127.0.0.1:PORT/...` and `caBundle`, and the CRD's
//! conversion webhook is pointed at `/convert`. Assertions are made the way
//! a user sees them: through kubectl.

#[path = "e2e_webhook/access.rs"]
mod access;
#[path = "e2e_webhook/capacity.rs"]
mod capacity;

use crate::support;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Output;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::support::{
    ControlPlane, Serve, WAIT, client_config, connect, control_plane, conversion_ca_bundle,
    eventually, pki, root, serve_args, service_yaml, serving_pair, text, write_pair,
};
use infergate::api::InferencePolicy;
use infergate::api::v1beta1::InferenceService;
use infergate::metrics::Metrics;
use infergate::webhook::tls::CertResolver;
use infergate::webhook::tls::certs::{self, PemPair};
use infergate::webhook::tls::rotation;
use infergate::webhook::tls::selfsigned::{self, SelfSignedConfig};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

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

// ------------------------------------------------------------------ tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_examples_are_rejected_with_their_field_message() {
    let cp = control_plane().await;
    webhook().await;
    let client = cp.client().await;
    // The examples assume team-a is a production namespace with the team's policy.
    let prod = cp
        .fresh_namespace_with_labels("bad", BTreeMap::from([("tier".into(), "prod".into())]))
        .await;
    // team-b: production, without a namespace policy.
    let prod_b = cp
        .fresh_namespace_with_labels("badb", BTreeMap::from([("tier".into(), "prod".into())]))
        .await;
    // team-c: production, with a curated catalogue and a GPU budget.
    let prod_c = cp
        .fresh_namespace_with_labels("badc", BTreeMap::from([("tier".into(), "prod".into())]))
        .await;
    let bare = cp.fresh_namespace("bare").await;
    let good = root().join("examples/good");
    let cluster = std::fs::read_to_string(good.join("cluster-policy.yaml")).unwrap();
    must_apply(cp, &cluster);
    let ns_policy = std::fs::read_to_string(good.join("namespace-policy.yaml"))
        .unwrap()
        .replace("team-a", &prod);
    must_apply(cp, &ns_policy);
    let catalogue = std::fs::read_to_string(good.join("catalogue-policy.yaml"))
        .unwrap()
        .replace("team-c", &prod_c);
    must_apply(cp, &catalogue);
    // ... and the catalogue policy: an unlisted model is denied in team-c.
    eventually("catalogue policy cached", Duration::from_secs(15), || {
        let out = cp.kubectl_stdin(
            &["apply", "--dry-run=server", "-f", "-"],
            &service_yaml(&prod_c, "probe", "  model: {ref: unlisted}\n"),
        );
        let all = text(&out);
        let r = if all.contains("requireModelProfile") {
            Ok(())
        } else {
            Err(all)
        };
        async move { r }
    })
    .await;
    // Wait until the cache holds both policies: the namespace policy's
    // replicas default shows up in a dry run.
    dry_run_until(
        cp,
        &service_yaml(&prod, "probe", "  model: {ref: m}\n"),
        "policies cached",
        |v, _| {
            (v["spec"]["replicas"] == 2 && v["spec"]["engine"]["image"] == ENGINE_IMAGE)
                .then_some(())
                .ok_or_else(|| v["spec"].to_string())
        },
    )
    .await;

    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("examples/bad"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 10,
        "examples/bad holds the rejected examples"
    );
    let mut failures = Vec::new();
    for file in &files {
        let raw = std::fs::read_to_string(file).unwrap();
        let ns = if raw.contains("# check-flags: no-policies") {
            &bare
        } else {
            &prod
        };
        let raw = raw
            .replace("team-a", ns)
            .replace("team-b", &prod_b)
            .replace("team-c", &prod_c);
        let expects: Vec<&str> = raw
            .lines()
            .filter_map(|l| l.strip_prefix("# expect: "))
            .collect();
        assert!(
            !expects.is_empty(),
            "{} has no `# expect:` line",
            file.display()
        );
        let docs: Vec<&str> = raw.split("\n---\n").collect();
        // Every document but the last sets the scene and must be accepted.
        for doc in &docs[..docs.len() - 1] {
            must_apply(cp, doc);
        }
        let last = docs[docs.len() - 1];
        // Cross-object rules read a watch-fed cache: allow it to catch up.
        let mut out = apply(cp, last);
        let deadline = Instant::now() + Duration::from_secs(10);
        while out.status.success() && docs.len() > 1 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(300)).await;
            out = apply(cp, last);
        }
        let all = text(&out);
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        if out.status.success() {
            failures.push(format!("{name}: accepted:\n{all}"));
            continue;
        }
        // Every denial reads like the API server's own validation (422
        // Invalid): kubectl prints `The KIND "NAME" is invalid:` and the causes.
        let kind = docs[docs.len() - 1]
            .lines()
            .find_map(|l| l.strip_prefix("kind: "))
            .unwrap_or_default()
            .trim();
        let invalid = all.contains(&format!("The {kind} ")) && all.contains(" is invalid");
        let matched = invalid
            && (expects.iter().any(|e| all.contains(e))
                // Rejected by the schema or CEL before the webhook: the field is named.
                || expects.iter().any(|e| {
                    let field = e.split(": ").next().unwrap_or(e);
                    let parent = field.rsplit_once('.').map_or(field, |(p, _)| p);
                    all.contains(field) || all.contains(parent)
                }));
        if !matched {
            failures.push(format!("{name}: expected one of {expects:#?}\ngot: {all}"));
        }
    }
    // Clean up the cluster-scoped policy for the other tests.
    let _ = cp.kubectl(&[
        "delete",
        "clusterinferencepolicy",
        "platform",
        "--ignore-not-found",
    ]);
    drop(client);
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minimal_service_is_stored_with_every_default_and_provenance() {
    let cp = control_plane().await;
    webhook().await;
    let ns = cp.fresh_namespace("minimal").await;
    must_apply(cp, &image_policy(&ns, "defaults", ""));
    let minimal = std::fs::read_to_string(root().join("examples/good/minimal.yaml"))
        .unwrap()
        .replace("team-a", &ns);

    // Dry run shows the defaults (and waits for the policy to be cached).
    dry_run_until(cp, &minimal, "dry-run shows defaults", |v, _| {
        (v["spec"]["engine"]["image"] == ENGINE_IMAGE)
            .then_some(())
            .ok_or_else(|| v.to_string())
    })
    .await;
    let out = cp.kubectl_stdin(
        &["apply", "--dry-run=server", "-o", "yaml", "-f", "-"],
        &minimal,
    );
    assert!(out.status.success(), "{}", text(&out));
    let yaml = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "port: 8000",
        "backend: Deployment",
        "requestTimeout: 5m",
        "infergate.dev/defaulted-from",
    ] {
        assert!(
            yaml.contains(needle),
            "{needle} missing from dry-run output:\n{yaml}"
        );
    }
    let absent = cp.kubectl(&["get", "inferenceservice", "chat", "-n", &ns]);
    assert!(!absent.status.success(), "a dry run stores nothing");

    must_apply(cp, &minimal);
    let out = cp.kubectl(&["get", "inferenceservice", "chat", "-n", &ns, "-o", "json"]);
    assert!(out.status.success(), "{}", text(&out));
    let stored: Value = serde_json::from_slice(&out.stdout).unwrap();
    let spec = &stored["spec"];
    assert_eq!(spec["engine"]["image"], ENGINE_IMAGE, "{stored}");
    assert_eq!(spec["engine"]["port"], 8000, "{stored}");
    assert_eq!(spec["backend"], "Deployment");
    assert_eq!(spec["replicas"], 1);
    assert_eq!(spec["accelerator"]["type"], "none");
    assert_eq!(spec["parallelism"]["tensor"], 1);
    assert_eq!(spec["parallelism"]["pipeline"], 1);
    assert_eq!(spec["healthCheck"]["path"], "/healthz");
    assert_eq!(spec["healthCheck"]["interval"], "10s");
    assert_eq!(spec["healthCheck"]["timeout"], "1s");
    assert_eq!(
        spec["routing"]["pathTemplate"],
        "/{.metadata.namespace}/{.metadata.name}"
    );
    assert_eq!(spec["routing"]["requestTimeout"], "5m");
    let annotation = stored["metadata"]["annotations"]["infergate.dev/defaulted-from"]
        .as_str()
        .expect("provenance annotation");
    let provenance: BTreeMap<String, String> = serde_json::from_str(annotation).unwrap();
    assert_eq!(
        provenance.get("spec.engine.image"),
        Some(&format!("InferencePolicy/{ns}/defaults"))
    );
    assert_eq!(
        provenance.get("spec.replicas").map(String::as_str),
        Some("built-in")
    );

    // Reapplying changes nothing (defaulting is idempotent).
    let again = must_apply(cp, &minimal);
    assert!(again.contains("unchanged"), "{again}");
    let svc: InferenceService = serde_json::from_value(stored).unwrap();
    assert_eq!(svc.spec.replicas, Some(1));
}

/// The API server's count of calls to infergate's admission hooks that
/// `matchConditions` skipped, on UPDATE.
async fn skipped_updates(client: &kube::Client) -> u64 {
    let req = http::Request::get("/metrics")
        .body(Vec::new())
        .expect("request");
    let text = client.request_text(req).await.expect("apiserver metrics");
    text.lines()
        .filter(|l| {
            l.starts_with("apiserver_admission_match_condition_exclusions_total{")
                && l.contains("infergate.dev\"")
                && l.contains("operation=\"UPDATE\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_that_leave_spec_labels_and_annotations_alone_skip_the_webhooks() {
    let cp = control_plane().await;
    webhook().await;
    let client = cp.client().await;
    let ns = cp.fresh_namespace("skip").await;
    apply_image_policy(cp, &ns).await;
    must_apply(
        cp,
        &service_yaml(&ns, "chat", "  model: {ref: m}\n  replicas: 2\n"),
    );
    // A limit the stored spec breaks, from now on.
    must_apply(
        cp,
        &image_policy(&ns, "defaults", "  limits: {maxReplicas: 1}\n"),
    );
    let probe = service_yaml(&ns, "probe", "  model: {ref: m}\n  replicas: 2\n");
    eventually("the limit cached", Duration::from_secs(15), || {
        let out = cp.kubectl_stdin(&["apply", "--dry-run=server", "-f", "-"], &probe);
        let all = text(&out);
        let denied = !out.status.success() && all.contains("spec.replicas");
        async move { denied.then_some(()).ok_or(all) }
    })
    .await;
    let api: Api<InferenceService> = Api::namespaced(client.clone(), &ns);
    let merge = |v: Value| Patch::Merge(v);

    // A finalizer added and removed: neither hook is called (the mutating
    // and the validating one each count one skip per update), and the
    // update is admitted although the spec breaks the new limit: the spec
    // did not change, and refusing would keep the object from being deleted.
    let before = skipped_updates(&client).await;
    for finalizers in [json!(["example.com/hold"]), json!(null)] {
        api.patch(
            "chat",
            &PatchParams::default(),
            &merge(json!({"metadata": {"finalizers": finalizers}})),
        )
        .await
        .expect("a metadata-only update is admitted");
    }
    let skipped = skipped_updates(&client).await - before;
    assert!(skipped >= 4, "two updates, two hooks: {skipped} skipped");

    // A label changes: the hooks are called (a route template may read
    // labels); so does a spec change, which the new limit denies.
    let before = skipped_updates(&client).await;
    api.patch(
        "chat",
        &PatchParams::default(),
        &merge(json!({"metadata": {"labels": {"team": "a"}}})),
    )
    .await
    .expect_err("the label update is validated, and the spec breaks the limit");
    let err = api
        .patch(
            "chat",
            &PatchParams::default(),
            &merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .expect_err("a spec change is validated");
    assert!(err.to_string().contains("spec.replicas"), "{err}");
    assert_eq!(
        skipped_updates(&client).await,
        before,
        "label and spec changes are never skipped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warn_policy_prints_a_warning_and_admits() {
    let cp = control_plane().await;
    webhook().await;
    let ns = cp.fresh_namespace("warn").await;
    must_apply(cp, &image_policy(&ns, "defaults", ""));
    let policy = format!(
        "apiVersion: infergate.dev/v1beta1\nkind: ClusterInferencePolicy\nmetadata:\n  name: soft-{ns}\nspec:\n  namespaceSelector: {{matchLabels: {{kubernetes.io/metadata.name: {ns}}}}}\n  enforcement: Warn\n  limits: {{maxReplicas: 1}}\n"
    );
    must_apply(cp, &policy);
    let svc = service_yaml(&ns, "big", "  model: {ref: m}\n  replicas: 3\n");
    dry_run_until(cp, &svc, "warning from the Warn policy", |_, all| {
        all.contains("Warning:")
            .then_some(())
            .ok_or_else(|| all.to_owned())
    })
    .await;
    let out = apply(cp, &svc);
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    assert!(
        all.contains("Warning:") && all.contains("spec.replicas"),
        "{all}"
    );
    let _ = cp.kubectl(&["delete", "clusterinferencepolicy", &format!("soft-{ns}")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1alpha1_reads_are_converted_and_round_trip() {
    let cp = control_plane().await;
    webhook().await;
    let ns = cp.fresh_namespace("legacy").await;
    apply_image_policy(cp, &ns).await;
    let legacy = std::fs::read_to_string(root().join("examples/good/legacy-v1alpha1.yaml"))
        .unwrap()
        .replace("team-a", &ns);
    let out = must_apply(cp, &legacy);
    assert!(out.contains("deprecated"), "v1alpha1 warns: {out}");

    let out = cp.kubectl(&[
        "get",
        "inferenceservices.v1alpha1.infergate.dev",
        "-n",
        &ns,
        "-o",
        "json",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{list}");
    for item in items {
        assert_eq!(item["apiVersion"], "infergate.dev/v1alpha1", "{item}");
    }
    let legacy_read = items
        .iter()
        .find(|i| i["metadata"]["name"] == "legacy")
        .unwrap();
    let applied: Value = serde_saphyr::from_str(legacy.split("\n---\n").next().unwrap()).unwrap();
    assert_eq!(
        legacy_read["spec"], applied["spec"],
        "reads back identically"
    );
    let embed = items
        .iter()
        .find(|i| i["metadata"]["name"] == "embed")
        .unwrap();
    assert_eq!(embed["spec"]["modelRef"], "bge-large", "{embed}");
    assert_eq!(embed["spec"]["replicas"], 0);

    // The storage version holds the defaults.
    let out = cp.kubectl(&[
        "get",
        "inferenceservices.v1beta1.infergate.dev",
        "legacy",
        "-n",
        &ns,
        "-o",
        "json",
    ]);
    let stored: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(stored["spec"]["model"]["ref"], "llama2-7b");
    assert_eq!(stored["spec"]["autoscaling"]["maxReplicas"], 4);
    assert_eq!(stored["spec"]["engine"]["image"], ENGINE_IMAGE, "{stored}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_change_applies_to_the_next_admission_without_restart() {
    let cp = control_plane().await;
    webhook().await;
    let ns = cp.fresh_namespace("change").await;
    let svc = service_yaml(&ns, "s", "  model: {ref: m}\n");
    must_apply(cp, &image_policy(&ns, "defaults", "    replicas: 3\n"));
    dry_run_until(cp, &svc, "replicas from the policy", |v, _| {
        (v["spec"]["replicas"] == 3)
            .then_some(())
            .ok_or_else(|| v["spec"].to_string())
    })
    .await;
    let started = Instant::now();
    must_apply(cp, &image_policy(&ns, "defaults", "    replicas: 4\n"));
    dry_run_until(cp, &svc, "replicas from the changed policy", |v, _| {
        (v["spec"]["replicas"] == 4)
            .then_some(())
            .ok_or_else(|| v["spec"].to_string())
    })
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let policies: Api<InferencePolicy> = Api::namespaced(cp.client().await, &ns);
    assert!(policies.get_opt("defaults").await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_rotation_under_load_loses_no_request() {
    let cp = control_plane().await;
    let wh = webhook().await;
    let ns = cp.fresh_namespace("rotate").await;
    apply_image_policy(cp, &ns).await;

    let client = cp.client().await;
    let ok = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let stop = CancellationToken::new();
    let mut workers = Vec::new();
    for w in 0..4 {
        let api: Api<InferenceService> = Api::namespaced(client.clone(), &ns);
        let (ok, failed, stop) = (Arc::clone(&ok), Arc::clone(&failed), stop.clone());
        workers.push(tokio::spawn(async move {
            let pp = PostParams {
                dry_run: true,
                ..PostParams::default()
            };
            let mut i = 0;
            while !stop.is_cancelled() {
                i += 1;
                let svc: InferenceService = serde_json::from_value(json!({
                    "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
                    "metadata": {"name": format!("load-{w}-{i}")},
                    "spec": {"model": {"ref": "m"}}
                }))
                .unwrap();
                match api.create(&pp, &svc).await {
                    Ok(s)
                        if s.spec.engine.as_ref().and_then(|e| e.image.as_deref())
                            == Some(ENGINE_IMAGE) =>
                    {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    other => {
                        eprintln!("request failed during rotation: {other:?}");
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = served_leaf(wh.port, &wh.ca).await;
    let next = serving_pair(&wh.ca);
    write_pair(&wh.cert_dir, &next);
    let next_der = {
        use rustls_pki_types::pem::PemObject;
        rustls_pki_types::CertificateDer::from_pem_slice(next.cert.as_bytes())
            .unwrap()
            .to_vec()
    };
    eventually(
        "the new certificate is served",
        Duration::from_secs(15),
        || {
            let (port, ca, want) = (wh.port, wh.ca.clone(), next_der.clone());
            async move {
                (served_leaf(port, &ca).await == want)
                    .then_some(())
                    .ok_or_else(|| "old certificate".to_owned())
            }
        },
    )
    .await;
    assert_ne!(before, next_der);
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.cancel();
    for w in workers {
        w.await.unwrap();
    }
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    assert!(ok >= 20, "too little load: {ok} requests");
    assert_eq!(
        failed,
        0,
        "{failed} of {} admission requests failed",
        ok + failed
    );
}

/// The PEM certificates in the caBundle of each webhook registration and of
/// the CRD's conversion webhook.
async fn ca_bundles(client: &kube::Client, hook: &str, crd: &str) -> Vec<(String, Vec<String>)> {
    let split = |b: Option<&ByteString>| -> Vec<String> {
        let text = b
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .unwrap_or_default();
        text.split_inclusive("-----END CERTIFICATE-----\n")
            .map(str::to_owned)
            .filter(|c| c.contains("BEGIN CERTIFICATE"))
            .collect()
    };
    let m = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get(hook)
        .await
        .unwrap();
    let v = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get(hook)
        .await
        .unwrap();
    let c = Api::<CustomResourceDefinition>::all(client.clone())
        .get(crd)
        .await
        .unwrap();
    let mut out = Vec::new();
    for w in m.webhooks.unwrap_or_default() {
        out.push((
            format!("mutating {}", w.name),
            split(w.client_config.ca_bundle.as_ref()),
        ));
    }
    for w in v.webhooks.unwrap_or_default() {
        out.push((
            format!("validating {}", w.name),
            split(w.client_config.ca_bundle.as_ref()),
        ));
    }
    out.push((
        "the CRD".to_owned(),
        split(conversion_ca_bundle(c).as_ref()),
    ));
    out
}

/// Whether the DER certificate `leaf` is signed by one of the PEM `cas`.
fn signed_by_one_of(leaf: &[u8], cas: &[String]) -> bool {
    use rustls_pki_types::pem::PemObject;
    let (_, leaf) = x509_parser::parse_x509_certificate(leaf).unwrap();
    cas.iter().any(|pem| {
        let der = rustls_pki_types::CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
        let (_, ca) = x509_parser::parse_x509_certificate(&der).unwrap();
        leaf.verify_signature(Some(ca.public_key())).is_ok()
    })
}

/// The leaf certificate the server presents to a new connection.
async fn served_leaf(port: u16, ca: &PemPair) -> Vec<u8> {
    let addr = ([127, 0, 0, 1], port).into();
    connect(addr, client_config(&[ca], &[], false))
        .await
        .unwrap()
        .1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_signed_mode_shares_one_secret_repairs_it_rotates_the_ca_with_an_overlap_and_injects_ca_bundles()
 {
    support::install_crypto_provider();
    support::init_tracing();
    let cp = control_plane().await;
    let client = cp.client().await;
    let ns = cp.fresh_namespace("selfsigned").await;
    let pp = PatchParams::apply("infergate-e2e").force();

    // Registrations of our own (the shared ones must keep the test CA).
    let hook_name = format!("infergate-selfsigned-{ns}");
    let mutating: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": hook_name},
        "webhooks": [{
            "name": "never.infergate.dev", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "clientConfig": {"url": "https://127.0.0.1:1/mutate"},
            "rules": [{"apiGroups": ["infergate.dev"], "apiVersions": ["v1beta1"], "operations": ["CREATE"], "resources": ["nothing"]}]
        }]
    }))
    .unwrap();
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .patch(&hook_name, &pp, &Patch::Apply(&mutating))
        .await
        .unwrap();
    let mut validating: Value = serde_json::to_value(&mutating).unwrap();
    validating["kind"] = json!("ValidatingWebhookConfiguration");
    validating["webhooks"][0]
        .as_object_mut()
        .unwrap()
        .remove("reinvocationPolicy");
    let validating: ValidatingWebhookConfiguration = serde_json::from_value(validating).unwrap();
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .patch(&hook_name, &pp, &Patch::Apply(&validating))
        .await
        .unwrap();
    let crd_name = format!("widgets.{ns}.infergate.dev");
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": crd_name},
        "spec": {
            "group": format!("{ns}.infergate.dev"),
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
            "scope": "Namespaced",
            "versions": [
                {"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
                {"name": "v2", "served": true, "storage": false, "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}
            ],
            "conversion": {"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": {"url": "https://127.0.0.1:1/convert"}}}
        }
    }))
    .unwrap();
    Api::<CustomResourceDefinition>::all(client.clone())
        .patch(&crd_name, &pp, &Patch::Apply(&crd))
        .await
        .unwrap();

    let config = |identity: &str| {
        let mut c = SelfSignedConfig::new(&ns, identity);
        c.ips = vec!["127.0.0.1".parse().unwrap()];
        c.mutating_webhook = hook_name.clone();
        c.validating_webhook = hook_name.clone();
        c.crd_name = crd_name.clone();
        c.serving_validity = Duration::from_secs(3600);
        c.ca_overlap = Duration::from_secs(2);
        c.check_interval = Duration::from_millis(500);
        c.lease_duration_seconds = 3;
        c
    };
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);

    // Two replicas starting at once converge on one Secret.
    let (cfg_a, cfg_b) = (config("replica-a"), config("replica-b"));
    let (a, b) = tokio::join!(
        selfsigned::ensure_secret(&secrets, &cfg_a),
        selfsigned::ensure_secret(&secrets, &cfg_b),
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a, b, "replicas serve the same certificate");
    let secret = secrets.get(selfsigned::SECRET_NAME).await.unwrap();
    let keys: Vec<&String> = secret.data.as_ref().unwrap().keys().collect();
    assert_eq!(keys, ["ca.crt", "ca.key", "tls.crt", "tls.key"]);
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));

    // Run two managers; the lease holder injects the CA everywhere.
    let shutdown = CancellationToken::new();
    let metrics = Metrics::new();
    let ra = Arc::new(CertResolver::new());
    let rb = Arc::new(CertResolver::new());
    let ta = selfsigned::start(
        client.clone(),
        config("replica-a"),
        Arc::clone(&ra),
        metrics.clone(),
        shutdown.clone(),
    )
    .await
    .unwrap();
    let tb = selfsigned::start(
        client.clone(),
        config("replica-b"),
        Arc::clone(&rb),
        Metrics::new(),
        shutdown.clone(),
    )
    .await
    .unwrap();
    assert!(ra.is_loaded() && rb.is_loaded());
    let ca_bundle = ByteString(a.bundle().into_bytes());
    eventually("caBundle injected", Duration::from_secs(30), || {
        let client = client.clone();
        let (hook_name, crd_name, ca_bundle) =
            (hook_name.clone(), crd_name.clone(), ca_bundle.clone());
        async move {
            let m = Api::<MutatingWebhookConfiguration>::all(client.clone())
                .get(&hook_name)
                .await
                .map_err(|e| e.to_string())?;
            let v = Api::<ValidatingWebhookConfiguration>::all(client.clone())
                .get(&hook_name)
                .await
                .map_err(|e| e.to_string())?;
            let c = Api::<CustomResourceDefinition>::all(client)
                .get(&crd_name)
                .await
                .map_err(|e| e.to_string())?;
            let m_ok = m
                .webhooks
                .unwrap_or_default()
                .iter()
                .all(|w| w.client_config.ca_bundle.as_ref() == Some(&ca_bundle));
            let v_ok = v
                .webhooks
                .unwrap_or_default()
                .iter()
                .all(|w| w.client_config.ca_bundle.as_ref() == Some(&ca_bundle));
            let c_ok = conversion_ca_bundle(c).as_ref() == Some(&ca_bundle);
            (m_ok && v_ok && c_ok)
                .then_some(())
                .ok_or_else(|| format!("mutating {m_ok} validating {v_ok} crd {c_ok}"))
        }
    })
    .await;
    // The URL and everything else of the registration is left alone.
    let m = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get(&hook_name)
        .await
        .unwrap();
    assert_eq!(
        m.webhooks.unwrap()[0].client_config.url.as_deref(),
        Some("https://127.0.0.1:1/mutate")
    );

    // Rotation: a serving certificate near its end is reissued under the same CA,
    // and both replicas pick it up from the Secret.
    let short = config("rotator");
    let mut near_expiry = secret.clone();
    let old_leaf = certs::issue_serving(
        &a.ca,
        &[],
        &["127.0.0.1".parse().unwrap()],
        Duration::from_secs(1),
    )
    .unwrap();
    near_expiry
        .data
        .as_mut()
        .unwrap()
        .insert("tls.crt".into(), ByteString(old_leaf.cert.into_bytes()));
    near_expiry
        .data
        .as_mut()
        .unwrap()
        .insert("tls.key".into(), ByteString(old_leaf.key.into_bytes()));
    near_expiry.metadata.resource_version = None;
    secrets
        .replace(
            selfsigned::SECRET_NAME,
            &PostParams::default(),
            &near_expiry,
        )
        .await
        .unwrap();
    let rotated = selfsigned::ensure_secret(&secrets, &short).await.unwrap();
    assert_eq!(rotated.ca, a.ca, "the CA stays stable");
    assert_ne!(rotated.serving, a.serving);
    let want = rotated.serving.cert.clone();
    eventually(
        "both replicas serve the rotated certificate",
        Duration::from_secs(15),
        || {
            let (ra, rb, want) = (Arc::clone(&ra), Arc::clone(&rb), want.clone());
            async move {
                use rustls_pki_types::pem::PemObject;
                let der =
                    rustls_pki_types::CertificateDer::from_pem_slice(want.as_bytes()).unwrap();
                let served = |r: &CertResolver| r.current().map(|k| k.cert[0].to_vec());
                (served(&ra) == Some(der.to_vec()) && served(&rb) == Some(der.to_vec()))
                    .then_some(())
                    .ok_or_else(|| "old certificate".to_owned())
            }
        },
    )
    .await;
    let text = metrics.encode().unwrap();
    assert!(
        text.contains("infergate_certificate_expiry_timestamp_seconds{certificate=\"ca\"}"),
        "{text}"
    );

    // The lease holder records which trust bundle every caBundle holds.
    eventually(
        "the injected bundle recorded",
        Duration::from_secs(15),
        async || {
            let s = secrets
                .get(selfsigned::SECRET_NAME)
                .await
                .map_err(|e| e.to_string())?;
            let recorded = s
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(rotation::INJECTED_ANNOTATION).cloned());
            (recorded == Some(rotation::bundle_id(&rotated)))
                .then_some(())
                .ok_or_else(|| format!("{recorded:?}"))
        },
    )
    .await;

    // A corrupt Secret (tls.key overwritten) is repaired, not crashed on:
    // the CA is kept and both replicas go on serving.
    let mut partial = secrets.get(selfsigned::SECRET_NAME).await.unwrap();
    partial
        .data
        .as_mut()
        .unwrap()
        .insert("tls.key".into(), ByteString(b"not a key".to_vec()));
    secrets
        .replace(selfsigned::SECRET_NAME, &PostParams::default(), &partial)
        .await
        .unwrap();
    eventually("the Secret repaired", Duration::from_secs(15), async || {
        let s = secrets
            .get(selfsigned::SECRET_NAME)
            .await
            .map_err(|e| e.to_string())?;
        let d = s.data.unwrap_or_default();
        match (d.get("tls.key"), d.get("ca.crt")) {
            (Some(k), Some(ca)) if k.0 != b"not a key" && ca.0 == a.ca.cert.as_bytes() => Ok(()),
            _ => Err("not repaired yet".to_owned()),
        }
    })
    .await;
    assert!(
        !ta.is_finished() && !tb.is_finished(),
        "the managers keep running"
    );

    // The CA rotates with an overlap: a CA with a sixth of its life left
    // gets a successor, which enters every caBundle before any certificate
    // it signs is served.
    let now = time::OffsetDateTime::now_utc();
    let old_ca = certs::generate_ca_at(
        "infergate-webhook-ca",
        Duration::from_secs(300),
        now - time::Duration::seconds(250),
    )
    .unwrap();
    let old_leaf = certs::issue_serving_at(
        &old_ca,
        &[],
        &["127.0.0.1".parse().unwrap()],
        now,
        now + time::Duration::seconds(40),
    )
    .unwrap();
    let mut aging = secrets.get(selfsigned::SECRET_NAME).await.unwrap();
    for (k, v) in [
        ("ca.crt", &old_ca.cert),
        ("ca.key", &old_ca.key),
        ("tls.crt", &old_leaf.cert),
        ("tls.key", &old_leaf.key),
    ] {
        aging
            .data
            .as_mut()
            .unwrap()
            .insert(k.into(), ByteString(v.clone().into_bytes()));
    }
    secrets
        .replace(selfsigned::SECRET_NAME, &PostParams::default(), &aging)
        .await
        .unwrap();
    // (The test swapped the CA by hand, as if the old one were lost: the
    // bundles drop the old CA while a replica may still serve a certificate
    // it signed, until that replica's next look at the Secret. From the
    // moment the bundles hold the swapped CA and both replicas serve from
    // it, every served certificate must be trusted, through the rotation.)
    eventually(
        "the swapped CA in every caBundle and served",
        Duration::from_secs(15),
        async || {
            let bundles = ca_bundles(&client, &hook_name, &crd_name).await;
            let in_bundles = bundles.iter().all(|(_, b)| b.contains(&old_ca.cert));
            let served = [&ra, &rb].iter().all(|r| {
                let leaf = r.current().unwrap().cert[0].to_vec();
                bundles.iter().all(|(_, b)| signed_by_one_of(&leaf, b))
            });
            (in_bundles && served)
                .then_some(())
                .ok_or_else(|| format!("in bundles {in_bundles}, served {served}"))
        },
    )
    .await;
    let started = std::time::Instant::now();
    let mut checks = 0;
    let new_ca = loop {
        assert!(
            started.elapsed() < Duration::from_secs(40),
            "the CA did not rotate"
        );
        let bundles = ca_bundles(&client, &hook_name, &crd_name).await;
        for r in [&ra, &rb] {
            let served = r.current().unwrap().cert[0].to_vec();
            for (what, bundle) in &bundles {
                assert!(
                    signed_by_one_of(&served, bundle),
                    "a served certificate is not trusted by the caBundle of {what}"
                );
            }
            checks += 1;
        }
        let s = secrets.get(selfsigned::SECRET_NAME).await.unwrap();
        let d = s.data.unwrap_or_default();
        let ca_now = String::from_utf8(d["ca.crt"].0.clone()).unwrap();
        let previous = d.get("previous-ca.crt").map(|p| p.0.clone());
        if ca_now != old_ca.cert
            && previous.as_deref() == Some(old_ca.cert.as_bytes())
            && [&ra, &rb].iter().all(|r| {
                signed_by_one_of(&r.current().unwrap().cert[0], std::slice::from_ref(&ca_now))
            })
        {
            break ca_now;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(checks > 10, "{checks} checks");
    let bundles = ca_bundles(&client, &hook_name, &crd_name).await;
    for (what, bundle) in &bundles {
        assert!(bundle.contains(&new_ca), "{what}");
        assert!(
            bundle.contains(&old_ca.cert),
            "{what}: the old CA stays trusted"
        );
    }

    shutdown.cancel();
    let _ = tokio::join!(ta, tb);
    let _ = cp.kubectl(&["delete", "crd", &crd_name]);
    let _ = cp.kubectl(&[
        "delete",
        "mutatingwebhookconfiguration,validatingwebhookconfiguration",
        &hook_name,
    ]);
}
