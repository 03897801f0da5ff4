//! In-process cost of the admission path on realistic bodies: the engine
//! alone (default + validate + JSON patch on a ~3 KB InferenceService on
//! the example H100 class, with a cluster and a namespace policy), and the handlers from review bytes to
//! response bytes (the load bench's kubectl-shaped bodies).
//! Run: `cargo bench --bench engine`.
//!
//! Figures, with the command, commit and machine: `docs/performance.md`.

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use infergate::api::conversion::{V1ALPHA1, V1BETA1, convert};
use infergate::api::v1beta1::InferenceService;
use infergate::api::{ClusterInferencePolicy, InferencePolicy};
use infergate::engine::{self, Context, NoRoutes, PolicySnapshot, ServerDefaults};
use infergate::metrics::Webhook;
use infergate::state::ClusterState;

mod common;
use common::reviews;

#[path = "../tests/support/mod.rs"]
mod support;

// The allocator `infergate` itself runs with (src/main.rs).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SERVICE: &str = include_str!("../tests/fixtures/engine/service-3k.json");
const CLUSTER_POLICY: &str = include_str!("../examples/good/cluster-policy.yaml");
const NAMESPACE_POLICY: &str = include_str!("../examples/good/namespace-policy.yaml");

fn snapshot() -> PolicySnapshot {
    let cluster: ClusterInferencePolicy =
        serde_saphyr::from_str(CLUSTER_POLICY).expect("cluster policy example");
    let namespaced: InferencePolicy =
        serde_saphyr::from_str(NAMESPACE_POLICY).expect("namespace policy example");
    PolicySnapshot {
        cluster: vec![cluster],
        namespaced: vec![namespaced],
    }
}

/// The AcceleratorClasses of `examples/good/accelerator-classes.yaml`.
fn example_classes() -> infergate::engine::AcceleratorClasses {
    serde_saphyr::from_multiple::<infergate::api::AcceleratorClass>(include_str!(
        "../examples/good/accelerator-classes.yaml"
    ))
    .expect("classes example")
    .into_iter()
    .map(|c| (c.metadata.name.unwrap_or_default(), c.spec))
    .collect()
}

fn bench(c: &mut Criterion) {
    let policies = snapshot();
    let labels = BTreeMap::from([("tier".to_owned(), "prod".to_owned())]);
    let server = ServerDefaults::default();
    // The namespace policy allows GPUs only through its classes.
    let classes = example_classes();
    let ctx = Context {
        namespace: "team-a",
        namespace_labels: &labels,
        policies: &policies,
        classes: &classes,
        profiles: &infergate::engine::ModelProfiles::default(),
        server: &server,
        routes: &NoRoutes,
    };
    let raw: serde_json::Value = serde_json::from_str(SERVICE).expect("fixture");
    let svc: InferenceService = serde_json::from_value(raw.clone()).expect("fixture");
    // Sanity: the fixture is valid and defaulting changes it.
    let d = engine::default_service(&svc, &ctx);
    assert!(!d.filled.is_empty());
    assert!(engine::validate_service(&d.object, Some(&svc), &ctx).allowed());

    c.bench_function("default+validate+diff (typed, 3 KB)", |b| {
        b.iter(|| {
            let svc = black_box(&svc);
            let d = engine::default_service(svc, &ctx);
            let v = engine::validate_service(&d.object, Some(svc), &ctx);
            let before = serde_json::to_value(svc).unwrap_or_default();
            let after = serde_json::to_value(&d.object).unwrap_or_default();
            let patch = json_patch::diff(&before, &after);
            black_box((v.allowed(), patch));
        });
    });

    c.bench_function("decode+default+validate+diff (from JSON text, 3 KB)", |b| {
        b.iter(|| {
            let svc: InferenceService = serde_json::from_str(black_box(SERVICE)).expect("fixture");
            let d = engine::default_service(&svc, &ctx);
            let v = engine::validate_service(&d.object, None, &ctx);
            let before = serde_json::to_value(&svc).unwrap_or_default();
            let after = serde_json::to_value(&d.object).unwrap_or_default();
            black_box((v.allowed(), json_patch::diff(&before, &after)));
        });
    });

    c.bench_function("convert v1beta1 -> v1alpha1 -> v1beta1 (3 KB)", |b| {
        b.iter(|| {
            let down = convert(black_box(raw.clone()), V1ALPHA1).expect("down");
            black_box(convert(down, V1BETA1).expect("up"));
        });
    });
}

/// What one request costs the server past HTTP and TLS: the review body in,
/// the response bytes out (the load bench's bodies and policies).
fn handlers(c: &mut Criterion) {
    let admission = support::admission(
        ClusterState::new(reviews::policies()),
        ServerDefaults::default(),
    );
    let mutate = reviews::admission_review(reviews::service_object(0, false));
    let validate = reviews::admission_review(reviews::service_object(0, true));
    let convert100 = reviews::conversion_review(100);
    let alpha1000 = reviews::alpha_conversion_review(1000);
    let answer = admission.handle(Webhook::Mutate, &mutate).expect("review");
    assert!(
        answer.allowed && answer.mutated,
        "the mutate body gets a patch"
    );
    let answer = admission
        .handle(Webhook::Validate, &validate)
        .expect("review");
    assert!(answer.allowed, "the validate body is admitted");

    c.bench_function(
        "handle /mutate (review bytes in, response bytes out)",
        |b| {
            b.iter(|| {
                let answer = admission
                    .handle(Webhook::Mutate, black_box(&mutate))
                    .expect("review");
                black_box(answer.to_json().expect("json"))
            });
        },
    );
    c.bench_function(
        "handle /validate (review bytes in, response bytes out)",
        |b| {
            b.iter(|| {
                let answer = admission
                    .handle(Webhook::Validate, black_box(&validate))
                    .expect("review");
                black_box(answer.to_json().expect("json"))
            });
        },
    );
    c.bench_function("handle /convert, 1000 v1alpha1 objects to v1beta1", |b| {
        b.iter(|| {
            black_box(infergate::webhook::conversion::convert_review_pieces(
                black_box(&alpha1000),
                &admission.metrics,
            ))
        });
    });
    c.bench_function("handle /convert, 100 objects (bytes in, bytes out)", |b| {
        b.iter(|| {
            black_box(infergate::webhook::conversion::convert_review_pieces(
                black_box(&convert100),
                &admission.metrics,
            ))
        });
    });
}

/// The fit (`docs/capacity.md`): one model on one shape, the tensor the
/// defaults pick, and default + validate of a service on a class with a
/// profile beside the same service without one (the baseline, same run).
fn fit(c: &mut Criterion) {
    use infergate::api::ModelProfile;
    use infergate::engine::capacity::sizing::{choose, fit_model, misfit, sizing};
    let classes = example_classes();
    let profiles: infergate::engine::ModelProfiles = serde_saphyr::from_multiple::<ModelProfile>(
        include_str!("../examples/good/model-profiles.yaml"),
    )
    .expect("profiles example")
    .into_iter()
    .map(|p| (p.metadata.name.unwrap_or_default(), p.spec))
    .collect();
    let policies = snapshot();
    let labels = BTreeMap::from([("tier".to_owned(), "prod".to_owned())]);
    let server = ServerDefaults::default();
    let with_fit = Context {
        namespace: "team-a",
        namespace_labels: &labels,
        policies: &policies,
        classes: &classes,
        profiles: &profiles,
        server: &server,
        routes: &NoRoutes,
    };
    let no_profiles = infergate::engine::ModelProfiles::default();
    let without = Context {
        profiles: &no_profiles,
        ..with_fit
    };
    let svc: InferenceService =
        serde_saphyr::from_str(include_str!("../examples/good/fitted-70b.yaml"))
            .expect("fitted example");
    let d = engine::default_service(&svc, &with_fit);
    assert_eq!(
        d.object.spec.parallelism.as_ref().and_then(|p| p.tensor),
        Some(4)
    );
    assert!(engine::validate_service(&d.object, None, &with_fit).allowed());
    let sized = sizing(&d.object.spec, &classes).expect("sized");

    c.bench_function("fit: one model on one shape", |b| {
        b.iter(|| {
            let m = fit_model(
                &profiles,
                black_box("meta-llama/Llama-3.1-70B-Instruct"),
                &sized,
            )
            .expect("profile");
            black_box(misfit(&sized, &m));
        });
    });
    c.bench_function("fit: the tensor the defaults pick", |b| {
        b.iter(|| black_box(choose(black_box(&svc.spec), &classes, &profiles)));
    });
    for (name, ctx) in [
        ("fit: default+validate, no profile (baseline)", &without),
        ("fit: default+validate, profile and class", &with_fit),
    ] {
        c.bench_function(name, |b| {
            b.iter(|| {
                let d = engine::default_service(black_box(&svc), ctx);
                black_box(engine::validate_service(&d.object, None, ctx).allowed());
            });
        });
    }
}

criterion_group!(benches, bench, handlers, fit);
criterion_main!(benches);
