//! The rules about one node: its import path, its scaling, its actor
//! options and its user config.

use crate::graph::proto::Node;
use crate::graph::violation::Violation;

/// Ray Serve's import path form: `module.sub:attr` (at most one colon, not
/// at either end) or `module.sub.attr` (at least one dot, not at either end),
/// without whitespace or empty dotted segments.
#[must_use]
pub fn import_path(i: usize, node: &Node) -> Vec<Violation> {
    let field = format!("nodes[{i}].importPath");
    let v = node.import_path.as_str();
    let bad = |why: &str| {
        vec![Violation::new(
            field.clone(),
            format!("import path {v:?} {why}"),
        )]
    };
    if v.is_empty() {
        return vec![Violation::new(
            field,
            format!("node {:?} needs an import path", node.name),
        )];
    }
    if v.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return bad("must not contain whitespace");
    }
    let colons = v.matches(':').count();
    if colons > 1 {
        return bad("may have at most one colon");
    }
    let segments_ok = |s: &str| !s.is_empty() && s.split('.').all(|seg| !seg.is_empty());
    if colons == 1 {
        let (module, attr) = v.split_once(':').unwrap_or((v, ""));
        if module.is_empty() || attr.is_empty() {
            return bad("may not start or end with a colon");
        }
        if !segments_ok(module) || !segments_ok(attr) {
            return bad("has an empty dotted segment");
        }
        return Vec::new();
    }
    if !v.contains('.') {
        return bad(
            "must separate the module from the attribute with a dot or a colon, e.g. \"module:app\"",
        );
    }
    if v.starts_with('.') || v.ends_with('.') {
        return bad("may not start or end with a dot");
    }
    if !segments_ok(v) {
        return bad("has an empty dotted segment");
    }
    Vec::new()
}

/// `num_replicas > 0` or `autoscaling` (consistent bounds), not both.
#[must_use]
pub fn scaling(i: usize, node: &Node) -> Vec<Violation> {
    let mut out = Vec::new();
    if let Some(n) = node.num_replicas
        && n <= 0
    {
        out.push(Violation::new(
            format!("nodes[{i}].numReplicas"),
            format!(
                "num_replicas {n} of node {:?} must be greater than 0",
                node.name
            ),
        ));
    }
    let Some(a) = node.autoscaling.as_ref() else {
        return out;
    };
    if node.num_replicas.is_some() {
        out.push(Violation::new(
            format!("nodes[{i}]"),
            format!(
                "node {:?} sets both num_replicas and autoscaling; set one",
                node.name
            ),
        ));
    }
    let field = format!("nodes[{i}].autoscaling");
    if a.min_replicas < 0 {
        out.push(Violation::new(
            format!("{field}.minReplicas"),
            format!("min_replicas {} must be at least 0", a.min_replicas),
        ));
    }
    if a.max_replicas < 1 {
        out.push(Violation::new(
            format!("{field}.maxReplicas"),
            format!("max_replicas {} must be at least 1", a.max_replicas),
        ));
    }
    if a.min_replicas > a.max_replicas {
        out.push(Violation::new(
            field.clone(),
            format!(
                "min_replicas {} must not exceed max_replicas {}",
                a.min_replicas, a.max_replicas
            ),
        ));
    }
    if let Some(t) = a.target_ongoing_requests
        && !(t.is_finite() && t > 0.0)
    {
        out.push(Violation::new(
            format!("{field}.targetOngoingRequests"),
            format!("target_ongoing_requests {t} must be greater than 0"),
        ));
    }
    out
}

/// CPUs, GPUs and custom resources are finite and non-negative; custom
/// resources are not `CPU` or `GPU` (Ray reserves those for num_cpus/num_gpus).
#[must_use]
pub fn actor_options(i: usize, node: &Node) -> Vec<Violation> {
    let mut out = Vec::new();
    let Some(o) = node.actor_options.as_ref() else {
        return out;
    };
    let field = format!("nodes[{i}].actorOptions");
    let mut amount = |name: &str, v: f64| {
        if !(v.is_finite() && v >= 0.0) {
            out.push(Violation::new(
                format!("{field}.{name}"),
                format!("{v} must be a number of at least 0"),
            ));
        }
    };
    if let Some(c) = o.num_cpus {
        amount("numCpus", c);
    }
    if let Some(g) = o.num_gpus {
        amount("numGpus", g);
    }
    for (name, v) in &o.resources {
        amount(&format!("resources[{name:?}]"), *v);
    }
    for name in o.resources.keys() {
        if name.is_empty() {
            out.push(Violation::new(
                format!("{field}.resources"),
                "resource names must not be empty",
            ));
        } else if name == "CPU" || name == "GPU" {
            out.push(Violation::new(
                format!("{field}.resources[{name:?}]"),
                format!(
                    "use num_{}s instead of the {name:?} custom resource",
                    name.to_ascii_lowercase()
                ),
            ));
        }
    }
    out
}

/// `user_config_json`, when set, is one JSON value.
#[must_use]
pub fn user_config(i: usize, node: &Node) -> Vec<Violation> {
    if node.user_config_json.trim().is_empty() {
        return Vec::new();
    }
    match serde_json::from_str::<serde_json::Value>(&node.user_config_json) {
        Ok(_) => Vec::new(),
        Err(e) => vec![Violation::new(
            format!("nodes[{i}].userConfigJson"),
            format!("user config of node {:?} is not valid JSON: {e}", node.name),
        )],
    }
}
