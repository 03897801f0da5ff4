//! What a plain review costs in process: the allocations of one `/mutate`
//! and one `/validate` of the load bench's service (no AcceleratorClass,
//! ModelProfile, Secret, ConfigMap, ServiceAccount, served name or budgeted
//! namespace), review bytes in, answer bytes out, counted against bounds
//! recorded here; and the same count beside a cluster full of those
//! features in another namespace, so that a feature the request does not
//! use costs it nothing but a lookup that finds nothing.
//!
//! When a change raises a count, the bound is not to be raised to fit: find
//! what the plain path now pays for (`cargo bench --bench engine -- handle`
//! under `valgrind --tool=callgrind`, docs/performance.md).

use infergate::api::v1beta1::InferenceService;
use infergate::api::{ClusterInferencePolicy, InferencePolicy};
use infergate::engine::ServerDefaults;
use infergate::metrics::Webhook;
use infergate::state::ClusterState;
use infergate::webhook::admission::Admission;
use serde_json::json;

use crate::reviews;
use crate::support::alloc_count::count;

/// Allocations of one `/mutate` of the plain service, answer written
/// (measured when recorded, 2026-12-07: 158; 129 once policy sources were
/// shared by the fields they fill and patch paths written in place; 116
/// with the filled values written into one buffer; 103 with the review's
/// group, version, kind and resource names read without allocating; 89
/// with only the spec copied for defaulting, not the whole object; 88
/// with the annotation written only as the patch carries it).
const MUTATE_ALLOCATIONS: u64 = 88;
/// Allocations of one `/validate` of the plain service, answer written
/// (measured when recorded, 2026-12-07: 87; 74 with the review's names
/// read without allocating).
const VALIDATE_ALLOCATIONS: u64 = 74;

/// Allocations of one answer to `body`, review bytes in, answer bytes out
/// (the same for ten calls in a row, or the test says so), and the answer.
fn allocations(admission: &Admission, webhook: Webhook, body: &[u8]) -> (u64, serde_json::Value) {
    let answer = |a: &Admission| {
        let answer = a.handle(webhook, body).expect("a review");
        answer.to_json().expect("an answer")
    };
    // Once to warm what is made once per process (lazy statics, metric series).
    answer(admission);
    let counts: Vec<u64> = (0..10).map(|_| count(|| answer(admission)).1).collect();
    let first = counts[0];
    assert!(
        counts.iter().all(|c| *c == first),
        "{webhook:?}: the same review allocates the same each time: {counts:?}"
    );
    let bytes = answer(admission);
    (
        first,
        serde_json::from_slice(&bytes).expect("the answer is JSON"),
    )
}

/// A cluster holding every feature the plain review does not use, in
/// namespace `team-b`: AcceleratorClasses and ModelProfiles, a GPU and cost
/// budget, namespace labels, and 200 services with classes, served names,
/// Secrets, ConfigMaps and ServiceAccounts routed through the same Gateway.
fn busy_cluster() -> ClusterState {
    let mut policies = reviews::policies();
    let budget: InferencePolicy = serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "InferencePolicy",
        "metadata": {"name": "budget", "namespace": "team-b"},
        "spec": {"limits": {"maxGPUsPerNamespace": 64, "maxCostPerHourPerNamespace": "400.00"}}
    }))
    .expect("policy");
    let opened: ClusterInferencePolicy = serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "ClusterInferencePolicy",
        "metadata": {"name": "gpus-b"},
        "spec": {"namespaceSelector": {"matchLabels": {"team": "b"}}, "limits": {"maxGPUsPerReplica": 16}}
    }))
    .expect("policy");
    policies.namespaced.push(budget);
    policies.cluster.push(opened);
    let state = ClusterState::new(policies);
    state.set_classes(crate::capacity::classes());
    state.set_profiles(crate::capacity::profiles());
    state.set_namespace_labels("team-b", [("team".to_owned(), "b".to_owned())].into());
    let classes: Vec<String> = crate::capacity::classes().into_keys().collect();
    for i in 0..200 {
        let mut object = reviews::service_object(i, true);
        object["metadata"]["namespace"] = json!("team-b");
        object["spec"]["model"]["servedName"] = json!(format!("model-{i}"));
        object["spec"]["accelerator"]["class"] = json!(classes[i % classes.len()]);
        object["spec"]["serviceAccountName"] = json!("engine");
        object["spec"]["engine"]["envFrom"] = json!([
            {"secretRef": {"name": format!("token-{i}")}},
            {"configMapRef": {"name": "engine-config"}}
        ]);
        let svc: InferenceService = serde_json::from_value(object).expect("service");
        state.apply_service(&svc);
    }
    state
}

fn admission(state: ClusterState) -> Admission {
    crate::support::app::admission(state, ServerDefaults::default())
}

/// The plain service's reviews allocate at most the recorded counts, and
/// exactly as many beside a busy cluster as beside an empty one.
#[test]
fn a_plain_review_pays_only_for_what_it_uses() {
    let mutate = reviews::admission_review(reviews::service_object(0, false));
    let validate = reviews::admission_review(reviews::service_object(0, true));
    let quiet = admission(ClusterState::new(reviews::policies()));
    let busy = admission(busy_cluster());

    let (m_quiet, answer) = allocations(&quiet, Webhook::Mutate, &mutate);
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    assert_eq!(answer["response"]["patchType"], "JSONPatch", "{answer}");
    let (v_quiet, answer) = allocations(&quiet, Webhook::Validate, &validate);
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    let (m_busy, answer) = allocations(&busy, Webhook::Mutate, &mutate);
    assert_eq!(answer["response"]["patchType"], "JSONPatch", "{answer}");
    let (v_busy, answer) = allocations(&busy, Webhook::Validate, &validate);
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    println!(
        "allocations per review: /mutate {m_quiet} (busy cluster {m_busy}), /validate {v_quiet} (busy cluster {v_busy})"
    );

    assert_eq!(
        (m_busy, v_busy),
        (m_quiet, v_quiet),
        "features of another namespace cost the plain review allocations"
    );
    assert!(
        m_quiet <= MUTATE_ALLOCATIONS,
        "/mutate of a plain service allocates {m_quiet} times, over the recorded {MUTATE_ALLOCATIONS}"
    );
    assert!(
        v_quiet <= VALIDATE_ALLOCATIONS,
        "/validate of a plain service allocates {v_quiet} times, over the recorded {VALIDATE_ALLOCATIONS}"
    );
}
