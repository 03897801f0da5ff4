//! Defaulting with provenance (API.md section 2).
//!
//! Each field takes its value from the first layer that sets it: the
//! service's own spec, then the namespace's InferencePolicy objects, then
//! the matching ClusterInferencePolicy objects, then server flags and
//! built-in values. Every field filled in now is recorded in the
//! `infergate.dev/defaulted-from` annotation; entries already there are
//! kept, so defaulting an already defaulted object changes nothing.

use std::borrow::Cow;
use std::collections::BTreeMap;

use crate::api::{
    AcceleratorType, DEFAULTED_FROM_ANNOTATION, HealthCheckSpec, ResourcesSpec,
    v1beta1::{
        AcceleratorSpec, Backend, EngineSpec, InferenceService, InferenceServiceSpec,
        ParallelismSpec, RoutingSpec,
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
    /// Each layer's provenance source, formatted on first use.
    sources: Vec<Option<Cow<'static, str>>>,
    filled: Vec<Provenance>,
}

impl<'a> Filler<'_, 'a> {
    /// Fill `slot` when empty: policy layers, then `fallback` (value, source).
    fn fill<T: serde::Serialize>(
        &mut self,
        slot: &mut Option<T>,
        field: &'static str,
        from_policy: impl Fn(&'a crate::api::policy::PolicyDefaults) -> Option<T>,
        fallback: Option<(T, &'static str)>,
    ) {
        if slot.is_some() {
            return;
        }
        let found = match first_default(self.layers, from_policy) {
            Some((v, i)) => {
                let layer = &self.layers[i];
                let source = self.sources[i].get_or_insert_with(|| Cow::Owned(layer.source()));
                Some((v, source.clone()))
            }
            None => fallback.map(|(v, src)| (v, Cow::Borrowed(src))),
        };
        if let Some((v, source)) = found {
            let value = serde_json::to_string(&v).ok();
            *slot = Some(v);
            self.filled.push(Provenance {
                field,
                source,
                value,
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
        sources: vec![None; layers.len()],
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
    let earlier = provenance_of(svc);
    let mut map: BTreeMap<&str, &str> = earlier
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    for p in filled {
        map.insert(p.field, &p.source);
    }
    // A map of strings always serialises. Written with simd-json's
    // serializer, whose string escaping scans 32 bytes at a time: this text
    // is escaped again inside the patch, and is the longest string written.
    let json = simd_json::serde::to_string(&map).unwrap_or_default();
    svc.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(DEFAULTED_FROM_ANNOTATION.to_owned(), json);
}

/// What to do with one top-level spec field, by its JSON key: the typed
/// field is handed to [`SpecField::typed`] (absent as `None`); a key not
/// listed here goes to [`SpecField::untyped`] with the whole spec.
trait SpecField {
    type Out;
    fn typed<T: serde::Serialize>(self, field: Option<&T>) -> Self::Out;
    fn untyped(self, spec: &InferenceServiceSpec, key: &str) -> Self::Out;
}

/// Apply `f` to `spec.<key>`. Only the field itself is serialised by the
/// visitors, not the whole spec: a patch usually touches a few small
/// fields of a spec carrying long argument lists and environments.
fn spec_field<F: SpecField>(spec: &InferenceServiceSpec, key: &str, f: F) -> F::Out {
    match key {
        "engine" => f.typed(spec.engine.as_ref()),
        "backend" => f.typed(spec.backend.as_ref()),
        "replicas" => f.typed(spec.replicas.as_ref()),
        "autoscaling" => f.typed(spec.autoscaling.as_ref()),
        "resources" => f.typed(spec.resources.as_ref()),
        "accelerator" => f.typed(spec.accelerator.as_ref()),
        "parallelism" => f.typed(spec.parallelism.as_ref()),
        "healthCheck" => f.typed(spec.health_check.as_ref()),
        "routing" => f.typed(spec.routing.as_ref()),
        // Any other field: taken from the whole spec (slower, same result).
        _ => f.untyped(spec, key),
    }
}

/// `spec.<key>` as a JSON value.
struct ToValue;

impl SpecField for ToValue {
    type Out = Result<Option<serde_json::Value>, serde_json::Error>;
    fn typed<T: serde::Serialize>(self, field: Option<&T>) -> Self::Out {
        field.map(serde_json::to_value).transpose()
    }
    fn untyped(self, spec: &InferenceServiceSpec, key: &str) -> Self::Out {
        Ok(serde_json::to_value(spec)?.get(key).cloned())
    }
}

/// Whether `spec.<key>` is present.
struct Present;

impl SpecField for Present {
    type Out = Result<bool, serde_json::Error>;
    fn typed<T: serde::Serialize>(self, field: Option<&T>) -> Self::Out {
        Ok(field.is_some())
    }
    fn untyped(self, spec: &InferenceServiceSpec, key: &str) -> Self::Out {
        Ok(serde_json::to_value(spec)?.get(key).is_some())
    }
}

/// Write the JSONPatch `add` of `spec.<key>` at `path`, if present.
struct WriteAdd<'o> {
    out: &'o mut Patch,
    path: &'o str,
}

impl SpecField for WriteAdd<'_> {
    type Out = Result<(), serde_json::Error>;
    fn typed<T: serde::Serialize>(self, field: Option<&T>) -> Self::Out {
        match field {
            Some(v) => self.out.add(self.path, v),
            None => Ok(()),
        }
    }
    fn untyped(self, spec: &InferenceServiceSpec, key: &str) -> Self::Out {
        match serde_json::to_value(spec)?.get(key) {
            Some(v) => self.out.add(self.path, v),
            None => Ok(()),
        }
    }
}

/// A JSONPatch being written as JSON text.
struct Patch(Vec<u8>);

impl Patch {
    fn start(&mut self, op: &str, path: &str) -> Result<(), serde_json::Error> {
        self.0.push(if self.0.is_empty() { b'[' } else { b',' });
        self.0.extend_from_slice(br#"{"op":""#);
        self.0.extend_from_slice(op.as_bytes());
        self.0.extend_from_slice(br#"","path":"#);
        serde_json::to_writer(&mut self.0, path)
    }
    fn add<V: serde::Serialize + ?Sized>(
        &mut self,
        path: &str,
        value: &V,
    ) -> Result<(), serde_json::Error> {
        self.start("add", path)?;
        self.0.extend_from_slice(br#","value":"#);
        // simd-json's serializer: the same JSON, with strings escaped 32
        // bytes at a time (the provenance annotation is JSON in a string).
        simd_json::serde::to_writer(&mut self.0, value).map_err(serde::ser::Error::custom)?;
        self.0.push(b'}');
        Ok(())
    }
    /// An `add` of a value already serialised as JSON text.
    fn add_json(&mut self, path: &str, json: &str) -> Result<(), serde_json::Error> {
        self.start("add", path)?;
        self.0.extend_from_slice(br#","value":"#);
        self.0.extend_from_slice(json.as_bytes());
        self.0.push(b'}');
        Ok(())
    }
    fn remove(&mut self, path: &str) -> Result<(), serde_json::Error> {
        self.start("remove", path)?;
        self.0.push(b'}');
        Ok(())
    }
    fn finish(mut self) -> Vec<u8> {
        if self.0.is_empty() {
            self.0.push(b'[');
        }
        self.0.push(b']');
        self.0
    }
}

/// The JSON pointer of `tokens` (RFC 6901: `~` and `/` escaped).
fn pointer<'t>(tokens: impl IntoIterator<Item = &'t str>) -> String {
    let mut p = String::with_capacity(64);
    for t in tokens {
        p.push('/');
        p.push_str(json_patch::jsonptr::Token::new(t).encoded());
    }
    p
}

/// The JSONPatch that turns `before` into `defaulted.object`, as JSON
/// text, built from what defaulting recorded rather than by comparing whole
/// objects: one `add` per filled field, or one for the shallowest parent
/// `before` does not have (the parent's subtree is then written straight
/// from the typed field), and one per annotation defaulting wrote. Only
/// `spec` fields and `metadata.annotations` ever change, so nothing else of
/// the object is read, compared or touched, and nothing the user sent is
/// removed.
pub fn defaulting_patch_json(
    before: &InferenceService,
    defaulted: &Defaulted,
) -> Result<Vec<u8>, serde_json::Error> {
    use serde_json::Value;

    /// A top-level field's JSON, computed only when a path below it is needed.
    struct Top<'k> {
        key: &'k str,
        present_before: bool,
        before: Option<Option<Value>>,
        after: Option<Option<Value>>,
    }

    let after = &defaulted.object;
    let mut out = Patch(Vec::with_capacity(1024));
    let mut tops: Vec<Top<'_>> = Vec::new();
    // Dotted paths below `spec` added so far: nothing below them again.
    let mut added: Vec<&str> = Vec::new();
    for p in &defaulted.filled {
        let Some(rest) = p.field.strip_prefix("spec.") else {
            continue;
        };
        let key = rest.split_once('.').map_or(rest, |(k, _)| k);
        let i = match tops.iter().position(|t| t.key == key) {
            Some(i) => i,
            None => {
                tops.push(Top {
                    key,
                    present_before: spec_field(&before.spec, key, Present)?,
                    before: None,
                    after: None,
                });
                tops.len() - 1
            }
        };
        let top = &mut tops[i];
        // The shallowest prefix `before` lacks: the whole subtree goes there.
        let path = if !top.present_before {
            key
        } else if rest.matches('.').count() <= 1 {
            rest
        } else {
            if top.before.is_none() {
                top.before = Some(spec_field(&before.spec, key, ToValue)?);
            }
            let mut end = rest.len();
            if let Some(mut container) = top.before.as_ref().and_then(Option::as_ref) {
                let parents = rest.match_indices('.').map(|(at, _)| at).skip(1);
                let mut from = key.len() + 1;
                for at in parents {
                    match container.get(&rest[from..at]) {
                        Some(next @ Value::Object(_)) => container = next,
                        _ => {
                            end = at;
                            break;
                        }
                    }
                    from = at + 1;
                }
            }
            &rest[..end]
        };
        let below = |a: &&str| {
            path.strip_prefix(*a)
                .is_some_and(|r| r.is_empty() || r.starts_with('.'))
        };
        if added.iter().any(below) {
            continue;
        }
        let ptr = pointer(std::iter::once("spec").chain(path.split('.')));
        if path == key {
            spec_field(
                &after.spec,
                key,
                WriteAdd {
                    out: &mut out,
                    path: &ptr,
                },
            )?;
        } else if let Some(value) = p.value.as_deref().filter(|_| path == rest) {
            out.add_json(&ptr, value)?;
        } else {
            if top.after.is_none() {
                top.after = Some(spec_field(&after.spec, key, ToValue)?);
            }
            let value = top
                .after
                .as_ref()
                .and_then(Option::as_ref)
                .and_then(|a| path.split('.').skip(1).try_fold(a, |v, t| v.get(t)));
            let Some(value) = value else {
                continue;
            };
            out.add(&ptr, value)?;
        }
        added.push(path);
    }
    match (
        before.metadata.annotations.as_ref(),
        after.metadata.annotations.as_ref(),
    ) {
        (_, None) => {}
        (None, Some(new)) => out.add("/metadata/annotations", new)?,
        (Some(old), Some(new)) => {
            for (key, value) in new.iter().filter(|(k, v)| old.get(*k) != Some(*v)) {
                out.add(&pointer(["metadata", "annotations", key.as_str()]), value)?;
            }
            for key in old.keys().filter(|k| !new.contains_key(*k)) {
                out.remove(&pointer(["metadata", "annotations", key.as_str()]))?;
            }
        }
    }
    Ok(out.finish())
}

/// [`defaulting_patch_json`] as a typed patch.
pub fn defaulting_patch(
    before: &InferenceService,
    defaulted: &Defaulted,
) -> Result<json_patch::Patch, serde_json::Error> {
    serde_json::from_slice(&defaulting_patch_json(before, defaulted)?)
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

    /// `spec_field` names each field as its JSON key, and its fallback for
    /// fields it does not list gives the same as the listed arms.
    #[test]
    fn spec_fields_match_the_serialised_spec() {
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
        for spec in [&s.spec, &full.spec] {
            let json = serde_json::to_value(spec).unwrap();
            for key in listed.iter().copied().chain(["model", "canary", "graph"]) {
                let value = spec_field(spec, key, ToValue).unwrap();
                assert_eq!(value.as_ref(), json.get(key), "{key}");
                assert_eq!(
                    spec_field(spec, key, Present).unwrap(),
                    json.get(key).is_some(),
                    "{key}"
                );
                let mut out = Patch(Vec::new());
                spec_field(
                    spec,
                    key,
                    WriteAdd {
                        out: &mut out,
                        path: "/x",
                    },
                )
                .unwrap();
                let written: Vec<serde_json::Value> =
                    serde_json::from_slice(&out.finish()).unwrap();
                assert_eq!(
                    written.first().map(|op| &op["value"]),
                    json.get(key),
                    "{key}"
                );
            }
        }
        let json = serde_json::to_value(&full.spec).unwrap();
        for key in listed {
            assert!(json.get(key).is_some(), "{key} is a key of the spec's JSON");
        }
    }

    /// A filled field three levels below `spec` gets its `add` at the
    /// shallowest parent the object lacks, or at the field itself when
    /// every parent is there; applied, the patch gives the defaulted object.
    #[test]
    fn deep_fields_are_added_at_the_first_missing_parent() {
        use crate::api::GatewayRef;
        let filled = vec![Provenance {
            field: "spec.routing.gateway.namespace",
            source: Cow::Borrowed(SOURCE_BUILT_IN),
            value: Some(r#""gateways""#.to_owned()),
        }];
        let mut before = svc();
        before.spec.routing = Some(RoutingSpec::default());
        let mut after = before.clone();
        after.spec.routing.as_mut().unwrap().gateway = Some(GatewayRef {
            name: "gw".into(),
            namespace: Some("gateways".into()),
        });
        let mut with_gateway = before.clone();
        with_gateway.spec.routing.as_mut().unwrap().gateway = Some(GatewayRef {
            name: "gw".into(),
            namespace: None,
        });
        for (before, expected_path) in [
            (&before, "/spec/routing/gateway"),
            (&with_gateway, "/spec/routing/gateway/namespace"),
        ] {
            let d = Defaulted {
                object: after.clone(),
                filled: filled.clone(),
            };
            let patch = defaulting_patch(before, &d).unwrap();
            assert_eq!(patch.0.len(), 1, "{patch:?}");
            let json_patch::PatchOperation::Add(op) = &patch.0[0] else {
                panic!("not an add: {patch:?}");
            };
            assert_eq!(op.path.as_str(), expected_path);
            let mut json = serde_json::to_value(before).unwrap();
            json_patch::patch(&mut json, &patch).unwrap();
            assert_eq!(json, serde_json::to_value(&after).unwrap());
        }
    }

    /// Strings in the patch go through simd-json's escaper, which works on
    /// 32-byte blocks and falls back to a table for the tail: every
    /// character JSON must escape, at every offset around a block edge,
    /// reads back as written.
    #[test]
    fn patch_strings_read_back_at_every_offset() {
        let specials = [
            '"', '\\', '\n', '\t', '\u{1}', '\u{1f}', '\u{7f}', 'é', '€', '😀',
        ];
        for len in [0_usize, 1, 31, 32, 33, 63, 64, 65, 100] {
            for at in [0, len / 2, len.saturating_sub(1)] {
                for c in specials {
                    let mut text: String = "a".repeat(len);
                    if len > 0 {
                        text.replace_range(at..=at, &c.to_string());
                    }
                    let mut out = Patch(Vec::new());
                    out.add("/metadata/annotations/a~1b", &text).unwrap();
                    let written: serde_json::Value = serde_json::from_slice(&out.finish()).unwrap();
                    assert_eq!(written[0]["value"], serde_json::Value::String(text.clone()));
                }
            }
        }
    }
}
