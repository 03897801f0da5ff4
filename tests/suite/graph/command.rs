//! `infergate graph` through the built binary: the DAG and the serve config
//! printed, every example graph as its README says (and the RayService
//! example's graph fitting its service's workers, a smaller one not),
//! stdin read, every violation reported with exit 1, unreadable or
//! undecodable input with exit 2.

use std::process::Command;

use crate::support::{binary, fixture, infergate, read_fixture, root, run};

#[test]
fn graph_command_prints_the_dag_and_serve_config() {
    let file = fixture("graph/rag.pb");
    let out = infergate(&[
        "graph",
        file.to_str().expect("utf-8"),
        "--route-prefix",
        "/team-a/rag",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "router [rag.app:app, replicas 2, cpus 0.5]",
        "├── retriever [rag.retrieve:Retriever, autoscaling 1..4, cpus 1, memory 2147483648]",
        "│   └── embedder [",
        "└── generator [rag.generate:Generator, autoscaling 1..2, cpus 4, gpus 8]",
        "# serveConfigV2",
        "route_prefix: /team-a/rag",
        "import_path: rag.app:app",
        "target_ongoing_requests: 4",
        "top_k: 8",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in\n{stdout}");
    }
    // The YAML after the marker is a Ray Serve config.
    let yaml = stdout.split("# serveConfigV2\n").nth(1).expect("yaml part");
    let config: infergate::graph::serve_config::ServeConfig =
        serde_saphyr::from_str(yaml).expect("serve config parses");
    let names: Vec<_> = config.applications[0]
        .deployments
        .iter()
        .map(|d| d.name.as_str())
        .collect();
    assert_eq!(names, ["embedder", "retriever", "generator", "router"]);
}

/// Every example graph does what its README says under `infergate graph`,
/// and the RayService example's graph fits the workers of its service (as
/// defaulted by the example policies); a service whose workers are too small
/// gets the reconciler's `Unschedulable` finding offline.
#[test]
fn example_graphs_work_and_fit_the_example_service() {
    let ex = |p: &str| root().join(p).display().to_string();
    for (graph, code) in [("rag", 0), ("rag-v2", 0), ("cyclic", 1), ("invalid", 1)] {
        let file = fixture(&format!("graph/{graph}.pb"));
        let out = infergate(&["graph", file.to_str().expect("utf-8")]);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{graph}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let policies = [
        "--policy".to_owned(),
        ex("examples/good/cluster-policy.yaml"),
        "--policy".to_owned(),
        ex("examples/good/namespace-policy.yaml"),
        // The service names the H100 class (team-a's policy allows GPUs
        // only through its classes).
        "--policy".to_owned(),
        ex("examples/good/accelerator-classes.yaml"),
        "--namespace-labels".to_owned(),
        "tier=prod".to_owned(),
    ];
    let rag = fixture("graph/rag.pb").display().to_string();
    let with_service = |service: &str| {
        let mut args = vec![
            "graph".to_owned(),
            rag.clone(),
            "--service".to_owned(),
            service.to_owned(),
        ];
        args.extend(policies.iter().cloned());
        infergate(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let out = with_service(&ex("examples/good/rayservice.yaml"));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The same service with 2 GPUs and 2 CPUs per worker.
    let dir = tempfile::tempdir().expect("tempdir");
    let small = dir.path().join("small.yaml");
    let text = std::fs::read_to_string(root().join("examples/good/rayservice.yaml"))
        .expect("example")
        .replace("tensor: 4", "tensor: 2")
        .replace("pipeline: 2", "pipeline: 1")
        .replace("cpu: \"8\"", "cpu: \"2\"");
    std::fs::write(&small, text).expect("write");
    let out = with_service(&small.display().to_string());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot be placed on the workers of InferenceService team-a/rag-pipeline (Unschedulable)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("deployment \"generator\" asks num_gpus 8 but a worker offers 2 GPU(s) (tensor 2 x pipeline 1), num_cpus 4 but a worker offers 2 CPU(s) (spec.resources.cpu)"),
        "{stderr}"
    );
}

#[test]
fn graph_command_reads_stdin() {
    let out = run(
        Command::new(binary()).args(["graph", "-"]),
        Some(&read_fixture("graph/rag-v2.pb")),
    );
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("reranker [rag.rerank:Reranker"), "{stdout}");
    assert!(stdout.contains("route_prefix: /\n"), "default route prefix");
}

#[test]
fn graph_command_reports_every_violation_with_exit_1() {
    for name in ["cyclic", "invalid"] {
        let text = std::fs::read_to_string(root().join(format!("examples/graphs/{name}.txtpb")))
            .expect("example");
        let expected: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# expect: "))
            .collect();
        assert!(!expected.is_empty(), "{name} has expect lines");
        let file = fixture(&format!("graph/{name}.pb"));
        let out = infergate(&["graph", file.to_str().expect("utf-8")]);
        assert_eq!(out.status.code(), Some(1), "{name}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        for e in expected {
            assert!(stderr.contains(e), "{name}: missing {e:?} in\n{stderr}");
        }
        assert!(
            out.stdout.is_empty(),
            "nothing printed on stdout for an invalid graph"
        );
    }
}

#[test]
fn graph_command_exit_2_for_unreadable_or_undecodable_input() {
    let out = infergate(&["graph", "/nonexistent/graph.pb"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read /nonexistent/graph.pb"));

    let dir = tempfile::tempdir().expect("tempdir");
    let junk = dir.path().join("junk.pb");
    std::fs::write(&junk, b"\x0a\xff\xff\xff\xff\xff").expect("write");
    let out = infergate(&["graph", junk.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("not a valid infergate.graph.v1.ServingGraph")
    );
}
