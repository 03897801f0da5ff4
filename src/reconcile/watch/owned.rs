//! What infergate's own field manager owns of a child, as the API server
//! records it, and whether that still covers what infergate would apply.
//!
//! Server-side apply keeps, per manager, the set of fields it owns
//! (`metadata.managedFields`). An apply by infergate makes its entry (manager
//! `infergate`, operation `Apply`, the main resource) exactly the fields of
//! the object it sent. Anyone else who changes one of those fields
//! (`kubectl set image`, `kubectl scale`, `kubectl edit`, a forced apply)
//! takes that field over, and a field removed is owned by nobody: either
//! way infergate's entry no longer has it. So a child is as infergate left it
//! exactly when infergate's entry still holds every field of the desired
//! object, whenever the change was made: while infergate ran, while it was
//! stopped, or before a leader change. Fields others add beside infergate's
//! are theirs; an apply would not remove them.
//!
//! The watch keeps that entry as the sorted hashes of its paths ([`Owned`]),
//! a few hundred bytes per child, and [`OwnedIndex`] keeps them per child
//! and revision beside the kind's cache.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Mutex, MutexGuard};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, ObjectMeta};
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use crate::api::MANAGER;

/// The path of the object itself.
const ROOT: u64 = 0;
/// The low bit of a kept path: the API server's set has nothing beneath it
/// (a scalar, an atomic list or map, an empty map).
const LEAF: u32 = 1;

/// Fields the API server never records in a manager's set: the object's
/// identity and what only it writes.
const TOP_UNRECORDED: [&str; 3] = ["apiVersion", "kind", "status"];
const META_UNRECORDED: [&str; 10] = [
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

/// The path `parent` followed by the component `prefix` + `text` (`f:`
/// a field, `k:` a list element by its key, `v:` a set's value).
fn step(parent: u64, prefix: &str, text: &str) -> u64 {
    let mut h = DefaultHasher::new();
    parent.hash(&mut h);
    prefix.hash(&mut h);
    text.hash(&mut h);
    h.finish()
}

fn packed(path: u64, leaf: bool) -> u32 {
    // Both halves folded; the low bit carries `leaf`.
    (((path >> 32) as u32) ^ (path as u32)) & !LEAF | u32::from(leaf)
}

/// JSON text with every object's keys sorted, as the API server writes a
/// list element's key (`k:{"containerPort":8000,"protocol":"TCP"}`).
fn canonical(v: &Value) -> String {
    fn write(v: &Value, out: &mut String) {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                out.push('{');
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push(':');
                    write(&m[k], out);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(item, out);
                }
                out.push(']');
            }
            scalar => out.push_str(&scalar.to_string()),
        }
    }
    let mut out = String::new();
    write(v, &mut out);
    out
}

/// Whether `e` is infergate's own apply entry of the main resource.
fn is_ours(manager: Option<&str>, operation: Option<&str>, subresource: Option<&str>) -> bool {
    manager == Some(MANAGER) && operation == Some("Apply") && subresource.is_none_or(str::is_empty)
}

/// The fields infergate's apply entry of a child holds, as path hashes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Owned {
    /// Sorted, each with [`LEAF`] set or not.
    paths: Box<[u32]>,
}

impl Owned {
    /// What infergate's entry among `entries` holds (nothing, without one).
    #[must_use]
    pub fn of(entries: Option<&[ManagedFieldsEntry]>) -> Self {
        let ours = entries.into_iter().flatten().find(|e| {
            is_ours(
                e.manager.as_deref(),
                e.operation.as_deref(),
                e.subresource.as_deref(),
            )
        });
        let mut paths = Vec::new();
        if let Some(FieldsV1(fields)) = ours.and_then(|e| e.fields_v1.as_ref()) {
            collect(fields, ROOT, &mut paths);
        }
        paths.sort_unstable();
        paths.dedup();
        Self {
            paths: paths.into_boxed_slice(),
        }
    }

    /// [`Owned::of`] the entries in `meta`, which keeps none after.
    pub fn take(meta: &mut ObjectMeta) -> Self {
        let owned = Self::of(meta.managed_fields.as_deref());
        meta.managed_fields = None;
        owned
    }

    /// How many paths are kept.
    #[must_use]
    pub fn len(&self) -> usize {
        self.paths.len()
    }

    /// Whether nothing is kept (no entry of infergate's).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// Whether the path is held; `Some(true)` with nothing beneath it.
    fn find(&self, path: u64) -> Option<bool> {
        let p = packed(path, false);
        if self.paths.binary_search(&p).is_ok() {
            Some(false)
        } else if self.paths.binary_search(&(p | LEAF)).is_ok() {
            Some(true)
        } else {
            None
        }
    }

    /// Whether every field of `desired` (the object infergate applies, as
    /// JSON) is still held: nobody changed, took over or removed any of
    /// them since infergate applied it. Inside an atomic list or map the
    /// whole is held or not; a keyed list whose key infergate does not
    /// know (`key_of`) is checked as a whole.
    #[must_use]
    pub fn covers(&self, desired: &Value) -> bool {
        let Value::Object(top) = desired else {
            return true;
        };
        top.iter().all(|(name, value)| match name.as_str() {
            n if TOP_UNRECORDED.contains(&n) => true,
            "metadata" => {
                let path = step(ROOT, "f:", "metadata");
                let Value::Object(meta) = value else {
                    return true;
                };
                let fields = meta
                    .iter()
                    .filter(|(k, _)| !META_UNRECORDED.contains(&k.as_str()));
                let mut fields = fields.peekable();
                if fields.peek().is_none() {
                    return true;
                }
                match self.find(path) {
                    None => false,
                    Some(true) => true,
                    Some(false) => fields.into_iter().all(|(k, v)| self.field(path, k, v)),
                }
            }
            _ => self.field(ROOT, name, value),
        })
    }

    fn field(&self, parent: u64, name: &str, value: &Value) -> bool {
        if value.is_null() {
            return true;
        }
        let path = step(parent, "f:", name);
        match self.find(path) {
            // An empty list may or may not be recorded.
            None => matches!(value, Value::Array(a) if a.is_empty()),
            Some(true) => true,
            Some(false) => match value {
                Value::Object(m) => m.iter().all(|(k, v)| self.field(path, k, v)),
                Value::Array(items) => items.iter().all(|item| self.item(path, name, item)),
                _ => true,
            },
        }
    }

    fn item(&self, list: u64, name: &str, item: &Value) -> bool {
        let path = match item {
            Value::Object(fields) => match key_of(name, fields) {
                Some(key) => step(list, "k:", &canonical(&key)),
                None => return true,
            },
            scalar => step(list, "v:", &canonical(scalar)),
        };
        match (self.find(path), item) {
            (None, _) => false,
            (Some(false), Value::Object(m)) => m.iter().all(|(k, v)| self.field(path, k, v)),
            (Some(_), _) => true,
        }
    }
}

/// Every path of a `fieldsV1` tree beneath `parent` into `out`.
fn collect(node: &Value, parent: u64, out: &mut Vec<u32>) {
    let Value::Object(children) = node else {
        return;
    };
    for (component, child) in children {
        if component == "." || component.len() < 2 {
            continue;
        }
        let (prefix, text) = component.split_at(2);
        let path = match prefix {
            "k:" | "v:" => match serde_json::from_str::<Value>(text) {
                Ok(v) => step(parent, prefix, &canonical(&v)),
                Err(_) => step(parent, prefix, text),
            },
            _ => step(parent, prefix, text),
        };
        let leaf = matches!(child, Value::Object(m) if m.is_empty());
        out.push(packed(path, leaf));
        if !leaf {
            collect(child, path, out);
        }
    }
}

/// The key of an element of the keyed list `list` as the API server
/// records it (with its defaults), for the lists infergate writes:
/// containers, env, volumes and pull secrets by name, mounts by path,
/// ports by number and protocol, owner references by uid, spread
/// constraints by topology key and rule. `None` for any other list.
#[must_use]
fn key_of(list: &str, item: &Map<String, Value>) -> Option<Value> {
    let fields: &[(&str, Option<&str>)] = match list {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "resourceClaims" => &[("name", None)],
        "volumeMounts" => &[("mountPath", None)],
        "volumeDevices" => &[("devicePath", None)],
        "ownerReferences" => &[("uid", None)],
        "hostAliases" => &[("ip", None)],
        "readinessGates" => &[("conditionType", None)],
        "topologySpreadConstraints" => &[("topologyKey", None), ("whenUnsatisfiable", None)],
        "ports" if item.contains_key("containerPort") => {
            &[("containerPort", None), ("protocol", Some("TCP"))]
        }
        "ports" if item.contains_key("port") => &[("port", None), ("protocol", Some("TCP"))],
        _ => return None,
    };
    let mut key = Map::new();
    for (field, default) in fields {
        match (item.get(*field), default) {
            (Some(v), _) => {
                key.insert((*field).to_owned(), v.clone());
            }
            (None, Some(d)) => {
                key.insert((*field).to_owned(), Value::String((*d).to_owned()));
            }
            (None, None) => {}
        }
    }
    Some(Value::Object(key))
}

/// The `metadata.managedFields` of an object as a watch decodes it: only
/// infergate's apply entry of the main resource is kept (the others'
/// field sets are skipped unparsed), for [`Owned::take`].
///
/// # Errors
/// When the list is not a list of entries.
pub fn our_entry<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<ManagedFieldsEntry>>, D::Error> {
    #[derive(Deserialize)]
    struct Entry {
        manager: Option<String>,
        operation: Option<String>,
        subresource: Option<String>,
        #[serde(rename = "fieldsV1")]
        fields: Option<Box<serde_json::value::RawValue>>,
    }
    let entries: Option<Vec<Entry>> = Option::deserialize(d)?;
    let Some(ours) = entries.into_iter().flatten().find(|e| {
        is_ours(
            e.manager.as_deref(),
            e.operation.as_deref(),
            e.subresource.as_deref(),
        )
    }) else {
        return Ok(None);
    };
    let fields = ours
        .fields
        .map(|raw| serde_json::from_str::<Value>(raw.get()).map(FieldsV1))
        .transpose()
        .map_err(serde::de::Error::custom)?;
    Ok(Some(vec![ManagedFieldsEntry {
        manager: ours.manager,
        operation: ours.operation,
        fields_v1: fields,
        ..ManagedFieldsEntry::default()
    }]))
}

/// What infergate's entry holds of each child of one kind, at the revision
/// its watch last showed (fed by the watch of the kind, `child::Feed`).
#[derive(Debug, Default)]
pub struct OwnedIndex {
    by_child: Mutex<HashMap<(String, String), (String, Owned)>>,
}

impl OwnedIndex {
    fn lock(&self) -> MutexGuard<'_, HashMap<(String, String), (String, Owned)>> {
        // Every holder leaves the map consistent.
        self.by_child
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn key(meta: &ObjectMeta) -> (String, String) {
        (
            meta.namespace.clone().unwrap_or_default(),
            meta.name.clone().unwrap_or_default(),
        )
    }

    /// The child `meta` describes holds `owned`.
    pub fn record(&self, meta: &ObjectMeta, owned: Owned) {
        let rv = meta.resource_version.clone().unwrap_or_default();
        self.lock().insert(Self::key(meta), (rv, owned));
    }

    /// The child `meta` describes is gone.
    pub fn forget(&self, meta: &ObjectMeta) {
        self.lock().remove(&Self::key(meta));
    }

    /// Whether the child `meta` describes, at its revision, still holds
    /// every field of `desired` ([`Owned::covers`]); `false` when the
    /// index has not seen that revision.
    #[must_use]
    pub fn covers(&self, meta: &ObjectMeta, desired: &Value) -> bool {
        let map = self.lock();
        map.get(&Self::key(meta)).is_some_and(|(rv, owned)| {
            rv.as_str() == meta.resource_version.as_deref().unwrap_or_default()
                && owned.covers(desired)
        })
    }

    /// Children indexed.
    #[must_use]
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no child is indexed.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}
