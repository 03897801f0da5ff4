//! [`validate`]: every rule at once, and for a graph that passes, its
//! [`Dag`] (the ingress and a topological order).

use super::graph_rules::{
    app_name, dependencies_exist, find_cycle, ingress, reachable_from_ingress, route_prefix,
    unique_names,
};
use super::node_rules::{actor_options, import_path, scaling, user_config};
use super::order::{edges, name_index, topological_order};
use crate::graph::proto::ServingGraph;
use crate::graph::violation::{Violation, Violations};

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
