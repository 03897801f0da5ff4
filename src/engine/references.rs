//! What a service makes its pods use on the requester's behalf: Secrets
//! (env `secretKeyRef`, envFrom `secretRef`, `imagePullSecrets`),
//! ConfigMaps (`configMapKeyRef`, `configMapRef`) and a ServiceAccount
//! other than `default`. Admission asks whether the requester may use each
//! one a write adds or changes (`webhook::access`).

use std::collections::BTreeSet;
use std::fmt;

use crate::api::v1beta1::{EngineSpec, InferenceService};

use super::field_path::Path;

/// The ServiceAccount every pod runs as unless told otherwise.
pub const DEFAULT_SERVICE_ACCOUNT: &str = "default";

/// What kind of object a reference names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ReferenceKind {
    /// A Secret: the requester needs `get` on it.
    Secret,
    /// A ConfigMap: the requester needs `get` on it.
    ConfigMap,
    /// A ServiceAccount: the requester needs `create` on `serviceaccounts/token` (to act as it).
    ServiceAccount,
}

impl ReferenceKind {
    /// The kind as messages name it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Secret => "Secret",
            Self::ConfigMap => "ConfigMap",
            Self::ServiceAccount => "ServiceAccount",
        }
    }

    /// `(verb, resource, subresource)` the requester must be allowed.
    #[must_use]
    pub fn access(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Self::Secret => ("get", "secrets", ""),
            Self::ConfigMap => ("get", "configmaps", ""),
            Self::ServiceAccount => ("create", "serviceaccounts", "token"),
        }
    }
}

impl fmt::Display for ReferenceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One object a service's pods would use, and the first field that names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    /// What it is.
    pub kind: ReferenceKind,
    /// Its name, in the service's namespace.
    pub name: String,
    /// The field naming it, such as `spec.engine.env[0].valueFrom.secretKeyRef.name`.
    pub field: String,
}

/// Every object `svc`'s pods would use, each once (at the first field that names it).
#[must_use]
pub fn references(svc: &InferenceService) -> Vec<Reference> {
    let mut refs = Collected::default();
    let spec = Path::new("spec");
    let s = &svc.spec;
    if let Some(e) = s.engine.as_ref() {
        engine_references(&mut refs, &spec.child("engine"), e);
    }
    let pull_secrets = spec.child("imagePullSecrets");
    for (i, r) in s.image_pull_secrets.iter().enumerate() {
        let item = pull_secrets.index(i);
        refs.add(ReferenceKind::Secret, &r.name, &item.child("name"));
    }
    if let Some(sa) = s.service_account_name.as_deref()
        && sa != DEFAULT_SERVICE_ACCOUNT
    {
        refs.add(
            ReferenceKind::ServiceAccount,
            sa,
            &spec.child("serviceAccountName"),
        );
    }
    refs.out
}

/// The references found so far, each once.
#[derive(Default)]
struct Collected {
    out: Vec<Reference>,
    seen: BTreeSet<(ReferenceKind, String)>,
}

impl Collected {
    /// `name` (of `kind`) at `field`, unless empty or already found.
    fn add(&mut self, kind: ReferenceKind, name: &str, field: &Path<'_>) {
        if !name.is_empty() && self.seen.insert((kind, name.to_owned())) {
            self.out.push(Reference {
                kind,
                name: name.to_owned(),
                field: field.to_string(),
            });
        }
    }
}

/// The Secrets and ConfigMaps the engine's `env` and `envFrom` name (`at`
/// is the engine's path).
fn engine_references(refs: &mut Collected, at: &Path<'_>, e: &EngineSpec) {
    let env = at.child("env");
    for (i, var) in e.env.iter().enumerate() {
        let Some(from) = var.value_from.as_ref() else {
            continue;
        };
        let item = env.index(i);
        let value_from = item.child("valueFrom");
        if let Some(r) = from.secret_key_ref.as_ref() {
            let selector = value_from.child("secretKeyRef");
            refs.add(ReferenceKind::Secret, &r.name, &selector.child("name"));
        }
        if let Some(r) = from.config_map_key_ref.as_ref() {
            let selector = value_from.child("configMapKeyRef");
            refs.add(ReferenceKind::ConfigMap, &r.name, &selector.child("name"));
        }
    }
    let env_from = at.child("envFrom");
    for (i, src) in e.env_from.iter().enumerate() {
        let item = env_from.index(i);
        if let Some(r) = src.secret_ref.as_ref() {
            let source = item.child("secretRef");
            refs.add(ReferenceKind::Secret, &r.name, &source.child("name"));
        }
        if let Some(r) = src.config_map_ref.as_ref() {
            let source = item.child("configMapRef");
            refs.add(ReferenceKind::ConfigMap, &r.name, &source.child("name"));
        }
    }
}

/// The references of `svc` that `old` (the stored object on UPDATE) did
/// not already make: only those need the requester's rights checked.
#[must_use]
pub fn new_references(svc: &InferenceService, old: Option<&InferenceService>) -> Vec<Reference> {
    let mut refs = references(svc);
    if let Some(old) = old {
        let before: BTreeSet<(ReferenceKind, String)> = references(old)
            .into_iter()
            .map(|r| (r.kind, r.name))
            .collect();
        refs.retain(|r| !before.contains(&(r.kind, r.name.clone())));
    }
    refs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc(spec: serde_json::Value) -> InferenceService {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
            "metadata": {"name": "chat", "namespace": "team-a"},
            "spec": spec,
        }))
        .expect("service")
    }

    #[test]
    fn every_kind_of_reference_is_found_once_at_its_first_field() {
        let s = svc(serde_json::json!({
            "model": {"ref": "m"},
            "engine": {
                "env": [
                    {"name": "PLAIN", "value": "x"},
                    {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
                    {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "mode"}}},
                    {"name": "AGAIN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "other"}}},
                    {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
                ],
                "envFrom": [{"secretRef": {"name": "extra"}}, {"configMapRef": {"name": "cfg"}}]
            },
            "imagePullSecrets": [{"name": "registry"}],
            "serviceAccountName": "chat-engine"
        }));
        let found: Vec<String> = references(&s)
            .iter()
            .map(|r| format!("{} {} {}", r.kind, r.name, r.field))
            .collect();
        assert_eq!(
            found,
            [
                "Secret hf spec.engine.env[1].valueFrom.secretKeyRef.name",
                "ConfigMap cfg spec.engine.env[2].valueFrom.configMapKeyRef.name",
                "Secret extra spec.engine.envFrom[0].secretRef.name",
                "Secret registry spec.imagePullSecrets[0].name",
                "ServiceAccount chat-engine spec.serviceAccountName",
            ]
        );
    }

    #[test]
    fn the_default_service_account_needs_no_right() {
        let s = svc(serde_json::json!({"model": {"ref": "m"}, "serviceAccountName": "default"}));
        assert!(references(&s).is_empty());
    }

    #[test]
    fn an_update_checks_only_what_it_adds() {
        let old = svc(serde_json::json!({
            "model": {"ref": "m"},
            "engine": {"env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}]}
        }));
        // Another key of the same Secret, and a new pull secret.
        let new = svc(serde_json::json!({
            "model": {"ref": "m"},
            "engine": {"env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "v2"}}}]},
            "imagePullSecrets": [{"name": "registry"}]
        }));
        let added: Vec<String> = new_references(&new, Some(&old))
            .into_iter()
            .map(|r| r.name)
            .collect();
        assert_eq!(added, ["registry"]);
        assert!(new_references(&old, Some(&old)).is_empty());
        assert_eq!(new_references(&old, None).len(), 1);
    }
}
