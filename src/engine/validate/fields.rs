//! Checks of fields that services and policies share (quantities, health
//! checks, metrics) and how lists are quoted in messages.

use std::fmt::Display;
use std::sync::LazyLock;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube_quantity::ParsedQuantity;

use crate::api::rollout::PrometheusGate;
use crate::api::{HealthCheckSpec, MetricsSpec};
use crate::engine::builtin::{
    DEFAULT_HEALTH_INTERVAL, DEFAULT_HEALTH_PATH, DEFAULT_HEALTH_TIMEOUT,
};
use crate::engine::duration::{parse_gateway_duration, parse_go_duration};
use crate::engine::field_error::FieldError;
use crate::engine::field_path::Path;
use crate::engine::promql;

static ZERO: LazyLock<Option<ParsedQuantity>> =
    LazyLock::new(|| ParsedQuantity::try_from("0").ok());

/// A quantity must parse and be non-negative.
pub(super) fn check_quantity(errs: &mut Vec<FieldError>, field: &Path<'_>, q: Option<&Quantity>) {
    let Some(q) = q else { return };
    if plain_quantity(&q.0) {
        return;
    }
    match ParsedQuantity::try_from(q) {
        Err(_) => errs.push(FieldError::invalid(
            field,
            format!("{:?}", q.0),
            "must be a Kubernetes quantity such as 500m, 4 or 16Gi",
        )),
        Ok(p) => {
            if ZERO.as_ref().is_some_and(|z| p < *z) {
                errs.push(FieldError::invalid(
                    field,
                    format!("{:?}", q.0),
                    "must be greater than or equal to 0",
                ));
            }
        }
    }
}

/// Whether `s` is digits and at most one unit suffix (`4`, `500m`,
/// `16Gi`): a non-negative quantity, as the parser would find, without
/// parsing (at most 12 digits and units up to peta: well inside what the
/// parser reads exactly).
fn plain_quantity(s: &str) -> bool {
    const SUFFIXES: [&str; 12] = [
        "", "m", "k", "M", "G", "T", "P", "Ki", "Mi", "Gi", "Ti", "Pi",
    ];
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    (1..=12).contains(&digits) && SUFFIXES.contains(&&s[digits..])
}

/// An image a service needs: set, not empty, without whitespace; `missing`
/// says where one can come from.
pub(super) fn check_image(
    errs: &mut Vec<FieldError>,
    field: &Path<'_>,
    image: Option<&str>,
    missing: &str,
) {
    match image {
        None | Some("") => errs.push(FieldError::required(field, missing)),
        Some(img) if img.chars().any(char::is_whitespace) => errs.push(FieldError::invalid(
            field,
            format!("{img:?}"),
            "must not contain whitespace",
        )),
        Some(_) => {}
    }
}

/// A quantity must parse and be greater than 0.
pub(super) fn check_positive_quantity(errs: &mut Vec<FieldError>, field: &Path<'_>, q: &Quantity) {
    let before = errs.len();
    check_quantity(errs, field, Some(q));
    if errs.len() == before
        && let (Ok(p), Some(zero)) = (ParsedQuantity::try_from(q), ZERO.as_ref())
        && p == *zero
    {
        errs.push(FieldError::invalid(
            field,
            format!("{:?}", q.0),
            "must be greater than 0",
        ));
    }
}

/// Health check rules; unset fields take their built-in values.
pub(super) fn check_health(
    errs: &mut Vec<FieldError>,
    at: &Path<'_>,
    hc: Option<&HealthCheckSpec>,
) {
    let path = hc
        .and_then(|h| h.path.as_deref())
        .unwrap_or(DEFAULT_HEALTH_PATH);
    if !path.starts_with('/') {
        errs.push(FieldError::invalid(
            &at.child("path"),
            format!("{path:?}"),
            "must start with '/'",
        ));
    }
    let mut parse = |name: &str, value: &str| -> Option<Duration> {
        match parse_go_duration(value) {
            Ok(d) if d.is_zero() => {
                errs.push(FieldError::invalid(
                    &at.child(name),
                    format!("{value:?}"),
                    "must be greater than 0",
                ));
                None
            }
            Ok(d) => Some(d),
            Err(e) => {
                errs.push(FieldError::invalid(
                    &at.child(name),
                    format!("{value:?}"),
                    &e,
                ));
                None
            }
        }
    };
    let interval_s = hc
        .and_then(|h| h.interval.as_deref())
        .unwrap_or(DEFAULT_HEALTH_INTERVAL);
    let timeout_s = hc
        .and_then(|h| h.timeout.as_deref())
        .unwrap_or(DEFAULT_HEALTH_TIMEOUT);
    let interval = parse("interval", interval_s);
    let timeout = parse("timeout", timeout_s);
    if let (Some(i), Some(t)) = (interval, timeout)
        && t > i
    {
        errs.push(FieldError::invalid(
            &at.child("timeout"),
            format!("{timeout_s:?}"),
            &format!(
                "must be less than or equal to {} ({interval_s})",
                at.child("interval")
            ),
        ));
    }
}

/// The fields of `spec.metrics` (or a policy's `defaults.metrics`) that are set.
pub(super) fn check_metrics(errs: &mut Vec<FieldError>, at: &Path<'_>, m: Option<&MetricsSpec>) {
    let Some(m) = m else { return };
    if let Some(port) = m.port
        && !(1..=65535).contains(&port)
    {
        errs.push(FieldError::invalid(
            &at.child("port"),
            port,
            "must be between 1 and 65535, inclusive",
        ));
    }
    if let Some(path) = &m.path
        && (!path.starts_with('/') || path.chars().any(|c| c.is_whitespace() || c.is_control()))
    {
        errs.push(FieldError::invalid(
            &at.child("path"),
            format!("{path:?}"),
            "must start with '/' and contain no whitespace",
        ));
    }
    if let Some(interval) = &m.interval {
        match parse_gateway_duration(interval) {
            Ok(d) if d.is_zero() => errs.push(FieldError::invalid(
                &at.child("interval"),
                format!("{interval:?}"),
                "must be greater than 0",
            )),
            Ok(_) => {}
            Err(e) => errs.push(FieldError::invalid(
                &at.child("interval"),
                format!("{interval:?}"),
                &e,
            )),
        }
    }
}

/// The share of GPU memory the engine may take, when set: above 0, at most 1.
pub(super) fn check_memory_share(errs: &mut Vec<FieldError>, at: &Path<'_>, share: Option<f64>) {
    if let Some(u) = share
        && !(u > 0.0 && u <= 1.0)
    {
        errs.push(FieldError::invalid(at, u, "must be above 0 and at most 1"));
    }
}

/// The gate query of the rollout plan at `at` (`spec.rollout`, a policy's
/// `spec.defaults.rollout`), its placeholders filled with `sample`
/// (namespace, service, canary).
pub(super) fn check_gate_query(
    errs: &mut Vec<FieldError>,
    at: &Path<'_>,
    gate: &PrometheusGate,
    sample: (&str, &str, &str),
) {
    let analysis = at.child("analysis");
    let prometheus = analysis.child("prometheus");
    promql::check_query(errs, &prometheus.child("query"), &gate.query, sample);
}

/// The Gateway API duration `value`, or `None` and an error at `at`.
pub(super) fn check_duration(
    errs: &mut Vec<FieldError>,
    at: &Path<'_>,
    value: &str,
) -> Option<Duration> {
    match parse_gateway_duration(value) {
        Ok(d) => Some(d),
        Err(e) => {
            errs.push(FieldError::invalid(at, format!("{value:?}"), &e));
            None
        }
    }
}

/// `"a", "b", "c"`.
pub(super) fn quoted_list<T: Display>(items: &[T]) -> String {
    items
        .iter()
        .map(|i| format!("\"{i}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A count (of replicas, of devices), when set, is at least `min`.
pub(super) fn check_at_least<T: PartialOrd + std::fmt::Display>(
    errs: &mut Vec<FieldError>,
    at: &Path<'_>,
    value: Option<T>,
    min: T,
) {
    if let Some(r) = value
        && r < min
    {
        errs.push(FieldError::invalid(
            at,
            r,
            &format!("must be greater than or equal to {min}"),
        ));
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// What the shortcut passes, the parser reads as a quantity >= 0.
        #[test]
        fn a_plain_quantity_parses_and_is_not_negative(
            s in "[0-9]{1,12}(m|k|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?|[0-9a-zA-Z.+-]{0,8}",
        ) {
            if plain_quantity(&s) {
                let q = ParsedQuantity::try_from(s.as_str());
                prop_assert!(q.is_ok(), "{s}: {q:?}");
                prop_assert!(ZERO.as_ref().is_some_and(|z| q.unwrap() >= *z), "{s}");
            }
        }
    }

    #[test]
    fn the_shortcut_takes_plain_forms_only() {
        for s in ["4", "500m", "16Gi", "000", "999999999999Pi"] {
            assert!(plain_quantity(s), "{s}");
        }
        for s in [
            "",
            "-1",
            "1.5",
            "1e3",
            "Gi",
            "16GiB",
            "1E",
            "1Ei",
            "9999999999999",
        ] {
            assert!(!plain_quantity(s), "{s}");
        }
    }
}
