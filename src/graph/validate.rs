//! The serving graph as a DAG, and Ray Serve's own rules. Pure functions.
//!
//! [`validate`] runs every rule and reports every violation at once; each
//! rule is also a function of its own so it can be tested alone:
//! [`unique_names`], [`dependencies_exist`], [`find_cycle`], [`ingress`],
//! [`reachable_from_ingress`], [`import_path`], [`scaling`],
//! [`actor_options`], [`user_config`] and [`route_prefix`].

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use super::proto::{Node, ServingGraph};

/// One broken rule: the offending field and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Field path inside the graph, e.g. `nodes[2].importPath`.
    pub field: String,
    /// What is wrong, naming the offending value.
    pub message: String,
}

impl Violation {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// All violations of a graph, in rule order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Violations(pub Vec<Violation>);

/// Bytes of violations [`Violations`] shows before it only counts the rest
/// (a condition message holds 1 KiB; `infergate graph` lists every one).
const SHOWN_MAX: usize = 640;

impl fmt::Display for Violations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut written = 0;
        for (i, v) in self.0.iter().enumerate() {
            let text = v.to_string();
            if i > 0 && written + text.len() > SHOWN_MAX {
                let rest = self.0.len() - i;
                return write!(
                    f,
                    "; and {rest} more violation{} (infergate graph FILE lists every one)",
                    if rest == 1 { "" } else { "s" }
                );
            }
            if i > 0 {
                f.write_str("; ")?;
            }
            f.write_str(&text)?;
            written += text.len() + 2;
        }
        Ok(())
    }
}

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
mod tests {
    use super::super::proto::{ActorOptions, Autoscaling};
    use super::*;

    use super::edges as edges_of;

    #[test]
    fn many_violations_are_counted_not_listed() {
        let many = Violations(
            (0..500)
                .map(|i| Violation::new(format!("nodes[{i}].name"), "x".repeat(40)))
                .collect(),
        );
        let shown = many.to_string();
        assert!(shown.len() < 800, "{}", shown.len());
        assert!(shown.starts_with("nodes[0].name: "), "{shown}");
        let listed = shown.matches(".name: ").count();
        assert!(
            shown.ends_with(&format!(
                "; and {} more violations (infergate graph FILE lists every one)",
                500 - listed
            )),
            "{shown}"
        );
        let one = Violations(vec![Violation::new("ingress", "missing")]);
        assert_eq!(one.to_string(), "ingress: missing");
    }

    fn node(name: &str, deps: &[&str]) -> Node {
        Node {
            name: name.to_owned(),
            import_path: format!("app.{name}:{name}"),
            dependencies: deps.iter().map(|d| (*d).to_owned()).collect(),
            ..Node::default()
        }
    }

    fn graph(ingress: &str, nodes: Vec<Node>) -> ServingGraph {
        ServingGraph {
            name: "app".into(),
            ingress: ingress.to_owned(),
            nodes,
        }
    }

    fn diamond() -> ServingGraph {
        graph(
            "router",
            vec![
                node("router", &["retriever", "generator"]),
                node("retriever", &["embedder"]),
                node("generator", &["embedder"]),
                node("embedder", &[]),
            ],
        )
    }

    #[test]
    fn a_valid_diamond_passes_with_dependencies_first() {
        let g = diamond();
        let dag = validate(&g, "/team-a/chat").expect("valid");
        assert_eq!(dag.ingress, 0);
        assert_eq!(dag.order.len(), 4);
        let pos = |i: usize| dag.order.iter().position(|&n| n == i).expect("in order");
        for (i, deps) in dag.edges.iter().enumerate() {
            for &d in deps {
                assert!(pos(d) < pos(i), "{d} before {i}");
            }
        }
        assert_eq!(*dag.order.last().expect("non-empty"), 0, "ingress last");
    }

    #[test]
    fn empty_graph_is_rejected() {
        let e = validate(&graph("", vec![]), "/").unwrap_err();
        assert!(
            e.0.iter()
                .any(|v| v.field == "nodes" && v.message.contains("no nodes"))
        );
    }

    #[test]
    fn duplicate_and_empty_names() {
        let mut g = diamond();
        g.nodes.push(node("retriever", &[]));
        g.nodes.push(node("", &[]));
        g.nodes.push(node("has space", &[]));
        let v = unique_names(&g);
        assert_eq!(v.len(), 3, "{v:?}");
        assert_eq!(v[0].field, "nodes[4].name");
        assert!(
            v[0].message
                .contains("duplicate node name \"retriever\" (also nodes[1])")
        );
        assert!(v[1].message.contains("required"));
        assert!(v[2].message.contains("whitespace"));
        assert!(unique_names(&diamond()).is_empty());
    }

    #[test]
    fn unknown_and_repeated_dependencies() {
        let mut g = diamond();
        g.nodes[1].dependencies.push("ranker".into());
        g.nodes[2].dependencies.push("embedder".into());
        let v = dependencies_exist(&g);
        assert_eq!(v.len(), 2, "{v:?}");
        assert_eq!(v[0].field, "nodes[1].dependencies[1]");
        assert!(v[0].message.contains("unknown node \"ranker\""));
        assert!(v[1].message.contains("twice"));
        assert!(dependencies_exist(&diamond()).is_empty());
    }

    #[test]
    fn cycle_path_is_shown() {
        let mut g = diamond();
        // embedder -> router closes router -> retriever -> embedder -> router.
        g.nodes[3].dependencies.push("router".into());
        assert_eq!(
            find_cycle(&g).expect("cycle"),
            ["router", "retriever", "embedder", "router"]
        );
        let e = validate(&g, "/").unwrap_err();
        assert!(
            e.to_string()
                .contains("dependency cycle: router -> retriever -> embedder -> router"),
            "{e}"
        );
        assert_eq!(find_cycle(&diamond()), None);
    }

    #[test]
    fn self_dependency_is_a_cycle() {
        let g = graph("a", vec![node("a", &["a"])]);
        assert_eq!(find_cycle(&g).expect("cycle"), ["a", "a"]);
    }

    #[test]
    fn cycle_away_from_the_first_node_is_found() {
        let g = graph(
            "a",
            vec![
                node("a", &["b"]),
                node("b", &["c"]),
                node("c", &["d"]),
                node("d", &["c"]),
            ],
        );
        assert_eq!(find_cycle(&g).expect("cycle"), ["c", "d", "c"]);
    }

    #[test]
    fn exactly_one_ingress() {
        let mut g = diamond();
        assert!(ingress(&g).is_empty());
        g.ingress = String::new();
        assert!(ingress(&g)[0].message.contains("required"));
        g.ingress = "gateway".into();
        assert!(ingress(&g)[0].message.contains("\"gateway\" is not a node"));
        let mut g = diamond();
        g.nodes.push(node("router", &[]));
        assert!(ingress(&g)[0].message.contains("names 2 nodes"));
    }

    #[test]
    fn every_node_reachable_from_the_ingress() {
        let mut g = diamond();
        g.nodes.push(node("orphan", &["embedder"]));
        g.nodes.push(node("lonely", &[]));
        let v = reachable_from_ingress(&g);
        assert_eq!(v.len(), 1);
        assert_eq!(
            v[0].message,
            "not reachable from ingress \"router\": \"orphan\", \"lonely\""
        );
        assert!(reachable_from_ingress(&diamond()).is_empty());
        // The ingress is the only root: a graph rooted elsewhere fails.
        let mut g = diamond();
        g.ingress = "retriever".into();
        assert!(
            reachable_from_ingress(&g)[0]
                .message
                .contains("\"router\", \"generator\"")
        );
    }

    #[test]
    fn import_path_forms() {
        let check = |p: &str| {
            let mut n = node("x", &[]);
            n.import_path = p.to_owned();
            import_path(0, &n)
        };
        for ok in ["app:graph", "pkg.mod:app", "pkg.mod.app", "pkg.mod:obj.app"] {
            assert!(check(ok).is_empty(), "{ok}");
        }
        for (bad, why) in [
            ("", "needs an import path"),
            ("a:b:c", "at most one colon"),
            (":app", "start or end with a colon"),
            ("mod:", "start or end with a colon"),
            ("module", "with a dot or a colon"),
            (".mod.app", "start or end with a dot"),
            ("mod.app.", "start or end with a dot"),
            ("mod..app", "empty dotted segment"),
            ("pkg..m:app", "empty dotted segment"),
            ("mod app:x", "whitespace"),
        ] {
            let v = check(bad);
            assert_eq!(v.len(), 1, "{bad}");
            assert_eq!(v[0].field, "nodes[0].importPath");
            assert!(v[0].message.contains(why), "{bad}: {}", v[0].message);
        }
    }

    #[test]
    fn replicas_or_autoscaling_not_both() {
        let mut n = node("x", &[]);
        assert!(scaling(0, &n).is_empty(), "neither: Ray's default");
        n.num_replicas = Some(2);
        assert!(scaling(0, &n).is_empty());
        n.num_replicas = Some(0);
        assert!(scaling(0, &n)[0].message.contains("must be greater than 0"));
        n.num_replicas = Some(2);
        n.autoscaling = Some(Autoscaling {
            min_replicas: 1,
            max_replicas: 4,
            target_ongoing_requests: Some(2.0),
        });
        let v = scaling(0, &n);
        assert_eq!(v.len(), 1);
        assert!(v[0].message.contains("both num_replicas and autoscaling"));
        n.num_replicas = None;
        assert!(scaling(0, &n).is_empty());
    }

    #[test]
    fn autoscaling_bounds() {
        let mut n = node("x", &[]);
        n.autoscaling = Some(Autoscaling {
            min_replicas: 5,
            max_replicas: 0,
            target_ongoing_requests: Some(0.0),
        });
        let fields: Vec<_> = scaling(3, &n).into_iter().map(|v| v.field).collect();
        assert_eq!(
            fields,
            [
                "nodes[3].autoscaling.maxReplicas",
                "nodes[3].autoscaling",
                "nodes[3].autoscaling.targetOngoingRequests"
            ]
        );
        n.autoscaling = Some(Autoscaling {
            min_replicas: -1,
            max_replicas: 2,
            target_ongoing_requests: None,
        });
        assert_eq!(scaling(0, &n)[0].field, "nodes[0].autoscaling.minReplicas");
        n.autoscaling = Some(Autoscaling {
            min_replicas: 0,
            max_replicas: 2,
            target_ongoing_requests: None,
        });
        assert!(scaling(0, &n).is_empty(), "scale to zero is allowed");
    }

    #[test]
    fn actor_option_amounts_and_reserved_resources() {
        let mut n = node("x", &[]);
        n.actor_options = Some(ActorOptions {
            num_cpus: Some(0.5),
            num_gpus: Some(1.0),
            memory_bytes: Some(1 << 30),
            resources: BTreeMap::from([("accelerator_type:A100".to_owned(), 0.01)]),
        });
        assert!(actor_options(0, &n).is_empty());
        n.actor_options = Some(ActorOptions {
            num_cpus: Some(-1.0),
            num_gpus: Some(f64::NAN),
            memory_bytes: None,
            resources: BTreeMap::from([("GPU".to_owned(), 1.0), ("x".to_owned(), -2.0)]),
        });
        let v = actor_options(1, &n);
        let fields: Vec<_> = v.iter().map(|v| v.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "nodes[1].actorOptions.numCpus",
                "nodes[1].actorOptions.numGpus",
                "nodes[1].actorOptions.resources[\"x\"]",
                "nodes[1].actorOptions.resources[\"GPU\"]"
            ]
        );
        assert!(v[3].message.contains("use num_gpus"));
    }

    #[test]
    fn user_config_must_be_json() {
        let mut n = node("x", &[]);
        n.user_config_json = r#"{"temperature": 0.2}"#.into();
        assert!(user_config(0, &n).is_empty());
        n.user_config_json = "{temperature: 0.2".into();
        assert_eq!(user_config(0, &n)[0].field, "nodes[0].userConfigJson");
    }

    #[test]
    fn route_prefix_rules() {
        for ok in ["/", "/team-a/chat", "/a"] {
            assert!(route_prefix(ok).is_empty(), "{ok}");
        }
        for (bad, why) in [
            ("team-a", "start with '/'"),
            ("", "start with '/'"),
            ("/a/", "must not end with '/'"),
            ("/a/{name}", "'{' or '}'"),
        ] {
            assert!(route_prefix(bad)[0].message.contains(why), "{bad}");
        }
    }

    #[test]
    fn all_violations_are_reported_at_once() {
        let mut g = diamond();
        g.nodes[0].import_path = "nodots".into();
        g.nodes[1].num_replicas = Some(0);
        g.nodes.push(node("orphan", &["ghost"]));
        let e = validate(&g, "/x/").unwrap_err();
        let fields: Vec<_> = e.0.iter().map(|v| v.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "nodes[4].dependencies[0]",
                "nodes",
                "nodes[0].importPath",
                "nodes[1].numReplicas",
                "routePrefix"
            ]
        );
    }

    #[test]
    fn deep_chains_do_not_exhaust_the_stack() {
        // A graph fetched from a server is untrusted: traversals are iterative.
        let n = 50_000;
        let nodes: Vec<Node> = (0..n)
            .map(|i| {
                let next = format!("n{}", i + 1);
                let deps: Vec<&str> = if i + 1 < n {
                    vec![next.as_str()]
                } else {
                    vec![]
                };
                node(&format!("n{i}"), &deps)
            })
            .collect();
        let mut g = graph("n0", nodes);
        let dag = validate(&g, "/").expect("valid chain");
        assert_eq!(dag.order.first(), Some(&(n - 1)));
        g.nodes[n - 1].dependencies.push("n0".into());
        assert_eq!(find_cycle(&g).map(|c| c.len()), Some(n + 1));
    }

    proptest::proptest! {
        /// On any dependency structure, either the reported cycle is a real
        /// cycle (consecutive nodes are edges, it closes on itself), or
        /// there is none and the topological order puts every dependency first.
        #[test]
        fn cycles_are_real_and_acyclic_graphs_order(
            n in 1usize..10,
            edges in proptest::collection::vec((0usize..10, 0usize..10), 0..25),
        ) {
            let mut nodes: Vec<Node> = (0..n).map(|i| node(&format!("n{i}"), &[])).collect();
            for (a, b) in edges {
                let (a, b) = (a % n, b % n);
                let dep = format!("n{b}");
                if !nodes[a].dependencies.contains(&dep) {
                    nodes[a].dependencies.push(dep);
                }
            }
            let g = graph("n0", nodes);
            match find_cycle(&g) {
                Some(path) => {
                    proptest::prop_assert!(path.len() >= 2);
                    proptest::prop_assert_eq!(path.first(), path.last());
                    for pair in path.windows(2) {
                        let from = g.nodes.iter().find(|x| x.name == pair[0]).expect("node");
                        proptest::prop_assert!(from.dependencies.contains(&pair[1]));
                    }
                }
                None => {
                    let index = name_index(&g);
                    let e = edges_of(&g, &index);
                    let order = topological_order(&e);
                    proptest::prop_assert_eq!(order.len(), n);
                    let pos = |i: usize| order.iter().position(|&x| x == i).expect("in order");
                    for (i, deps) in e.iter().enumerate() {
                        for &d in deps {
                            proptest::prop_assert!(pos(d) < pos(i));
                        }
                    }
                }
            }
        }
    }
}
