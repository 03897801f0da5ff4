//! CRDs on the test control plane: infergate's own as committed in `crds/`,
//! and the minimal Gateway API HTTPRoute and KubeRay RayService CRDs the
//! tests install as fixtures; manifests of infergate's kinds.

use std::collections::BTreeSet;

use k8s_openapi::ByteString;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use super::control_plane::ControlPlane;
use super::process::text;

/// infergate's CRDs as committed (a unit test keeps them equal to `infergate crds`).
pub const INFERGATE_CRDS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/crds/infergate.dev.yaml");

/// The minimal `gateway.networking.k8s.io/v1` HTTPRoute CRD.
pub const HTTPROUTE_CRD: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/reconcile/httproute-crd.yaml"
);

/// The minimal `ray.io/v1` RayService CRD.
pub const RAYSERVICE_CRD: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/graph/rayservice-crd.yaml"
);

/// The CRD files installed so far by this test binary.
static INSTALLED: tokio::sync::Mutex<BTreeSet<&'static str>> =
    tokio::sync::Mutex::const_new(BTreeSet::new());

impl ControlPlane {
    /// Install infergate's CRDs ([`INFERGATE_CRDS`]); see [`Self::install_crd_file`].
    pub async fn install_crds(&self) {
        self.install_crd_file(INFERGATE_CRDS).await;
    }

    /// Apply the CRDs of `path` with plain client-side `kubectl apply`, as a
    /// user would, and wait until every one is Established. Once per file and
    /// test binary (the tests of a binary run in parallel).
    pub async fn install_crd_file(&self, path: &'static str) {
        let mut installed = INSTALLED.lock().await;
        if installed.contains(path) {
            return;
        }
        let out = self.kubectl(&["apply", "-f", path]);
        assert!(
            out.status.success(),
            "kubectl apply -f {path} failed: {}",
            text(&out)
        );
        let out = self.kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "-f",
            path,
        ]);
        assert!(
            out.status.success(),
            "the CRDs of {path} are not Established: {}",
            text(&out)
        );
        installed.insert(path);
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
