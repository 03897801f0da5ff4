//! Defaulting with provenance (API.md section 2).
//!
//! Each field takes its value from the first layer that sets it: the
//! service's own spec, then the namespace's InferencePolicy objects, then
//! the matching ClusterInferencePolicy objects, then server flags and
//! built-in values. Every field filled in now is recorded in the
//! `infergate.dev/defaulted-from` annotation; entries already there are
//! kept, so defaulting an already defaulted object changes nothing.

use std::collections::BTreeMap;

use crate::api::{
    AcceleratorType, DEFAULTED_FROM_ANNOTATION, HealthCheckSpec, ResourcesSpec,
    v1beta1::{
        AcceleratorSpec, Backend, EngineSpec, InferenceService, ParallelismSpec, RoutingSpec,
    },
};

use super::policy::{Layer, first_default, layers};
use super::route::DEFAULT_PATH_TEMPLATE;
use super::{Context, Defaulted, Provenance};

/// Built-in engine port.
pub const DEFAULT_PORT: i32 = 8000;
/// Built-in replicas.
pub const DEFAULT_REPLICAS: i32 = 1;
/// Built-in autoscaling target.
pub const DEFAULT_TARGET_CPU: i32 = 80;
/// Built-in health check path.
pub const DEFAULT_HEALTH_PATH: &str = "/healthz";
/// Built-in health check interval.
pub const DEFAULT_HEALTH_INTERVAL: &str = "10s";
/// Built-in health check timeout.
pub const DEFAULT_HEALTH_TIMEOUT: &str = "1s";
/// Built-in request timeout.
pub const DEFAULT_REQUEST_TIMEOUT: &str = "5m";
/// Provenance of a server flag.
pub const SOURCE_FLAG: &str = "flag";
/// Provenance of a built-in value.
pub const SOURCE_BUILT_IN: &str = "built-in";

struct Filler<'l, 'a> {
    layers: &'l [Layer<'a>],
    filled: Vec<Provenance>,
}

impl<'a> Filler<'_, 'a> {
    /// Fill `slot` when empty: policy layers, then `fallback` (value, source).
    fn fill<T>(
        &mut self,
        slot: &mut Option<T>,
        field: &str,
        from_policy: impl Fn(&'a crate::api::policy::PolicyDefaults) -> Option<T>,
        fallback: Option<(T, &str)>,
    ) {
        if slot.is_some() {
            return;
        }
        let found = first_default(self.layers, from_policy)
            .or_else(|| fallback.map(|(v, src)| (v, src.to_owned())));
        if let Some((v, source)) = found {
            *slot = Some(v);
            self.filled.push(Provenance {
                field: field.to_owned(),
                source,
            });
        }
    }
}

/// Fill every default of API.md section 2, write/extend the
/// `infergate.dev/defaulted-from` annotation. Idempotent.
#[must_use]
pub fn default_service(svc: &InferenceService, ctx: &Context) -> Defaulted {
    let layers = layers(ctx);
    let mut out = svc.clone();
    let mut f = Filler {
        layers: &layers,
        filled: Vec::new(),
    };
    let spec = &mut out.spec;

    // engine.*
    {
        let engine = spec.engine.get_or_insert_with(EngineSpec::default);
        f.fill(
            &mut engine.image,
            "spec.engine.image",
            |d| d.engine.as_ref()?.image.clone(),
            ctx.server.engine_image.clone().map(|v| (v, SOURCE_FLAG)),
        );
        f.fill(
            &mut engine.port,
            "spec.engine.port",
            |d| d.engine.as_ref()?.port,
            Some((DEFAULT_PORT, SOURCE_BUILT_IN)),
        );
    }
    f.fill(
        &mut spec.backend,
        "spec.backend",
        |_| None,
        Some((Backend::Deployment, SOURCE_BUILT_IN)),
    );
    {
        let fallback = match ctx.server.replicas {
            Some(r) => (r, SOURCE_FLAG),
            None => (DEFAULT_REPLICAS, SOURCE_BUILT_IN),
        };
        f.fill(
            &mut spec.replicas,
            "spec.replicas",
            |d| d.replicas,
            Some(fallback),
        );
    }
    if let Some(auto) = spec.autoscaling.as_mut() {
        f.fill(
            &mut auto.target_cpu_utilization_percent,
            "spec.autoscaling.targetCPUUtilizationPercent",
            |d| d.autoscaling.as_ref()?.target_cpu_utilization_percent,
            Some((DEFAULT_TARGET_CPU, SOURCE_BUILT_IN)),
        );
    }
    // resources.cpu/memory only when a policy sets them.
    {
        let has_policy_resources = layers
            .iter()
            .any(|l| l.defaults.is_some_and(|d| d.resources.is_some()));
        if has_policy_resources || spec.resources.is_some() {
            let res = spec.resources.get_or_insert_with(ResourcesSpec::default);
            f.fill(
                &mut res.cpu,
                "spec.resources.cpu",
                |d| d.resources.as_ref()?.cpu.clone(),
                None,
            );
            f.fill(
                &mut res.memory,
                "spec.resources.memory",
                |d| d.resources.as_ref()?.memory.clone(),
                None,
            );
            if *res == ResourcesSpec::default() && svc.spec.resources.is_none() {
                spec.resources = None;
            }
        }
    }
    {
        let acc = spec
            .accelerator
            .get_or_insert_with(AcceleratorSpec::default);
        f.fill(
            &mut acc.r#type,
            "spec.accelerator.type",
            |_| None,
            Some((AcceleratorType::None, SOURCE_BUILT_IN)),
        );
    }
    {
        let par = spec
            .parallelism
            .get_or_insert_with(ParallelismSpec::default);
        f.fill(
            &mut par.tensor,
            "spec.parallelism.tensor",
            |_| None,
            Some((1, SOURCE_BUILT_IN)),
        );
        f.fill(
            &mut par.pipeline,
            "spec.parallelism.pipeline",
            |_| None,
            Some((1, SOURCE_BUILT_IN)),
        );
    }
    {
        let hc = spec
            .health_check
            .get_or_insert_with(HealthCheckSpec::default);
        f.fill(
            &mut hc.path,
            "spec.healthCheck.path",
            |d| d.health_check.as_ref()?.path.clone(),
            Some((DEFAULT_HEALTH_PATH.to_owned(), SOURCE_BUILT_IN)),
        );
        f.fill(
            &mut hc.interval,
            "spec.healthCheck.interval",
            |d| d.health_check.as_ref()?.interval.clone(),
            Some((DEFAULT_HEALTH_INTERVAL.to_owned(), SOURCE_BUILT_IN)),
        );
        f.fill(
            &mut hc.timeout,
            "spec.healthCheck.timeout",
            |d| d.health_check.as_ref()?.timeout.clone(),
            Some((DEFAULT_HEALTH_TIMEOUT.to_owned(), SOURCE_BUILT_IN)),
        );
    }
    {
        let r = spec.routing.get_or_insert_with(RoutingSpec::default);
        f.fill(
            &mut r.path_template,
            "spec.routing.pathTemplate",
            |d| d.routing.as_ref()?.path_template.clone(),
            Some((DEFAULT_PATH_TEMPLATE.to_owned(), SOURCE_BUILT_IN)),
        );
        f.fill(
            &mut r.request_timeout,
            "spec.routing.requestTimeout",
            |d| d.routing.as_ref()?.request_timeout.clone(),
            Some((DEFAULT_REQUEST_TIMEOUT.to_owned(), SOURCE_BUILT_IN)),
        );
        f.fill(
            &mut r.gateway,
            "spec.routing.gateway",
            |d| d.routing.as_ref()?.gateway.clone(),
            None,
        );
    }

    let filled = f.filled;
    if !filled.is_empty() {
        record_provenance(&mut out, &filled);
    }
    Defaulted {
        object: out,
        filled,
    }
}

/// The `defaulted-from` annotation of `svc`, parsed (empty when absent or malformed).
#[must_use]
pub fn provenance_of(svc: &InferenceService) -> BTreeMap<String, String> {
    svc.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(DEFAULTED_FROM_ANNOTATION))
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default()
}

fn record_provenance(svc: &mut InferenceService, filled: &[Provenance]) {
    let mut map = provenance_of(svc);
    for p in filled {
        map.insert(p.field.clone(), p.source.clone());
    }
    // A map of strings always serialises.
    let json = serde_json::to_string(&map).unwrap_or_default();
    svc.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(DEFAULTED_FROM_ANNOTATION.to_owned(), json);
}

/// One top-level spec field as JSON, before and after defaulting.
struct TopField {
    key: String,
    before: Option<serde_json::Value>,
    after: Option<serde_json::Value>,
}

/// `spec.<key>` of both objects as JSON. Only the field itself is
/// serialised, not the whole spec: a patch usually touches a few small
/// fields of a spec carrying long argument lists and environments.
fn top_field(
    before: &crate::api::v1beta1::InferenceServiceSpec,
    after: &crate::api::v1beta1::InferenceServiceSpec,
    key: &str,
) -> Result<TopField, serde_json::Error> {
    fn pair<T: serde::Serialize>(
        key: &str,
        b: Option<&T>,
        a: Option<&T>,
    ) -> Result<TopField, serde_json::Error> {
        Ok(TopField {
            key: key.to_owned(),
            before: b.map(serde_json::to_value).transpose()?,
            after: a.map(serde_json::to_value).transpose()?,
        })
    }
    match key {
        "engine" => pair(key, before.engine.as_ref(), after.engine.as_ref()),
        "backend" => pair(key, before.backend.as_ref(), after.backend.as_ref()),
        "replicas" => pair(key, before.replicas.as_ref(), after.replicas.as_ref()),
        "autoscaling" => pair(key, before.autoscaling.as_ref(), after.autoscaling.as_ref()),
        "resources" => pair(key, before.resources.as_ref(), after.resources.as_ref()),
        "accelerator" => pair(key, before.accelerator.as_ref(), after.accelerator.as_ref()),
        "parallelism" => pair(key, before.parallelism.as_ref(), after.parallelism.as_ref()),
        "healthCheck" => pair(
            key,
            before.health_check.as_ref(),
            after.health_check.as_ref(),
        ),
        "routing" => pair(key, before.routing.as_ref(), after.routing.as_ref()),
        // Any other field: take it from the whole spec (slower, same result).
        _ => {
            let b = serde_json::to_value(before)?;
            let a = serde_json::to_value(after)?;
            Ok(TopField {
                key: key.to_owned(),
                before: b.get(key).cloned(),
                after: a.get(key).cloned(),
            })
        }
    }
}

/// The JSONPatch that turns `before` into `defaulted.object`, built from
/// what defaulting recorded rather than by comparing whole objects: one
/// `add` per filled field, or one for the shallowest parent `before` does
/// not have, and one per annotation defaulting wrote. Only `spec` fields
/// and `metadata.annotations` ever change, so nothing else of the object is
/// read, compared or touched, and nothing the user sent is removed.
pub fn defaulting_patch(
    before: &InferenceService,
    defaulted: &Defaulted,
) -> Result<json_patch::Patch, serde_json::Error> {
    use json_patch::jsonptr::PointerBuf;
    use json_patch::{AddOperation, PatchOperation, RemoveOperation};
    use serde_json::Value;

    let mut ops = Vec::new();
    let mut tops: Vec<TopField> = Vec::new();
    let mut added: Vec<Vec<&str>> = Vec::new();
    for p in &defaulted.filled {
        let Some(rest) = p.field.strip_prefix("spec.") else {
            continue;
        };
        let tokens: Vec<&str> = rest.split('.').collect();
        let i = match tops.iter().position(|t| t.key == tokens[0]) {
            Some(i) => i,
            None => {
                tops.push(top_field(&before.spec, &defaulted.object.spec, tokens[0])?);
                tops.len() - 1
            }
        };
        let top = &tops[i];
        // The shallowest prefix `before` lacks: the whole subtree goes there.
        let mut depth = tokens.len();
        match top.before.as_ref() {
            None => depth = 1,
            Some(mut container) => {
                for (j, token) in tokens.iter().enumerate().take(tokens.len() - 1).skip(1) {
                    match container.get(*token) {
                        Some(next @ Value::Object(_)) => container = next,
                        _ => {
                            depth = j + 1;
                            break;
                        }
                    }
                }
            }
        }
        let path = &tokens[..depth];
        if added.iter().any(|a| path.starts_with(a)) {
            continue;
        }
        let Some(value) = top
            .after
            .as_ref()
            .and_then(|a| path[1..].iter().try_fold(a, |v, t| v.get(*t)))
        else {
            continue;
        };
        ops.push(PatchOperation::Add(AddOperation {
            path: PointerBuf::from_tokens(std::iter::once("spec").chain(path.iter().copied())),
            value: value.clone(),
        }));
        added.push(path.to_vec());
    }
    match (
        before.metadata.annotations.as_ref(),
        defaulted.object.metadata.annotations.as_ref(),
    ) {
        (_, None) => {}
        (None, Some(new)) => ops.push(PatchOperation::Add(AddOperation {
            path: PointerBuf::from_tokens(["metadata", "annotations"]),
            value: serde_json::to_value(new)?,
        })),
        (Some(old), Some(new)) => {
            for (key, value) in new.iter().filter(|(k, v)| old.get(*k) != Some(*v)) {
                ops.push(PatchOperation::Add(AddOperation {
                    path: PointerBuf::from_tokens(["metadata", "annotations", key.as_str()]),
                    value: Value::String(value.clone()),
                }));
            }
            for key in old.keys().filter(|k| !new.contains_key(*k)) {
                ops.push(PatchOperation::Remove(RemoveOperation {
                    path: PointerBuf::from_tokens(["metadata", "annotations", key.as_str()]),
                }));
            }
        }
    }
    Ok(json_patch::Patch(ops))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::policy::{
        ClusterInferencePolicySpec, EngineDefaults, InferencePolicySpec, PolicyDefaults,
    };
    use crate::api::{ClusterInferencePolicy, InferencePolicy};
    use crate::engine::{NoRoutes, PolicySnapshot, ServerDefaults};

    fn svc() -> InferenceService {
        let mut s = InferenceService::new("chat", Default::default());
        s.metadata.namespace = Some("team-a".to_owned());
        s.spec.model.r#ref = "m".to_owned();
        s
    }

    fn with<R>(
        policies: &PolicySnapshot,
        server: &ServerDefaults,
        f: impl FnOnce(&Context) -> R,
    ) -> R {
        let labels = BTreeMap::new();
        let ctx = Context {
            namespace: "team-a",
            namespace_labels: &labels,
            policies,
            server,
            routes: &NoRoutes,
        };
        f(&ctx)
    }

    fn image_policy_ns(name: &str, prio: i32, image: &str) -> InferencePolicy {
        let mut p = InferencePolicy::new(
            name,
            InferencePolicySpec {
                priority: prio,
                defaults: Some(PolicyDefaults {
                    engine: Some(EngineDefaults {
                        image: Some(image.to_owned()),
                        port: None,
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            },
        );
        p.metadata.namespace = Some("team-a".to_owned());
        p
    }

    fn image_policy_cluster(name: &str, prio: i32, image: &str) -> ClusterInferencePolicy {
        ClusterInferencePolicy::new(
            name,
            ClusterInferencePolicySpec {
                priority: prio,
                defaults: Some(PolicyDefaults {
                    engine: Some(EngineDefaults {
                        image: Some(image.to_owned()),
                        port: Some(9000),
                    }),
                    replicas: Some(3),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
    }

    #[test]
    fn built_ins_fill_everything_but_the_image() {
        let d = with(
            &PolicySnapshot::default(),
            &ServerDefaults::default(),
            |c| default_service(&svc(), c),
        );
        let s = &d.object.spec;
        let e = s.engine.as_ref().unwrap();
        assert_eq!(e.image, None);
        assert_eq!(e.port, Some(8000));
        assert_eq!(s.backend, Some(Backend::Deployment));
        assert_eq!(s.replicas, Some(1));
        assert_eq!(
            s.accelerator.as_ref().unwrap().r#type,
            Some(AcceleratorType::None)
        );
        let r = s.routing.as_ref().unwrap();
        assert_eq!(r.request_timeout.as_deref(), Some("5m"));
        assert_eq!(r.path_template.as_deref(), Some(DEFAULT_PATH_TEMPLATE));
        assert_eq!(r.gateway, None);
        assert_eq!(s.resources, None);
        assert_eq!(s.autoscaling, None);
        let hc = s.health_check.as_ref().unwrap();
        assert_eq!(hc.interval.as_deref(), Some("10s"));
        assert_eq!(hc.timeout.as_deref(), Some("1s"));
        let prov = provenance_of(&d.object);
        assert_eq!(
            prov.get("spec.replicas").map(String::as_str),
            Some("built-in")
        );
        assert!(!prov.contains_key("spec.engine.image"));
    }

    #[test]
    fn zero_replicas_stay_zero() {
        let mut s = svc();
        s.spec.replicas = Some(0);
        let d = with(
            &PolicySnapshot::default(),
            &ServerDefaults::default(),
            |c| default_service(&s, c),
        );
        assert_eq!(d.object.spec.replicas, Some(0));
        assert!(!d.filled.iter().any(|p| p.field == "spec.replicas"));
    }

    #[test]
    fn layers_in_order() {
        let server = ServerDefaults {
            engine_image: Some("flag/img".to_owned()),
            replicas: Some(5),
        };
        // flag only
        let d = with(&PolicySnapshot::default(), &server, |c| {
            default_service(&svc(), c)
        });
        assert_eq!(
            d.object.spec.engine.as_ref().unwrap().image.as_deref(),
            Some("flag/img")
        );
        assert_eq!(d.object.spec.replicas, Some(5));
        // cluster beats flag; higher priority cluster wins; ties by name
        let snap = PolicySnapshot {
            cluster: vec![
                image_policy_cluster("zeta", 1, "zeta/img"),
                image_policy_cluster("beta", 1, "beta/img"),
                image_policy_cluster("alpha", 0, "alpha/img"),
            ],
            namespaced: vec![],
        };
        let d = with(&snap, &server, |c| default_service(&svc(), c));
        let e = d.object.spec.engine.as_ref().unwrap();
        assert_eq!(e.image.as_deref(), Some("beta/img"));
        assert_eq!(e.port, Some(9000));
        assert_eq!(d.object.spec.replicas, Some(3));
        let prov = provenance_of(&d.object);
        assert_eq!(
            prov.get("spec.engine.image").map(String::as_str),
            Some("ClusterInferencePolicy/beta")
        );
        // namespace policy beats cluster; only for fields it sets
        let snap = PolicySnapshot {
            namespaced: vec![
                image_policy_ns("low", 0, "low/img"),
                image_policy_ns("high", 7, "high/img"),
            ],
            ..snap
        };
        let d = with(&snap, &server, |c| default_service(&svc(), c));
        let e = d.object.spec.engine.as_ref().unwrap();
        assert_eq!(e.image.as_deref(), Some("high/img"));
        assert_eq!(e.port, Some(9000), "port still from the cluster policy");
        let prov = provenance_of(&d.object);
        assert_eq!(
            prov.get("spec.engine.image").map(String::as_str),
            Some("InferencePolicy/team-a/high")
        );
        // the service's own value beats every layer
        let mut own = svc();
        own.spec.engine = Some(EngineSpec {
            image: Some("own/img".to_owned()),
            ..Default::default()
        });
        let d = with(&snap, &server, |c| default_service(&own, c));
        assert_eq!(
            d.object.spec.engine.as_ref().unwrap().image.as_deref(),
            Some("own/img")
        );
        assert!(!provenance_of(&d.object).contains_key("spec.engine.image"));
    }

    #[test]
    fn other_namespaces_policies_do_not_apply() {
        let mut p = image_policy_ns("other", 100, "other/img");
        p.metadata.namespace = Some("team-b".to_owned());
        let snap = PolicySnapshot {
            namespaced: vec![p],
            ..Default::default()
        };
        let d = with(&snap, &ServerDefaults::default(), |c| {
            default_service(&svc(), c)
        });
        assert_eq!(d.object.spec.engine.as_ref().unwrap().image, None);
    }

    #[test]
    fn idempotent_and_provenance_kept() {
        let snap = PolicySnapshot {
            cluster: vec![image_policy_cluster("platform", 0, "reg/img")],
            ..Default::default()
        };
        let (once, twice) = with(&snap, &ServerDefaults::default(), |c| {
            let once = default_service(&svc(), c);
            let twice = default_service(&once.object, c);
            (once, twice)
        });
        assert!(!once.filled.is_empty());
        assert!(twice.filled.is_empty());
        assert_eq!(once.object, twice.object);
        // autoscaling added later: only the new field is recorded
        let mut later = once.object.clone();
        later.spec.autoscaling = Some(crate::api::v1beta1::AutoscalingSpec {
            min_replicas: 1,
            max_replicas: 2,
            target_cpu_utilization_percent: None,
        });
        let d = with(&snap, &ServerDefaults::default(), |c| {
            default_service(&later, c)
        });
        assert_eq!(d.filled.len(), 1);
        let before = provenance_of(&once.object);
        let after = provenance_of(&d.object);
        assert_eq!(after.len(), before.len() + 1);
        for (k, v) in &before {
            assert_eq!(after.get(k), Some(v));
        }
    }

    /// `top_field` names each field as its JSON key, and its fallback for
    /// fields it does not list gives the same as the listed arms.
    #[test]
    fn top_fields_match_the_serialised_spec() {
        let snap = PolicySnapshot {
            cluster: vec![image_policy_cluster("platform", 0, "reg/img")],
            ..Default::default()
        };
        let mut s = svc();
        s.spec.autoscaling = Some(crate::api::v1beta1::AutoscalingSpec {
            min_replicas: 1,
            max_replicas: 2,
            target_cpu_utilization_percent: None,
        });
        s.spec.resources = Some(ResourcesSpec {
            cpu: Some(k8s_openapi::apimachinery::pkg::api::resource::Quantity(
                "2".into(),
            )),
            ..Default::default()
        });
        let full = with(&snap, &ServerDefaults::default(), |c| {
            default_service(&s, c)
        })
        .object;
        let json = serde_json::to_value(&full.spec).unwrap();
        let listed = [
            "engine",
            "backend",
            "replicas",
            "autoscaling",
            "resources",
            "accelerator",
            "parallelism",
            "healthCheck",
            "routing",
        ];
        for key in listed.iter().copied().chain(["model", "canary", "graph"]) {
            let t = top_field(&s.spec, &full.spec, key).unwrap();
            assert_eq!(t.after.as_ref(), json.get(key), "{key}");
            let before = serde_json::to_value(&s.spec).unwrap();
            assert_eq!(t.before.as_ref(), before.get(key), "{key}");
            if listed.contains(&key) {
                assert!(json.get(key).is_some(), "{key} is a key of the spec's JSON");
            }
        }
    }
}
