//! `infergate check`: the engine run offline over manifest files.
//!
//! Reads files, directories (recursively: `*.yaml`, `*.yml`, `*.json`) or
//! `-` (standard input), each holding one or more YAML documents or JSON
//! values (a `kind: List` is expanded). InferenceService objects (v1beta1,
//! or v1alpha1 converted to v1beta1) are defaulted and validated exactly as
//! the webhooks would; ClusterInferencePolicy and InferencePolicy objects
//! are validated. Policies given with `--policy` are applied to the services.
//! Services routed by name hold their served names in the order given, as
//! admission records them: the later of two serving one name through one
//! Gateway (hostnames that meet) is denied, across files and namespaces.
//!
//! Output: one line per object on standard error,
//! `FILE [doc N] KIND NAMESPACE/NAME: FIELD: MESSAGE` (N counts the
//! non-empty documents of the file from 0); `-o yaml|json` prints the
//! defaulted valid services on standard output; `--explain` prints where
//! each default came from on standard error.
//! Exit codes: 0 all valid, 1 violations found, 2 unreadable input or usage error.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use serde_json::Value;

use crate::api::{DEFAULTED_FROM_ANNOTATION, v1beta1::InferenceService};
use crate::engine::{self, AcceleratorClasses, ModelProfiles, PolicySnapshot, ServerDefaults};
use crate::state::context::Files;
use crate::state::files::{
    Document, DocumentKind, Origin, classify, expand_paths, kind_label, read_documents,
};
use crate::state::with_context;

/// What `infergate check` reads and prints.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Manifest files or directories to check; `-` reads standard input.
    pub files: Vec<PathBuf>,
    /// Policy manifests to apply.
    pub policies: Vec<PathBuf>,
    /// Labels of the namespace, for `namespaceSelector` matching: `k=v,k2=v2`.
    pub namespace_labels: Option<String>,
    /// Print the defaulted objects in this format.
    pub output: Option<OutputFormat>,
    /// Print where each default came from.
    pub explain: bool,
    /// Defaults that `serve` takes from flags.
    pub server_defaults: ServerDefaults,
}

/// Output formats of `check -o`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    /// YAML documents.
    Yaml,
    /// JSON.
    Json,
}

/// Exit code for violations.
const EXIT_VIOLATIONS: u8 = 1;
/// Exit code for unreadable input or usage errors.
const EXIT_USAGE: u8 = 2;

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
pub fn check(args: &Options) -> Report {
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
    let mut files = Files {
        namespace_labels: ns_labels,
        server: args.server_defaults.clone(),
        ..Files::default()
    };
    let mut classes = AcceleratorClasses::new();
    let mut profiles = ModelProfiles::default();
    read_policies(args, &mut r, &mut files, &mut classes, &mut profiles);

    // Manifests from -f; the AcceleratorClasses and ModelProfiles among
    // them first, so a service is judged against every class and profile
    // given, wherever it stands.
    let docs = read_all(&args.files, &mut r);
    let classified: Vec<_> = docs.iter().map(classify).collect();
    for (d, c) in docs.iter().zip(&classified) {
        match c {
            Ok((label, DocumentKind::Class(c))) => {
                add_class(&mut r, &mut classes, &d.origin, label, (**c).clone());
            }
            Ok((label, DocumentKind::Profile(p))) => {
                add_profile(&mut r, &mut profiles, &d.origin, label, (**p).clone());
            }
            _ => {}
        }
    }
    files.classes = Arc::new(classes);
    files.profiles = Arc::new(profiles);

    let pending = default_all(&docs, classified, &mut files, &mut r);
    judge_services(args, pending, &files, &mut r);
    if docs.is_empty() && r.input_errors == 0 {
        r.lines
            .push("warning: no documents found in the given files".to_owned());
    }
    r
}

/// The policies (and AcceleratorClasses and ModelProfiles) of `--policy`:
/// each judged as admission would judge it, the ones it would reject left
/// out of `files.policies`.
fn read_policies(
    args: &Options,
    r: &mut Report,
    files: &mut Files,
    classes: &mut AcceleratorClasses,
    profiles: &mut ModelProfiles,
) {
    let mut snapshot = PolicySnapshot::default();
    let policy_docs = read_all(&args.policies, r);
    let mut policy_objects = Vec::new();
    for d in &policy_docs {
        match classify(d) {
            Err(e) => {
                r.lines.push(format!("error: {e}"));
                r.input_errors += 1;
            }
            Ok((label, DocumentKind::Cluster(p))) => {
                policy_objects.push((d.origin.clone(), label.clone()));
                snapshot.cluster.push(*p);
            }
            Ok((label, DocumentKind::Namespaced(p))) => {
                policy_objects.push((d.origin.clone(), label.clone()));
                snapshot.namespaced.push(*p);
            }
            Ok((label, DocumentKind::Class(c))) => {
                add_class(r, classes, &d.origin, &label, *c);
            }
            Ok((label, DocumentKind::Profile(p))) => {
                add_profile(r, profiles, &d.origin, &label, *p);
            }
            Ok((label, DocumentKind::Invalid(e))) => {
                r.lines.push(format!("{} {label}: {e}", d.origin));
                r.violations += 1;
            }
            Ok((label, DocumentKind::Service(..))) => r.lines.push(format!(
                "{} {label}: --policy takes policy objects; pass services with -f; skipped",
                d.origin
            )),
            Ok((label, DocumentKind::Skipped(why))) => {
                r.lines.push(format!("{} {label}: {why}", d.origin));
            }
        }
    }
    // Policies that admission would reject do not take effect.
    let mut keep_cluster = Vec::new();
    for p in std::mem::take(&mut snapshot.cluster) {
        let v = engine::validate_cluster_policy(&p);
        if report_policy(
            r,
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
    let namespaced = std::mem::take(&mut snapshot.namespaced);
    // Namespace policies are judged against the cluster policies that took effect.
    files.policies = Arc::new(snapshot.clone());
    let mut keep_ns = Vec::new();
    for p in namespaced {
        let ns = p.metadata.namespace.clone().unwrap_or_default();
        let v = with_context(files, &ns, |ctx| {
            engine::validate_namespaced_policy(&p, ctx)
        });
        if report_policy(
            r,
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
    files.policies = Arc::new(snapshot);
}

/// A service of `-f`, defaulted, waiting for its validation.
struct Pending {
    origin: Origin,
    label: String,
    namespace: String,
    defaulted: engine::Defaulted,
    warnings: Vec<String>,
}

/// Report every document of `-f` but the services, and default every
/// service first (its route recorded), so routes collide across the input.
fn default_all(
    docs: &[Document],
    classified: Vec<Result<(String, DocumentKind), crate::state::files::InputError>>,
    files: &mut Files,
    r: &mut Report,
) -> Vec<Pending> {
    let mut pending = Vec::new();
    for (d, classified) in docs.iter().zip(classified) {
        let (label, obj) = match classified {
            Ok(x) => x,
            Err(e) => {
                r.lines.push(format!("error: {e}"));
                r.input_errors += 1;
                continue;
            }
        };
        let line = |msg: &str| format!("{} {label}: {msg}", d.origin);
        match obj {
            DocumentKind::Skipped(why) => r.lines.push(line(&why)),
            // Judged above, before any service.
            DocumentKind::Class(_) | DocumentKind::Profile(_) => {}
            DocumentKind::Invalid(e) => {
                r.lines.push(line(&e));
                r.violations += 1;
            }
            DocumentKind::Cluster(p) => {
                let v = engine::validate_cluster_policy(&p);
                r.violations += v.errors.len();
                emit(&mut r.lines, &d.origin, &label, &v);
            }
            DocumentKind::Namespaced(p) => {
                let ns = p.metadata.namespace.clone().unwrap_or_default();
                let v = with_context(files, &ns, |ctx| {
                    engine::validate_namespaced_policy(&p, ctx)
                });
                r.violations += v.errors.len();
                emit(&mut r.lines, &d.origin, &label, &v);
            }
            DocumentKind::Service(mut svc, warnings) => {
                let ns = svc
                    .metadata
                    .namespace
                    .get_or_insert_with(|| "default".to_owned())
                    .clone();
                let defaulted = with_context(files, &ns, |ctx| engine::default_service(&svc, ctx));
                files.routes.upsert(&defaulted.object);
                pending.push(Pending {
                    origin: d.origin.clone(),
                    label,
                    namespace: ns,
                    defaulted,
                    warnings,
                });
            }
        }
    }
    pending
}

/// Validate each defaulted service (its served names held and its GPU
/// budget charged in input order, as admission would in that order) and
/// report it; the admitted ones go to `r.services`.
fn judge_services(args: &Options, pending: Vec<Pending>, files: &Files, r: &mut Report) {
    let mut tally = super::charges::Charges::default();
    let mut names = super::names::Names::default();
    for p in pending {
        let svc = &p.defaulted.object;
        let mut v = with_context(files, &p.namespace, |ctx| {
            let mut v = engine::validate_service(svc, None, ctx);
            // Names first: a service denied for a name is not charged.
            if v.allowed() {
                v.errors.extend(names.check(svc).errors);
            }
            if v.allowed() {
                let charged = tally.charge(svc, ctx);
                v.errors.extend(charged.errors);
                v.warnings.extend(charged.warnings);
            }
            v
        });
        if v.allowed() {
            names.record(svc);
        }
        v.warnings.splice(0..0, p.warnings);
        v.warnings
            .splice(0..0, p.defaulted.warnings.iter().cloned());
        r.violations += v.errors.len();
        emit(&mut r.lines, &p.origin, &p.label, &v);
        if args.explain {
            explain(&mut r.lines, &p.origin, &p.label, &p.defaulted);
        }
        if v.allowed() {
            r.services.push(p.defaulted.object);
        }
    }
}

/// Validate an AcceleratorClass as the API server's schema would, report
/// it, and keep it when valid.
fn add_class(
    r: &mut Report,
    classes: &mut AcceleratorClasses,
    origin: &Origin,
    label: &str,
    class: crate::api::AcceleratorClass,
) {
    let v = engine::validate_accelerator_class(&class.spec);
    r.violations += v.errors.len();
    emit(&mut r.lines, origin, label, &v);
    if v.allowed() {
        classes.insert(class.metadata.name.unwrap_or_default(), class.spec);
    }
}

/// Validate a ModelProfile as the API server's schema would, report it,
/// and keep it when valid.
fn add_profile(
    r: &mut Report,
    profiles: &mut ModelProfiles,
    origin: &Origin,
    label: &str,
    profile: crate::api::ModelProfile,
) {
    let v = engine::validate_model_profile(&profile.spec);
    r.violations += v.errors.len();
    emit(&mut r.lines, origin, label, &v);
    if v.allowed() {
        profiles.insert(profile.metadata.name.unwrap_or_default(), profile.spec);
    }
}

/// Every document in `paths`; what cannot be read is an input error in `r`.
fn read_all(paths: &[PathBuf], r: &mut Report) -> Vec<Document> {
    let mut docs = Vec::new();
    let files = expand_paths(paths).unwrap_or_else(|e| {
        r.lines.push(format!("error: {e}"));
        r.input_errors += 1;
        Vec::new()
    });
    for f in files {
        match read_documents(&f) {
            Ok(d) => docs.extend(d),
            Err(e) => {
                r.lines.push(format!("error: {e}"));
                r.input_errors += 1;
            }
        }
    }
    docs
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
pub fn run(args: Options) -> ExitCode {
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
