//! `infergate check`: the engine run offline over manifest files.
//!
//! Reads files, directories (recursively: `*.yaml`, `*.yml`, `*.json`) or
//! `-` (standard input), each holding one or more YAML documents or JSON
//! values (a `kind: List` is expanded). InferenceService objects (v1beta1,
//! or v1alpha1 converted to v1beta1) are defaulted and validated exactly as
//! the webhooks would; ClusterInferencePolicy and InferencePolicy objects
//! are validated. Policies given with `--policy` are applied to the services.
//!
//! Output: one line per object on standard error,
//! `FILE [doc N] KIND NAMESPACE/NAME: FIELD: MESSAGE` (N counts the
//! non-empty documents of the file from 0); `-o yaml|json` prints the
//! defaulted valid services on standard output; `--explain` prints where
//! each default came from on standard error.
//! Exit codes: 0 all valid, 1 violations found, 2 unreadable input or usage error.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::Value;

use crate::api::conversion::{V1ALPHA1, V1BETA1, to_v1beta1};
use crate::api::{
    ClusterInferencePolicy, DEFAULTED_FROM_ANNOTATION, GROUP, GatewayRef, InferencePolicy,
    v1alpha1, v1beta1::InferenceService,
};
use crate::cli::{CheckArgs, OutputFormat};
use crate::engine::{self, Context, PolicySnapshot, RouteIndex, ServerDefaults};

/// Exit code for violations.
const EXIT_VIOLATIONS: u8 = 1;
/// Exit code for unreadable input or usage errors.
const EXIT_USAGE: u8 = 2;

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
        match value {
            Value::Array(items) => {
                for (i, v) in items.into_iter().enumerate() {
                    docs.push(Document {
                        origin: Origin {
                            item: Some(i),
                            ..origin.clone()
                        },
                        value: v,
                    });
                }
            }
            Value::Object(ref m) if m.get("kind").and_then(Value::as_str) == Some("List") => {
                let items = m
                    .get("items")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                for (i, v) in items.into_iter().enumerate() {
                    docs.push(Document {
                        origin: Origin {
                            item: Some(i),
                            ..origin.clone()
                        },
                        value: v,
                    });
                }
            }
            v => docs.push(Document { origin, value: v }),
        }
    }
    Ok(docs)
}

/// Quantities written as YAML numbers (`cpu: 4`) are strings to the API.
fn normalise_quantities(v: &mut Value) {
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

/// Decode with the field path of the first error.
fn decode<T: serde::de::DeserializeOwned>(mut v: Value) -> Result<T, String> {
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
enum Object {
    Service(Box<InferenceService>, Vec<String>),
    Cluster(Box<ClusterInferencePolicy>),
    Namespaced(Box<InferencePolicy>),
    Skipped(String),
    Invalid(String),
}

fn kind_label(kind: &str, ns: Option<&str>, name: &str) -> String {
    match ns {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

fn classify(doc: &Document) -> Result<(String, Object), InputError> {
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
                    Ok(s) => Object::Service(Box::new(s), Vec::new()),
                    Err(e) => Object::Invalid(e),
                },
            ));
        }
        (V1ALPHA1, "InferenceService") => {
            let label = kind_label(kind, Some(ns.unwrap_or("default")), name);
            let o = match decode::<v1alpha1::InferenceService>(v) {
                Err(e) => Object::Invalid(e),
                Ok(a) => match to_v1beta1(&a) {
                    Ok(b) => Object::Service(
                        Box::new(b),
                        vec![format!(
                            "{V1ALPHA1} InferenceService is deprecated; use {V1BETA1} (checked after conversion)"
                        )],
                    ),
                    Err(e) => Object::Invalid(format!("cannot convert to {V1BETA1}: {e}")),
                },
            };
            return Ok((label, o));
        }
        (V1BETA1, "ClusterInferencePolicy") => match decode::<ClusterInferencePolicy>(v) {
            Ok(p) => Object::Cluster(Box::new(p)),
            Err(e) => Object::Invalid(e),
        },
        (V1BETA1, "InferencePolicy") => {
            let label = kind_label(kind, Some(ns.unwrap_or("default")), name);
            let o = match decode::<InferencePolicy>(v) {
                Ok(p) => Object::Namespaced(Box::new(p)),
                Err(e) => Object::Invalid(e),
            };
            return Ok((label, o));
        }
        _ if group == GROUP => Object::Skipped(format!(
            "unknown kind {kind} in {api_version}; infergate knows InferenceService ({V1ALPHA1}, {V1BETA1}), ClusterInferencePolicy and InferencePolicy ({V1BETA1}); skipped"
        )),
        _ => Object::Skipped(format!(
            "not an infergate object ({api_version} {kind}); skipped"
        )),
    };
    Ok((kind_label(kind, ns, name), obj))
}

/// (gateway name, gateway namespace, rendered path).
type RouteKey = (String, Option<String>, String);

/// Rendered routes of the services under check, for the collision rule:
/// route -> the `(namespace, name)` of every service claiming it.
struct LocalRoutes(HashMap<RouteKey, Vec<(String, String)>>);

impl RouteIndex for LocalRoutes {
    fn owner(
        &self,
        gateway: &GatewayRef,
        path: &str,
        exclude: (&str, &str),
    ) -> Option<(String, String)> {
        self.0
            .get(&(
                gateway.name.clone(),
                gateway.namespace.clone(),
                path.to_owned(),
            ))?
            .iter()
            .find(|(ns, n)| (ns.as_str(), n.as_str()) != exclude)
            .cloned()
    }
}

/// Parse `k=v,k2=v2`.
pub fn parse_labels(s: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for pair in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| format!("--namespace-labels: {pair:?} is not key=value"))?;
        engine::names::check_label_key(k).map_err(|e| format!("--namespace-labels: {e}"))?;
        engine::names::check_label_value(v)
            .map_err(|e| format!("--namespace-labels: value of {k:?} {e}"))?;
        out.insert(k.to_owned(), v.to_owned());
    }
    Ok(out)
}

/// The outcome of a check run (what `run` prints and its exit code).
#[derive(Debug, Default)]
pub struct Report {
    /// Lines for standard error, in order.
    pub lines: Vec<String>,
    /// Defaulted valid services, for `-o`.
    pub services: Vec<InferenceService>,
    /// Violations found.
    pub violations: usize,
    /// Unreadable input or usage errors.
    pub input_errors: usize,
}

impl Report {
    /// 0, 1 or 2.
    #[must_use]
    pub fn exit_code(&self) -> u8 {
        if self.input_errors > 0 {
            EXIT_USAGE
        } else if self.violations > 0 {
            EXIT_VIOLATIONS
        } else {
            0
        }
    }
}

/// Read, default and validate everything `args` names (no printing).
#[must_use]
pub fn check(args: &CheckArgs) -> Report {
    let mut r = Report::default();
    let ns_labels = match args.namespace_labels.as_deref().map(parse_labels) {
        Some(Err(e)) => {
            r.lines.push(format!("error: {e}"));
            r.input_errors += 1;
            return r;
        }
        Some(Ok(l)) => l,
        None => BTreeMap::new(),
    };
    let server = ServerDefaults {
        engine_image: args.default_engine_image.clone(),
        replicas: args.default_replicas,
    };

    // Policies from --policy.
    let mut snapshot = PolicySnapshot::default();
    let mut policy_docs = Vec::new();
    match expand_paths(&args.policies) {
        Err(e) => {
            r.lines.push(format!("error: {e}"));
            r.input_errors += 1;
        }
        Ok(files) => {
            for f in files {
                match read_documents(&f) {
                    Ok(d) => policy_docs.extend(d),
                    Err(e) => {
                        r.lines.push(format!("error: {e}"));
                        r.input_errors += 1;
                    }
                }
            }
        }
    }
    let mut policy_objects = Vec::new();
    for d in &policy_docs {
        match classify(d) {
            Err(e) => {
                r.lines.push(format!("error: {e}"));
                r.input_errors += 1;
            }
            Ok((label, Object::Cluster(p))) => {
                policy_objects.push((d.origin.clone(), label.clone()));
                snapshot.cluster.push(*p);
            }
            Ok((label, Object::Namespaced(mut p))) => {
                p.metadata
                    .namespace
                    .get_or_insert_with(|| "default".to_owned());
                policy_objects.push((d.origin.clone(), label.clone()));
                snapshot.namespaced.push(*p);
            }
            Ok((label, Object::Invalid(e))) => {
                r.lines.push(format!("{} {label}: {e}", d.origin));
                r.violations += 1;
            }
            Ok((label, Object::Service(..))) => r.lines.push(format!(
                "{} {label}: --policy takes policy objects; pass services with -f; skipped",
                d.origin
            )),
            Ok((label, Object::Skipped(why))) => {
                r.lines.push(format!("{} {label}: {why}", d.origin));
            }
        }
    }
    // Policies that admission would reject do not take effect.
    let mut keep_cluster = Vec::new();
    for p in std::mem::take(&mut snapshot.cluster) {
        let v = engine::validate_cluster_policy(&p);
        if report_policy(
            &mut r,
            &policy_objects,
            "ClusterInferencePolicy",
            None,
            &p.metadata.name,
            &v,
        ) {
            keep_cluster.push(p);
        }
    }
    snapshot.cluster = keep_cluster;
    let mut keep_ns = Vec::new();
    for p in std::mem::take(&mut snapshot.namespaced) {
        let ns = p.metadata.namespace.clone().unwrap_or_default();
        let labels = namespace_labels(&ns_labels, &ns);
        let ctx = Context {
            namespace: &ns,
            namespace_labels: &labels,
            policies: &snapshot,
            server: &server,
            routes: &engine::NoRoutes,
        };
        let v = engine::validate_namespaced_policy(&p, &ctx);
        if report_policy(
            &mut r,
            &policy_objects,
            "InferencePolicy",
            Some(&ns),
            &p.metadata.name,
            &v,
        ) {
            keep_ns.push(p);
        }
    }
    snapshot.namespaced = keep_ns;

    // Manifests from -f.
    let mut docs = Vec::new();
    match expand_paths(&args.files) {
        Err(e) => {
            r.lines.push(format!("error: {e}"));
            r.input_errors += 1;
        }
        Ok(files) => {
            for f in files {
                match read_documents(&f) {
                    Ok(d) => docs.extend(d),
                    Err(e) => {
                        r.lines.push(format!("error: {e}"));
                        r.input_errors += 1;
                    }
                }
            }
        }
    }

    // Default every service first, so routes collide across the input.
    struct Pending {
        origin: Origin,
        label: String,
        namespace: String,
        labels: BTreeMap<String, String>,
        defaulted: engine::Defaulted,
        warnings: Vec<String>,
    }
    let mut pending = Vec::new();
    let mut routes = LocalRoutes(HashMap::new());
    for d in &docs {
        let (label, obj) = match classify(d) {
            Ok(x) => x,
            Err(e) => {
                r.lines.push(format!("error: {e}"));
                r.input_errors += 1;
                continue;
            }
        };
        let line = |msg: &str| format!("{} {label}: {msg}", d.origin);
        match obj {
            Object::Skipped(why) => r.lines.push(line(&why)),
            Object::Invalid(e) => {
                r.lines.push(line(&e));
                r.violations += 1;
            }
            Object::Cluster(p) => {
                let v = engine::validate_cluster_policy(&p);
                r.violations += v.errors.len();
                emit(&mut r.lines, &d.origin, &label, &v);
            }
            Object::Namespaced(mut p) => {
                let ns = p
                    .metadata
                    .namespace
                    .get_or_insert_with(|| "default".to_owned())
                    .clone();
                let labels = namespace_labels(&ns_labels, &ns);
                let ctx = Context {
                    namespace: &ns,
                    namespace_labels: &labels,
                    policies: &snapshot,
                    server: &server,
                    routes: &engine::NoRoutes,
                };
                let v = engine::validate_namespaced_policy(&p, &ctx);
                r.violations += v.errors.len();
                emit(&mut r.lines, &d.origin, &label, &v);
            }
            Object::Service(mut svc, warnings) => {
                let ns = svc
                    .metadata
                    .namespace
                    .get_or_insert_with(|| "default".to_owned())
                    .clone();
                let labels = namespace_labels(&ns_labels, &ns);
                let ctx = Context {
                    namespace: &ns,
                    namespace_labels: &labels,
                    policies: &snapshot,
                    server: &server,
                    routes: &engine::NoRoutes,
                };
                let defaulted = engine::default_service(&svc, &ctx);
                if let Some((gw, path)) = engine::route_claim(&defaulted.object) {
                    routes
                        .0
                        .entry((gw.name, gw.namespace, path))
                        .or_default()
                        .push((
                            ns.clone(),
                            defaulted.object.metadata.name.clone().unwrap_or_default(),
                        ));
                }
                pending.push(Pending {
                    origin: d.origin.clone(),
                    label,
                    namespace: ns,
                    labels,
                    defaulted,
                    warnings,
                });
            }
        }
    }
    for p in pending {
        let ctx = Context {
            namespace: &p.namespace,
            namespace_labels: &p.labels,
            policies: &snapshot,
            server: &server,
            routes: &routes,
        };
        let mut v = engine::validate_service(&p.defaulted.object, None, &ctx);
        v.warnings.splice(0..0, p.warnings);
        r.violations += v.errors.len();
        emit(&mut r.lines, &p.origin, &p.label, &v);
        if args.explain {
            explain(&mut r.lines, &p.origin, &p.label, &p.defaulted);
        }
        if v.allowed() {
            r.services.push(p.defaulted.object);
        }
    }
    if docs.is_empty() && r.input_errors == 0 {
        r.lines
            .push("warning: no documents found in the given files".to_owned());
    }
    r
}

/// The namespace's labels as the apiserver sets them: the given ones plus
/// `kubernetes.io/metadata.name`.
fn namespace_labels(given: &BTreeMap<String, String>, ns: &str) -> BTreeMap<String, String> {
    let mut l = given.clone();
    l.entry("kubernetes.io/metadata.name".to_owned())
        .or_insert_with(|| ns.to_owned());
    l
}

/// Print a policy's verdict; true when it takes effect (no errors).
fn report_policy(
    r: &mut Report,
    origins: &[(Origin, String)],
    kind: &str,
    ns: Option<&str>,
    name: &Option<String>,
    v: &engine::Verdict,
) -> bool {
    let name = name.as_deref().unwrap_or("<unnamed>");
    let label = kind_label(kind, ns, name);
    let origin = origins
        .iter()
        .find(|(_, l)| *l == label)
        .map(|(o, _)| o.clone())
        .unwrap_or(Origin {
            file: "--policy".to_owned(),
            doc: 0,
            item: None,
        });
    r.violations += v.errors.len();
    if !v.errors.is_empty() || !v.warnings.is_empty() {
        emit(&mut r.lines, &origin, &label, v);
    }
    if !v.errors.is_empty() {
        r.lines.push(format!(
            "{origin} {label}: policy is invalid and is not applied"
        ));
    }
    v.errors.is_empty()
}

fn emit(lines: &mut Vec<String>, origin: &Origin, label: &str, v: &engine::Verdict) {
    for w in &v.warnings {
        lines.push(format!("{origin} {label}: warning: {w}"));
    }
    for e in &v.errors {
        lines.push(format!("{origin} {label}: {e}"));
    }
    if v.errors.is_empty() {
        lines.push(format!("{origin} {label}: ok"));
    }
}

fn explain(lines: &mut Vec<String>, origin: &Origin, label: &str, d: &engine::Defaulted) {
    let prov: BTreeMap<String, String> = d
        .object
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(DEFAULTED_FROM_ANNOTATION))
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default();
    let json = serde_json::to_value(&d.object).unwrap_or(Value::Null);
    lines.push(format!("{origin} {label}: defaults:"));
    if prov.is_empty() {
        lines.push("  (none: every field is set in the manifest)".to_owned());
    }
    for (field, source) in prov {
        let ptr = format!("/{}", field.replace('.', "/"));
        let value = json
            .pointer(&ptr)
            .map_or_else(|| "?".to_owned(), Value::to_string);
        let now = if d.filled.iter().any(|p| p.field == field) {
            ""
        } else {
            " (recorded earlier)"
        };
        lines.push(format!("  {field} = {value} from {source}{now}"));
    }
}

/// Run `infergate check`.
pub fn run(args: CheckArgs) -> ExitCode {
    let report = check(&args);
    for l in &report.lines {
        eprintln!("{l}");
    }
    if let Some(fmt) = args.output {
        match render_output(&report.services, fmt) {
            Ok(s) => print!("{s}"),
            Err(e) => {
                eprintln!("error: cannot print the defaulted objects: {e}");
                return ExitCode::from(EXIT_USAGE);
            }
        }
    }
    let n = report.lines.iter().filter(|l| l.ends_with(": ok")).count();
    eprintln!(
        "checked: {n} valid, {} violation(s), {} input error(s)",
        report.violations, report.input_errors
    );
    ExitCode::from(report.exit_code())
}

/// Serialise the defaulted services: YAML documents, or JSON (one object, or a `List`).
pub fn render_output(services: &[InferenceService], fmt: OutputFormat) -> Result<String, String> {
    match fmt {
        OutputFormat::Yaml => serde_saphyr::to_string_multiple(services).map_err(|e| e.to_string()),
        OutputFormat::Json => {
            let v = if let [one] = services {
                serde_json::to_value(one)
            } else {
                serde_json::to_value(services).map(
                    |items| serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items}),
                )
            }
            .map_err(|e| e.to_string())?;
            serde_json::to_string_pretty(&v)
                .map(|s| s + "\n")
                .map_err(|e| e.to_string())
        }
    }
}
