//! The rules about the graph as a whole: the application's name and route
//! prefix, node names, dependencies, cycles, the ingress and reachability.

use std::collections::{BTreeMap, BTreeSet};

use super::order::{edges, name_index};
use crate::graph::proto::ServingGraph;
use crate::graph::violation::Violation;

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
