//! `serve --policy-file` and `check --policy` read policy files with one
//! reader: the same file gives the same defaults through both.

use infergate::api::v1beta1::InferenceService;
use infergate::check;
use infergate::engine::ServerDefaults;
use infergate::state::files::load_policies;
use infergate::state::{ClusterState, context, with_context};

/// A `kind: List` of policies in YAML, with a quantity written as a
/// number, then a second document: everything the two readers differed on.
const POLICIES: &str = r#"
apiVersion: v1
kind: List
items:
  - apiVersion: infergate.dev/v1beta1
    kind: ClusterInferencePolicy
    metadata: {name: platform}
    spec:
      defaults:
        engine: {image: registry.example.com/vllm:0.9}
        replicas: 3
        resources: {cpu: 4, memory: 8Gi}
---
apiVersion: infergate.dev/v1beta1
kind: InferencePolicy
metadata: {name: team, namespace: team-a}
spec:
  priority: 5
  defaults:
    routing: {requestTimeout: 2m}
"#;

const SERVICE: &str = r#"
apiVersion: infergate.dev/v1beta1
kind: InferenceService
metadata: {name: chat, namespace: team-a}
spec:
  model: {ref: llama3-8b}
"#;

#[test]
fn serve_and_check_read_a_policy_file_alike() {
    let dir = tempfile::tempdir().expect("tempdir");
    let policies = dir.path().join("policies.yaml");
    let service = dir.path().join("service.yaml");
    std::fs::write(&policies, POLICIES).expect("write policies");
    std::fs::write(&service, SERVICE).expect("write service");

    // What `serve --policy-file` loads, answered as admission would.
    let snapshot = load_policies(std::slice::from_ref(&policies))
        .expect("policies load")
        .policies;
    assert_eq!(snapshot.cluster.len(), 1);
    assert_eq!(snapshot.namespaced.len(), 1);
    let state = ClusterState::new(snapshot);
    let server = ServerDefaults::default();
    let source = context::Watched {
        state: &state,
        server: &server,
        reconciling: None,
    };
    let svc: InferenceService = serde_saphyr::from_str(SERVICE).expect("service decodes");
    let served = with_context(&source, "team-a", |ctx| {
        infergate::engine::default_service(&svc, ctx)
    });

    // What `check --policy` prints for the same files.
    let report = check::check(&check::Options {
        files: vec![service],
        policies: vec![policies],
        ..check::Options::default()
    });
    assert_eq!(report.exit_code(), 0, "{:?}", report.lines);
    let [checked] = report.services.as_slice() else {
        panic!("one service expected: {:?}", report.lines);
    };
    assert_eq!(checked, &served.object);
    let resources = served
        .object
        .spec
        .resources
        .as_ref()
        .expect("resources defaulted");
    assert_eq!(resources.cpu.as_ref().map(|q| q.0.as_str()), Some("4"));
    assert_eq!(served.object.spec.replicas, Some(3));
}

#[test]
fn a_policy_file_with_anything_else_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("mixed.yaml");
    std::fs::write(&path, format!("{POLICIES}---\n{SERVICE}")).expect("write");
    let err = load_policies(&[path]).expect_err("a service is not a policy");
    assert!(
        err.to_string().contains("InferenceService team-a/chat"),
        "{err}"
    );
}
