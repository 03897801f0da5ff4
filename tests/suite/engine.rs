//! Engine and conversion without a cluster: property tests (defaulting is
//! idempotent, conversion round-trips both ways) and one test per
//! policy/validation rule that the examples cannot express on their own.
//! The shared set-up (a valid service, a context to run the engine in,
//! policies with limits) is here; the tests, a module per concern:
//!
//! - [`strategies`]: the generators of the properties: InferenceServices of
//!   both versions (spec and status) and policy snapshots.
//! - [`properties`]: conversion round-trips both ways, the webhook's
//!   streaming path converts as the typed one, defaulting is idempotent
//!   (and its patch adds only), every validation error names its field.
//! - [`conversion`]: cases the properties cannot say: kubectl-shaped and
//!   unknown metadata, the stash annotation (escaped, stale, edited through
//!   the old version), what cannot be converted.
//! - [`policies`]: limits and defaults across policies: the strictest limit
//!   wins and names its policy, `Warn` enforcement, namespace selectors,
//!   graph hosts, layering by priority, a namespace policy only tightens,
//!   policy validation, rollout gate queries.
//! - [`full_pool`]: the full-pool fields: one replica always serves, the
//!   policies' `maxUnavailable` (Deny and Warn), policies validated,
//!   defaults layered and idempotent.
//! - [`picker`]: the endpoint picker: replicas and requests within the
//!   limits, policy defaults, the round trip through v1alpha1.
//! - [`services`]: service rules: an identical canary, the immutable
//!   backend, route collisions, every violation at once, the GPU helpers,
//!   the storage shape.

#[path = "engine/conversion.rs"]
mod conversion;
#[path = "engine/full_pool.rs"]
mod full_pool;
#[path = "engine/picker.rs"]
mod picker;
#[path = "engine/policies.rs"]
mod policies;
#[path = "engine/properties.rs"]
mod properties;
#[path = "engine/services.rs"]
mod services;
#[path = "engine/strategies.rs"]
mod strategies;

use std::collections::BTreeMap;

use infergate::api::policy::{
    ClusterInferencePolicySpec, Enforcement, InferencePolicySpec, PolicyLimits,
};
use infergate::api::v1beta1::{EngineSpec, InferenceService};
use infergate::api::{ClusterInferencePolicy, InferencePolicy};
use infergate::engine::{
    self, Context, NoRoutes, PolicySnapshot, RouteIndex, ServerDefaults, Verdict,
};

/// Run `f` in a context of namespace `team-a` with `labels`, `policies` and
/// `routes` (no classes, no profiles, the server's built-in defaults).
fn ctx_run<R>(
    policies: &PolicySnapshot,
    labels: &BTreeMap<String, String>,
    routes: &dyn RouteIndex,
    f: impl FnOnce(&Context) -> R,
) -> R {
    let server = ServerDefaults::default();
    let ctx = Context {
        namespace: "team-a",
        namespace_labels: labels,
        policies,
        classes: &infergate::engine::AcceleratorClasses::new(),
        profiles: &infergate::engine::ModelProfiles::default(),
        server: &server,
        routes,
    };
    f(&ctx)
}

/// `team-a/chat`: a model and an engine image, nothing else.
fn valid_service() -> InferenceService {
    let mut s = InferenceService::new("chat", Default::default());
    s.metadata.namespace = Some("team-a".to_owned());
    s.spec.model.r#ref = "llama3-8b-q4".to_owned();
    s.spec.engine = Some(EngineSpec {
        image: Some("registry.example.com/vllm:0.9".to_owned()),
        ..Default::default()
    });
    s
}

/// Validate `s` as created (no old object) under the policies `p`.
fn validate(s: &InferenceService, p: &PolicySnapshot) -> Verdict {
    let labels = BTreeMap::new();
    ctx_run(p, &labels, &NoRoutes, |c| {
        engine::validate_service(s, None, c)
    })
}

/// A ClusterInferencePolicy `name` with `enforcement` and `limits`.
fn cluster(name: &str, enforcement: Enforcement, limits: PolicyLimits) -> ClusterInferencePolicy {
    ClusterInferencePolicy::new(
        name,
        ClusterInferencePolicySpec {
            enforcement,
            limits: Some(limits),
            ..Default::default()
        },
    )
}

/// An InferencePolicy `team-a/name` with `limits`.
fn namespaced(name: &str, limits: PolicyLimits) -> InferencePolicy {
    let mut p = InferencePolicy::new(
        name,
        InferencePolicySpec {
            limits: Some(limits),
            ..Default::default()
        },
    );
    p.metadata.namespace = Some("team-a".to_owned());
    p
}

/// The verdict's errors as the API server prints them.
fn errors(v: &Verdict) -> Vec<String> {
    v.errors.iter().map(ToString::to_string).collect()
}
