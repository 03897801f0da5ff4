//! The JSONPatch of a mutating answer, written from what defaulting
//! returned ([`DefaultedSpec`]: the defaulted spec, the annotation and the
//! provenance of each field filled in) rather than by comparing whole
//! objects.
//!
//! One `add` per filled field, or one for the shallowest parent the object
//! lacks, and one for the defaulted-from annotation when defaulting wrote
//! or changed it (with the annotations, when the object had none). Only
//! `spec` fields and `metadata.annotations` ever change, so nothing else
//! of the object is read, compared or touched, and nothing the user sent
//! is removed.

use crate::api::DEFAULTED_FROM_ANNOTATION;
use crate::api::v1beta1::{InferenceService, InferenceServiceSpec};
use crate::engine::DefaultedSpec;
use crate::engine::json_text;

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
/// fields of a spec carrying long argument lists and environments. The
/// spec is taken apart whole (no `..`), so a field added to the spec does
/// not build until it has its arm here: a key without one would serialise
/// the whole spec on every review that defaults it.
fn spec_field<F: SpecField>(spec: &InferenceServiceSpec, key: &str, f: F) -> F::Out {
    let InferenceServiceSpec {
        model,
        engine,
        backend,
        replicas,
        autoscaling,
        resources,
        accelerator,
        parallelism,
        placement,
        service_account_name,
        image_pull_secrets,
        canary,
        health_check,
        routing,
        metrics,
        rollout,
        graph,
    } = spec;
    match key {
        "engine" => f.typed(engine.as_ref()),
        "backend" => f.typed(backend.as_ref()),
        "replicas" => f.typed(replicas.as_ref()),
        "autoscaling" => f.typed(autoscaling.as_ref()),
        "resources" => f.typed(resources.as_ref()),
        "accelerator" => f.typed(accelerator.as_ref()),
        "parallelism" => f.typed(parallelism.as_ref()),
        "placement" => f.typed(placement.as_ref()),
        "serviceAccountName" => f.typed(service_account_name.as_ref()),
        // Serialised only when not empty.
        "imagePullSecrets" => f.typed(Some(image_pull_secrets).filter(|v| !v.is_empty())),
        "healthCheck" => f.typed(health_check.as_ref()),
        "routing" => f.typed(routing.as_ref()),
        "model" => f.typed(Some(model)),
        "canary" => f.typed(canary.as_ref()),
        "metrics" => f.typed(metrics.as_ref()),
        "rollout" => f.typed(rollout.as_ref()),
        "graph" => f.typed(graph.as_ref()),
        // Not a key of the spec's JSON: taken from the whole spec (slower,
        // same result: absent).
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
    path: Path<'o>,
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

/// Where an operation applies.
#[derive(Clone, Copy)]
enum Path<'p> {
    /// A field below `spec` by its dotted path (`routing.gateway`), the
    /// pointer written from it in place.
    Spec(&'p str),
    /// A JSON pointer, as it is.
    Pointer(&'p str),
}

/// A JSONPatch being written as JSON text.
struct Patch(Vec<u8>);

impl Patch {
    /// Begin an `add` (defaulting only adds) at `path`.
    fn start(&mut self, path: Path<'_>) -> Result<(), serde_json::Error> {
        self.0.push(if self.0.is_empty() { b'[' } else { b',' });
        self.0.extend_from_slice(br#"{"op":"add","path":"#);
        match path {
            Path::Spec(dotted) => {
                // A spec field's tokens are JSON keys of the spec: letters
                // and digits, nothing a pointer or a JSON string escapes;
                // copied whole, then its dots turned to slashes (two loops
                // without a branch per byte). Anything else goes the long
                // way.
                let plain = dotted
                    .bytes()
                    .fold(true, |p, b| p & (b.is_ascii_alphanumeric() | (b == b'.')));
                if plain {
                    self.0.extend_from_slice(br#""/spec/"#);
                    let at = self.0.len();
                    self.0.extend_from_slice(dotted.as_bytes());
                    for b in &mut self.0[at..] {
                        *b = if *b == b'.' { b'/' } else { *b };
                    }
                    self.0.push(b'"');
                } else {
                    let p = pointer(std::iter::once("spec").chain(dotted.split('.')));
                    json_text::push_string(&mut self.0, &p);
                }
            }
            Path::Pointer(p) => json_text::push_string(&mut self.0, p),
        }
        Ok(())
    }
    fn add<V: serde::Serialize + ?Sized>(
        &mut self,
        path: Path<'_>,
        value: &V,
    ) -> Result<(), serde_json::Error> {
        self.start(path)?;
        self.0.extend_from_slice(br#","value":"#);
        serde_json::to_writer(&mut self.0, value)?;
        self.0.push(b'}');
        Ok(())
    }
    /// An `add` of a value already serialised as JSON text.
    fn add_json(&mut self, path: Path<'_>, json: &str) -> Result<(), serde_json::Error> {
        self.start(path)?;
        self.0.extend_from_slice(br#","value":"#);
        self.0.extend_from_slice(json.as_bytes());
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
        // `~` and `/` are ASCII: the runs between them are whole chars.
        let mut from = 0;
        for (i, b) in t.bytes().enumerate() {
            let escaped = match b {
                b'~' => "~0",
                b'/' => "~1",
                _ => continue,
            };
            p.push_str(&t[from..i]);
            p.push_str(escaped);
            from = i + 1;
        }
        p.push_str(&t[from..]);
    }
    p
}

/// The JSONPatch that turns `before` into the object `defaulted` describes
/// (what `engine::default_service` returns for `before`), as JSON text
/// (`[]` when defaulting changed nothing). A filled field whose parent
/// `before` lacks is added with the parent, its subtree written straight
/// from the typed field.
pub fn defaulting_patch(
    before: &InferenceService,
    defaulted: &DefaultedSpec,
) -> Result<Vec<u8>, serde_json::Error> {
    use serde_json::Value;

    /// A top-level field's JSON, computed only when a path below it is needed.
    struct Top<'k> {
        key: &'k str,
        present_before: bool,
        before: Option<Option<Value>>,
        after: Option<Option<Value>>,
    }

    let after = &defaulted.spec;
    // Room for the operations and the annotation's string, grown once.
    let quoted_len = defaulted.annotation.as_ref().map_or(0, |a| a.quoted.len());
    let mut out = Patch(Vec::with_capacity(4096 + quoted_len));
    let mut tops: Vec<Top<'_>> = Vec::with_capacity(16);
    // Dotted paths below `spec` added so far, with their top-level field's
    // index in `tops`: nothing below them again.
    let mut added: Vec<(usize, &str)> = Vec::with_capacity(defaulted.filled.len());
    for p in &defaulted.filled {
        let Some(rest) = p.field.strip_prefix("spec.") else {
            continue;
        };
        // Byte searches: a field path is ASCII, and `str::find` of a char
        // costs more than these short paths.
        let first_dot = rest.bytes().position(|b| b == b'.');
        let key = first_dot.map_or(rest, |dot| &rest[..dot]);
        // Fields of one top-level field are filled one after another: the
        // last one is checked first.
        let last = tops.len().checked_sub(1).filter(|&l| tops[l].key == key);
        let i = match last.or_else(|| tops.iter().position(|t| t.key == key)) {
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
        } else if rest.bytes().filter(|&b| b == b'.').count() <= 1 {
            rest
        } else {
            if top.before.is_none() {
                top.before = Some(spec_field(&before.spec, key, ToValue)?);
            }
            let mut end = rest.len();
            if let Some(mut container) = top.before.as_ref().and_then(Option::as_ref) {
                let parents = (key.len() + 1..rest.len()).filter(|&at| rest.as_bytes()[at] == b'.');
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
        let below = |&(top, a): &(usize, &str)| {
            top == i
                && path
                    .strip_prefix(a)
                    .is_some_and(|r| r.is_empty() || r.as_bytes()[0] == b'.')
        };
        if added.iter().any(below) {
            continue;
        }
        let at = Path::Spec(path);
        if path == key {
            spec_field(
                after,
                key,
                WriteAdd {
                    out: &mut out,
                    path: at,
                },
            )?;
        } else if let Some(value) = defaulted.value(p).filter(|_| path == rest) {
            out.add_json(at, value)?;
        } else {
            if top.after.is_none() {
                top.after = Some(spec_field(after, key, ToValue)?);
            }
            let value = top
                .after
                .as_ref()
                .and_then(Option::as_ref)
                .and_then(|a| path.split('.').skip(1).try_fold(a, |v, t| v.get(t)));
            let Some(value) = value else {
                continue;
            };
            out.add(at, value)?;
        }
        added.push((i, path));
    }
    annotation_ops(&mut out, before, defaulted)?;
    Ok(out.finish())
}

/// Where the defaulted-from annotation is, as a JSON pointer (its `/`
/// escaped).
const DEFAULTED_FROM_POINTER: &str = "/metadata/annotations/infergate.dev~1defaulted-from";

/// The operation on `metadata.annotations`: the defaulted-from annotation
/// added when defaulting wrote or changed it (already written as a JSON
/// string, not escaped again), with the annotations themselves when
/// `before` had none. Defaulting changes no other annotation.
fn annotation_ops(
    out: &mut Patch,
    before: &InferenceService,
    defaulted: &DefaultedSpec,
) -> Result<(), serde_json::Error> {
    let Some(from) = defaulted.annotation.as_ref() else {
        return Ok(());
    };
    match before.metadata.annotations.as_ref() {
        None => {
            out.start(Path::Pointer("/metadata/annotations"))?;
            out.0.extend_from_slice(br#","value":{"#);
            json_text::push_string(&mut out.0, DEFAULTED_FROM_ANNOTATION);
            out.0.push(b':');
            out.0.extend_from_slice(from.quoted.as_bytes());
            out.0.extend_from_slice(b"}}");
        }
        Some(old) => {
            // Unchanged when the annotation there, written as a JSON
            // string, is the string defaulting wrote (escaping is one to
            // one); the copy is made only for an object that already
            // carries it (an UPDATE of a defaulted object).
            let unchanged = old.get(DEFAULTED_FROM_ANNOTATION).is_some_and(|v| {
                let mut quoted = String::with_capacity(from.quoted.len());
                json_text::push_string(&mut quoted, v);
                quoted == from.quoted
            });
            if !unchanged {
                out.add_json(Path::Pointer(DEFAULTED_FROM_POINTER), &from.quoted)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::api::ResourcesSpec;
    use crate::api::v1beta1::RoutingSpec;
    use crate::engine::default::SOURCE_BUILT_IN;
    use crate::engine::{PolicySnapshot, Provenance, ServerDefaults, Source};

    fn svc() -> InferenceService {
        let mut s = InferenceService::new("chat", Default::default());
        s.metadata.namespace = Some("team-a".to_owned());
        s.spec.model.r#ref = "m".to_owned();
        s
    }

    /// A cluster policy that defaults the image, the port and the replicas.
    fn platform() -> PolicySnapshot {
        PolicySnapshot {
            cluster: vec![crate::engine::context::image_policy_cluster(
                "platform", 0, "reg/img",
            )],
            namespaced: vec![],
        }
    }

    fn default_spec(svc: &InferenceService, policies: &PolicySnapshot) -> DefaultedSpec {
        crate::engine::context::in_team_a(policies, &ServerDefaults::default(), |ctx| {
            crate::engine::default_spec(svc, ctx)
        })
    }

    /// The whole defaulted object, as the engine's other callers get it.
    fn default_service(svc: &InferenceService, policies: &PolicySnapshot) -> InferenceService {
        crate::engine::context::in_team_a(policies, &ServerDefaults::default(), |ctx| {
            crate::engine::default_service(svc, ctx).object
        })
    }

    /// The patch, parsed as a JSONPatch.
    fn typed(before: &InferenceService, d: &DefaultedSpec) -> json_patch::Patch {
        serde_json::from_slice(&defaulting_patch(before, d).unwrap()).unwrap()
    }

    /// `spec_field` names each field as its JSON key, and its fallback for
    /// fields it does not list gives the same as the listed arms.
    #[test]
    fn spec_fields_match_the_serialised_spec() {
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
        // The fields matched by name but not typed by defaulting, set.
        s.spec.canary = Some(
            serde_json::from_value(serde_json::json!({"model": {"ref": "m2"}, "weight": 10}))
                .unwrap(),
        );
        s.spec.metrics = Some(crate::api::MetricsSpec {
            path: Some("/metrics".to_owned()),
            ..Default::default()
        });
        s.spec.rollout = Some(
            serde_json::from_value(serde_json::json!({"steps": [10, 50], "interval": "1m"}))
                .unwrap(),
        );
        s.spec.placement = Some(crate::api::v1beta1::PlacementSpec {
            priority_class_name: Some("inference".to_owned()),
            ..Default::default()
        });
        s.spec.service_account_name = Some("engine".to_owned());
        s.spec.image_pull_secrets = vec![k8s_openapi::api::core::v1::LocalObjectReference {
            name: "pull".to_owned(),
        }];
        let full = default_service(&s, &platform());
        let listed = [
            "engine",
            "backend",
            "replicas",
            "autoscaling",
            "resources",
            "accelerator",
            "parallelism",
            "placement",
            "serviceAccountName",
            "imagePullSecrets",
            "healthCheck",
            "routing",
        ];
        let mut bare = svc();
        bare.spec.image_pull_secrets.clear();
        for spec in [&s.spec, &full.spec, &bare.spec] {
            let json = serde_json::to_value(spec).unwrap();
            let others = [
                "model",
                "canary",
                "metrics",
                "rollout",
                "graph",
                "notAField",
            ];
            for key in listed.iter().copied().chain(others) {
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
                        path: Path::Pointer("/x"),
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
        // Every key the spec serialises has its typed arm.
        for key in json.as_object().unwrap().keys() {
            assert!(
                listed.contains(&key.as_str())
                    || ["model", "canary", "metrics", "rollout", "graph"].contains(&key.as_str()),
                "spec.{key} has no typed arm in spec_field"
            );
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
            source: Source::Fixed(SOURCE_BUILT_IN),
            value: Some(0..r#""gateways""#.len()),
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
            let d = DefaultedSpec {
                spec: after.spec.clone(),
                filled: filled.clone(),
                warnings: Vec::new(),
                annotation: None,
                values: br#""gateways""#.to_vec(),
            };
            let patch = typed(before, &d);
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

    /// The defaulted-from annotation: added with the annotations when the
    /// object has none, added beside the others when it has some, replaced
    /// when more fields are filled, left alone when nothing is; applied,
    /// the patch gives the object the engine's other callers get.
    #[test]
    fn the_annotation_is_added_beside_the_others_or_replaced() {
        let bare = svc();
        let mut others = svc();
        others.metadata.annotations = Some(BTreeMap::from([
            ("a/b".to_owned(), "x".to_owned()),
            ("z".to_owned(), "{\"quoted\": 1}".to_owned()),
        ]));
        let defaulted = default_service(&others, &platform());
        // The image taken out again: filled from the same source, the
        // annotation stays as it is.
        let mut again = defaulted.clone();
        again.spec.engine.as_mut().unwrap().image = None;
        // The image and its entry taken out: the annotation is replaced.
        let mut forgotten = again.clone();
        let entries = forgotten.metadata.annotations.as_mut().unwrap();
        let mut from: BTreeMap<String, String> =
            serde_json::from_str(&entries[DEFAULTED_FROM_ANNOTATION]).unwrap();
        assert!(from.remove("spec.engine.image").is_some());
        entries.insert(
            DEFAULTED_FROM_ANNOTATION.to_owned(),
            serde_json::to_string(&from).unwrap(),
        );
        // (object, operations in all, operations on the annotations)
        for (before, ops, on_annotations) in [
            (&bare, None, 1),
            (&others, None, 1),
            (&again, Some(1), 0),
            (&forgotten, Some(2), 1),
            (&defaulted, Some(0), 0),
        ] {
            let d = default_spec(before, &platform());
            let patch = typed(before, &d);
            if let Some(n) = ops {
                assert_eq!(patch.0.len(), n, "{patch:?}");
            }
            let annotation_ops = patch
                .0
                .iter()
                .filter(|op| {
                    matches!(op, json_patch::PatchOperation::Add(a)
                        if a.path.as_str().starts_with("/metadata"))
                })
                .count();
            assert_eq!(annotation_ops, on_annotations, "{patch:?}");
            let mut json = serde_json::to_value(before).unwrap();
            json_patch::patch(&mut json, &patch).unwrap();
            assert_eq!(
                json,
                serde_json::to_value(default_service(before, &platform())).unwrap()
            );
            if before.metadata.annotations.is_some() {
                assert_eq!(json["metadata"]["annotations"]["a/b"], "x");
            }
        }
    }

    /// A policy's rollout plan reaching a service whose block has only the
    /// full-pool fields is added field by field, keeping the service's own
    /// values; a Canary plan adds the track's `canary` block under it.
    #[test]
    fn a_plan_is_added_beside_the_full_pool_fields() {
        use crate::api::policy::{ClusterInferencePolicySpec, PolicyDefaults};
        use crate::api::rollout::{RolloutOnFullPool, RolloutSpec, RolloutStrategy};
        let policies = PolicySnapshot {
            cluster: vec![crate::api::ClusterInferencePolicy::new(
                "plan",
                ClusterInferencePolicySpec {
                    defaults: Some(PolicyDefaults {
                        rollout: Some(RolloutSpec {
                            strategy: Some(RolloutStrategy::Canary),
                            steps: vec![10, 50],
                            ..RolloutSpec::default()
                        }),
                        ..PolicyDefaults::default()
                    }),
                    ..ClusterInferencePolicySpec::default()
                },
            )],
            namespaced: vec![],
        };
        let mut before = svc();
        before.spec.rollout = Some(RolloutSpec {
            on_full_pool: Some(RolloutOnFullPool::Wait),
            max_unavailable: Some(1),
            ..RolloutSpec::default()
        });
        let d = default_spec(&before, &policies);
        let patch = typed(&before, &d);
        let paths: Vec<String> = patch
            .0
            .iter()
            .filter_map(|op| match op {
                json_patch::PatchOperation::Add(a) => Some(a.path.to_string()),
                _ => None,
            })
            .filter(|p| p.starts_with("/spec/rollout"))
            .collect();
        assert_eq!(
            paths,
            [
                "/spec/rollout/strategy",
                "/spec/rollout/steps",
                "/spec/rollout/canary"
            ]
        );
        let mut json = serde_json::to_value(&before).unwrap();
        json_patch::patch(&mut json, &patch).unwrap();
        assert_eq!(
            json,
            serde_json::to_value(default_service(&before, &policies)).unwrap()
        );
        assert_eq!(json["spec"]["rollout"]["onFullPool"], "Wait");
        assert_eq!(json["spec"]["rollout"]["canary"]["onFullPool"], "Wait");
    }

    /// Every character JSON must escape, at any offset in a string, reads
    /// back as written.
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
                    out.add(Path::Pointer("/metadata/annotations/a~1b"), &text)
                        .unwrap();
                    let written: serde_json::Value = serde_json::from_slice(&out.finish()).unwrap();
                    assert_eq!(written[0]["value"], serde_json::Value::String(text.clone()));
                }
            }
        }
    }

    /// A spec field's path written in place is the pointer [`pointer`]
    /// makes of it, plain or not.
    #[test]
    fn spec_paths_are_written_as_their_pointers() {
        for dotted in [
            "replicas",
            "routing.gateway.namespace",
            "a~b.c/d",
            "x\"y",
            "é.z",
        ] {
            let mut fast = Patch(Vec::new());
            fast.add_json(Path::Spec(dotted), "1").unwrap();
            let slow_ptr = pointer(std::iter::once("spec").chain(dotted.split('.')));
            let mut slow = Patch(Vec::new());
            slow.add_json(Path::Pointer(&slow_ptr), "1").unwrap();
            assert_eq!(fast.finish(), slow.finish(), "{dotted}");
        }
    }

    /// Pointer tokens escape `~` and `/` (RFC 6901) and nothing else, as
    /// json-patch's own tokens do.
    #[test]
    fn pointers_escape_tilde_and_slash() {
        assert_eq!(
            pointer(["metadata", "annotations", "infergate.dev/defaulted-from"]),
            "/metadata/annotations/infergate.dev~1defaulted-from"
        );
        assert_eq!(
            pointer(["metadata", "annotations", DEFAULTED_FROM_ANNOTATION]),
            DEFAULTED_FROM_POINTER
        );
        for token in ["a~b/c", "~1", "/~0", "é 😀", "", "plain"] {
            assert_eq!(
                pointer([token]),
                format!("/{}", json_patch::jsonptr::Token::new(token).encoded()),
                "{token}"
            );
        }
    }
}
