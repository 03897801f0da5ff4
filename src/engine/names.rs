//! Derived child names and label syntax: every child name (`S`, `S-canary`, ...)
//! must be a DNS-1035 label of at most 63 characters, every label value at most
//! 63 characters; a name that cannot fit is an admission error, never truncated.
//!
//! Every child name must be a DNS-1035 label of at most 63 characters
//! (a RayService at most 47, KubeRay's limit); every label value at most
//! 63 characters. Nothing is truncated: a name that cannot fit is an error
//! that names the child.

use kube::ResourceExt;

use crate::api::v1beta1::{Backend, InferenceService};

use super::field_error::FieldError;
use super::field_path::Path;

/// Longest DNS-1035 label / label value.
pub const MAX_LABEL: usize = 63;
/// Longest RayService name KubeRay accepts.
pub const MAX_RAYSERVICE_NAME: usize = 47;

/// Name of the primary children (Deployment, Service, HPA, HTTPRoute, RayService): `S`.
#[must_use]
pub fn primary_name(svc: &InferenceService) -> String {
    svc.name_any()
}

/// Name of the endpoint picker's objects of the pool `pool`: `<pool>-epp`.
#[must_use]
pub fn epp_name(pool: &str) -> String {
    format!("{pool}-epp")
}

/// Whether the service routes through InferencePools with endpoint pickers
/// infergate runs (`backendKind: InferencePool`, `endpointPicker.mode: Owned`).
#[must_use]
pub fn owns_endpoint_pickers(svc: &InferenceService) -> bool {
    use crate::api::{BackendKind, EndpointPickerMode};
    let routing = svc.spec.routing.as_ref();
    routing.and_then(|r| r.backend_kind) == Some(BackendKind::InferencePool)
        && routing
            .and_then(|r| r.endpoint_picker.as_ref())
            .and_then(|e| e.mode)
            .unwrap_or_default()
            == EndpointPickerMode::Owned
}

/// Name of the canary children (Deployment, Service): `S-canary`.
#[must_use]
pub fn canary_name(svc: &InferenceService) -> String {
    format!("{}-canary", svc.name_any())
}

/// Name of a track's LeaderWorkerSet when its replicas span nodes:
/// `S-lws` or `S-canary-lws` (`track_name` is the track's Deployment
/// name). LWS names its headless Service after it, so it is not `S`.
#[must_use]
pub fn lws_name(track_name: &str) -> String {
    format!("{track_name}-lws")
}

/// The longest LeaderWorkerSet name whose groups up to `groups` keep
/// every name LWS and the StatefulSet controller derive within a label:
/// worker StatefulSet `<lws>-<group>` and its pods' revision label
/// `<lws>-<group>-<hash of 10>`.
#[must_use]
pub fn max_lws_name(groups: i32) -> usize {
    let digits = groups.saturating_sub(1).max(0).to_string().len();
    MAX_LABEL - 1 - digits - 11
}

/// Why `s` is not a DNS-1035 label (`[a-z]([-a-z0-9]*[a-z0-9])?`), ignoring length.
fn dns1035_error(s: &str) -> Option<&'static str> {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (None, _) | (_, None) => Some("must not be empty"),
        (Some(f), _) if !f.is_ascii_lowercase() => {
            Some("must start with a lowercase letter (DNS-1035 label)")
        }
        (_, Some(l)) if !(l.is_ascii_lowercase() || l.is_ascii_digit()) => {
            Some("must end with a lowercase letter or digit (DNS-1035 label)")
        }
        _ if !b
            .iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-') =>
        {
            Some("must consist of lowercase letters, digits and '-' (DNS-1035 label)")
        }
        _ => None,
    }
}

/// Checks a label value: at most 63 characters, empty or alphanumeric at
/// both ends with `-`, `_`, `.` inside.
pub fn check_label_value(v: &str) -> Result<(), String> {
    if v.len() > MAX_LABEL {
        return Err(format!(
            "must be no more than {MAX_LABEL} characters (is {})",
            v.len()
        ));
    }
    if v.is_empty() {
        return Ok(());
    }
    let b = v.as_bytes();
    let alnum = |c: &u8| c.is_ascii_alphanumeric();
    if !alnum(&b[0]) || !alnum(&b[b.len() - 1]) {
        return Err("must start and end with an alphanumeric character".to_owned());
    }
    if !b
        .iter()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
    {
        return Err("must consist of alphanumeric characters, '-', '_' or '.'".to_owned());
    }
    Ok(())
}

/// Checks a DNS-1123 subdomain (the name of most objects, a Secret's
/// included): at most 253 characters, dot-separated labels of lowercase
/// letters, digits and `-`, alphanumeric at both ends.
pub fn check_dns_subdomain(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("must not be empty".to_owned());
    }
    if s.len() > 253 {
        return Err(format!(
            "must be no more than 253 characters (is {})",
            s.len()
        ));
    }
    let ok = s.split('.').all(|part| {
        let b = part.as_bytes();
        !b.is_empty()
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
    });
    if ok {
        Ok(())
    } else {
        Err("a lowercase RFC 1123 subdomain must consist of lowercase alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character".to_owned())
    }
}

/// Checks a Secret (or ConfigMap) data key: at most 253 characters of
/// letters, digits, `-`, `_` and `.`, and not `.` or `..`.
pub fn check_secret_key(k: &str) -> Result<(), String> {
    if k.is_empty() {
        return Err("must not be empty".to_owned());
    }
    if k.len() > 253 {
        return Err(format!(
            "must be no more than 253 characters (is {})",
            k.len()
        ));
    }
    if k == "." || k == ".." {
        return Err("must not be '.' or '..'".to_owned());
    }
    if !k
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
    {
        return Err(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.'"
                .to_owned(),
        );
    }
    Ok(())
}

/// Checks a label key: an optional DNS-1123 subdomain prefix and `/`, then a
/// name of at most 63 characters.
pub fn check_label_key(k: &str) -> Result<(), String> {
    let (prefix, name) = match k.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    if let Some(p) = prefix
        && check_dns_subdomain(p).is_err()
    {
        return Err(format!(
            "Invalid value: {k:?}: prefix must be a DNS-1123 subdomain"
        ));
    }
    if name.is_empty() {
        return Err(format!("Invalid value: {k:?}: name part must not be empty"));
    }
    check_label_value(name).map_err(|e| format!("Invalid value: {k:?}: name part {e}"))
}

/// Every derived child name and label value of `svc`, checked.
/// Errors are reported on `at` (`metadata.name`) and name the child that
/// overflows.
#[must_use]
pub fn derived_name_errors(at: &Path<'_>, svc: &InferenceService) -> Vec<FieldError> {
    let mut out = Vec::new();
    let name = svc.name_any();
    if name.is_empty() {
        out.push(FieldError::required(at, "name is required"));
        return out;
    }
    let backend = svc.spec.backend.unwrap_or_default();
    let mut check = |kind: &str, child: &str, limit: usize| {
        if child.len() > limit {
            out.push(FieldError::too_long(
                at,
                &format!(
                    "derived {kind} name {child:?} is {} characters; the limit is {limit}",
                    child.len()
                ),
            ));
        } else if let Some(why) = dns1035_error(child) {
            out.push(FieldError::invalid(
                at,
                format!("{name:?}"),
                &format!("derived {kind} name {child:?} {why}"),
            ));
        }
    };
    match backend {
        Backend::Deployment => {
            // Deployment, Service, HPA and HTTPRoute share the name; the
            // Service (a DNS-1035 label) is the strictest, so it is the one
            // named. One message per distinct name keeps the output readable.
            check("Service", &name, MAX_LABEL);
            if svc.spec.canary.is_some() {
                check("Service", &canary_name(svc), MAX_LABEL);
            }
            // An owned endpoint picker per InferencePool: `<pool>-epp`.
            if owns_endpoint_pickers(svc) {
                check("endpoint picker Service", &epp_name(&name), MAX_LABEL);
                if svc.spec.canary.is_some() {
                    check(
                        "endpoint picker Service",
                        &epp_name(&canary_name(svc)),
                        MAX_LABEL,
                    );
                }
            }
        }
        Backend::RayService => check("RayService", &name, MAX_RAYSERVICE_NAME),
    }
    // Label values: app.kubernetes.io/name and infergate.dev/service carry S.
    if name.len() <= MAX_LABEL
        && let Err(e) = check_label_value(&name)
    {
        out.push(FieldError::invalid(
            at,
            format!("{name:?}"),
            &format!("label value app.kubernetes.io/name {e}"),
        ));
    } else if name.len() > MAX_LABEL && backend == Backend::Deployment {
        // Already reported as the Service name; the label is the same string.
    } else if name.len() > MAX_LABEL {
        out.push(FieldError::too_long(
            at,
            &format!(
                "label value app.kubernetes.io/name {name:?} is {} characters; the limit is {MAX_LABEL}",
                name.len()
            ),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name_at() -> Path<'static> {
        Path::new("metadata.name")
    }

    fn svc(name: &str) -> InferenceService {
        InferenceService::new(name, Default::default())
    }

    #[test]
    fn label_values() {
        assert!(check_label_value("").is_ok());
        assert!(check_label_value("a.b_c-d").is_ok());
        assert!(check_label_value("-a").is_err());
        assert!(check_label_value("a/b").is_err());
        assert!(check_label_value(&"a".repeat(64)).is_err());
    }

    #[test]
    fn label_keys() {
        assert!(check_label_key("tier").is_ok());
        assert!(check_label_key("kubernetes.io/metadata.name").is_ok());
        assert!(check_label_key("/x").is_err());
        assert!(check_label_key("Bad_Prefix/x").is_err());
        assert!(check_label_key("a/").is_err());
    }

    #[test]
    fn canary_name_overflow_names_the_child() {
        let mut s = svc(&"a".repeat(59));
        assert!(
            derived_name_errors(&name_at(), &s).is_empty(),
            "no canary: S fits"
        );
        s.spec.canary = Some(Default::default());
        let errs = derived_name_errors(&name_at(), &s);
        assert_eq!(errs.len(), 1, "{errs:?}");
        let msg = errs[0].to_string();
        assert!(msg.starts_with("metadata.name: "), "{msg}");
        assert!(msg.contains("derived Service name"), "{msg}");
        assert!(
            msg.contains("-canary\" is 66 characters; the limit is 63"),
            "{msg}"
        );
    }

    #[test]
    fn rayservice_limit_is_47() {
        let mut s = svc(&"r".repeat(48));
        s.spec.backend = Some(Backend::RayService);
        let errs = derived_name_errors(&name_at(), &s);
        assert_eq!(errs.len(), 1);
        assert!(errs[0].to_string().contains("derived RayService name"));
        assert!(errs[0].to_string().contains("the limit is 47"));
        s.metadata.name = Some("r".repeat(47));
        assert!(derived_name_errors(&name_at(), &s).is_empty());
    }

    #[test]
    fn primary_name_overflow() {
        let errs = derived_name_errors(&name_at(), &svc(&"p".repeat(64)));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].message.contains("derived Service name"));
        assert!(
            errs[0]
                .message
                .contains("is 64 characters; the limit is 63")
        );
        assert!(derived_name_errors(&name_at(), &svc(&"p".repeat(63))).is_empty());
    }

    #[test]
    fn names_must_be_dns1035() {
        let errs = derived_name_errors(&name_at(), &svc("1chat"));
        assert!(errs.iter().any(|e| e.message.contains("lowercase letter")));
        let errs = derived_name_errors(&name_at(), &svc("chat.v1"));
        assert!(!errs.is_empty());
        assert!(derived_name_errors(&name_at(), &svc("chat-v1")).is_empty());
    }
}
