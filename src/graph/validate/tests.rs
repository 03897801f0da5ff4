//! Tests of the graph rules.

use std::collections::BTreeMap;

use super::order::{edges as edges_of, name_index, topological_order};
use super::*;
use crate::graph::proto::{ActorOptions, Autoscaling, Node, ServingGraph};

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
