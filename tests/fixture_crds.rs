//! The minimal HTTPRoute and RayService CRDs under `tests/fixtures/` are
//! test data for clusters without Gateway API or KubeRay, generated from
//! the types infergate writes. They must match those types.
//!
//! Regenerate: `INFERGATE_UPDATE_FIXTURES=1 cargo test --test fixture_crds`.

use std::collections::BTreeMap;
use std::path::Path;

use kube::CustomResourceExt;

use infergate::reconcile::children::httproute::HTTPRoute;
use infergate::reconcile::children::rayservice::RayService;

const HTTPROUTE_CRD: &str = "tests/fixtures/reconcile/httproute-crd.yaml";
const RAYSERVICE_CRD: &str = "tests/fixtures/graph/rayservice-crd.yaml";

fn httproute_crd_yaml() -> String {
    let mut crd = HTTPRoute::crd();
    // `*.k8s.io` groups are protected: the real Gateway API CRDs carry this approval.
    crd.metadata.annotations = Some(BTreeMap::from([(
        "api-approved.kubernetes.io".to_owned(),
        "https://github.com/kubernetes-sigs/gateway-api/pull/2466".to_owned(),
    )]));
    let body = serde_saphyr::to_string(&crd).expect("yaml");
    format!(
        "# Minimal Gateway API HTTPRoute CRD generated from src/reconcile/children/httproute.rs\n# (test data; install the real Gateway API CRDs in clusters).\n# Regenerate: INFERGATE_UPDATE_FIXTURES=1 cargo test --test fixture_crds\n{body}"
    )
}

fn rayservice_crd_yaml() -> String {
    let body = serde_saphyr::to_string(&RayService::crd()).expect("yaml");
    format!(
        "# Minimal KubeRay RayService CRD generated from src/reconcile/children/rayservice.rs\n# (test data; install KubeRay in clusters).\n# Regenerate: INFERGATE_UPDATE_FIXTURES=1 cargo test --test fixture_crds\n{body}"
    )
}

fn assert_committed(relative: &str, generated: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    if std::env::var_os("INFERGATE_UPDATE_FIXTURES").is_some() {
        std::fs::write(&path, generated).expect("write fixture");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{relative} is stale: run INFERGATE_UPDATE_FIXTURES=1 cargo test --test fixture_crds"
    );
}

#[test]
fn committed_httproute_crd_matches_the_types() {
    assert_committed(HTTPROUTE_CRD, &httproute_crd_yaml());
}

#[test]
fn committed_rayservice_crd_matches_the_types() {
    assert_committed(RAYSERVICE_CRD, &rayservice_crd_yaml());
}
