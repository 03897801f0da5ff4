//! Manifest files: the one reader of YAML and JSON manifests for
//! `serve --policy-file` and `infergate check`.
//!
//! A file holds one or more YAML documents or JSON values; a `kind: List`
//! (or a JSON array) is expanded into its items; quantities written as YAML
//! numbers (`cpu: 4`) are read as the strings the API server would store.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::api::conversion::{V1ALPHA1, V1BETA1, to_v1beta1};
use crate::api::{
    AcceleratorClass, ClusterInferencePolicy, GROUP, InferencePolicy, ModelProfile, v1alpha1,
    v1beta1::InferenceService,
};
use crate::engine::{AcceleratorClasses, ModelProfiles, PolicySnapshot};

/// Where a document came from.
#[derive(Clone, Debug)]
pub struct Origin {
    /// File path (`-` for standard input).
    pub file: String,
    /// Index of the document in the file (non-empty documents, from 0).
    pub doc: usize,
    /// Index inside a `kind: List`, if any.
    pub item: Option<usize>,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} [doc {}", self.file, self.doc)?;
        if let Some(i) = self.item {
            write!(f, ", item {i}")?;
        }
        f.write_str("]")
    }
}

/// A document read from input.
#[derive(Clone, Debug)]
pub struct Document {
    /// Where it came from.
    pub origin: Origin,
    /// The parsed value.
    pub value: Value,
}

/// Input that could not be read or parsed (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The file or directory could not be read.
    #[error("{path}: cannot read: {source}")]
    Io {
        /// Path.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The YAML or JSON is malformed.
    #[error("{path}: malformed {format}: {message}")]
    Syntax {
        /// Path.
        path: String,
        /// `YAML` or `JSON`.
        format: &'static str,
        /// Parser message.
        message: String,
    },
    /// A document is not a Kubernetes object.
    #[error("{origin}: not a Kubernetes object: {message}")]
    NotAnObject {
        /// Where.
        origin: String,
        /// Why.
        message: String,
    },
}

/// Expand files and directories into the files to read, in order.
pub fn expand_paths(paths: &[PathBuf]) -> Result<Vec<PathBuf>, InputError> {
    let mut out = Vec::new();
    for p in paths {
        if p.as_os_str() == "-" {
            out.push(p.clone());
            continue;
        }
        let meta = std::fs::metadata(p).map_err(|source| InputError::Io {
            path: p.display().to_string(),
            source,
        })?;
        if meta.is_dir() {
            walk(p, &mut out)?;
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), InputError> {
    let io = |source| InputError::Io {
        path: dir.display().to_string(),
        source,
    };
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(io)?;
    entries.sort();
    for e in entries {
        if e.is_dir() {
            walk(&e, out)?;
        } else if matches!(
            e.extension().and_then(|x| x.to_str()),
            Some("yaml" | "yml" | "json")
        ) {
            out.push(e);
        }
    }
    Ok(())
}

/// Read one file (or `-`) into documents.
pub fn read_documents(path: &Path) -> Result<Vec<Document>, InputError> {
    let name = path.display().to_string();
    let text = if path.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|source| InputError::Io {
                path: "-".to_owned(),
                source,
            })?;
        s
    } else {
        std::fs::read_to_string(path).map_err(|source| InputError::Io {
            path: name.clone(),
            source,
        })?
    };
    parse_documents(&name, &text)
}

/// Parse a multi-document YAML stream or a sequence of JSON values.
pub fn parse_documents(name: &str, text: &str) -> Result<Vec<Document>, InputError> {
    let trimmed = text.trim_start();
    let looks_json = trimmed.starts_with('{') || trimmed.starts_with('[');
    let values: Vec<Value> = if looks_json {
        serde_json::Deserializer::from_str(text)
            .into_iter::<Value>()
            .collect::<Result<_, _>>()
            .map_err(|e| InputError::Syntax {
                path: name.to_owned(),
                format: "JSON",
                message: e.to_string(),
            })?
    } else {
        serde_saphyr::from_multiple::<Value>(text).map_err(|e| InputError::Syntax {
            path: name.to_owned(),
            format: "YAML",
            message: e.to_string(),
        })?
    };
    let mut docs = Vec::new();
    for (doc, value) in values.into_iter().filter(|v| !v.is_null()).enumerate() {
        let origin = Origin {
            file: name.to_owned(),
            doc,
            item: None,
        };
        let items = match value {
            Value::Array(items) => items,
            Value::Object(mut m) if m.get("kind").and_then(Value::as_str) == Some("List") => {
                match m.remove("items") {
                    Some(Value::Array(items)) => items,
                    _ => Vec::new(),
                }
            }
            value => {
                docs.push(Document { origin, value });
                continue;
            }
        };
        for (i, value) in items.into_iter().enumerate() {
            docs.push(Document {
                origin: Origin {
                    item: Some(i),
                    ..origin.clone()
                },
                value,
            });
        }
    }
    Ok(docs)
}

/// Quantities written as YAML numbers (`cpu: 4`) are strings to the API.
pub fn normalise_quantities(v: &mut Value) {
    for path in [
        &["spec", "resources"][..],
        &["spec", "defaults", "resources"][..],
    ] {
        let mut cur = Some(&mut *v);
        for p in path {
            cur = cur.and_then(|c| c.get_mut(*p));
        }
        if let Some(Value::Object(m)) = cur {
            for (_, q) in m.iter_mut() {
                if let Value::Number(n) = q {
                    *q = Value::String(n.to_string());
                }
            }
        }
    }
}

/// Decode an object (quantities written as numbers normalised first), with
/// the field path of the first error.
pub fn decode<T: serde::de::DeserializeOwned>(mut v: Value) -> Result<T, String> {
    normalise_quantities(&mut v);
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.inner().to_string();
        let at = |field: &str| {
            if path == "." || path.is_empty() {
                field.to_owned()
            } else {
                format!("{path}.{field}")
            }
        };
        // `missing field `x`` reads better as a Kubernetes field error.
        if let Some(field) = inner
            .strip_prefix("missing field `")
            .and_then(|r| r.split_once('`'))
            .map(|(f, _)| f)
        {
            return format!("{}: Required value", at(field));
        }
        if path == "." || path.is_empty() {
            inner
        } else {
            format!("{path}: {inner}")
        }
    })
}

/// What a document is.
pub enum DocumentKind {
    /// An InferenceService (v1alpha1 converted to v1beta1), with the warnings conversion gave.
    Service(Box<InferenceService>, Vec<String>),
    /// A ClusterInferencePolicy.
    Cluster(Box<ClusterInferencePolicy>),
    /// An InferencePolicy (namespace `default` when the manifest names none).
    Namespaced(Box<InferencePolicy>),
    /// An AcceleratorClass.
    Class(Box<AcceleratorClass>),
    /// A ModelProfile.
    Profile(Box<ModelProfile>),
    /// Not an infergate object, or one this reader does not take; why.
    Skipped(String),
    /// An infergate object that does not decode; the field error.
    Invalid(String),
}

/// `KIND NS/NAME`, or `KIND NAME` for cluster-scoped objects.
pub fn kind_label(kind: &str, ns: Option<&str>, name: &str) -> String {
    match ns {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

/// What `doc` is, with its `KIND NS/NAME` label; an error when it is not a
/// Kubernetes object at all.
pub fn classify(doc: &Document) -> Result<(String, DocumentKind), InputError> {
    let not_object = |message: &str| InputError::NotAnObject {
        origin: doc.origin.to_string(),
        message: message.to_owned(),
    };
    let m = doc
        .value
        .as_object()
        .ok_or_else(|| not_object("expected a mapping with apiVersion and kind"))?;
    let api_version = m
        .get("apiVersion")
        .and_then(Value::as_str)
        .ok_or_else(|| not_object("apiVersion is missing"))?;
    let kind = m
        .get("kind")
        .and_then(Value::as_str)
        .ok_or_else(|| not_object("kind is missing"))?;
    let meta = m.get("metadata");
    let name = meta
        .and_then(|x| x.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("<unnamed>");
    let ns = meta
        .and_then(|x| x.get("namespace"))
        .and_then(Value::as_str);
    let v = doc.value.clone();
    let group = api_version.split_once('/').map_or("", |(g, _)| g);
    let obj = match (api_version, kind) {
        (V1BETA1, "InferenceService") => {
            let label = kind_label(kind, Some(ns.unwrap_or("default")), name);
            return Ok((
                label,
                match decode::<InferenceService>(v) {
                    Ok(s) => DocumentKind::Service(Box::new(s), Vec::new()),
                    Err(e) => DocumentKind::Invalid(e),
                },
            ));
        }
        (V1ALPHA1, "InferenceService") => {
            let label = kind_label(kind, Some(ns.unwrap_or("default")), name);
            let o = match decode::<v1alpha1::InferenceService>(v) {
                Err(e) => DocumentKind::Invalid(e),
                Ok(a) => match to_v1beta1(&a) {
                    Ok(b) => DocumentKind::Service(
                        Box::new(b),
                        vec![format!(
                            "{V1ALPHA1} InferenceService is deprecated; use {V1BETA1} (checked after conversion)"
                        )],
                    ),
                    Err(e) => DocumentKind::Invalid(format!("cannot convert to {V1BETA1}: {e}")),
                },
            };
            return Ok((label, o));
        }
        (V1BETA1, "ClusterInferencePolicy") => match decode::<ClusterInferencePolicy>(v) {
            Ok(p) => DocumentKind::Cluster(Box::new(p)),
            Err(e) => DocumentKind::Invalid(e),
        },
        (V1BETA1, "AcceleratorClass") => match decode::<AcceleratorClass>(v) {
            Ok(c) => DocumentKind::Class(Box::new(c)),
            Err(e) => DocumentKind::Invalid(e),
        },
        (V1BETA1, "ModelProfile") => match decode::<ModelProfile>(v) {
            Ok(p) => DocumentKind::Profile(Box::new(p)),
            Err(e) => DocumentKind::Invalid(e),
        },
        (V1BETA1, "InferencePolicy") => {
            let label = kind_label(kind, Some(ns.unwrap_or("default")), name);
            let o = match decode::<InferencePolicy>(v) {
                Ok(mut p) => {
                    p.metadata
                        .namespace
                        .get_or_insert_with(|| "default".to_owned());
                    DocumentKind::Namespaced(Box::new(p))
                }
                Err(e) => DocumentKind::Invalid(e),
            };
            return Ok((label, o));
        }
        _ if group == GROUP => DocumentKind::Skipped(format!(
            "unknown kind {kind} in {api_version}; infergate knows InferenceService ({V1ALPHA1}, {V1BETA1}), ClusterInferencePolicy, InferencePolicy, AcceleratorClass and ModelProfile ({V1BETA1}); skipped"
        )),
        _ => DocumentKind::Skipped(format!(
            "not an infergate object ({api_version} {kind}); skipped"
        )),
    };
    Ok((kind_label(kind, ns, name), obj))
}

/// Errors while loading policy files for `serve --policy-file`.
#[derive(Debug, thiserror::Error)]
pub enum PolicyFileError {
    /// A file is unreadable, malformed, or holds something that is not an object.
    #[error(transparent)]
    Input(#[from] InputError),
    /// A document is an object, but not a policy infergate can load.
    #[error("{origin} {label}: {message}")]
    NotAPolicy {
        /// Where.
        origin: Origin,
        /// `KIND NS/NAME`.
        label: String,
        /// Why.
        message: String,
    },
}

/// What `serve --policy-file` loads.
#[derive(Debug, Default)]
pub struct PolicyFiles {
    /// The policies.
    pub policies: PolicySnapshot,
    /// The AcceleratorClasses.
    pub classes: AcceleratorClasses,
    /// The ModelProfiles.
    pub profiles: ModelProfiles,
}

/// Read every policy, AcceleratorClass and ModelProfile in `paths` (files
/// or directories), as `serve --policy-file` does. Anything else, or one
/// of those that does not decode, is an error.
pub fn load_policies(paths: &[PathBuf]) -> Result<PolicyFiles, PolicyFileError> {
    let mut out = PolicyFiles::default();
    let mut profiles = Vec::new();
    for file in expand_paths(paths)? {
        for doc in read_documents(&file)? {
            let (label, object) = classify(&doc)?;
            let message = match object {
                DocumentKind::Cluster(p) => {
                    out.policies.cluster.push(*p);
                    continue;
                }
                DocumentKind::Namespaced(p) => {
                    out.policies.namespaced.push(*p);
                    continue;
                }
                DocumentKind::Class(c) => {
                    out.classes
                        .insert(c.metadata.name.clone().unwrap_or_default(), c.spec);
                    continue;
                }
                DocumentKind::Profile(p) => {
                    profiles.push((p.metadata.name.clone().unwrap_or_default(), p.spec));
                    continue;
                }
                DocumentKind::Invalid(e) => e,
                DocumentKind::Skipped(_) | DocumentKind::Service(..) => {
                    "not a ClusterInferencePolicy, InferencePolicy, AcceleratorClass or ModelProfile"
                        .to_owned()
                }
            };
            return Err(PolicyFileError::NotAPolicy {
                origin: doc.origin,
                label,
                message,
            });
        }
    }
    out.profiles = profiles.into_iter().collect();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whatever a manifest nests, `check` and `--policy-file` read it
    /// without recursing past a bound: JSON at serde_json's 128 levels,
    /// YAML at serde-saphyr's default budget (64 levels).
    #[test]
    fn deep_manifests_are_refused_without_recursing_past_a_bound() {
        for (format, text) in [
            ("JSON", "[".repeat(100_000)),
            ("JSON", format!("{}1{}", "[".repeat(129), "]".repeat(129))),
            ("YAML", format!("a: {}", "[".repeat(100_000))),
            ("YAML", format!("a: {}1{}", "[".repeat(65), "]".repeat(65))),
            (
                "YAML",
                (0..1_000)
                    .map(|i| format!("{}- ", "  ".repeat(i)))
                    .collect::<Vec<_>>()
                    .join("\n"),
            ),
            (
                "YAML",
                (0..70)
                    .map(|i| format!("{}k{i}:", "  ".repeat(i)))
                    .collect::<Vec<_>>()
                    .join("\n"),
            ),
        ] {
            match parse_documents("deep", &text) {
                Err(InputError::Syntax { format: f, .. }) => assert_eq!(f, format),
                other => panic!(
                    "{format} of {} bytes: {:?}",
                    text.len(),
                    other.map(|d| d.len())
                ),
            }
        }
        // Within the bounds, nesting reads as usual.
        let within = format!("a: {}1{}", "[".repeat(60), "]".repeat(60));
        assert_eq!(
            parse_documents("ok", &within).map(|d| d.len()).ok(),
            Some(1)
        );
        let within = format!("{}1{}", "[".repeat(120), "]".repeat(120));
        assert_eq!(
            parse_documents("ok", &within).map(|d| d.len()).ok(),
            Some(1)
        );
    }
}
