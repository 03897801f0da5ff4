//! Model names, the model name header and LoRA adapters: what a service
//! serves under which names, the engine flags that make vLLM serve them,
//! which (Gateway, hostname, name) a service routed by name holds, and the
//! rules of the fields.
//!
//! A service routed by name (`routing.match: ModelName` or `Both`) holds
//! each of its served names (the base name and each adapter's) on its
//! Gateway for each of its hostnames (none: every hostname); two holders
//! of one name on one Gateway whose hostnames meet would steal each
//! other's requests.

use crate::api::policy::Enforcement;
use crate::api::v1beta1::{GatewayRef, InferenceService, RouteMatch};

use super::field_error::FieldError;
use super::field_path::Path;
use super::policy::{Layer, strictest};

/// The header a gateway's body-based router copies the request's `model`
/// into (Gateway API Inference Extension).
pub const DEFAULT_HEADER: &str = "X-Gateway-Model-Name";
/// Adapters a service may load where no policy says otherwise.
pub const DEFAULT_MAX_ADAPTERS: i32 = 8;
/// vLLM's `--max-lora-rank` where the service does not say.
pub const DEFAULT_MAX_ADAPTER_RANK: i32 = 16;
/// Rules an HTTPRoute may hold (the Gateway API CRD's bound).
pub const MAX_ROUTE_RULES: usize = 16;

/// The name the base model is served under: `model.servedName`, else
/// `model.ref`.
#[must_use]
pub fn served_name(svc: &InferenceService) -> &str {
    svc.spec
        .model
        .served_name
        .as_deref()
        .unwrap_or(&svc.spec.model.r#ref)
}

/// How the service's route selects its requests.
#[must_use]
pub fn route_match(svc: &InferenceService) -> RouteMatch {
    svc.spec
        .routing
        .as_ref()
        .and_then(|r| r.r#match)
        .unwrap_or_default()
}

/// The header the route matches names in.
#[must_use]
pub fn header(svc: &InferenceService) -> &str {
    svc.spec
        .routing
        .as_ref()
        .and_then(|r| r.model_name_header.as_deref())
        .unwrap_or(DEFAULT_HEADER)
}

/// Every name the service serves, the base first, each with its field.
#[must_use]
pub fn served_names(svc: &InferenceService) -> Vec<(&str, String)> {
    let spec = Path::new("spec");
    let model = spec.child("model");
    let adapters = model.child("adapters");
    let mut out = vec![(served_name(svc), String::from(&model.child("servedName")))];
    for (i, a) in svc.spec.model.adapters.iter().enumerate() {
        out.push((
            a.name.as_str(),
            String::from(&adapters.index(i).child("name")),
        ));
    }
    out
}

/// Whether the engine serves names of its own: a served name, adapters,
/// or a route by name (both tracks then serve the base's names).
#[must_use]
pub fn names_its_models(svc: &InferenceService) -> bool {
    svc.spec.model.served_name.is_some()
        || !svc.spec.model.adapters.is_empty()
        || route_match(svc).by_name()
}

/// vLLM's flags for the adapters: `--enable-lora --max-loras N
/// --max-lora-rank R --lora-modules <json>...` (none without adapters).
#[must_use]
pub fn lora_args(svc: &InferenceService) -> Vec<String> {
    let adapters = &svc.spec.model.adapters;
    if adapters.is_empty() {
        return Vec::new();
    }
    let base = served_name(svc);
    let mut args = vec![
        "--enable-lora".to_owned(),
        "--max-loras".to_owned(),
        adapters.len().to_string(),
        "--max-lora-rank".to_owned(),
        svc.spec
            .model
            .max_adapter_rank
            .unwrap_or(DEFAULT_MAX_ADAPTER_RANK)
            .to_string(),
        "--lora-modules".to_owned(),
    ];
    for a in adapters {
        args.push(
            serde_json::json!({"name": a.name, "path": a.source, "base_model_name": base})
                .to_string(),
        );
    }
    args
}

/// One name a service routed by name holds.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Claim {
    /// The Gateway's namespace (the service's when the reference has none).
    pub gateway_namespace: String,
    /// The Gateway's name.
    pub gateway: String,
    /// A hostname of the route; `None`: every hostname.
    pub hostname: Option<String>,
    /// The served name.
    pub name: String,
    /// The field that serves it (`spec.model.servedName`,
    /// `spec.model.adapters[i].name`).
    pub field: String,
}

impl Claim {
    /// Whether two claims hold one name on one Gateway for a hostname both
    /// reach.
    #[must_use]
    pub fn meets(&self, other: &Claim) -> bool {
        self.name == other.name
            && self.gateway == other.gateway
            && self.gateway_namespace == other.gateway_namespace
            && match (&self.hostname, &other.hostname) {
                (Some(a), Some(b)) => hostnames_meet(a, b),
                _ => true,
            }
    }

    /// `gateways/inference-gw`.
    #[must_use]
    pub fn gateway_display(&self) -> String {
        format!("{}/{}", self.gateway_namespace, self.gateway)
    }
}

/// Whether a request for some host reaches routes of both hostnames: the
/// same name, or a wildcard (`*.example.com`: any name below
/// `example.com`) that covers the other.
#[must_use]
pub fn hostnames_meet(a: &str, b: &str) -> bool {
    let (a, b) = (a.to_ascii_lowercase(), b.to_ascii_lowercase());
    let below = |wild: &str, name: &str| {
        wild.strip_prefix('*')
            .is_some_and(|suffix| name.len() > suffix.len() && name.ends_with(suffix))
    };
    a == b || below(&a, &b) || below(&b, &a)
}

/// What the service holds: for a service routed by name through a
/// Gateway, each served name for each hostname (one claim without
/// hostnames); nothing otherwise.
#[must_use]
pub fn claims(svc: &InferenceService) -> Vec<Claim> {
    let Some(routing) = svc.spec.routing.as_ref() else {
        return Vec::new();
    };
    let (Some(gw), true) = (routing.gateway.as_ref(), route_match(svc).by_name()) else {
        return Vec::new();
    };
    let GatewayRef { name, namespace } = gw;
    let own = svc.metadata.namespace.clone().unwrap_or_default();
    let hostnames: Vec<Option<String>> = if routing.hostnames.is_empty() {
        vec![None]
    } else {
        routing.hostnames.iter().cloned().map(Some).collect()
    };
    let mut out = Vec::new();
    for (served, field) in served_names(svc) {
        for h in &hostnames {
            out.push(Claim {
                gateway_namespace: namespace.clone().unwrap_or_else(|| own.clone()),
                gateway: name.clone(),
                hostname: h.clone(),
                name: served.to_owned(),
                field: field.clone(),
            });
        }
    }
    out
}

/// The first claim of `mine` that a claim of `theirs` meets, with it.
#[must_use]
pub fn clash<'a>(mine: &'a [Claim], theirs: &'a [Claim]) -> Option<(&'a Claim, &'a Claim)> {
    mine.iter()
        .find_map(|m| theirs.iter().find(|t| m.meets(t)).map(|t| (m, t)))
}

/// The denial of `mine`, which `holder` (`namespace/name`) already holds;
/// the holder is named only in the requester's own namespace.
#[must_use]
pub fn clash_error(mine: &Claim, holder: (&str, &str), requester_namespace: &str) -> FieldError {
    let by = if holder.0 == requester_namespace {
        format!("{}/{}", holder.0, holder.1)
    } else {
        "a service in another namespace".to_owned()
    };
    let hostname = mine
        .hostname
        .as_deref()
        .map(|h| format!(" for hostname {h}"))
        .unwrap_or_default();
    FieldError::duplicate(
        mine.field.as_str(),
        format!("{:?}", mine.name),
        &format!(
            "served through Gateway {}{hostname} by {by}",
            mine.gateway_display()
        ),
    )
}

/// Whether `source` matches the glob `pattern` (`*`: any run of
/// characters, everything else literally).
#[must_use]
pub fn glob_matches(pattern: &str, source: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == source;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !source.starts_with(first) || source.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &source[first.len()..];
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(at) => rest = &rest[at + middle.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// The rules of the names, the adapters and the header (`spec` is the
/// spec's path): errors, and warnings under Warn policies.
pub fn check(
    (errors, warnings): (&mut Vec<FieldError>, &mut Vec<String>),
    spec: &Path<'_>,
    svc: &InferenceService,
    layers: &[Layer<'_>],
) {
    let routing = svc.spec.routing.as_ref();
    let canary_names = svc
        .spec
        .canary
        .as_ref()
        .is_some_and(|c| c.model.served_name.is_some() || !c.model.adapters.is_empty());
    if !names_its_models(svc)
        && !canary_names
        && routing.is_none_or(|r| r.model_name_header.is_none() && r.hostnames.is_empty())
    {
        // A service that names nothing: nothing to judge.
        return;
    }
    let model = spec.child("model");
    let adapters = model.child("adapters");
    // Names are unique within the service.
    let names = served_names(svc);
    for (i, (name, field)) in names.iter().enumerate() {
        if names[..i].iter().any(|(n, _)| n == name) {
            errors.push(FieldError::duplicate(
                field.as_str(),
                format!("{name:?}"),
                "the service already serves this name",
            ));
        }
    }
    // A Ray service's engines come from its serving graph.
    if svc.spec.backend == Some(crate::api::v1beta1::Backend::RayService)
        && !svc.spec.model.adapters.is_empty()
    {
        errors.push(FieldError::forbidden(
            &adapters,
            "backend RayService serves what its graph deploys: adapters are for backend Deployment",
        ));
    }
    // Both tracks serve spec.model's names.
    if let Some(c) = svc.spec.canary.as_ref() {
        let canary_at = spec.child("canary");
        let canary = canary_at.child("model");
        if c.model.served_name.is_some() {
            errors.push(FieldError::forbidden(
                &canary.child("servedName"),
                "both tracks serve spec.model's names: set spec.model.servedName",
            ));
        }
        if !c.model.adapters.is_empty() {
            errors.push(FieldError::forbidden(
                &canary.child("adapters"),
                "both tracks serve spec.model's adapters: set spec.model.adapters",
            ));
        }
    }
    check_counts((errors, warnings), &adapters, svc, layers);
    check_sources((errors, warnings), &adapters, svc, layers);
    if let Some(h) = svc
        .spec
        .routing
        .as_ref()
        .and_then(|r| r.model_name_header.as_deref())
        && !is_header_name(h)
    {
        errors.push(FieldError::invalid(
            &spec.child("routing").child("modelNameHeader"),
            format!("{h:?}"),
            "must be an HTTP header name (letters, digits and !#$%&'*+-.^_`|~)",
        ));
    }
    let routing_at = spec.child("routing");
    let hostnames = routing_at.child("hostnames");
    if let Some(r) = svc.spec.routing.as_ref() {
        for (i, h) in r.hostnames.iter().enumerate() {
            if !is_route_hostname(h) {
                errors.push(FieldError::invalid(
                    &hostnames.index(i),
                    format!("{h:?}"),
                    "must be a DNS name, optionally led by `*.` (no IP address, no port)",
                ));
            }
        }
    }
}

/// How many names a route by name may hold, and how many adapters the
/// policies allow (`adapters` is `spec.model.adapters`).
fn check_counts(
    (errors, warnings): (&mut Vec<FieldError>, &mut Vec<String>),
    adapters: &Path<'_>,
    svc: &InferenceService,
    layers: &[Layer<'_>],
) {
    let names = served_names(svc);
    // One HTTPRoute holds at most 16 rules.
    let by_name = route_match(svc).by_name();
    if by_name {
        // At most 15 names, one rule of the 16 left spare, as the API
        // bounds them; `Both` counts the path rule among them.
        let path_rule = usize::from(route_match(svc) == RouteMatch::Both);
        let most = MAX_ROUTE_RULES - 1 - path_rule;
        if names.len() > most {
            errors.push(FieldError::too_many(
                adapters,
                &format!(
                    "a route by name holds one rule per served name: at most {most} names ({} adapters besides the base name{}), {} given",
                    most - 1,
                    if path_rule == 1 { " and the path rule" } else { "" },
                    names.len()
                ),
            ));
        }
    }
    let n = i32::try_from(svc.spec.model.adapters.len()).unwrap_or(i32::MAX);
    let (deny, warn) = strictest(layers, |l| l.max_adapters);
    let deny_bound = deny.as_ref().map_or(DEFAULT_MAX_ADAPTERS, |b| b.value);
    if n > deny_bound {
        let who = deny.as_ref().map_or_else(
            || "where no policy sets limits.maxAdapters".to_owned(),
            |b| format!("limits.maxAdapters of {}", b.layer.display()),
        );
        errors.push(FieldError::too_many(
            adapters,
            &format!("must have at most {deny_bound} items ({who}), has {n}"),
        ));
    } else if let Some(b) = warn.filter(|b| n > b.value) {
        warnings.push(
            FieldError::too_many(
                adapters,
                &format!(
                    "must have at most {} items (limits.maxAdapters of {}), has {n}",
                    b.value,
                    b.layer.display()
                ),
            )
            .to_string(),
        );
    }
}

/// Each adapter's source against every policy's `allowedAdapterSources`.
fn check_sources(
    (errors, warnings): (&mut Vec<FieldError>, &mut Vec<String>),
    adapters: &Path<'_>,
    svc: &InferenceService,
    layers: &[Layer<'_>],
) {
    for layer in layers {
        let Some(allowed) = layer
            .limits
            .and_then(|l| l.allowed_adapter_sources.as_ref())
        else {
            continue;
        };
        for (i, a) in svc.spec.model.adapters.iter().enumerate() {
            if allowed.iter().any(|p| glob_matches(p, &a.source)) {
                continue;
            }
            let e = FieldError::invalid(
                &adapters.index(i).child("source"),
                format!("{:?}", a.source),
                &format!(
                    "must match one of {} (limits.allowedAdapterSources of {})",
                    allowed
                        .iter()
                        .map(|p| format!("{p:?}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    layer.display()
                ),
            );
            match layer.enforcement {
                Enforcement::Deny => errors.push(e),
                Enforcement::Warn => warnings.push(e.to_string()),
            }
        }
    }
}

/// An HTTP header field name (RFC 9110 token).
fn is_header_name(h: &str) -> bool {
    !h.is_empty()
        && h.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// A Gateway API hostname: a DNS-1123 subdomain, optionally `*.` first.
fn is_route_hostname(h: &str) -> bool {
    let name = h.strip_prefix("*.").unwrap_or(h);
    !name.is_empty()
        && h.len() <= 253
        && name.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b.len() <= 63
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
        && !name.bytes().all(|c| c.is_ascii_digit() || c == b'.')
}
