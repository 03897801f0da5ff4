//! `infergate graph FILE`: decode, validate, print the DAG and `serveConfigV2`;
//! with `--service`, also check every deployment against one worker of that
//! service (defaulted with `--policy` as `check` does), as the reconciler does.
//!
//! Exit codes as `check`: 0 valid, 1 violations found, 2 unreadable or
//! undecodable input.

use std::fmt::Write as _;
use std::io::Read as _;
use std::process::ExitCode;

use std::path::PathBuf;

use super::manifests;
use crate::api::v1beta1::Backend;
use crate::engine::ServerDefaults;
use crate::graph::placement::{self, Worker};
use crate::graph::proto::{Node, ServingGraph};
use crate::graph::validate::Dag;
use crate::graph::{decode, serve_config, validate};

/// Graphs with more nodes than this print as a flat list.
pub const MAX_TREE_NODES: usize = 256;
/// Graphs deeper than this print as a flat list.
pub const MAX_TREE_DEPTH: usize = 32;

/// Application name used when the graph has none (offline there is no service).
pub const OFFLINE_APP_NAME: &str = "default";

/// Route prefix of the generated application unless asked otherwise.
pub const DEFAULT_ROUTE_PREFIX: &str = "/";

/// What `infergate graph` reads.
#[derive(Clone, Debug)]
pub struct Options {
    /// The serving graph file (protobuf binary); `-` reads standard input.
    pub file: PathBuf,
    /// Route prefix of the generated Ray Serve application.
    pub route_prefix: String,
    /// An InferenceService manifest whose workers must hold the graph.
    pub service: Option<PathBuf>,
    /// Policy manifests the service is defaulted with.
    pub policies: Vec<PathBuf>,
    /// Labels of the service's namespace (`k=v,...`).
    pub namespace_labels: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            file: PathBuf::from("-"),
            route_prefix: DEFAULT_ROUTE_PREFIX.to_owned(),
            service: None,
            policies: Vec::new(),
            namespace_labels: None,
        }
    }
}

/// The worker of the service `args.service` names, defaulted as `check`
/// would; the exit code and the error text otherwise.
fn service_worker(args: &Options) -> Result<Option<(String, Worker)>, (u8, String)> {
    let Some(path) = &args.service else {
        return Ok(None);
    };
    let report = manifests::check(&manifests::Options {
        files: vec![path.clone()],
        policies: args.policies.clone(),
        namespace_labels: args.namespace_labels.clone(),
        output: None,
        explain: false,
        server_defaults: ServerDefaults::default(),
    });
    if report.input_errors > 0 || report.violations > 0 {
        let mut text = format!("error: the service in {} is not valid:\n", path.display());
        for line in &report.lines {
            let _ = writeln!(text, "  {line}");
        }
        return Err((2, text));
    }
    let svc = report
        .services
        .iter()
        .find(|s| s.spec.backend == Some(Backend::RayService))
        .or(report.services.first())
        .ok_or_else(|| {
            (
                2,
                format!("error: no InferenceService in {}\n", path.display()),
            )
        })?;
    let label = format!(
        "InferenceService {}/{}",
        svc.metadata.namespace.as_deref().unwrap_or("default"),
        svc.metadata.name.as_deref().unwrap_or_default()
    );
    Ok(Some((label, Worker::of(svc))))
}

/// Run `infergate graph`.
pub fn run(args: Options) -> ExitCode {
    let bytes = if args.file.as_os_str() == "-" {
        let mut buf = Vec::new();
        match std::io::stdin().lock().read_to_end(&mut buf) {
            Ok(_) => buf,
            Err(e) => {
                eprintln!("error: cannot read standard input: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        match std::fs::read(&args.file) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("error: cannot read {}: {e}", args.file.display());
                return ExitCode::from(2);
            }
        }
    };
    let worker = match service_worker(&args) {
        Ok(w) => w,
        Err((code, message)) => {
            eprint!("{message}");
            return ExitCode::from(code);
        }
    };
    let worker = worker.as_ref().map(|(label, w)| (label.as_str(), w));
    match report(&bytes, &args.route_prefix, worker) {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err((code, message)) => {
            eprint!("{message}");
            ExitCode::from(code)
        }
    }
}

/// The text `infergate graph` prints for an encoded graph, or the exit code
/// and the error text. With `worker` (the service's name and one of its
/// workers), a deployment that could never be placed is a violation.
pub fn report(
    bytes: &[u8],
    route_prefix: &str,
    worker: Option<(&str, &Worker)>,
) -> Result<String, (u8, String)> {
    let graph = decode(bytes).map_err(|e| (2, format!("error: {e}\n")))?;
    let dag = validate::validate(&graph, route_prefix).map_err(|v| {
        let mut msg = format!("graph has {} violation(s):\n", v.0.len());
        for violation in &v.0 {
            let _ = writeln!(msg, "  {violation}");
        }
        (1, msg)
    })?;
    if let Some((label, w)) = worker
        && let Err(found) = placement::check(&graph, w)
    {
        let mut msg =
            format!("graph cannot be placed on the workers of {label} (Unschedulable):\n");
        for f in &found {
            let _ = writeln!(msg, "  {f}");
        }
        return Err((1, msg));
    }
    let config = serve_config::from_dag(&graph, &dag, OFFLINE_APP_NAME, route_prefix);
    let yaml = serve_config::to_yaml(&config).map_err(|e| (2, format!("error: {e}\n")))?;
    let mut out = render_dag(&graph, &dag);
    out.push_str("---\n# serveConfigV2\n");
    out.push_str(&yaml);
    if !yaml.ends_with('\n') {
        out.push('\n');
    }
    Ok(out)
}

/// The DAG as a tree from the ingress; a node reached a second time is
/// marked instead of repeated.
#[must_use]
pub fn render_dag(graph: &ServingGraph, dag: &Dag) -> String {
    let mut out = format!(
        "# graph {:?}: {} node(s), ingress {:?}\n",
        graph.name,
        graph.nodes.len(),
        graph.ingress
    );
    // Deep or large graphs as a flat list: a tree's indentation grows with depth.
    let mut depth = vec![0usize; graph.nodes.len()];
    for &i in &dag.order {
        depth[i] = 1 + dag.edges[i].iter().map(|&d| depth[d]).max().unwrap_or(0);
    }
    if graph.nodes.len() > MAX_TREE_NODES || depth.iter().any(|&d| d > MAX_TREE_DEPTH) {
        out.push_str("# (flat: dependencies first)\n");
        for &i in &dag.order {
            let node = &graph.nodes[i];
            let _ = write!(out, "{}", describe(node));
            if !node.dependencies.is_empty() {
                let _ = write!(out, " -> {}", node.dependencies.join(", "));
            }
            out.push('\n');
        }
        return out;
    }
    let mut shown = vec![false; graph.nodes.len()];
    // (node, prefix for its children, connector for itself)
    let mut stack = vec![(dag.ingress, String::new(), String::new())];
    while let Some((i, child_prefix, connector)) = stack.pop() {
        let Some(node) = graph.nodes.get(i) else {
            continue;
        };
        let seen = std::mem::replace(&mut shown[i], true);
        let _ = write!(out, "{connector}{}", describe(node));
        if seen && !dag.edges[i].is_empty() {
            out.push_str(" (shown above)\n");
            continue;
        }
        out.push('\n');
        let deps = &dag.edges[i];
        // Push in reverse so the first dependency prints first.
        for (k, &d) in deps.iter().enumerate().rev() {
            let last = k + 1 == deps.len();
            let conn = format!("{child_prefix}{}", if last { "└── " } else { "├── " });
            let next = format!("{child_prefix}{}", if last { "    " } else { "│   " });
            stack.push((d, next, conn));
        }
    }
    out
}

fn describe(node: &Node) -> String {
    let mut parts = vec![node.import_path.clone()];
    if let Some(n) = node.num_replicas {
        parts.push(format!("replicas {n}"));
    }
    if let Some(a) = node.autoscaling.as_ref() {
        parts.push(format!(
            "autoscaling {}..{}",
            a.min_replicas, a.max_replicas
        ));
    }
    if let Some(o) = node.actor_options.as_ref() {
        if let Some(c) = o.num_cpus {
            parts.push(format!("cpus {c}"));
        }
        if let Some(g) = o.num_gpus {
            parts.push(format!("gpus {g}"));
        }
        if let Some(m) = o.memory_bytes {
            parts.push(format!("memory {m}"));
        }
        for (k, v) in &o.resources {
            parts.push(format!("{k} {v}"));
        }
    }
    format!("{} [{}]", node.name, parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, deps: &[&str]) -> Node {
        Node {
            name: name.into(),
            import_path: format!("app.{name}:{name}"),
            dependencies: deps.iter().map(|d| (*d).to_owned()).collect(),
            ..Node::default()
        }
    }

    fn diamond() -> ServingGraph {
        ServingGraph {
            name: "rag".into(),
            ingress: "router".into(),
            nodes: vec![
                node("router", &["retriever", "generator"]),
                node("retriever", &["embedder"]),
                node("generator", &["embedder"]),
                node("embedder", &[]),
            ],
        }
    }

    #[test]
    fn tree_shows_every_edge_once_and_shared_nodes_once() {
        let g = diamond();
        let dag = validate::validate(&g, "/").expect("valid");
        let text = render_dag(&g, &dag);
        let expected = "\
# graph \"rag\": 4 node(s), ingress \"router\"
router [app.router:router]
├── retriever [app.retriever:retriever]
│   └── embedder [app.embedder:embedder]
└── generator [app.generator:generator]
    └── embedder [app.embedder:embedder]
";
        assert_eq!(text, expected);
    }

    #[test]
    fn exit_codes() {
        let good = crate::graph::encode(&diamond());
        let out = report(&good, "/rag", None).expect("valid");
        assert!(out.contains("route_prefix: /rag"));
        assert!(out.contains("import_path: app.router:router"));

        let mut bad = diamond();
        bad.nodes[3].dependencies.push("router".into());
        let (code, msg) = report(&crate::graph::encode(&bad), "/", None).unwrap_err();
        assert_eq!(code, 1);
        assert!(msg.contains("dependency cycle: router -> retriever -> embedder -> router"));

        let (code, msg) = report(b"\xff\xff\xff", "/", None).unwrap_err();
        assert_eq!(code, 2);
        assert!(
            msg.contains("not a valid infergate.graph.v1.ServingGraph"),
            "{msg}"
        );
    }

    #[test]
    fn deep_graphs_print_flat() {
        let n = MAX_TREE_DEPTH + 1;
        let names: Vec<String> = (0..n).map(|i| format!("n{i}")).collect();
        let nodes = (0..n)
            .map(|i| {
                let deps: Vec<&str> = names.get(i + 1).map(String::as_str).into_iter().collect();
                node(&names[i], &deps)
            })
            .collect();
        let g = ServingGraph {
            name: "chain".into(),
            ingress: "n0".into(),
            nodes,
        };
        let dag = validate::validate(&g, "/").expect("valid");
        let text = render_dag(&g, &dag);
        assert!(text.contains("# (flat: dependencies first)"));
        assert_eq!(text.lines().count(), n + 2);
        assert!(text.contains("n0 [app.n0:n0] -> n1\n"));
        assert!(!text.contains("└──"));
    }
}
