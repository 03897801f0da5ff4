//! Policy resolution: which policies apply to a namespace, in which order.
//!
//! Layers, highest first: InferencePolicy objects of the namespace (highest
//! `spec.priority` first, ties by name), then ClusterInferencePolicy objects
//! whose `namespaceSelector` matches (same order). Defaults come from the
//! first layer that sets a field; limits come from every layer.

use crate::api::policy::{Enforcement, PolicyDefaults, PolicyLimits};

use super::context::Context;

/// One applicable policy, reduced to what the engine needs.
#[derive(Clone, Copy, Debug)]
pub struct Layer<'a> {
    /// `InferencePolicy` or `ClusterInferencePolicy`.
    pub kind: &'static str,
    /// Namespace of an InferencePolicy.
    pub namespace: Option<&'a str>,
    /// Policy name.
    pub name: &'a str,
    /// `spec.priority`.
    pub priority: i32,
    /// Deny or Warn.
    pub enforcement: Enforcement,
    /// The policy's defaults.
    pub defaults: Option<&'a PolicyDefaults>,
    /// The policy's limits.
    pub limits: Option<&'a PolicyLimits>,
}

impl Layer<'_> {
    /// Provenance source: `InferencePolicy/team-a/defaults`, `ClusterInferencePolicy/platform`.
    #[must_use]
    pub fn source(&self) -> String {
        // Pushed, not formatted: written once per layer on every review
        // that takes a default from it.
        let ns = self.namespace.unwrap_or("");
        let mut s = String::with_capacity(self.kind.len() + ns.len() + self.name.len() + 2);
        s.push_str(self.kind);
        s.push('/');
        if let Some(ns) = self.namespace {
            s.push_str(ns);
            s.push('/');
        }
        s.push_str(self.name);
        s
    }

    /// How messages name the policy: `ClusterInferencePolicy "platform"`.
    #[must_use]
    pub fn display(&self) -> String {
        match self.namespace {
            Some(ns) => format!("{} \"{ns}/{}\"", self.kind, self.name),
            None => format!("{} \"{}\"", self.kind, self.name),
        }
    }
}

/// The layer of a policy `$p` of either kind: both specs carry `priority`,
/// `enforcement`, `defaults` and `limits`.
macro_rules! layer {
    ($kind:literal, $namespace:expr, $p:expr) => {
        Layer {
            kind: $kind,
            namespace: $namespace,
            name: $p.metadata.name.as_deref().unwrap_or_default(),
            priority: $p.spec.priority,
            enforcement: $p.spec.enforcement,
            defaults: $p.spec.defaults.as_ref(),
            limits: $p.spec.limits.as_ref(),
        }
    };
}

/// The layers that apply to `ctx.namespace`, highest first.
#[must_use]
pub fn layers<'a>(ctx: &Context<'a>) -> Vec<Layer<'a>> {
    let mut ns: Vec<Layer<'a>> = ctx
        .policies
        .namespaced
        .iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(ctx.namespace))
        .map(|p| layer!("InferencePolicy", p.metadata.namespace.as_deref(), p))
        .collect();
    sort_layers(&mut ns);
    ns.extend(cluster_layers(ctx));
    ns
}

/// The ClusterInferencePolicy layers whose selector matches `ctx.namespace_labels`, highest first.
#[must_use]
pub fn cluster_layers<'a>(ctx: &Context<'a>) -> Vec<Layer<'a>> {
    let mut cl: Vec<Layer<'a>> = ctx
        .policies
        .cluster
        .iter()
        .filter(|p| {
            p.spec
                .namespace_selector
                .as_ref()
                .is_none_or(|s| super::selector::matches(s, ctx.namespace_labels))
        })
        .map(|p| layer!("ClusterInferencePolicy", None, p))
        .collect();
    sort_layers(&mut cl);
    cl
}

fn sort_layers(v: &mut [Layer<'_>]) {
    v.sort_by(|a, b| b.priority.cmp(&a.priority).then_with(|| a.name.cmp(b.name)));
}

/// The first layer whose defaults yield `Some`, with that layer's index.
pub fn first_default<'a, T>(
    layers: &[Layer<'a>],
    get: impl Fn(&'a PolicyDefaults) -> Option<T>,
) -> Option<(T, usize)> {
    layers
        .iter()
        .enumerate()
        .find_map(|(i, l)| l.defaults.and_then(&get).map(|v| (v, i)))
}

/// A numeric upper bound and the policy that sets it.
#[derive(Clone, Debug)]
pub struct Bound<'a, T> {
    /// The bound.
    pub value: T,
    /// The policy setting it.
    pub layer: Layer<'a>,
}

/// The strictest (smallest) bound among Deny policies and among Warn policies.
pub fn strictest<'a, T: PartialOrd + Clone>(
    layers: &[Layer<'a>],
    get: impl Fn(&'a PolicyLimits) -> Option<T>,
) -> (Option<Bound<'a, T>>, Option<Bound<'a, T>>) {
    let mut deny: Option<Bound<'a, T>> = None;
    let mut warn: Option<Bound<'a, T>> = None;
    for l in layers {
        let Some(v) = l.limits.and_then(&get) else {
            continue;
        };
        let slot = match l.enforcement {
            Enforcement::Deny => &mut deny,
            Enforcement::Warn => &mut warn,
        };
        if slot.as_ref().is_none_or(|b| v < b.value) {
            *slot = Some(Bound {
                value: v,
                layer: *l,
            });
        }
    }
    (deny, warn)
}
