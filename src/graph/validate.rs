//! The serving graph as a DAG, and Ray Serve's own rules. Pure functions.
//!
//! [`validate`] runs every rule and reports every violation at once; each
//! rule is also a function of its own so it can be tested alone:
//! [`unique_names`], [`dependencies_exist`], [`find_cycle`], [`ingress`],
//! [`reachable_from_ingress`], [`import_path`], [`scaling`],
//! [`actor_options`], [`user_config`] and [`route_prefix`].

use std::collections::{BTreeMap, BTreeSet};

use super::proto::{Node, ServingGraph};
pub use super::violation::{Violation, Violations};

/// A graph that passed [`validate`]: the ingress and a topological order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dag {
    /// Index of the ingress node in `graph.nodes`.
    pub ingress: usize,
    /// Node indices, every node after all of its dependencies.
    pub order: Vec<usize>,
    /// Dependencies of each node as indices, in declared order.
    pub edges: Vec<Vec<usize>>,
}

/// Run every rule. `route_prefix` is the application's route prefix (the
/// rendered route path of the service).
pub fn validate(graph: &ServingGraph, route_prefix_value: &str) -> Result<Dag, Violations> {
    let mut out = Vec::new();
    if graph.nodes.is_empty() {
        out.push(Violation::new("nodes", "the graph has no nodes"));
    }
    out.extend(app_name(graph));
    out.extend(unique_names(graph));
    out.extend(dependencies_exist(graph));
    if let Some(cycle) = find_cycle(graph) {
        out.push(Violation::new(
            "nodes",
            format!("dependency cycle: {}", cycle.join(" -> ")),
        ));
    }
    out.extend(ingress(graph));
    out.extend(reachable_from_ingress(graph));
    for (i, node) in graph.nodes.iter().enumerate() {
        out.extend(import_path(i, node));
        out.extend(scaling(i, node));
        out.extend(actor_options(i, node));
        out.extend(user_config(i, node));
    }
    out.extend(route_prefix(route_prefix_value));
    if !out.is_empty() {
        return Err(Violations(out));
    }
    let index = name_index(graph);
    let edges = edges(graph, &index);
    let ingress = index.get(graph.ingress.as_str()).copied().unwrap_or(0);
    Ok(Dag {
        ingress,
        order: topological_order(&edges),
        edges,
    })
}

/// Name to index of its first occurrence.
fn name_index(graph: &ServingGraph) -> BTreeMap<&str, usize> {
    let mut index = BTreeMap::new();
    for (i, n) in graph.nodes.iter().enumerate() {
        index.entry(n.name.as_str()).or_insert(i);
    }
    index
}

/// Dependencies as indices; unknown names are left out.
fn edges(graph: &ServingGraph, index: &BTreeMap<&str, usize>) -> Vec<Vec<usize>> {
    graph
        .nodes
        .iter()
        .map(|n| {
            n.dependencies
                .iter()
                .filter_map(|d| index.get(d.as_str()).copied())
                .collect()
        })
        .collect()
}

/// Post-order DFS from every node in declared order: dependencies first.
fn topological_order(edges: &[Vec<usize>]) -> Vec<usize> {
    let mut seen = vec![false; edges.len()];
    let mut order = Vec::with_capacity(edges.len());
    for start in 0..edges.len() {
        if seen[start] {
            continue;
        }
        seen[start] = true;
        // (node, next edge to visit)
        let mut stack = vec![(start, 0usize)];
        while let Some(top) = stack.last_mut() {
            let (node, next) = *top;
            if let Some(&dep) = edges[node].get(next) {
                top.1 += 1;
                if !seen[dep] {
                    seen[dep] = true;
                    stack.push((dep, 0));
                }
            } else {
                order.push(node);
                stack.pop();
            }
        }
    }
    order
}

/// The application name, when set, is non-empty of visible characters.
#[must_use]
pub fn app_name(graph: &ServingGraph) -> Vec<Violation> {
    if graph
        .name
        .chars()
        .any(|c| c.is_whitespace() || c.is_control())
    {
        vec![Violation::new(
            "name",
            format!(
                "application name {:?} must not contain whitespace",
                graph.name
            ),
        )]
    } else {
        Vec::new()
    }
}

/// Node names are non-empty, without whitespace, and unique.
#[must_use]
pub fn unique_names(graph: &ServingGraph) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut first: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, n) in graph.nodes.iter().enumerate() {
        let field = format!("nodes[{i}].name");
        if n.name.is_empty() {
            out.push(Violation::new(field, "node name is required"));
            continue;
        }
        if n.name.chars().any(|c| c.is_whitespace() || c.is_control()) {
            out.push(Violation::new(
                field.clone(),
                format!("node name {:?} must not contain whitespace", n.name),
            ));
        }
        if let Some(prev) = first.get(n.name.as_str()) {
            out.push(Violation::new(
                field,
                format!("duplicate node name {:?} (also nodes[{prev}])", n.name),
            ));
        } else {
            first.insert(&n.name, i);
        }
    }
    out
}

/// Every dependency names a node of the graph (and no node lists one twice).
#[must_use]
pub fn dependencies_exist(graph: &ServingGraph) -> Vec<Violation> {
    let names: BTreeSet<&str> = graph.nodes.iter().map(|n| n.name.as_str()).collect();
    let mut out = Vec::new();
    for (i, n) in graph.nodes.iter().enumerate() {
        let mut listed = BTreeSet::new();
        for (j, d) in n.dependencies.iter().enumerate() {
            let field = format!("nodes[{i}].dependencies[{j}]");
            if !names.contains(d.as_str()) {
                out.push(Violation::new(
                    field,
                    format!("node {:?} depends on unknown node {d:?}", n.name),
                ));
            } else if !listed.insert(d.as_str()) {
                out.push(Violation::new(
                    field,
                    format!("node {:?} lists dependency {d:?} twice", n.name),
                ));
            }
        }
    }
    out
}

/// The first dependency cycle found (declared order), as the path of node
/// names that starts and ends with the same node, e.g. `[a, b, c, a]`.
#[must_use]
pub fn find_cycle(graph: &ServingGraph) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnPath,
        Done,
    }
    let index = name_index(graph);
    let edges = edges(graph, &index);
    let mut mark = vec![Mark::New; edges.len()];
    for start in 0..edges.len() {
        if mark[start] != Mark::New {
            continue;
        }
        mark[start] = Mark::OnPath;
        let mut stack = vec![(start, 0usize)];
        while let Some(top) = stack.last_mut() {
            let (node, next) = *top;
            if let Some(&dep) = edges[node].get(next) {
                top.1 += 1;
                match mark[dep] {
                    Mark::New => {
                        mark[dep] = Mark::OnPath;
                        stack.push((dep, 0));
                    }
                    Mark::OnPath => {
                        let from = stack.iter().position(|(n, _)| *n == dep).unwrap_or(0);
                        let mut path: Vec<String> = stack[from..]
                            .iter()
                            .map(|(n, _)| graph.nodes[*n].name.clone())
                            .collect();
                        path.push(graph.nodes[dep].name.clone());
                        return Some(path);
                    }
                    Mark::Done => {}
                }
            } else {
                mark[node] = Mark::Done;
                stack.pop();
            }
        }
    }
    None
}

/// Exactly one ingress: `ingress` is set and names exactly one node.
#[must_use]
pub fn ingress(graph: &ServingGraph) -> Vec<Violation> {
    if graph.ingress.is_empty() {
        return vec![Violation::new("ingress", "the ingress node is required")];
    }
    match graph
        .nodes
        .iter()
        .filter(|n| n.name == graph.ingress)
        .count()
    {
        0 => vec![Violation::new(
            "ingress",
            format!("ingress {:?} is not a node of the graph", graph.ingress),
        )],
        // More than one: the duplicate-name rule reports it too, but the
        // ingress must be unambiguous.
        1 => Vec::new(),
        n => vec![Violation::new(
            "ingress",
            format!("ingress {:?} names {n} nodes", graph.ingress),
        )],
    }
}

/// Every node is reachable from the ingress by following dependencies.
#[must_use]
pub fn reachable_from_ingress(graph: &ServingGraph) -> Vec<Violation> {
    let index = name_index(graph);
    let Some(&start) = index.get(graph.ingress.as_str()) else {
        // Reported by the ingress rule.
        return Vec::new();
    };
    let edges = edges(graph, &index);
    let mut seen = vec![false; edges.len()];
    seen[start] = true;
    let mut todo = vec![start];
    while let Some(n) = todo.pop() {
        for &d in &edges[n] {
            if !seen[d] {
                seen[d] = true;
                todo.push(d);
            }
        }
    }
    let unreachable: Vec<String> = graph
        .nodes
        .iter()
        .enumerate()
        // Duplicates are reported by the name rule.
        .filter(|(i, n)| !seen[*i] && index.get(n.name.as_str()) == Some(i))
        .map(|(_, n)| format!("{:?}", n.name))
        .collect();
    if unreachable.is_empty() {
        Vec::new()
    } else {
        vec![Violation::new(
            "nodes",
            format!(
                "not reachable from ingress {:?}: {}",
                graph.ingress,
                unreachable.join(", ")
            ),
        )]
    }
}

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

/// Ray Serve's route prefix rules: starts with `/`, no trailing `/` unless
/// it is `/`, no `{` or `}`.
#[must_use]
pub fn route_prefix(prefix: &str) -> Vec<Violation> {
    let bad = |why: &str| {
        vec![Violation::new(
            "routePrefix",
            format!("route prefix {prefix:?} {why}"),
        )]
    };
    if !prefix.starts_with('/') {
        return bad("must start with '/'");
    }
    if prefix.len() > 1 && prefix.ends_with('/') {
        return bad("must not end with '/' unless it is '/'");
    }
    if prefix.contains(['{', '}']) {
        return bad("must not contain '{' or '}'");
    }
    Vec::new()
}

#[cfg(test)]
mod tests;
