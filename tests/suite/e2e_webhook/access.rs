//! No privilege through infergate, against the real API server's RBAC:
//! users impersonated with `kubectl --as` (and `--as-group`) write services
//! that reference a Secret, a ConfigMap and a ServiceAccount. A user who
//! may not read them (or act as the ServiceAccount) is denied, each denial
//! naming the field, the object and the verb (every object it may not
//! use, not only the first); a user who may (through a group) is admitted; an update that leaves the references alone makes no
//! review and is admitted for anyone who may write the service.

use super::*;

/// RBAC of the scene in `ns`: `writer` may write InferenceServices (users
/// alice and bob); `reader` may read Secret `hf` and ConfigMap
/// `engine-config` and act as ServiceAccount `chat-engine` (group
/// `ml-leads` only). Nobody but the admin reads ConfigMap `tuning`.
fn scene(ns: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Secret
metadata: {{name: hf, namespace: {ns}}}
stringData: {{token: not-a-real-token}}
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: engine-config, namespace: {ns}}}
data: {{MODE: fast}}
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: tuning, namespace: {ns}}}
data: {{BLOCK_SIZE: "32"}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {{name: chat-engine, namespace: {ns}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: writer, namespace: {ns}}}
rules:
  - apiGroups: ["infergate.dev"]
    resources: ["inferenceservices"]
    verbs: ["get", "list", "create", "update", "patch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: writer, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: writer}}
subjects:
  - {{apiGroup: rbac.authorization.k8s.io, kind: User, name: alice}}
  - {{apiGroup: rbac.authorization.k8s.io, kind: User, name: bob}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: reader, namespace: {ns}}}
rules:
  - apiGroups: [""]
    resources: ["secrets"]
    resourceNames: ["hf"]
    verbs: ["get"]
  - apiGroups: [""]
    resources: ["configmaps"]
    resourceNames: ["engine-config"]
    verbs: ["get"]
  - apiGroups: [""]
    resources: ["serviceaccounts/token"]
    resourceNames: ["chat-engine"]
    verbs: ["create"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: reader, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: reader}}
subjects:
  - {{apiGroup: rbac.authorization.k8s.io, kind: Group, name: ml-leads}}
"#
    )
}

const USES_ALL: &str = "  model: {ref: llama3-8b}\n  serviceAccountName: chat-engine\n  engine:\n    env:\n      - name: HF_TOKEN\n        valueFrom: {secretKeyRef: {name: hf, key: token}}\n    envFrom:\n      - configMapRef: {name: engine-config}\n";

fn apply_as(cp: &ControlPlane, user: &[&str], manifest: &str) -> Output {
    let mut args = vec!["apply", "-f", "-"];
    args.extend_from_slice(user);
    cp.kubectl_stdin(&args, manifest)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requester_makes_the_pods_use_only_what_the_requester_may_use() {
    let hook = webhook().await;
    let cp = control_plane().await;
    let ns = cp.fresh_namespace("access").await;
    apply_image_policy(cp, &ns).await;
    must_apply(cp, &scene(&ns));
    // RBAC takes effect at once for SubjectAccessReviews, but the policy
    // cache may still be catching up: wait for a plain service to pass.
    dry_run_until(
        cp,
        &service_yaml(&ns, "probe", "  model: {ref: m}\n"),
        "policies cached",
        |v, _| {
            (v["spec"]["engine"]["image"] == ENGINE_IMAGE)
                .then_some(())
                .ok_or_else(|| v["spec"].to_string())
        },
    )
    .await;

    // alice may write services but read none of the three.
    let alice = ["--as", "alice"];
    let out = apply_as(cp, &alice, &service_yaml(&ns, "chat", USES_ALL));
    let said = text(&out);
    assert!(!out.status.success(), "alice was admitted: {said}");
    assert!(
        said.contains("The InferenceService \"chat\" is invalid"),
        "{said}"
    );
    for (field, object) in [
        (
            "spec.engine.env[0].valueFrom.secretKeyRef.name",
            format!("get secrets for Secret \"hf\" in namespace \"{ns}\""),
        ),
        (
            "spec.engine.envFrom[0].configMapRef.name",
            format!("get configmaps for ConfigMap \"engine-config\" in namespace \"{ns}\""),
        ),
        (
            "spec.serviceAccountName",
            format!(
                "create serviceaccounts/token for ServiceAccount \"chat-engine\" in namespace \"{ns}\""
            ),
        ),
    ] {
        assert!(
            said.contains(&format!(
                "{field}: Forbidden: user \"alice\" may not {object}"
            )),
            "the denial names {field}, the object and the verb: {said}"
        );
    }

    // Two objects she may not read in one envFrom: each is named. First
    // with neither asked about before, then with one of them (hf) denied
    // to her a moment ago and still in the webhook's cache: a known denial
    // does not hide the other.
    for (name, secret, config_map) in [("chat-3", "db", "proxy"), ("chat-4", "hf", "tuning")] {
        let out = apply_as(
            cp,
            &alice,
            &service_yaml(
                &ns,
                name,
                &format!(
                    "  model: {{ref: m}}\n  engine:\n    envFrom:\n      - secretRef: {{name: {secret}}}\n      - configMapRef: {{name: {config_map}}}\n"
                ),
            ),
        );
        let said = text(&out);
        assert!(!out.status.success(), "alice was admitted: {said}");
        for (field, object) in [
            (
                "spec.engine.envFrom[0].secretRef.name",
                format!("get secrets for Secret \"{secret}\" in namespace \"{ns}\""),
            ),
            (
                "spec.engine.envFrom[1].configMapRef.name",
                format!("get configmaps for ConfigMap \"{config_map}\" in namespace \"{ns}\""),
            ),
        ] {
            assert!(
                said.contains(&format!(
                    "{field}: Forbidden: user \"alice\" may not {object}"
                )),
                "the denial of {name} names {field}, the object and the verb: {said}"
            );
        }
    }

    // bob may, through his group: admitted (the review carries the groups).
    let bob = ["--as", "bob", "--as-group", "ml-leads"];
    let out = apply_as(cp, &bob, &service_yaml(&ns, "chat", USES_ALL));
    assert!(out.status.success(), "bob was denied: {}", text(&out));
    // Without the group bob is nobody special.
    let out = apply_as(
        cp,
        &["--as", "bob"],
        &service_yaml(
            &ns,
            "chat-2",
            "  model: {ref: m}\n  imagePullSecrets: [{name: hf}]\n",
        ),
    );
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("spec.imagePullSecrets[0].name: Forbidden: user \"bob\" may not get secrets for Secret \"hf\""),
        "{}",
        text(&out)
    );

    // alice changes bob's service without touching its references: no
    // review, admitted.
    let reviews_before = reviews(hook).await;
    let patch_as_alice = |patch: &str| {
        cp.kubectl(&[
            "patch",
            "-n",
            &ns,
            "infsvc",
            "chat",
            "--type=merge",
            "-p",
            patch,
            "--as",
            "alice",
        ])
    };
    let out = patch_as_alice(r#"{"spec":{"replicas":2}}"#);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        reviews(hook).await,
        reviews_before,
        "no review for unchanged references"
    );
    // ... but a reference she adds is reviewed.
    let out = patch_as_alice(r#"{"spec":{"imagePullSecrets":[{"name":"registry"}]}}"#);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("spec.imagePullSecrets[0].name: Forbidden: user \"alice\" may not get secrets for Secret \"registry\""),
        "{}",
        text(&out)
    );
    let (allowed, denied) = reviews(hook).await;
    assert!(
        denied > reviews_before.1 && allowed >= 3,
        "the reviews sent are counted: allowed {allowed}, denied {denied}"
    );
}

/// Access reviews the server has sent, `(allowed, denied)`, from its `/metrics`.
async fn reviews(hook: &Webhook) -> (u64, u64) {
    let (status, text) = support::http_get(hook.probe, "/metrics")
        .await
        .expect("GET /metrics");
    assert_eq!(status, 200, "{text}");
    let count = |result: &str| {
        text.lines()
            .find(|l| {
                l.starts_with(&format!(
                    "infergate_access_reviews_total{{result=\"{result}\"}}"
                ))
            })
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0)
    };
    (count("allowed"), count("denied"))
}
