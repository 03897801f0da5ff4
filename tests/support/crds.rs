//! CRDs on the test control plane: infergate's own as committed in `crds/`,
//! and the published Gateway API HTTPRoute and KubeRay RayService CRDs,
//! fetched from their Go modules at pinned versions; manifests of
//! infergate's kinds.

use infergate::api::v1beta1::{
    Backend, EngineSpec, GraphSpec, InferenceService, InferenceServiceSpec, ModelSpec,
};
use k8s_openapi::ByteString;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use super::control_plane::ControlPlane;
use super::process::{cached_by_script, text};

/// infergate's CRDs as committed (a unit test keeps them equal to `infergate crds`).
pub const INFERGATE_CRDS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/crds/infergate.dev.yaml");

/// The published Gateway API HTTPRoute CRD (standard channel), fetched from
/// the `sigs.k8s.io/gateway-api` Go module by `fetch-upstream-crds.sh`.
pub fn httproute_crd() -> &'static str {
    static PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        gateway_api_dir()
            .join("gateway.networking.k8s.io_httproutes.yaml")
            .display()
            .to_string()
    })
}

/// The published KubeRay RayService CRD, from the `ray-operator` Go module
/// (`build-kuberay.sh`).
pub fn rayservice_crd() -> &'static str {
    static PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        super::kuberay::kuberay_dir()
            .join("crd/ray.io_rayservices.yaml")
            .display()
            .to_string()
    })
}

/// The published KubeRay RayCluster CRD, from the `ray-operator` Go module
/// (`build-kuberay.sh`).
pub fn raycluster_crd() -> &'static str {
    static PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        super::kuberay::kuberay_dir()
            .join("crd/ray.io_rayclusters.yaml")
            .display()
            .to_string()
    })
}

/// The directory of the Gateway API standard-channel CRDs (fetched when
/// missing; `INFERGATE_GATEWAY_API_DIR` names one fetched elsewhere).
pub fn gateway_api_dir() -> std::path::PathBuf {
    upstream_dir("gateway-api", "INFERGATE_GATEWAY_API_DIR")
}

/// The published Prometheus Operator PodMonitor CRD, fetched from the
/// `github.com/prometheus-operator/prometheus-operator` Go module.
pub fn podmonitor_crd() -> &'static str {
    static PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        upstream_dir("prometheus-operator", "INFERGATE_PROMETHEUS_OPERATOR_DIR")
            .join("monitoring.coreos.com_podmonitors.yaml")
            .display()
            .to_string()
    })
}

/// The published Gateway API Inference Extension InferencePool CRD, fetched
/// from the `sigs.k8s.io/gateway-api-inference-extension` Go module.
pub fn inferencepool_crd() -> &'static str {
    static PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        upstream_dir("inference-extension", "INFERGATE_INFERENCE_EXTENSION_DIR")
            .join("inference.networking.k8s.io_inferencepools.yaml")
            .display()
            .to_string()
    })
}

/// The directory `fetch-upstream-crds.sh PROJECT` fetches into (or the one
/// the environment variable `env` names).
fn upstream_dir(project: &str, env: &str) -> std::path::PathBuf {
    cached_by_script(
        env,
        "fetch-upstream-crds.sh",
        &[project],
        "it fetches the CRDs from the Go module proxy",
    )
}

impl ControlPlane {
    /// Install infergate's CRDs ([`INFERGATE_CRDS`]); see [`Self::install_crd_file`].
    pub async fn install_crds(&self) {
        self.install_crd_file(INFERGATE_CRDS).await;
    }

    /// Apply the CRDs of `path` with plain client-side `kubectl apply`, as a
    /// user would, and wait until every one is Established. Once per file and
    /// control plane (the tests of a module run in parallel).
    pub async fn install_crd_file(&self, path: &'static str) {
        let mut installed = self.crds_installed.lock().await;
        if installed.contains(path) {
            return;
        }
        // infergate's CRDs as a user applies them; the published ones
        // server-side (they are too large for client-side apply's annotation).
        self.apply_crds(path, path != INFERGATE_CRDS);
        installed.insert(path);
    }

    /// Apply the CRDs of `path` and wait until every one is Established.
    pub fn apply_crds(&self, path: &str, server_side: bool) {
        let mut args = vec!["apply"];
        if server_side {
            args.extend(["--server-side", "--force-conflicts"]);
        }
        args.extend(["-f", path]);
        let out = self.kubectl(&args);
        assert!(
            out.status.success(),
            "kubectl apply -f {path} failed: {}",
            text(&out)
        );
        // Right after creation a CRD may have no conditions yet, which
        // `kubectl wait` reports as an error: ask again.
        let mut last = String::new();
        let established = (0..60).any(|_| {
            let out = self.kubectl(&[
                "wait",
                "--for=condition=Established",
                "--timeout=30s",
                "-f",
                path,
            ]);
            if out.status.success() {
                return true;
            }
            last = text(&out);
            std::thread::sleep(std::time::Duration::from_millis(500));
            false
        });
        assert!(
            established,
            "the CRDs of {path} are not Established: {last}"
        );
    }
}

/// The caBundle of a CRD's conversion webhook, if one is set.
pub fn conversion_ca_bundle(crd: CustomResourceDefinition) -> Option<ByteString> {
    crd.spec
        .conversion
        .and_then(|c| c.webhook)
        .and_then(|w| w.client_config)
        .and_then(|c| c.ca_bundle)
}

/// A v1beta1 InferenceService manifest; `spec` is YAML indented by two spaces.
pub fn service_yaml(ns: &str, name: &str, spec: &str) -> String {
    format!(
        "apiVersion: infergate.dev/v1beta1\nkind: InferenceService\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n{spec}"
    )
}

/// The service `name` serving the model `llama3-8b` with the engine `image`
/// on one replica; with a `graph`, `backend: RayService` serving it.
pub fn llama_service(name: &str, image: &str, graph: Option<GraphSpec>) -> InferenceService {
    InferenceService::new(
        name,
        InferenceServiceSpec {
            model: ModelSpec {
                r#ref: "llama3-8b".into(),
                image: None,
                ..Default::default()
            },
            engine: Some(EngineSpec {
                image: Some(image.into()),
                ..EngineSpec::default()
            }),
            backend: graph.as_ref().map(|_| Backend::RayService),
            replicas: Some(1),
            graph,
            ..InferenceServiceSpec::default()
        },
    )
}

/// Create the InferencePolicy `graph-hosts` in `ns` listing `host`
/// literally in `allowedGraphHosts` (so the fetcher may reach it even on
/// loopback, as the local graph servers of the tests are).
pub async fn allow_graph_host(client: &kube::Client, ns: &str, host: &str) {
    use infergate::api::policy::{InferencePolicy, InferencePolicySpec, PolicyLimits};
    let mut policy = InferencePolicy::new(
        "graph-hosts",
        InferencePolicySpec {
            limits: Some(PolicyLimits {
                allowed_graph_hosts: Some(vec![host.to_owned()]),
                ..PolicyLimits::default()
            }),
            ..InferencePolicySpec::default()
        },
    );
    policy.metadata.namespace = Some(ns.to_owned());
    kube::Api::<InferencePolicy>::namespaced(client.clone(), ns)
        .create(&kube::api::PostParams::default(), &policy)
        .await
        .expect("create the graph-hosts policy");
}

/// Apply the Secret `graph-token` in `ns` holding `value` under `token`,
/// its owner letting the token go to 127.0.0.1 (the graph servers' host).
pub async fn set_graph_token(client: &kube::Client, ns: &str, value: &str) {
    use infergate::graph::fetch::TOKEN_HOSTS_ANNOTATION;
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{ObjectMeta, Patch, PatchParams};
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("graph-token".into()),
            annotations: Some(
                [(TOKEN_HOSTS_ANNOTATION.to_owned(), "127.0.0.1".to_owned())]
                    .into_iter()
                    .collect(),
            ),
            ..ObjectMeta::default()
        },
        data: Some(
            [("token".to_owned(), ByteString(value.as_bytes().to_vec()))]
                .into_iter()
                .collect(),
        ),
        ..Secret::default()
    };
    kube::Api::<Secret>::namespaced(client.clone(), ns)
        .patch(
            "graph-token",
            &PatchParams::apply("infergate-tests").force(),
            &Patch::Apply(&secret),
        )
        .await
        .expect("apply secret");
}

/// Create the InferenceService `ns/name` with `spec` given as JSON.
pub async fn create_service_json(
    client: &kube::Client,
    ns: &str,
    name: &str,
    spec: serde_json::Value,
) {
    let svc: InferenceService = serde_json::from_value(serde_json::json!({
        "apiVersion": "infergate.dev/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }))
    .expect("service json");
    kube::Api::<InferenceService>::namespaced(client.clone(), ns)
        .create(&kube::api::PostParams::default(), &svc)
        .await
        .unwrap_or_else(|e| panic!("creating {ns}/{name}: {e}"));
}

/// Merge-patch the spec of service `name` in `ns` the way its team would.
pub async fn patch_service_spec(
    client: &kube::Client,
    ns: &str,
    name: &str,
    spec: serde_json::Value,
) {
    kube::Api::<InferenceService>::namespaced(client.clone(), ns)
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({ "spec": spec })),
        )
        .await
        .unwrap_or_else(|e| panic!("patching {ns}/{name}: {e}"));
}

/// An HTTPRoute's backends as `(name, weight)`, rule by rule.
#[must_use]
pub fn route_weights(
    route: &infergate::reconcile::children::httproute::HTTPRoute,
) -> Vec<(String, Option<i32>)> {
    route
        .spec
        .rules
        .iter()
        .flat_map(|r| r.backend_refs.iter())
        .map(|b| (b.name.clone(), b.weight))
        .collect()
}

/// Ask for a new fetch of service `name`'s graph: `infergate.dev/graph-refresh: value`.
pub async fn refresh_graph(services: &kube::Api<InferenceService>, name: &str, value: &str) {
    let patch = serde_json::json!({"metadata": {"annotations": {
        "infergate.dev/graph-refresh": value
    }}});
    services
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(patch),
        )
        .await
        .expect("annotate");
}
