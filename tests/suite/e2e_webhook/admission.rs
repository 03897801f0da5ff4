//! The admission hooks at the real API server, as kubectl shows them: every
//! example of `examples/bad/` rejected with its field's message, a minimal
//! service stored with every default and its provenance, updates that leave
//! spec, labels and annotations alone skipping the hooks (`matchConditions`),
//! a `Warn` policy's warning, v1alpha1 reads converted and round-tripped,
//! and a policy change applied to the next admission without a restart.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::support::{control_plane, eventually, root, service_yaml, text};
use infergate::api::InferencePolicy;
use infergate::api::v1beta1::InferenceService;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use super::{
    ENGINE_IMAGE, apply, apply_image_policy, dry_run_until, image_policy, must_apply, webhook,
};

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
