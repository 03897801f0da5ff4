//! Route path templates (`spec.routing.pathTemplate`).
//!
//! Placeholders in `{...}` are JSONPath-style references into the
//! InferenceService: `{.metadata.name}`, `{.metadata.namespace}`,
//! `{.metadata.labels['key']}`, `{.metadata.annotations['key']}` and any
//! `.spec` scalar. Each value is made an RFC 1123 label (lowercase,
//! `[a-z0-9-]`, trimmed of `-`, at most 63 characters). The path is trimmed,
//! gets a leading `/`, loses a trailing `/`, and empty segments are dropped.

use std::borrow::Cow;

use crate::api::{GatewayRef, v1beta1::InferenceService};

use super::builtin::DEFAULT_PATH_TEMPLATE;
use super::field_error::FieldError;
use super::field_path::Path;

/// Longest rendered path.
pub const MAX_PATH_LEN: usize = 200;

/// Render `spec.routing.pathTemplate` for this service;
/// the built-in template when none is set.
pub fn render_route_path(svc: &InferenceService) -> Result<String, FieldError> {
    let spec = Path::new("spec");
    let routing = spec.child("routing");
    render_route_path_at(&routing.child("pathTemplate"), svc)
}

/// [`render_route_path`], its error at `field` (the template's path).
pub fn render_route_path_at(
    field: &Path<'_>,
    svc: &InferenceService,
) -> Result<String, FieldError> {
    let template = svc
        .spec
        .routing
        .as_ref()
        .and_then(|r| r.path_template.as_deref())
        .unwrap_or(DEFAULT_PATH_TEMPLATE);
    render_template(template, svc)
        .map_err(|why| FieldError::invalid(field, format!("{template:?}"), &why))
}

/// The (gateway with namespace resolved, rendered path) a service claims, if it has a gateway.
#[must_use]
pub fn route_claim(svc: &InferenceService) -> Option<(GatewayRef, String)> {
    let gw = claimed_gateway(svc)?;
    let path = render_route_path(svc).ok()?;
    Some((gw, path))
}

/// The Gateway of [`route_claim`], its namespace filled in, without
/// rendering the path (for a caller that has rendered it already).
#[must_use]
pub fn claimed_gateway(svc: &InferenceService) -> Option<GatewayRef> {
    let gw = svc.spec.routing.as_ref()?.gateway.as_ref()?;
    let namespace = gw
        .namespace
        .clone()
        .or_else(|| svc.metadata.namespace.clone());
    Some(GatewayRef {
        name: gw.name.clone(),
        namespace,
    })
}

/// Render `template` for `svc`; the error is the reason, without the field.
pub fn render_template(template: &str, svc: &InferenceService) -> Result<String, String> {
    let object = Roots {
        metadata: Path::new("metadata"),
        spec: Path::new("spec"),
    };
    let mut raw = String::with_capacity(template.len() + 32);
    let mut rest = template;
    while let Some(open) = rest.bytes().position(|b| b == b'{' || b == b'}') {
        if rest.as_bytes()[open] == b'}' {
            return Err("unmatched '}'".to_owned());
        }
        raw.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let close = after
            .bytes()
            .position(|b| b == b'}')
            .ok_or_else(|| "unclosed '{' placeholder".to_owned())?;
        let expr = after[..close].trim();
        if expr.contains('{') {
            return Err("nested '{' in placeholder".to_owned());
        }
        let value = lookup(expr, svc, &object)?;
        if is_label(&value) {
            // What sanitizing would give back unchanged.
            raw.push_str(&value);
        } else {
            let clean = sanitize_segment(&value);
            if clean.is_empty() {
                return Err(format!(
                    "placeholder {{{expr}}} renders empty (value {value:?})"
                ));
            }
            raw.push_str(&clean);
        }
        rest = &after[close + 1..];
    }
    raw.push_str(rest);
    // Normal already (the default template's rendering): kept as it is.
    let normal = raw.starts_with('/')
        && !raw.ends_with('/')
        && !raw.contains("//")
        && raw.trim().len() == raw.len();
    let path = if normal {
        raw
    } else {
        let mut path = String::with_capacity(raw.len() + 1);
        for seg in raw.trim().split('/').filter(|s| !s.is_empty()) {
            path.push('/');
            path.push_str(seg);
        }
        path
    };
    if path.is_empty() {
        return Err("renders an empty path".to_owned());
    }
    check_gateway_path(&path)?;
    Ok(path)
}

/// Whether `value` is an RFC 1123 label already ([`sanitize_segment`]
/// gives it back as it is): a namespace's or a name's usual value.
fn is_label(value: &str) -> bool {
    let b = value.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
        && b.iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
}

/// Make a placeholder value an RFC 1123 label: lowercase, characters outside
/// `[a-z0-9-]` become `-`, leading/trailing `-` trimmed, at most 63 characters.
#[must_use]
pub fn sanitize_segment(value: &str) -> String {
    let mut s: String = value
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let trimmed = s.trim_matches('-');
    if trimmed.len() != s.len() {
        s = trimmed.to_owned();
    }
    if s.len() > 63 {
        s.truncate(63);
        let t = s.trim_end_matches('-').len();
        s.truncate(t);
    }
    s
}

/// Gateway API path rules for a rendered path.
fn check_gateway_path(path: &str) -> Result<(), String> {
    if path.len() > MAX_PATH_LEN {
        return Err(format!(
            "rendered path {path:?} is {} characters; the limit is {MAX_PATH_LEN}",
            path.len()
        ));
    }
    // Every piece below starts with `//`, `/.`, `%2` or `#`: a path with
    // none of them (nearly all) is not searched piece by piece.
    let suspect = path.contains('#')
        || path
            .as_bytes()
            .windows(2)
            .any(|w| matches!(w, [b'/', b'/' | b'.'] | [b'%', b'2']));
    if suspect {
        let lower = path.to_ascii_lowercase();
        for bad in ["//", "/./", "/../", "%2f", "#"] {
            if lower.contains(bad) {
                return Err(format!(
                    "rendered path {path:?} must not contain {bad:?} (Gateway API path rules)"
                ));
            }
        }
    }
    if path.ends_with("/.") || path.ends_with("/..") {
        return Err(format!(
            "rendered path {path:?} must not end with \"/.\" or \"/..\" (Gateway API path rules)"
        ));
    }
    // Gateway API HTTPPathMatch value pattern: RFC 3986 pchar plus '/'.
    let b = path.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'%' {
            let hex = b.get(i + 1..i + 3);
            if !hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                return Err(format!(
                    "rendered path {path:?} has an invalid percent-encoding"
                ));
            }
            i += 3;
            continue;
        }
        if !(c.is_ascii_alphanumeric() || b"-/._~!$&'()*+,;=:@".contains(&c)) {
            let ch = path[i..].chars().next().unwrap_or('?');
            return Err(format!(
                "rendered path {path:?} contains {ch:?}, which a Gateway API path may not contain"
            ));
        }
        i += 1;
    }
    Ok(())
}

/// The paths of an object's `metadata` and `spec`, as messages name the
/// fields a placeholder reads.
struct Roots<'a> {
    metadata: Path<'a>,
    spec: Path<'a>,
}

/// Resolve one placeholder expression such as `.metadata.labels['app']`.
fn lookup<'s>(
    expr: &str,
    svc: &'s InferenceService,
    object: &Roots<'_>,
) -> Result<Cow<'s, str>, String> {
    let not_set = |what: &Path<'_>| format!("placeholder {{{expr}}}: {what} is not set");
    if let Some(rest) = expr.strip_prefix(".metadata.") {
        for (prefix, map, what) in [
            ("labels", svc.metadata.labels.as_ref(), "label"),
            (
                "annotations",
                svc.metadata.annotations.as_ref(),
                "annotation",
            ),
        ] {
            if let Some(sel) = rest.strip_prefix(prefix) {
                let key = map_key(sel).ok_or_else(|| {
                    format!(
                        "placeholder {{{expr}}}: write .metadata.{prefix}['key'] to select one {what}"
                    )
                })?;
                return map
                    .and_then(|m| m.get(key))
                    .map(|v| Cow::Borrowed(v.as_str()))
                    .ok_or_else(|| format!("placeholder {{{expr}}}: {what} {key:?} is missing"));
            }
        }
        return match rest {
            "name" => svc
                .metadata
                .name
                .as_deref()
                .map(Cow::Borrowed)
                .ok_or_else(|| not_set(&object.metadata.child("name"))),
            "namespace" => svc
                .metadata
                .namespace
                .as_deref()
                .map(Cow::Borrowed)
                .ok_or_else(|| not_set(&object.metadata.child("namespace"))),
            "uid" => Err(format!(
                "placeholder {{{expr}}}: .metadata.uid is not allowed (it does not exist at admission)"
            )),
            _ => Err(format!(
                "placeholder {{{expr}}}: unknown field; use .metadata.name, .metadata.namespace, .metadata.labels['key'] or .metadata.annotations['key']"
            )),
        };
    }
    if expr == ".status" || expr.starts_with(".status.") || expr.starts_with(".status[") {
        return Err(format!(
            "placeholder {{{expr}}}: .status is not allowed (it does not exist at admission)"
        ));
    }
    if let Some(path) = expr.strip_prefix(".spec.") {
        let field = object.spec.child(path);
        return match spec_scalar(svc, path) {
            SpecField::Value(v) => Ok(Cow::Owned(v)),
            SpecField::Unset => Err(not_set(&field)),
            SpecField::NotScalar => Err(format!("placeholder {{{expr}}}: {field} is not a scalar")),
            SpecField::SelfReference => Err(format!(
                "placeholder {{{expr}}}: a template may not reference itself"
            )),
            SpecField::Unknown => Err(format!("placeholder {{{expr}}}: unknown field {field}")),
        };
    }
    Err(format!(
        "placeholder {{{expr}}}: unknown field; placeholders start with .metadata. or .spec."
    ))
}

/// `['key']`, `["key"]` or `.key` -> key.
fn map_key(sel: &str) -> Option<&str> {
    if let Some(inner) = sel.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
        let inner = inner.trim();
        return inner
            .strip_prefix('\'')
            .and_then(|s| s.strip_suffix('\''))
            .or_else(|| inner.strip_prefix('"').and_then(|s| s.strip_suffix('"')))
            .filter(|k| !k.is_empty());
    }
    sel.strip_prefix('.').filter(|k| !k.is_empty())
}

enum SpecField {
    Value(String),
    Unset,
    NotScalar,
    SelfReference,
    Unknown,
}

fn opt<T: ToString>(v: Option<T>) -> SpecField {
    v.map_or(SpecField::Unset, |v| SpecField::Value(v.to_string()))
}

/// The scalar fields of the v1beta1 spec a template may reference.
fn spec_scalar(svc: &InferenceService, path: &str) -> SpecField {
    let s = &svc.spec;
    let engine = s.engine.as_ref();
    let auto = s.autoscaling.as_ref();
    let res = s.resources.as_ref();
    let par = s.parallelism.as_ref();
    let canary = s.canary.as_ref();
    let hc = s.health_check.as_ref();
    let routing = s.routing.as_ref();
    let gw = routing.and_then(|r| r.gateway.as_ref());
    match path {
        "model.ref" => opt(Some(&s.model.r#ref).filter(|r| !r.is_empty())),
        "model.image" => opt(s.model.image.as_ref()),
        "engine.image" => opt(engine.and_then(|e| e.image.as_ref())),
        "engine.port" => opt(engine.and_then(|e| e.port)),
        "backend" => opt(s.backend.map(|b| b.as_str())),
        "replicas" => opt(s.replicas),
        "autoscaling.minReplicas" => opt(auto.map(|a| a.min_replicas)),
        "autoscaling.maxReplicas" => opt(auto.map(|a| a.max_replicas)),
        "autoscaling.targetCPUUtilizationPercent" => {
            opt(auto.and_then(|a| a.target_cpu_utilization_percent))
        }
        "resources.cpu" => opt(res.and_then(|r| r.cpu.as_ref()).map(|q| &q.0)),
        "resources.memory" => opt(res.and_then(|r| r.memory.as_ref()).map(|q| &q.0)),
        "resources.gpuMemory" => opt(res.and_then(|r| r.gpu_memory.as_ref()).map(|q| &q.0)),
        "accelerator.type" => opt(s.accelerator.as_ref().and_then(|a| a.r#type)),
        "parallelism.tensor" => opt(par.and_then(|p| p.tensor)),
        "parallelism.pipeline" => opt(par.and_then(|p| p.pipeline)),
        "canary.model.ref" => opt(canary.map(|c| &c.model.r#ref).filter(|r| !r.is_empty())),
        "canary.model.image" => opt(canary.and_then(|c| c.model.image.as_ref())),
        "canary.engineImage" => opt(canary.and_then(|c| c.engine_image.as_ref())),
        "canary.weight" => opt(canary.map(|c| c.weight)),
        "canary.replicas" => opt(canary.and_then(|c| c.replicas)),
        "healthCheck.path" => opt(hc.and_then(|h| h.path.as_ref())),
        "healthCheck.interval" => opt(hc.and_then(|h| h.interval.as_ref())),
        "healthCheck.timeout" => opt(hc.and_then(|h| h.timeout.as_ref())),
        "routing.requestTimeout" => opt(routing.and_then(|r| r.request_timeout.as_ref())),
        "routing.gateway.name" => opt(gw.map(|g| &g.name)),
        "routing.gateway.namespace" => opt(gw.and_then(|g| g.namespace.as_ref())),
        "graph.url" => opt(s.graph.as_ref().map(|g| &g.url)),
        "model"
        | "engine"
        | "engine.args"
        | "engine.env"
        | "autoscaling"
        | "resources"
        | "accelerator"
        | "parallelism"
        | "canary"
        | "canary.model"
        | "healthCheck"
        | "routing"
        | "routing.gateway"
        | "graph"
        | "graph.bearerTokenSecretRef" => SpecField::NotScalar,
        // The template cannot reference itself.
        "routing.pathTemplate" => SpecField::SelfReference,
        _ => SpecField::Unknown,
    }
}

/// Render a template against a sample service (policy validation).
pub fn check_template_on_sample(template: &str) -> Result<String, String> {
    let mut sample = InferenceService::new("sample-service", Default::default());
    sample.metadata.namespace = Some("sample-namespace".to_owned());
    sample.spec.model.r#ref = "sample-model".to_owned();
    // Labels and annotations a policy template names cannot be known in
    // advance: the sample carries every key the template asks for.
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else { break };
        let expr = after[..close].trim();
        for (prefix, is_label) in [(".metadata.labels", true), (".metadata.annotations", false)] {
            if let Some(key) = expr.strip_prefix(prefix).and_then(map_key) {
                let map = if is_label {
                    sample.metadata.labels.get_or_insert_with(Default::default)
                } else {
                    sample
                        .metadata
                        .annotations
                        .get_or_insert_with(Default::default)
                };
                map.insert(key.to_owned(), "sample".to_owned());
            }
        }
        rest = &after[close + 1..];
    }
    render_template(template, &sample_with_spec(sample))
}

/// `s` with every spec field set, to the built-in value where there is one.
fn sample_with_spec(mut s: InferenceService) -> InferenceService {
    use super::builtin::{
        DEFAULT_BACKEND, DEFAULT_HEALTH_INTERVAL, DEFAULT_HEALTH_PATH, DEFAULT_HEALTH_TIMEOUT,
        DEFAULT_PARALLELISM, DEFAULT_PORT, DEFAULT_REPLICAS, DEFAULT_REQUEST_TIMEOUT,
        DEFAULT_TARGET_CPU,
    };
    use crate::api::v1beta1::{
        AcceleratorSpec, AutoscalingSpec, CanarySpec, EngineSpec, ParallelismSpec, RoutingSpec,
    };
    s.spec.model.image = Some("registry.example.com/models/sample:1".to_owned());
    s.spec.engine = Some(EngineSpec {
        image: Some("registry.example.com/engine:1".to_owned()),
        port: Some(DEFAULT_PORT),
        ..Default::default()
    });
    s.spec.backend = Some(DEFAULT_BACKEND);
    s.spec.replicas = Some(DEFAULT_REPLICAS);
    s.spec.autoscaling = Some(AutoscalingSpec {
        min_replicas: 1,
        max_replicas: 2,
        target_cpu_utilization_percent: Some(DEFAULT_TARGET_CPU),
    });
    s.spec.accelerator = Some(AcceleratorSpec {
        r#type: Some(crate::api::AcceleratorType::Nvidia),
        class: Some("accelerator-class".to_owned()),
    });
    s.spec.service_account_name = Some("service-account".to_owned());
    s.spec.parallelism = Some(ParallelismSpec {
        tensor: Some(DEFAULT_PARALLELISM),
        pipeline: Some(DEFAULT_PARALLELISM),
    });
    s.spec.canary = Some(CanarySpec {
        model: crate::api::v1beta1::ModelSpec {
            r#ref: "sample-canary".to_owned(),
            image: Some("registry.example.com/models/canary:1".to_owned()),
            ..Default::default()
        },
        engine_image: Some("registry.example.com/engine:1".to_owned()),
        weight: 10,
        replicas: Some(1),
        on_full_pool: Some(crate::engine::builtin::DEFAULT_CANARY_ON_FULL_POOL),
    });
    s.spec.health_check = Some(crate::api::HealthCheckSpec {
        path: Some(DEFAULT_HEALTH_PATH.to_owned()),
        interval: Some(DEFAULT_HEALTH_INTERVAL.to_owned()),
        timeout: Some(DEFAULT_HEALTH_TIMEOUT.to_owned()),
    });
    s.spec.resources = Some(crate::api::ResourcesSpec {
        cpu: Some(k8s_openapi::apimachinery::pkg::api::resource::Quantity(
            "1".to_owned(),
        )),
        memory: Some(k8s_openapi::apimachinery::pkg::api::resource::Quantity(
            "1Gi".to_owned(),
        )),
        gpu_memory: Some(k8s_openapi::apimachinery::pkg::api::resource::Quantity(
            "16Gi".to_owned(),
        )),
    });
    s.spec.routing = Some(RoutingSpec {
        path_template: None,
        request_timeout: Some(DEFAULT_REQUEST_TIMEOUT.to_owned()),
        gateway: Some(GatewayRef {
            name: "sample-gateway".to_owned(),
            namespace: Some("sample-gateways".to_owned()),
        }),
        ..RoutingSpec::default()
    });
    // Every defaulted service has the full-pool fields.
    s.spec.rollout = Some(crate::api::rollout::RolloutSpec {
        on_full_pool: Some(crate::engine::builtin::DEFAULT_ON_FULL_POOL),
        max_unavailable: Some(crate::engine::builtin::DEFAULT_MAX_UNAVAILABLE),
        ..Default::default()
    });
    s
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::api::v1beta1::RoutingSpec;

    proptest::proptest! {
        /// A value taken as a label already is what sanitizing gives back.
        #[test]
        fn a_label_is_its_own_sanitized_value(v in "[a-z0-9-]{0,70}|[A-Za-z0-9_.-]{0,8}") {
            if is_label(&v) {
                proptest::prop_assert_eq!(sanitize_segment(&v), v);
            }
        }

        /// The paths not searched piece by piece get the answer the search
        /// gave: the same error for each piece, in the same order.
        #[test]
        fn forbidden_pieces_are_found_as_the_plain_search_finds_them(
            path in "/[a-z/.%2fF#]{0,12}",
        ) {
            let lower = path.to_ascii_lowercase();
            let searched = ["//", "/./", "/../", "%2f", "#"]
                .into_iter()
                .find(|bad| lower.contains(bad));
            let got = check_gateway_path(&path);
            match searched {
                Some(bad) => proptest::prop_assert_eq!(
                    got,
                    Err(format!(
                        "rendered path {path:?} must not contain {bad:?} (Gateway API path rules)"
                    ))
                ),
                None => proptest::prop_assert!(
                    !got.as_ref().is_err_and(|e| e.contains("must not contain")),
                    "{got:?}"
                ),
            }
        }
    }

    fn svc(template: &str) -> InferenceService {
        let mut s = InferenceService::new("Chat_V1", Default::default());
        s.metadata.namespace = Some("team-a".to_owned());
        s.metadata.labels = Some(BTreeMap::from([
            ("app".to_owned(), "Llama 3".to_owned()),
            ("empty".to_owned(), "__".to_owned()),
        ]));
        s.metadata.annotations = Some(BTreeMap::from([(
            "example.com/tenant".to_owned(),
            "ACME".to_owned(),
        )]));
        s.spec.model.r#ref = "llama3-8b-q4".to_owned();
        s.spec.replicas = Some(2);
        s.spec.routing = Some(RoutingSpec {
            path_template: Some(template.to_owned()),
            ..Default::default()
        });
        s
    }

    fn render(t: &str) -> Result<String, String> {
        render_route_path(&svc(t)).map_err(|e| e.to_string())
    }

    #[test]
    fn default_template() {
        let mut s = svc("");
        s.spec.routing = None;
        assert_eq!(render_route_path(&s).unwrap(), "/team-a/chat-v1");
    }

    #[test]
    fn placeholders_are_sanitised() {
        assert_eq!(
            render("/{.metadata.labels['app']}/{.spec.model.ref}").unwrap(),
            "/llama-3/llama3-8b-q4"
        );
        assert_eq!(
            render("{.metadata.annotations[\"example.com/tenant\"]}/x").unwrap(),
            "/acme/x"
        );
        assert_eq!(render("/r{.spec.replicas}").unwrap(), "/r2");
        assert_eq!(render("/a/{.metadata.labels.app}").unwrap(), "/a/llama-3");
    }

    #[test]
    fn slashes_are_normalised() {
        assert_eq!(
            render("  models//{.metadata.name}/  ").unwrap(),
            "/models/chat-v1"
        );
    }

    #[test]
    fn segment_cap_is_63() {
        assert_eq!(sanitize_segment(&"a".repeat(80)).len(), 63);
        assert_eq!(sanitize_segment("--Hi There--"), "hi-there");
        let s = format!("{}-{}", "a".repeat(62), "b");
        assert_eq!(sanitize_segment(&s), "a".repeat(62));
    }

    #[test]
    fn path_cap_is_200() {
        let t = "/{.metadata.name}".repeat(30);
        let e = render(&t).unwrap_err();
        assert!(e.contains("the limit is 200"), "{e}");
    }

    #[test]
    fn errors_are_clear() {
        let cases = [
            ("/{.metadata.labels['nope']}", "label \"nope\" is missing"),
            (
                "/{.metadata.annotations['nope']}",
                "annotation \"nope\" is missing",
            ),
            ("/{.spec.nope}", "unknown field spec.nope"),
            ("/{.status.routePath}", ".status is not allowed"),
            ("/{.metadata.uid}", ".metadata.uid is not allowed"),
            ("/{.metadata.labels['empty']}", "renders empty"),
            ("/", "renders an empty path"),
            ("/{.spec.model}", "is not a scalar"),
            ("/{.spec.routing.pathTemplate}", "may not reference itself"),
            ("/{.spec.canary.weight}", "spec.canary.weight is not set"),
            ("/{.metadata.name", "unclosed"),
            ("/a}", "unmatched"),
            ("/a/../b", "\"/../\""),
            ("/a/./b", "\"/./\""),
            ("/a%2Fb", "\"%2f\""),
            ("/a#b", "\"#\""),
            ("/a/..", "must not end with"),
            ("/a b", "may not contain"),
            ("/{metadata.name}", "unknown field"),
        ];
        for (t, want) in cases {
            let e = render(t).unwrap_err();
            assert!(
                e.starts_with("spec.routing.pathTemplate: Invalid value: "),
                "{e}"
            );
            assert!(e.contains(want), "{t}: {e} lacks {want}");
        }
    }

    /// A template is read in one loop, without recursion, whatever it
    /// nests or repeats.
    #[test]
    fn deep_or_long_templates_are_read_in_one_loop() {
        let e = render(&format!("/{{{}}}", "{".repeat(100_000))).unwrap_err();
        assert!(e.contains("nested '{' in placeholder"), "{e}");
        let e = render(&"/{.metadata.name}".repeat(20_000)).unwrap_err();
        assert!(e.contains("the limit is 200"), "{}", &e[e.len() - 80..]);
    }

    #[test]
    fn claim_resolves_gateway_namespace() {
        let mut s = svc("/{.metadata.name}");
        assert_eq!(route_claim(&s), None);
        if let Some(r) = s.spec.routing.as_mut() {
            r.gateway = Some(GatewayRef {
                name: "gw".to_owned(),
                namespace: None,
            });
        }
        let (gw, path) = route_claim(&s).unwrap();
        assert_eq!(gw.namespace.as_deref(), Some("team-a"));
        assert_eq!(path, "/chat-v1");
    }

    #[test]
    fn sample_rendering_for_policies() {
        assert!(check_template_on_sample("/{.metadata.labels['team']}/{.metadata.name}").is_ok());
        assert!(check_template_on_sample("/{.status.x}").is_err());
        assert!(check_template_on_sample("/{.spec.bogus}").is_err());
    }
}
