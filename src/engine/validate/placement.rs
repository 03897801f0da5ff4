//! Placement rules: the AcceleratorClass a service names (it exists, the
//! type is its vendor, the service fits one of its nodes, the placement
//! does not contradict it), the pod fields that go with it (`/dev/shm`,
//! env, pull secrets), and the AcceleratorClass itself.

use crate::api::v1beta1::InferenceService;
use crate::api::{AcceleratorClassSpec, AcceleratorType};
use crate::engine::builtin::DEFAULT_PARALLELISM;
use crate::engine::context::Context;
use crate::engine::field_error::FieldError;
use crate::engine::verdict::Verdict;

use super::fields::check_positive_quantity;

/// The rules of section "Placement" for `svc` (defaulted) against the classes of `ctx`.
pub(super) fn placement_errors(errs: &mut Vec<FieldError>, svc: &InferenceService, ctx: &Context) {
    let s = &svc.spec;
    if let Some(e) = s.engine.as_ref() {
        if let Some(q) = e.shm_size.as_ref() {
            check_positive_quantity(errs, "spec.engine.shmSize", q);
        }
        for (i, var) in e.env.iter().enumerate() {
            if var.value.is_some() && var.value_from.is_some() {
                errs.push(FieldError::invalid(
                    format!("spec.engine.env[{i}].valueFrom"),
                    "\"\"",
                    "may not be specified when `value` is not empty",
                ));
            }
        }
    }
    for (i, r) in s.image_pull_secrets.iter().enumerate() {
        if r.name.is_empty() {
            errs.push(FieldError::required(
                format!("spec.imagePullSecrets[{i}].name"),
                "",
            ));
        }
    }
    if let Some(p) = s.placement.as_ref()
        && let Some(n) = p.priority_class_name.as_deref()
        && n.is_empty()
    {
        errs.push(FieldError::required("spec.placement.priorityClassName", ""));
    }

    let Some(name) = s.accelerator.as_ref().and_then(|a| a.class.as_deref()) else {
        return;
    };
    let Some(class) = ctx.classes.get(name) else {
        errs.push(FieldError::not_found(
            "spec.accelerator.class",
            format!("{name:?}"),
        ));
        return;
    };
    let accel = s.accelerator.as_ref().and_then(|a| a.r#type);
    if let Some(t) = accel
        && t != class.vendor
    {
        errs.push(FieldError::invalid(
            "spec.accelerator.type",
            format!("{:?}", t.as_str()),
            &format!(
                "must be {:?}, the vendor of AcceleratorClass {name:?}",
                class.vendor.as_str()
            ),
        ));
    }
    let par = s.parallelism.as_ref();
    let tensor = par.and_then(|p| p.tensor).unwrap_or(DEFAULT_PARALLELISM);
    let pipeline = par.and_then(|p| p.pipeline).unwrap_or(DEFAULT_PARALLELISM);
    let devices = i64::from(tensor) * i64::from(pipeline);
    if devices > i64::from(class.devices_per_node) {
        errs.push(FieldError::invalid(
            "spec.parallelism",
            devices,
            &format!(
                "tensor {tensor} x pipeline {pipeline} devices per replica must be at most the {} devices per node of AcceleratorClass {name:?}",
                class.devices_per_node
            ),
        ));
    }
    if let (Some(mine), Some(theirs)) = (
        s.placement.as_ref().and_then(|p| p.node_selector.as_ref()),
        class.node_selector.as_ref(),
    ) {
        for (k, v) in mine {
            if let Some(want) = theirs.get(k)
                && want != v
            {
                errs.push(FieldError::invalid(
                    format!("spec.placement.nodeSelector[{k}]"),
                    format!("{v:?}"),
                    &format!("AcceleratorClass {name:?} selects {k}={want:?}"),
                ));
            }
        }
    }
}

/// The AcceleratorClass `class` as its CRD's schema and CEL rules judge it
/// (`infergate check` repeats them offline).
#[must_use]
pub fn validate_accelerator_class(class: &AcceleratorClassSpec) -> Verdict {
    let mut v = Verdict::default();
    let errs = &mut v.errors;
    if class.vendor == AcceleratorType::None {
        errs.push(FieldError::not_supported(
            "spec.vendor",
            "none",
            &["nvidia", "amd", "intel-gaudi", "google-tpu"],
            "",
        ));
    }
    if class.devices_per_node < 1 {
        errs.push(FieldError::invalid(
            "spec.devicesPerNode",
            class.devices_per_node,
            "must be greater than or equal to 1",
        ));
    }
    check_positive_quantity(errs, "spec.memoryPerDevice", &class.memory_per_device);
    if let Some(c) = class.cost_per_device_hour.as_deref()
        && !is_decimal(c)
    {
        errs.push(FieldError::invalid(
            "spec.costPerDeviceHour",
            format!("{c:?}"),
            "must be a decimal such as 4.10",
        ));
    }
    if let Some(r) = class.resource_name.as_deref()
        && (r.is_empty() || r.chars().any(char::is_whitespace))
    {
        errs.push(FieldError::invalid(
            "spec.resourceName",
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
