//! The graph's nodes by index: the index of each name, the dependencies as
//! indices, and an order that puts every node after its dependencies.

use std::collections::BTreeMap;

use crate::graph::proto::ServingGraph;

/// Name to index of its first occurrence.
pub(super) fn name_index(graph: &ServingGraph) -> BTreeMap<&str, usize> {
    let mut index = BTreeMap::new();
    for (i, n) in graph.nodes.iter().enumerate() {
        index.entry(n.name.as_str()).or_insert(i);
    }
    index
}

/// Dependencies as indices; unknown names are left out.
pub(super) fn edges(graph: &ServingGraph, index: &BTreeMap<&str, usize>) -> Vec<Vec<usize>> {
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
pub(super) fn topological_order(edges: &[Vec<usize>]) -> Vec<usize> {
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
