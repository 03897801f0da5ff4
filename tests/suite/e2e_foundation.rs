//! End-to-end: the committed CRDs against a real kube-apiserver and etcd.
//!
//! The CRDs install with plain `kubectl apply`, a valid service is stored,
//! printer columns and the `infergate` category work, and objects breaking a
//! CEL rule are rejected by the apiserver itself (no webhook involved).

use crate::support;
use crate::support::{ControlPlane, control_plane, service_yaml, text};

/// Held by tests that change or re-apply the CRD's conversion client config.
static CONVERSION_CONFIG: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Apply `manifest` and assert the apiserver rejects it with `message`.
fn assert_rejected(cp: &ControlPlane, manifest: &str, message: &str) {
    let out = cp.kubectl_stdin(&["apply", "-f", "-"], manifest);
    let all = text(&out);
    assert!(
        !out.status.success(),
        "expected rejection ({message}), but kubectl said: {all}"
    );
    assert!(
        all.contains(message),
        "expected the message {message:?} in: {all}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crds_install_and_store_a_valid_service() {
    let cp = control_plane().await;
    cp.install_crds().await;
    let ns = cp.fresh_namespace("foundation").await;

    let manifest = service_yaml(
        &ns,
        "chat",
        "  model:\n    ref: llama3-8b-q4\n  engine:\n    image: registry.example.com/vllm:0.9\n  replicas: 2\n  autoscaling:\n    minReplicas: 1\n    maxReplicas: 4\n  canary:\n    model:\n      ref: llama3-8b-q5\n    weight: 10\n  routing:\n    requestTimeout: 1h30m\n",
    );
    let out = cp.kubectl_stdin(&["apply", "-f", "-"], &manifest);
    assert!(
        out.status.success(),
        "valid service rejected: {}",
        text(&out)
    );

    let out = cp.kubectl(&[
        "get",
        "-n",
        &ns,
        "inferenceservice",
        "chat",
        "-o",
        "jsonpath={.spec.model.ref}/{.spec.canary.weight}/{.spec.routing.requestTimeout}",
    ]);
    assert_eq!(text(&out), "llama3-8b-q4/10/1h30m");

    // The short name, the category and the printer columns.
    let out = cp.kubectl(&["get", "-n", &ns, "infsvc"]);
    let table = text(&out);
    assert!(out.status.success(), "{table}");
    let header = table.lines().next().unwrap_or_default();
    for column in [
        "NAME", "MODEL", "REPLICAS", "READY", "PHASE", "WEIGHT", "PATH", "AGE",
    ] {
        assert!(
            header.contains(column),
            "column {column} missing in: {header}"
        );
    }
    assert!(table.contains("llama3-8b-q4"), "{table}");
    let out = cp.kubectl(&["get", "-n", &ns, "infergate", "-o", "name"]);
    assert!(
        text(&out).contains("inferenceservice.infergate.dev/chat"),
        "{}",
        text(&out)
    );

    // The served versions: v1alpha1 deprecated, v1beta1 stored, conversion by webhook.
    let out = cp.kubectl(&[
        "get",
        "crd",
        "inferenceservices.infergate.dev",
        "-o",
        "jsonpath={.spec.versions[?(@.name==\"v1alpha1\")].deprecated}/{.spec.versions[?(@.storage==true)].name}/{.spec.conversion.strategy}",
    ]);
    assert_eq!(text(&out), "true/v1beta1/Webhook");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cel_rules_reject_invalid_specs() {
    let cp = control_plane().await;
    cp.install_crds().await;
    let ns = cp.fresh_namespace("cel").await;
    let base = "  model:\n    ref: m\n";

    assert_rejected(
        cp,
        &service_yaml(
            &ns,
            "weight",
            &format!("{base}  canary:\n    model:\n      ref: m2\n    weight: 150\n"),
        ),
        "spec.canary.weight must be between 0 and 100",
    );
    assert_rejected(
        cp,
        &service_yaml(
            &ns,
            "minmax",
            &format!("{base}  autoscaling:\n    minReplicas: 5\n    maxReplicas: 2\n"),
        ),
        "spec.autoscaling.minReplicas must be less than or equal to spec.autoscaling.maxReplicas",
    );
    assert_rejected(
        cp,
        &service_yaml(&ns, "negative", &format!("{base}  replicas: -1\n")),
        "spec.replicas must be at least 0",
    );
    assert_rejected(
        cp,
        &service_yaml(
            &ns,
            "timeout",
            &format!("{base}  routing:\n    requestTimeout: 1.5s\n"),
        ),
        "spec.routing.requestTimeout must be a Gateway API duration",
    );
    assert_rejected(
        cp,
        &service_yaml(
            &ns,
            "health",
            &format!("{base}  healthCheck:\n    path: healthz\n"),
        ),
        "healthCheck.path must start with '/'",
    );
    assert_rejected(
        cp,
        &service_yaml(
            &ns,
            "graph",
            &format!("{base}  graph:\n    url: https://graphs.example.com/g\n"),
        ),
        "spec.graph is allowed only when spec.backend is RayService",
    );
    assert_rejected(
        cp,
        &service_yaml(&ns, "ray", &format!("{base}  backend: RayService\n")),
        "spec.graph is required when spec.backend is RayService",
    );
    assert_rejected(
        cp,
        &service_yaml(
            &ns,
            "plainurl",
            &format!(
                "{base}  backend: RayService\n  graph:\n    url: http://graphs.example.com/g\n"
            ),
        ),
        "spec.graph.url must be an https:// URL",
    );
    let ray = "  backend: RayService\n  graph:\n";
    for (name, graph, message) in [
        (
            "userinfo",
            "    url: https://me:pw@graphs.example.com/g\n",
            "spec.graph.url must be an https:// URL with a host and no user information",
        ),
        (
            "fragment",
            "    url: https://graphs.example.com/g#x\n",
            "spec.graph.url must not have a fragment",
        ),
        (
            "secretname",
            "    url: https://graphs.example.com/g\n    bearerTokenSecretRef: {name: ../admin, key: token}\n",
            "bearerTokenSecretRef.name must be a lowercase RFC 1123 subdomain",
        ),
        (
            "secretkey",
            "    url: https://graphs.example.com/g\n    bearerTokenSecretRef: {name: graph-token, key: a/b}\n",
            "bearerTokenSecretRef.key must consist of alphanumeric characters",
        ),
    ] {
        assert_rejected(
            cp,
            &service_yaml(&ns, name, &format!("{base}{ray}{graph}")),
            message,
        );
    }
    // The same rules let a good reference through.
    let ok = cp.kubectl_stdin(
        &["apply", "--dry-run=server", "-f", "-"],
        &service_yaml(
            &ns,
            "goodref",
            &format!(
                "{base}{ray}    url: https://graphs.example.com:8443/v1/g?x=1\n    bearerTokenSecretRef: {{name: graph-token.v1, key: token_A.b}}\n"
            ),
        ),
    );
    assert!(ok.status.success(), "{}", text(&ok));
    assert_rejected(
        cp,
        &service_yaml(&ns, "blank", "  model:\n    ref: \"two words\"\n"),
        "model.ref must be 1 to 253 characters without whitespace",
    );

    // backend is immutable (a transition rule).
    let created = cp.kubectl_stdin(
        &["apply", "-f", "-"],
        &service_yaml(&ns, "immutable", &format!("{base}  backend: Deployment\n")),
    );
    assert!(created.status.success(), "{}", text(&created));
    assert_rejected(
        cp,
        &service_yaml(
            &ns,
            "immutable",
            &format!(
                "{base}  backend: RayService\n  graph:\n    url: https://graphs.example.com/g\n"
            ),
        ),
        "spec.backend is immutable",
    );

    // All violations are reported at once.
    let out = cp.kubectl_stdin(
        &["apply", "-f", "-"],
        &service_yaml(
            &ns,
            "several",
            &format!(
                "{base}  replicas: -3\n  canary:\n    model:\n      ref: m2\n    weight: 101\n"
            ),
        ),
    );
    let all = text(&out);
    assert!(!out.status.success());
    assert!(
        all.contains("spec.replicas must be at least 0")
            && all.contains("spec.canary.weight must be between 0 and 100"),
        "{all}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_kinds_are_served() {
    let cp = control_plane().await;
    cp.install_crds().await;
    let ns = cp.fresh_namespace("policy").await;
    let policies = format!(
        "apiVersion: infergate.dev/v1beta1\nkind: ClusterInferencePolicy\nmetadata:\n  name: platform-{ns}\nspec:\n  namespaceSelector:\n    matchLabels:\n      tier: prod\n  priority: 10\n  enforcement: Warn\n  limits:\n    maxCanaryWeight: 50\n    maxGPUsPerReplica: 8\n    maxRequestTimeout: 30m\n    allowedAccelerators: [nvidia, amd]\n---\napiVersion: infergate.dev/v1beta1\nkind: InferencePolicy\nmetadata:\n  name: defaults\n  namespace: {ns}\nspec:\n  defaults:\n    replicas: 2\n    routing:\n      requestTimeout: 10m\n"
    );
    let out = cp.kubectl_stdin(&["apply", "-f", "-"], &policies);
    assert!(out.status.success(), "{}", text(&out));
    let out = cp.kubectl(&[
        "get",
        "cip",
        &format!("platform-{ns}"),
        "-o",
        "jsonpath={.spec.enforcement}/{.spec.limits.maxGPUsPerReplica}",
    ]);
    assert_eq!(text(&out), "Warn/8");
    let out = cp.kubectl(&[
        "get",
        "-n",
        &ns,
        "infpol",
        "defaults",
        "-o",
        "jsonpath={.spec.defaults.replicas}",
    ]);
    assert_eq!(text(&out), "2");
    assert_rejected(
        cp,
        &format!(
            "apiVersion: infergate.dev/v1beta1\nkind: InferencePolicy\nmetadata:\n  name: bad\n  namespace: {ns}\nspec:\n  limits:\n    maxCanaryWeight: 120\n"
        ),
        "limits.maxCanaryWeight must be between 0 and 100",
    );
}

/// `kubectl apply --dry-run=server -k deploy/` is accepted by the apiserver
/// (the namespace exists first: a dry-run creates nothing to put objects into).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kustomize_deployment_is_accepted_by_a_real_apiserver() {
    let cp = control_plane().await;
    cp.install_crds().await;
    let _conversion = CONVERSION_CONFIG.lock().await;
    let deploy = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy");
    let out = cp.kubectl(&["create", "namespace", "infergate-system"]);
    let created = text(&out);
    assert!(
        out.status.success() || created.contains("AlreadyExists"),
        "{created}"
    );
    let out = cp.kubectl(&["apply", "--dry-run=server", "-k", deploy]);
    let all = text(&out);
    assert!(out.status.success(), "dry-run of deploy/ failed: {all}");
    for object in [
        "deployment.apps/infergate",
        "clusterrole.rbac.authorization.k8s.io/infergate",
        "mutatingwebhookconfiguration.admissionregistration.k8s.io/infergate",
        "validatingwebhookconfiguration.admissionregistration.k8s.io/infergate",
        "poddisruptionbudget.policy/infergate",
        "networkpolicy.networking.k8s.io/infergate",
    ] {
        assert!(all.contains(object), "{object} missing from: {all}");
    }
}

/// The RBAC of deploy/ (and of its namespace-scoped component) grants no
/// wildcard verb, resource or API group.
#[test]
fn deploy_rbac_has_no_wildcards() {
    use k8s_openapi::api::rbac::v1::{ClusterRole, Role};
    let mut rules = Vec::new();
    let docs: Vec<String> = [
        "rbac.yaml",
        "namespaced/cluster.yaml",
        "namespaced/tenant-team-a.yaml",
    ]
    .iter()
    .flat_map(|f| {
        let path = format!("{}/deploy/{f}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).expect("reading deploy RBAC");
        text.split("\n---\n").map(str::to_owned).collect::<Vec<_>>()
    })
    .collect();
    for doc in &docs {
        let value: serde_json::Value = serde_saphyr::from_str(doc).expect("parsing rbac.yaml");
        match value["kind"].as_str() {
            Some("ClusterRole") => {
                let role: ClusterRole = serde_json::from_value(value).expect("ClusterRole");
                rules.extend(role.rules.unwrap_or_default());
            }
            Some("Role") => {
                let role: Role = serde_json::from_value(value).expect("Role");
                rules.extend(role.rules.unwrap_or_default());
            }
            _ => {}
        }
    }
    assert!(
        rules.len() >= 8,
        "expected the roles' rules, found {}",
        rules.len()
    );
    for rule in &rules {
        let fields = [
            &rule.verbs,
            rule.resources.as_ref().unwrap_or(&Vec::new()),
            rule.api_groups.as_ref().unwrap_or(&Vec::new()),
        ]
        .into_iter()
        .flatten()
        .cloned()
        .collect::<Vec<_>>();
        assert!(
            !fields.iter().any(|f| f.contains('*')),
            "wildcard in rule {rule:?}"
        );
        assert!(
            rule.non_resource_urls.is_none(),
            "non-resource URLs granted: {rule:?}"
        );
    }
}

/// The cert-manager overlay swaps the built-in certificates for cert-manager's:
/// file certificates in the Deployment, CA injection into every consumer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cert_manager_overlay_renders() {
    let cp = control_plane().await;
    let overlay = concat!(env!("CARGO_MANIFEST_DIR"), "/certs/with-cert-manager");
    let out = cp.kubectl(&["kustomize", overlay]);
    let rendered = text(&out);
    assert!(out.status.success(), "{rendered}");
    assert_eq!(
        rendered
            .matches("cert-manager.io/inject-ca-from: infergate-system/infergate-webhook")
            .count(),
        3,
        "CRD, mutating and validating configurations are annotated: {rendered}"
    );
    assert!(rendered.contains("--tls-cert-file=/tls/tls.crt"));
    assert!(!rendered.contains("--self-signed"), "{rendered}");
    assert!(rendered.contains("secretName: infergate-webhook-cert"));
}

/// A v1alpha1 object applied with kubectl is converted (through infergate's
/// conversion webhook, the only hook registered here) to the storage version,
/// reads back identically as v1alpha1 and field by field as v1beta1; a v1alpha1
/// object breaking a CEL rule of its own schema is rejected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v1alpha1_service_is_stored_through_the_conversion_webhook() {
    let cp = control_plane().await;
    cp.install_crds().await;
    let _conversion = CONVERSION_CONFIG.lock().await;
    let server = support::start_infergate(
        cp,
        support::binary(),
        &["--no-reconcile"],
        support::Hooks::ConversionOnly,
    )
    .await
    .unwrap_or_else(|e| panic!("starting infergate: {e:#}"));
    let ns = cp.fresh_namespace("alpha").await;
    let legacy = format!(
        "apiVersion: infergate.dev/v1alpha1\nkind: InferenceService\nmetadata:\n  name: legacy\n  namespace: {ns}\nspec:\n  modelRef: llama3-8b-q4\n  replicas: 2\n  minReplicas: 1\n  maxReplicas: 8\n  resources:\n    cpu: \"4\"\n    memory: 16Gi\n  canary:\n    modelRef: llama3-8b-q5\n    weight: 10\n  healthCheck:\n    path: /healthz\n    interval: 10s\n    timeout: 1s\n"
    );
    let out = cp.kubectl_stdin(&["apply", "-f", "-"], &legacy);
    assert!(
        out.status.success(),
        "v1alpha1 apply failed: {}\ninfergate log: {}",
        text(&out),
        std::fs::read_to_string(&server.log).unwrap_or_default()
    );
    assert!(
        text(&out).contains("deprecated"),
        "kubectl shows the deprecation warning: {}",
        text(&out)
    );

    let out = cp.kubectl(&[
        "get", "-n", &ns, "inferenceservices.v1beta1.infergate.dev", "legacy", "-o",
        "jsonpath={.spec.model.ref}/{.spec.autoscaling.minReplicas}-{.spec.autoscaling.maxReplicas}/{.spec.canary.model.ref}/{.spec.canary.weight}",
    ]);
    assert_eq!(text(&out), "llama3-8b-q4/1-8/llama3-8b-q5/10");

    let out = cp.kubectl(&[
        "get",
        "-n",
        &ns,
        "inferenceservices.v1alpha1.infergate.dev",
        "legacy",
        "-o",
        "json",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let read: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let written: serde_json::Value = serde_saphyr::from_str(&legacy).expect("YAML");
    assert_eq!(
        read["spec"], written["spec"],
        "v1alpha1 spec reads back identically"
    );
    let annotations = read["metadata"]["annotations"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    assert!(
        !annotations.contains_key("infergate.dev/conversion-data"),
        "no conversion data left on a round-tripped object: {annotations:?}"
    );

    assert_rejected(
        cp,
        &legacy
            .replace("name: legacy", "name: heavy")
            .replace("weight: 10", "weight: 150"),
        "spec.canary.weight must be between 0 and 100",
    );
    support::unregister_conversion(cp)
        .await
        .unwrap_or_else(|e| panic!("restoring the CRD's conversion config: {e:#}"));
    drop(server);
}

/// Every short name and category of infergate's CRDs, read back from the
/// API server's discovery, is unique among every resource it serves: a
/// short name that a built-in resource also has (`ip` is IPAddress's since
/// Kubernetes 1.33) makes `kubectl get` ambiguous.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_names_collide_with_no_other_resource() {
    use std::collections::BTreeMap;

    let cp = control_plane().await;
    cp.install_crds().await;
    let client = cp.client().await;
    // short name -> every "resource.group" that has it
    let mut short: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut category: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut ours: BTreeMap<String, (Vec<String>, Vec<String>)> = BTreeMap::new();
    let mut lists = vec![(
        String::new(),
        client
            .list_core_api_resources("v1")
            .await
            .expect("core discovery"),
    )];
    for group in client.list_api_groups().await.expect("groups").groups {
        let Some(version) = group
            .preferred_version
            .or_else(|| group.versions.first().cloned())
        else {
            continue;
        };
        let list = client
            .list_api_group_resources(&version.group_version)
            .await
            .expect("group discovery");
        lists.push((group.name, list));
    }
    for (group, list) in lists {
        for r in list.resources.iter().filter(|r| !r.name.contains('/')) {
            let id = format!("{}.{group}", r.name);
            for s in r.short_names.iter().flatten() {
                short.entry(s.clone()).or_default().push(id.clone());
            }
            for c in r.categories.iter().flatten() {
                category.entry(c.clone()).or_default().push(id.clone());
            }
            if group == "infergate.dev" {
                ours.insert(
                    r.name.clone(),
                    (
                        r.short_names.clone().unwrap_or_default(),
                        r.categories.clone().unwrap_or_default(),
                    ),
                );
            }
        }
    }
    let expected = [
        ("inferenceservices", "infsvc"),
        ("clusterinferencepolicies", "cip"),
        ("inferencepolicies", "infpol"),
        ("acceleratorclasses", "accel"),
    ];
    for (resource, name) in expected {
        let (names, categories) = ours
            .get(resource)
            .unwrap_or_else(|| panic!("{resource} not served: {ours:?}"));
        assert_eq!(names, &vec![name.to_owned()], "{resource}");
        assert_eq!(categories, &vec!["infergate".to_owned()], "{resource}");
        let holders = &short[name];
        assert_eq!(
            holders,
            &vec![format!("{resource}.infergate.dev")],
            "short name {name} is also used by another resource"
        );
    }
    // The category is ours alone: `kubectl get infergate` lists only our kinds.
    let mut members = category["infergate"].clone();
    members.sort();
    assert_eq!(
        members,
        [
            "acceleratorclasses.infergate.dev",
            "clusterinferencepolicies.infergate.dev",
            "inferencepolicies.infergate.dev",
            "inferenceservices.infergate.dev",
            "modelprofiles.infergate.dev",
        ]
    );
    assert!(
        !short.contains_key("infergate"),
        "{:?}",
        short.get("infergate")
    );
    assert!(
        short.contains_key("ip"),
        "the built-in short name ip is served (Kubernetes 1.33+)"
    );
}

/// An AcceleratorClass: stored as written, shown with its printer columns
/// under its short name, and refused by the apiserver's own CEL rules when a
/// quantity, the vendor, the devices or the cost is wrong (no webhook).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accelerator_classes_install_and_their_cel_rules_hold() {
    let cp = control_plane().await;
    cp.install_crds().await;
    let run = std::process::id();
    let class = |name: &str, body: &str| {
        format!(
            "apiVersion: infergate.dev/v1beta1\nkind: AcceleratorClass\nmetadata:\n  name: {name}-{run}\nspec:\n{body}"
        )
    };
    let good = class(
        "h100",
        "  vendor: nvidia\n  memoryPerDevice: 80Gi\n  devicesPerNode: 8\n  nodeSelector: {cloud.google.com/gke-accelerator: nvidia-h100-80gb}\n  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]\n  costPerDeviceHour: \"4.10\"\n",
    );
    let out = cp.kubectl_stdin(&["apply", "-f", "-"], &good);
    assert!(out.status.success(), "{}", text(&out));
    let out = cp.kubectl(&["get", "accel", &format!("h100-{run}")]);
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    let header = shown.lines().next().unwrap_or_default();
    for column in ["NAME", "VENDOR", "MEMORY", "DEVICES", "AGE"] {
        assert!(header.contains(column), "{header}");
    }
    let row = shown.lines().nth(1).unwrap_or_default();
    assert!(
        row.contains("nvidia") && row.contains("80Gi") && row.contains(" 8 "),
        "{row}"
    );

    for (name, body, message) in [
        (
            "no-vendor",
            "  vendor: none\n  memoryPerDevice: 80Gi\n  devicesPerNode: 8\n",
            "spec.vendor must be nvidia, amd, intel-gaudi or google-tpu",
        ),
        (
            "no-devices",
            "  vendor: amd\n  memoryPerDevice: 192Gi\n  devicesPerNode: 0\n",
            "spec.devicesPerNode must be at least 1",
        ),
        (
            "bad-memory",
            "  vendor: nvidia\n  memoryPerDevice: lots\n  devicesPerNode: 1\n",
            "spec.memoryPerDevice must be a positive quantity such as 80Gi",
        ),
        (
            "zero-memory",
            "  vendor: nvidia\n  memoryPerDevice: \"0\"\n  devicesPerNode: 1\n",
            "spec.memoryPerDevice must be a positive quantity such as 80Gi",
        ),
        (
            "bad-cost",
            "  vendor: nvidia\n  memoryPerDevice: 24Gi\n  devicesPerNode: 1\n  costPerDeviceHour: \"4,10\"\n",
            "spec.costPerDeviceHour must be a decimal such as 4.10",
        ),
    ] {
        assert_rejected(cp, &class(name, body), message);
    }
    let _ = cp.kubectl(&["delete", "accel", &format!("h100-{run}")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_profiles_install_and_their_cel_rules_hold() {
    let cp = control_plane().await;
    cp.install_crds().await;
    let run = std::process::id();
    let profile = |name: &str, body: &str| {
        format!(
            "apiVersion: infergate.dev/v1beta1\nkind: ModelProfile\nmetadata:\n  name: {name}-{run}\nspec:\n{body}"
        )
    };
    let gqa =
        "  attention: {kind: GQA, kvHeads: 8, headDim: 128}\n  maxPositionEmbeddings: 131072\n";
    let good = profile(
        "llama",
        &format!(
            "  modelRefs: [meta-llama/Llama-3.1-70B-Instruct]\n  weightBytes: 141107412992\n  layers: 80\n{gqa}"
        ),
    );
    let out = cp.kubectl_stdin(&["apply", "-f", "-"], &good);
    assert!(out.status.success(), "{}", text(&out));
    let out = cp.kubectl(&["get", "modelprofiles", &format!("llama-{run}")]);
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    let header = shown.lines().next().unwrap_or_default();
    for column in [
        "NAME",
        "MODELS",
        "WEIGHTS",
        "LAYERS",
        "ATTENTION",
        "CONTEXT",
        "AGE",
    ] {
        assert!(header.contains(column), "{header}");
    }
    let row = shown.lines().nth(1).unwrap_or_default();
    assert!(
        row.contains("141107412992") && row.contains("GQA") && row.contains("131072"),
        "{row}"
    );
    let refs = "  modelRefs: [m]\n  weightBytes: 1000\n  layers: 2\n";
    for (name, body, message) in [
        (
            "no-refs",
            format!("  modelRefs: []\n  weightBytes: 1000\n  layers: 2\n{gqa}"),
            "spec.modelRefs",
        ),
        (
            "no-weights",
            format!("  modelRefs: [m]\n  weightBytes: 0\n  layers: 2\n{gqa}"),
            "spec.weightBytes must be at least 1",
        ),
        (
            "gqa-without-heads",
            format!(
                "{refs}  attention: {{kind: GQA, headDim: 128}}\n  maxPositionEmbeddings: 4096\n"
            ),
            "spec.attention.kvHeads and headDim are required for GQA and MHA",
        ),
        (
            "mla-without-rank",
            format!(
                "{refs}  attention: {{kind: MLA, qkRopeHeadDim: 64}}\n  maxPositionEmbeddings: 4096\n"
            ),
            "spec.attention.kvLoraRank and qkRopeHeadDim are required for MLA",
        ),
        (
            "fp3-cache",
            format!("{refs}{gqa}  kvCacheBytesPerElement: 9\n"),
            "spec.kvCacheBytesPerElement must be between 1 and 8",
        ),
    ] {
        assert_rejected(cp, &profile(name, &body), message);
    }
    let _ = cp.kubectl(&["delete", "modelprofiles", &format!("llama-{run}")]);
}
