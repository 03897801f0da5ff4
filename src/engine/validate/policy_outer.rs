//! A namespace policy against each cluster policy over it: it may tighten
//! a cluster limit, never loosen it, and its defaults respect the cluster
//! limits.

use std::fmt::Display;

use crate::api::AcceleratorType;
use crate::api::policy::{Enforcement, PolicyDefaults, PolicyLimits};
use crate::engine::duration::parse_gateway_duration;
use crate::engine::field_error::FieldError;
use crate::engine::field_path::Path;
use crate::engine::graph_source;
use crate::engine::policy::Layer;
use crate::engine::verdict::Verdict;

use super::fields::quoted_list;
use super::policy_defaults::{
    default_max_unavailable, default_priority_class, image_defaults, replica_defaults,
};

/// The namespace policy's `defaults` and `limits` (`spec` is its spec
/// path) against the cluster layer `outer`: errors under a Deny policy,
/// warnings under a Warn one.
pub(super) fn check_against(
    v: &mut Verdict,
    spec: &Path<'_>,
    defaults: Option<&PolicyDefaults>,
    limits: Option<&PolicyLimits>,
    outer: &Layer<'_>,
) {
    let Some(theirs) = outer.limits else {
        return;
    };
    let mut out: Vec<FieldError> = Vec::new();
    let who = outer.display();
    let none = PolicyLimits::default();
    let mine = limits.unwrap_or(&none);
    let at = spec.child("limits");
    check_bounds(&mut out, &at, mine, theirs, &who);
    check_lists(&mut out, &at, mine, theirs, &who);
    if let Some(d) = defaults {
        check_defaults(&mut out, &spec.child("defaults"), d, theirs, &who);
    }
    match outer.enforcement {
        Enforcement::Deny => v.errors.extend(out),
        Enforcement::Warn => v.warnings.extend(out.iter().map(ToString::to_string)),
    }
}

/// The numbers and the request timeout a policy bounds (`at` is `spec.limits`).
fn check_bounds(
    out: &mut Vec<FieldError>,
    at: &Path<'_>,
    l: &PolicyLimits,
    ol: &PolicyLimits,
    who: &str,
) {
    for (field, mine, theirs) in [
        ("maxReplicas", l.max_replicas, ol.max_replicas),
        ("maxCanaryWeight", l.max_canary_weight, ol.max_canary_weight),
        (
            "maxGPUsPerReplica",
            l.max_gpus_per_replica,
            ol.max_gpus_per_replica,
        ),
        ("maxUnavailable", l.max_unavailable, ol.max_unavailable),
        (
            "maxNodesPerReplica",
            l.max_nodes_per_replica,
            ol.max_nodes_per_replica,
        ),
    ] {
        if let (Some(m), Some(t)) = (mine, theirs)
            && m > t
        {
            out.push(FieldError::invalid(
                &at.child(field),
                m,
                &format!("may not loosen the limit {t} of {who}"),
            ));
        }
    }
    if let (Some(m), Some(t)) = (
        l.max_request_timeout.as_deref(),
        ol.max_request_timeout.as_deref(),
    ) && let (Ok(md), Ok(td)) = (parse_gateway_duration(m), parse_gateway_duration(t))
        && md > td
    {
        out.push(FieldError::invalid(
            &at.child("maxRequestTimeout"),
            format!("{m:?}"),
            &format!("may not loosen the limit {t} of {who}"),
        ));
    }
}

/// The allow lists (`at` is `spec.limits`): every entry of the namespace
/// policy's list is within the cluster policy's.
fn check_lists(
    out: &mut Vec<FieldError>,
    at: &Path<'_>,
    l: &PolicyLimits,
    ol: &PolicyLimits,
    who: &str,
) {
    let quoted = |s: &String| format!("{s:?}");
    if let (Some(mine), Some(theirs)) = (&l.allowed_image_registries, &ol.allowed_image_registries)
    {
        let within = |p: &String| theirs.iter().any(|t| p.starts_with(t.as_str()));
        let field = at.child("allowedImageRegistries");
        let list = List {
            mine,
            theirs,
            what: "registries",
            who,
        };
        list.check(out, &field, quoted, within);
    }
    if let (Some(mine), Some(theirs)) = (&l.allowed_graph_hosts, &ol.allowed_graph_hosts) {
        let hosts = at.child("allowedGraphHosts");
        out.extend(graph_source::policy_host_errors(&hosts, mine, Some((theirs, who))).1);
    }
    if let (Some(mine), Some(theirs)) = (&l.allowed_accelerators, &ol.allowed_accelerators) {
        let within = |a: &AcceleratorType| *a == AcceleratorType::None || theirs.contains(a);
        let shown = |a: &AcceleratorType| format!("{:?}", a.as_str());
        let field = at.child("allowedAccelerators");
        let list = List {
            mine,
            theirs,
            what: "accelerators",
            who,
        };
        list.check(out, &field, shown, within);
    }
    for (field, mine, theirs, what) in [
        (
            "allowedAcceleratorClasses",
            &l.allowed_accelerator_classes,
            &ol.allowed_accelerator_classes,
            "accelerator classes",
        ),
        (
            "allowedPriorityClasses",
            &l.allowed_priority_classes,
            &ol.allowed_priority_classes,
            "priority classes",
        ),
    ] {
        if let (Some(mine), Some(theirs)) = (mine, theirs) {
            let list = List {
                mine,
                theirs,
                what,
                who,
            };
            list.check(out, &at.child(field), quoted, |c| theirs.contains(c));
        }
    }
}

/// A namespace policy's allow list against a cluster policy's.
struct List<'a, T> {
    mine: &'a [T],
    theirs: &'a [T],
    /// What the list allows, in the message (`registries`).
    what: &'a str,
    /// The cluster policy.
    who: &'a str,
}

impl<T: Display> List<'_, T> {
    /// An error at `at[i]` for each entry of `mine` not `within` `theirs`.
    fn check(
        &self,
        out: &mut Vec<FieldError>,
        at: &Path<'_>,
        shown: impl Fn(&T) -> String,
        within: impl Fn(&T) -> bool,
    ) {
        for (i, entry) in self.mine.iter().enumerate() {
            if !within(entry) {
                out.push(FieldError::invalid(
                    &at.index(i),
                    shown(entry),
                    &format!(
                        "may not loosen the allowed {} {} of {}",
                        self.what,
                        quoted_list(self.theirs),
                        self.who
                    ),
                ));
            }
        }
    }
}

/// The namespace policy's defaults `d` (`at` is `spec.defaults`) within
/// the cluster policy's limits `ol`.
fn check_defaults(
    out: &mut Vec<FieldError>,
    at: &Path<'_>,
    d: &PolicyDefaults,
    ol: &PolicyLimits,
    who: &str,
) {
    let accelerator = at.child("accelerator");
    let placement = at.child("placement");
    for (field, name, list) in [
        (
            accelerator.child("class"),
            d.accelerator.as_ref().and_then(|a| a.class.as_deref()),
            ol.allowed_accelerator_classes.as_ref(),
        ),
        (
            placement.child("priorityClassName"),
            default_priority_class(d),
            ol.allowed_priority_classes.as_ref(),
        ),
    ] {
        if let (Some(name), Some(list)) = (name, list)
            && !list.iter().any(|c| c == name)
        {
            out.push(FieldError::invalid(
                &field,
                format!("{name:?}"),
                &format!("must be one of {} ({who})", quoted_list(list)),
            ));
        }
    }
    if let Some(max) = ol.max_replicas {
        replica_defaults(at, d, |field, r| {
            if r > max {
                out.push(FieldError::invalid(
                    field,
                    r,
                    &format!("must be at most {max} ({who})"),
                ));
            }
        });
    }
    if let (Some(n), Some(max)) = (default_max_unavailable(d), ol.max_unavailable)
        && n > max
    {
        let rollout = at.child("rollout");
        out.push(FieldError::invalid(
            &rollout.child("maxUnavailable"),
            n,
            &format!("must be at most {max} ({who})"),
        ));
    }
    let routing = at.child("routing");
    if let (Some(t), Some(max)) = (
        d.routing
            .as_ref()
            .and_then(|r| r.request_timeout.as_deref()),
        ol.max_request_timeout.as_deref(),
    ) && let (Ok(td), Ok(md)) = (parse_gateway_duration(t), parse_gateway_duration(max))
        && td > md
    {
        out.push(FieldError::invalid(
            &routing.child("requestTimeout"),
            format!("{t:?}"),
            &format!("must be at most {max} ({who})"),
        ));
    }
    if let Some(list) = ol.allowed_image_registries.as_ref() {
        image_defaults(at, d, |field, img| {
            if !list.iter().any(|p| img.starts_with(p.as_str())) {
                out.push(FieldError::invalid(
                    field,
                    format!("{img:?}"),
                    &format!("must start with one of {} ({who})", quoted_list(list)),
                ));
            }
        });
    }
}
