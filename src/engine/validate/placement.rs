//! Placement rules: the AcceleratorClass a service names (it exists, the
//! type is its vendor, the service fits one of its nodes, the placement
//! does not contradict it), the pod fields that go with it (`/dev/shm`,
//! env, pull secrets), what the policies bound (a class for GPUs, no
//! placement into a pool they do not allow, the PriorityClass), and the
//! AcceleratorClass itself.

use k8s_openapi::api::core::v1::Toleration;

use crate::api::policy::Enforcement;
use crate::api::v1beta1::{EngineSpec, InferenceService};
use crate::api::{AcceleratorClassSpec, AcceleratorType};
use crate::engine::context::Context;
use crate::engine::field_error::FieldError;
use crate::engine::field_path::Path;
use crate::engine::policy::Layer;
use crate::engine::resources;
use crate::engine::verdict::Verdict;

use super::fields::{check_positive_quantity, quoted_list};

/// The rules of section "Placement" for `svc` (defaulted, `spec` its spec
/// path) against the classes of `ctx` and the policies of `layers`
/// (`ratchet`: a running service, or an update that keeps the shape).
pub(super) fn placement_errors(
    v: &mut Verdict,
    spec: &Path<'_>,
    svc: &InferenceService,
    (ctx, layers, ratchet): (&Context, &[Layer<'_>], bool),
) {
    let errs = &mut v.errors;
    let s = &svc.spec;
    if let Some(e) = s.engine.as_ref() {
        check_engine_pod(errs, &spec.child("engine"), e);
    }
    let secrets = spec.child("imagePullSecrets");
    for (i, r) in s.image_pull_secrets.iter().enumerate() {
        if r.name.is_empty() {
            errs.push(FieldError::required(&secrets.index(i).child("name"), ""));
        }
    }
    let placement = spec.child("placement");
    if let Some(p) = s.placement.as_ref()
        && let Some(n) = p.priority_class_name.as_deref()
        && n.is_empty()
    {
        errs.push(FieldError::required(
            &placement.child("priorityClassName"),
            "",
        ));
    }
    if let Some(name) = s.accelerator.as_ref().and_then(|a| a.class.as_deref()) {
        check_class(
            (errs, &mut v.warnings),
            spec,
            svc,
            name,
            (ctx, layers, ratchet),
        );
    }
}

/// The engine's pod fields (`at` is `spec.engine`): `/dev/shm` above 0, no
/// env var with both a value and a source.
fn check_engine_pod(errs: &mut Vec<FieldError>, at: &Path<'_>, e: &EngineSpec) {
    if let Some(q) = e.shm_size.as_ref() {
        check_positive_quantity(errs, &at.child("shmSize"), q);
    }
    let env = at.child("env");
    for (i, var) in e.env.iter().enumerate() {
        if var.value.is_some() && var.value_from.is_some() {
            errs.push(FieldError::invalid(
                &env.index(i).child("valueFrom"),
                "\"\"",
                "may not be specified when `value` is not empty",
            ));
        }
    }
}

/// The AcceleratorClass `name` the service names (`spec` its spec path):
/// it exists, the type is its vendor, a replica fits one of its nodes, the
/// node selector does not contradict the class's.
fn check_class(
    (errs, warnings): (&mut Vec<FieldError>, &mut Vec<String>),
    spec: &Path<'_>,
    svc: &InferenceService,
    name: &str,
    (ctx, layers, ratchet): (&Context, &[Layer<'_>], bool),
) {
    let s = &svc.spec;
    let accelerator = spec.child("accelerator");
    let Some(class) = ctx.classes.get(name) else {
        errs.push(FieldError::not_found(
            &accelerator.child("class"),
            format!("{name:?}"),
        ));
        return;
    };
    let accel = s.accelerator.as_ref().and_then(|a| a.r#type);
    if let Some(t) = accel
        && t != class.vendor
    {
        errs.push(FieldError::invalid(
            &accelerator.child("type"),
            format!("{:?}", t.as_str()),
            &format!(
                "must be {:?}, the vendor of AcceleratorClass {name:?}",
                class.vendor.as_str()
            ),
        ));
    }
    crate::engine::multi_node::check_shape(
        (errs, warnings),
        &spec.child("parallelism"),
        svc,
        (name, class),
        (layers, ratchet),
    );
    let placement = spec.child("placement");
    let selector = placement.child("nodeSelector");
    if let (Some(mine), Some(theirs)) = (
        s.placement.as_ref().and_then(|p| p.node_selector.as_ref()),
        class.node_selector.as_ref(),
    ) {
        for (k, v) in mine {
            if let Some(want) = theirs.get(k)
                && want != v
            {
                errs.push(FieldError::invalid(
                    &selector.key(k),
                    format!("{v:?}"),
                    &format!("AcceleratorClass {name:?} selects {k}={want:?}"),
                ));
            }
        }
    }
}

/// What the policies of `layers` bound in `svc`'s (defaulted) placement,
/// each violation with the enforcement of the policy it breaks:
///
/// - where a policy sets `limits.allowedAcceleratorClasses` or
///   `limits.maxCostPerHourPerNamespace`, a service with GPUs has a class
///   (one error, naming the first such Deny policy, else Warn policy);
/// - under every `allowedAcceleratorClasses`, a `placement.nodeSelector`
///   entry or a `placement.tolerations` item that equals one of a known
///   class's own, and of no class the list allows, reaches a pool the
///   policy does not allow (the service's own class aside: naming it is
///   judged on its own);
/// - under every `allowedPriorityClasses`, `placement.priorityClassName`
///   is one of the list.
pub(super) fn limit_violations(
    spec: &Path<'_>,
    svc: &InferenceService,
    ctx: &Context,
    layers: &[Layer<'_>],
) -> Vec<(Enforcement, FieldError)> {
    let mut out = Vec::new();
    let s = &svc.spec;
    let own_class = s.accelerator.as_ref().and_then(|a| a.class.as_deref());
    if own_class.is_none()
        && resources::gpus_per_replica(svc) > 0
        && let Some((layer, why)) = class_requiring(layers, Enforcement::Deny)
            .or_else(|| class_requiring(layers, Enforcement::Warn))
    {
        out.push((
            layer.enforcement,
            FieldError::required(
                &spec.child("accelerator").child("class"),
                &format!(
                    "a service with GPUs must name an AcceleratorClass ({why} of {})",
                    layer.display()
                ),
            ),
        ));
    }
    let placement = s.placement.as_ref();
    let placement_at = spec.child("placement");
    let (selector_at, tolerations_at) = (
        placement_at.child("nodeSelector"),
        placement_at.child("tolerations"),
    );
    for l in layers {
        let Some(limits) = l.limits else { continue };
        if let Some(allowed) = limits.allowed_accelerator_classes.as_ref()
            && let Some(p) = placement
        {
            let pools = Pools {
                ctx,
                allowed,
                own: own_class,
            };
            for (k, v) in p.node_selector.iter().flatten() {
                let reached = pools.reached(|c| {
                    c.node_selector
                        .as_ref()
                        .is_some_and(|m| m.get(k) == Some(v))
                });
                if !reached.is_empty() {
                    out.push((
                        l.enforcement,
                        FieldError::forbidden(
                            &selector_at.key(k),
                            &format!(
                                "{k}={v:?} selects the nodes of {}, which {} does not allow (limits.allowedAcceleratorClasses: {})",
                                named(&reached),
                                l.display(),
                                quoted_list(allowed)
                            ),
                        ),
                    ));
                }
            }
            for (i, t) in p.tolerations.iter().flatten().enumerate() {
                let reached = pools.reached(|c| {
                    c.tolerations
                        .iter()
                        .flatten()
                        .any(|own| same_toleration(own, t))
                });
                if !reached.is_empty() {
                    out.push((
                        l.enforcement,
                        FieldError::forbidden(
                            &tolerations_at.index(i),
                            &format!(
                                "tolerates the taint of the nodes of {}, which {} does not allow (limits.allowedAcceleratorClasses: {})",
                                named(&reached),
                                l.display(),
                                quoted_list(allowed)
                            ),
                        ),
                    ));
                }
            }
        }
        if let Some(allowed) = limits.allowed_priority_classes.as_ref()
            && let Some(name) = placement.and_then(|p| p.priority_class_name.as_deref())
            && !name.is_empty()
            && !allowed.iter().any(|a| a == name)
        {
            let supported: Vec<&str> = allowed.iter().map(String::as_str).collect();
            out.push((
                l.enforcement,
                FieldError::not_supported(
                    &placement_at.child("priorityClassName"),
                    name,
                    &supported,
                    &format!(" ({})", l.display()),
                ),
            ));
        }
    }
    out
}

/// The first layer of `enforcement` whose limits make a class required
/// for GPUs, and the limit that does.
fn class_requiring<'l, 'a>(
    layers: &'l [Layer<'a>],
    enforcement: Enforcement,
) -> Option<(&'l Layer<'a>, &'static str)> {
    layers
        .iter()
        .filter(|l| l.enforcement == enforcement)
        .find_map(|l| {
            let limits = l.limits?;
            if limits.allowed_accelerator_classes.is_some() {
                Some((l, "limits.allowedAcceleratorClasses"))
            } else if limits.max_cost_per_hour_per_namespace.is_some() {
                Some((l, "limits.maxCostPerHourPerNamespace"))
            } else {
                None
            }
        })
}

/// The classes one policy's `allowedAcceleratorClasses` allows and the
/// others, as the watch cache knows them.
struct Pools<'c, 'x> {
    ctx: &'c Context<'x>,
    allowed: &'c [String],
    /// The service's own class: naming it is judged by the class rules.
    own: Option<&'c str>,
}

impl<'c> Pools<'c, '_> {
    /// The names of the classes the list does not allow (the service's
    /// own aside) that `has` holds for, or none when an allowed class's
    /// does too.
    fn reached(&self, has: impl Fn(&AcceleratorClassSpec) -> bool) -> Vec<&'c str> {
        let allowed_has = self
            .allowed
            .iter()
            .filter_map(|n| self.ctx.classes.get(n))
            .any(&has);
        if allowed_has {
            return Vec::new();
        }
        self.ctx
            .classes
            .iter()
            .filter(|(n, c)| {
                !self.allowed.iter().any(|a| a == *n) && Some(n.as_str()) != self.own && has(c)
            })
            .map(|(n, _)| n.as_str())
            .collect()
    }
}

/// `AcceleratorClass "a"` or `AcceleratorClasses "a", "b"`.
fn named(classes: &[&str]) -> String {
    match classes {
        [one] => format!("AcceleratorClass {one:?}"),
        many => format!("AcceleratorClasses {}", quoted_list(many)),
    }
}

/// Two tolerations that tolerate the same taints: key, operator (absent is
/// `Equal`), value and effect alike; how long a toleration lasts under a
/// `NoExecute` taint does not change which nodes it reaches.
fn same_toleration(a: &Toleration, b: &Toleration) -> bool {
    fn text(s: &Option<String>) -> &str {
        s.as_deref().unwrap_or_default()
    }
    fn operator(t: &Toleration) -> &str {
        t.operator.as_deref().unwrap_or("Equal")
    }
    text(&a.key) == text(&b.key)
        && operator(a) == operator(b)
        && text(&a.value) == text(&b.value)
        && text(&a.effect) == text(&b.effect)
}

/// The AcceleratorClass `class` as its CRD's schema and CEL rules judge it
/// (`infergate check` repeats them offline).
#[must_use]
pub fn validate_accelerator_class(class: &AcceleratorClassSpec) -> Verdict {
    let mut v = Verdict::default();
    let errs = &mut v.errors;
    let spec = Path::new("spec");
    if class.vendor == AcceleratorType::None {
        errs.push(FieldError::not_supported(
            &spec.child("vendor"),
            "none",
            &["nvidia", "amd", "intel-gaudi", "google-tpu"],
            "",
        ));
    }
    super::fields::check_at_least(
        errs,
        &spec.child("devicesPerNode"),
        Some(class.devices_per_node),
        1,
    );
    check_positive_quantity(
        errs,
        &spec.child("memoryPerDevice"),
        &class.memory_per_device,
    );
    if let Some(c) = class.cost_per_device_hour.as_deref()
        && !is_decimal(c)
    {
        errs.push(FieldError::invalid(
            &spec.child("costPerDeviceHour"),
            format!("{c:?}"),
            "must be a decimal such as 4.10",
        ));
    }
    if let Some(r) = class.resource_name.as_deref()
        && (r.is_empty() || r.chars().any(char::is_whitespace))
    {
        errs.push(FieldError::invalid(
            &spec.child("resourceName"),
            format!("{r:?}"),
            "must be a resource name such as nvidia.com/gpu",
        ));
    }
    v
}

fn is_decimal(s: &str) -> bool {
    let (whole, frac) = s.split_once('.').unwrap_or((s, "1"));
    !whole.is_empty()
        && !frac.is_empty()
        && whole.bytes().all(|b| b.is_ascii_digit())
        && frac.bytes().all(|b| b.is_ascii_digit())
}
