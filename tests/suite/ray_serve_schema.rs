//! Ray accepts the Serve config infergate writes: every example graph
//! (`examples/graphs/*.txtpb`) and every graph fixture
//! (`tests/fixtures/graph/*.pb`) that infergate accepts, built into a
//! RayService exactly as the reconciler does (a defaulted service,
//! [`rayservice::desired_rayservice`], its `serveConfigV2`), is validated with
//! Ray Serve's own schema (`ray.serve.schema.ServeDeploySchema` from
//! `ray[serve]` at the version `tests/support/build-ray-serve.sh` pins, in a
//! virtual environment in the cache). Graphs infergate rejects never get that
//! far; mutated configs Ray must reject show the check can fail.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::support::classes::h100;
use crate::support::ray_serve::{ServeCase, ServeVerdict, validate_serve_configs};
use crate::support::{fixture, root};
use infergate::api::v1beta1::InferenceService;
use infergate::engine::{
    self, AcceleratorClasses, Context, NoRoutes, PolicySnapshot, ServerDefaults,
};
use infergate::graph::{self, GraphError, ServingGraph};
use infergate::reconcile::children::rayservice::{self, RayServiceError};
use prost_reflect::{DescriptorPool, DynamicMessage};
use serde_json::{Value, json};

/// One way of writing a RayService-backed service.
struct Variant {
    name: &'static str,
    spec: Value,
    /// Its AcceleratorClass, passed to the builder as the reconciler does.
    class: bool,
    /// Its worker has GPUs (graphs asking for some fit).
    gpus: bool,
}

fn variants() -> Vec<Variant> {
    vec![
        Variant {
            name: "nvidia",
            spec: json!({"replicas": 2, "accelerator": {"type": "nvidia"}, "parallelism": {"tensor": 8}}),
            class: false,
            gpus: true,
        },
        Variant {
            name: "class",
            spec: json!({"accelerator": {"class": "h100-80gb"}, "parallelism": {"tensor": 4, "pipeline": 2}}),
            class: true,
            gpus: true,
        },
        Variant {
            name: "autoscaling",
            spec: json!({
                "autoscaling": {"minReplicas": 1, "maxReplicas": 3},
                "accelerator": {"type": "nvidia"}, "parallelism": {"tensor": 8}
            }),
            class: false,
            gpus: true,
        },
        Variant {
            name: "cpu",
            spec: json!({"replicas": 1}),
            class: false,
            gpus: false,
        },
    ]
}

/// The service of `variant`, defaulted and admitted as the webhook does
/// (the reconciler builds from the defaulted service).
fn service(variant: &Variant) -> InferenceService {
    let mut spec = variant.spec.clone();
    spec["model"] = json!({"ref": "llama3-70b"});
    spec["engine"] = json!({"image": "registry.example.com/ray-vllm:2.40"});
    spec["backend"] = json!("RayService");
    spec["graph"] = json!({"url": "https://graphs.example.com/rag"});
    let svc: InferenceService = serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
        "metadata": {"name": "chat", "namespace": "team-a", "uid": "u-1"},
        "spec": spec,
    }))
    .expect("service");
    let labels = BTreeMap::new();
    let classes = AcceleratorClasses::from([("h100-80gb".to_owned(), h100())]);
    let policies = PolicySnapshot::default();
    let ctx = Context {
        namespace: "team-a",
        namespace_labels: &labels,
        policies: &policies,
        classes: &classes,
        profiles: &engine::ModelProfiles::default(),
        server: &ServerDefaults::default(),
        routes: &NoRoutes,
    };
    let defaulted = engine::default_service(&svc, &ctx).object;
    let verdict = engine::validate_service(&defaulted, None, &ctx);
    assert!(
        verdict.allowed(),
        "service {}: {:?}",
        variant.name,
        verdict
            .errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
    );
    defaulted
}

/// A graph to build, and whether infergate must reject it (its text
/// example lists `# expect:` violations).
struct Graph {
    name: String,
    graph: ServingGraph,
    rejected: bool,
}

fn sorted_files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    files.sort();
    files
}

fn stem(path: &Path) -> &str {
    path.file_stem().and_then(|s| s.to_str()).expect("stem")
}

/// Whether the text example `examples/graphs/<stem>.txtpb` expects rejection.
fn expects_rejection(stem: &str) -> bool {
    std::fs::read_to_string(root().join(format!("examples/graphs/{stem}.txtpb")))
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("# expect: "))
}

/// Every example graph (text format, through the compiled descriptors) and
/// every binary graph fixture, plus the rag graph without a name (the
/// application is then named after the service).
fn graphs() -> Vec<Graph> {
    let pool = DescriptorPool::decode(graph::FILE_DESCRIPTOR_SET).expect("descriptor set");
    let desc = pool
        .get_message_by_name(graph::GRAPH_MESSAGE)
        .expect("ServingGraph in the descriptors");
    let mut out = Vec::new();
    for path in sorted_files(&root().join("examples/graphs"), "txtpb") {
        let text = std::fs::read_to_string(&path).expect("read example");
        let graph: ServingGraph = DynamicMessage::parse_text_format(desc.clone(), &text)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .transcode_to()
            .expect("transcode");
        out.push(Graph {
            name: format!("examples/graphs/{}.txtpb", stem(&path)),
            rejected: expects_rejection(stem(&path)),
            graph,
        });
    }
    for path in sorted_files(&fixture("graph"), "pb") {
        let bytes = std::fs::read(&path).expect("read fixture");
        let graph = graph::decode(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        out.push(Graph {
            name: format!("tests/fixtures/graph/{}.pb", stem(&path)),
            rejected: expects_rejection(stem(&path)),
            graph,
        });
    }
    assert!(out.len() >= 8, "expected the example graphs and fixtures");
    let rag = out
        .iter()
        .find(|g| g.name == "tests/fixtures/graph/rag.pb")
        .expect("the rag fixture");
    let mut unnamed = rag.graph.clone();
    unnamed.name.clear();
    out.push(Graph {
        name: "tests/fixtures/graph/rag.pb without a name".into(),
        graph: unnamed,
        rejected: false,
    });
    out
}

fn asks_gpus(graph: &ServingGraph) -> bool {
    graph.nodes.iter().any(|n| {
        n.actor_options
            .as_ref()
            .and_then(|o| o.num_gpus)
            .is_some_and(|g| g > 0.0)
    })
}

/// A `serveConfigV2` infergate generated, by where it came from.
struct Generated {
    case: String,
    yaml: String,
}

/// Build the RayService of every accepted graph for every service variant
/// and both route prefixes infergate writes (the rendered path, and `/` for
/// a gateway-routed service); assert the rejected ones are rejected by
/// infergate itself.
fn generate_all() -> Vec<Generated> {
    let class = h100();
    let mut out = Vec::new();
    for variant in variants() {
        let svc = service(&variant);
        let rendered = engine::render_route_path(&svc).expect("route path");
        assert_eq!(rendered, "/team-a/chat");
        let class = variant.class.then_some(&class);
        for g in graphs() {
            for route in [rendered.as_str(), "/"] {
                let case = format!("{} | service {} | route {route}", g.name, variant.name);
                let built = rayservice::desired_rayservice(&svc, &g.graph, route, class);
                if g.rejected {
                    assert!(
                        matches!(built, Err(RayServiceError::Graph(GraphError::Invalid(_)))),
                        "{case}: infergate must reject the graph before Ray sees it, got {built:?}"
                    );
                    continue;
                }
                if !variant.gpus && asks_gpus(&g.graph) {
                    assert!(
                        matches!(
                            built,
                            Err(RayServiceError::Graph(GraphError::Unschedulable(_)))
                        ),
                        "{case}: a graph asking GPUs of a worker without any is refused, got {built:?}"
                    );
                    continue;
                }
                let rs = built.unwrap_or_else(|e| panic!("{case}: infergate refused it: {e}"));
                out.push(Generated {
                    case,
                    yaml: rs.spec.serve_config_v2,
                });
            }
        }
    }
    out
}

#[test]
fn graphs_infergate_rejects_never_become_serve_configs() {
    // Without Ray: what infergate refuses, and that it accepts the rest.
    let generated = generate_all();
    let accepted: Vec<&str> = generated.iter().map(|g| g.case.as_str()).collect();
    for must in [
        "examples/graphs/rag.txtpb | service nvidia | route /team-a/chat",
        "examples/graphs/rag-v2.txtpb | service class | route /",
        "tests/fixtures/graph/rag.pb | service autoscaling | route /team-a/chat",
        "tests/fixtures/graph/rag.pb without a name | service nvidia | route /",
    ] {
        assert!(
            accepted.contains(&must),
            "{must} missing from {accepted:#?}"
        );
    }
    assert!(
        !accepted
            .iter()
            .any(|c| c.contains("cyclic") || c.contains("invalid") || c.contains("service cpu")),
        "{accepted:#?}"
    );
}

fn verdict_text(v: &ServeVerdict) -> String {
    v.error.clone().unwrap_or_default()
}

#[test]
fn ray_accepts_every_serve_config_infergate_generates() {
    let generated = generate_all();
    // The generated configs as Ray reads them (YAML text), then negative
    // controls: a generated config mutated the ways Ray must refuse.
    let mut cases: Vec<ServeCase> = generated
        .iter()
        .map(|g| ServeCase {
            name: g.case.clone(),
            config: None,
            yaml: Some(g.yaml.clone()),
        })
        .collect();
    let base: Value = serde_saphyr::from_str(&generated[0].yaml).expect("serveConfigV2 parses");
    let mutate = |name: &str, change: &dyn Fn(&mut Value)| {
        let mut config = base.clone();
        change(&mut config);
        ServeCase {
            name: name.to_owned(),
            config: Some(config),
            yaml: None,
        }
    };
    let controls = [
        mutate("control: num_replicas 0", &|c| {
            c["applications"][0]["deployments"][0]["num_replicas"] = json!(0);
            c["applications"][0]["deployments"][0]
                .as_object_mut()
                .expect("deployment")
                .remove("autoscaling_config");
        }),
        mutate("control: route_prefix without the leading /", &|c| {
            c["applications"][0]["route_prefix"] = json!("team-a/chat");
        }),
        mutate("control: route_prefix ending in /", &|c| {
            c["applications"][0]["route_prefix"] = json!("/team-a/chat/");
        }),
        mutate("control: num_replicas with autoscaling_config", &|c| {
            let d = &mut c["applications"][0]["deployments"];
            let auto = d
                .as_array_mut()
                .expect("deployments")
                .iter_mut()
                .find(|d| d.get("autoscaling_config").is_some())
                .expect("a deployment with autoscaling");
            auto["num_replicas"] = json!(2);
        }),
    ];
    let control_names: Vec<String> = controls.iter().map(|c| c.name.clone()).collect();
    cases.extend(controls);

    let started = std::time::Instant::now();
    let verdicts = validate_serve_configs(&cases);
    eprintln!(
        "Ray Serve's schema checked {} configs ({} generated) in {:.1?}",
        verdicts.len(),
        generated.len(),
        started.elapsed()
    );

    for (name, field) in control_names.iter().zip([
        "num_replicas",
        "route_prefix",
        "route_prefix",
        "num_replicas",
    ]) {
        let v = verdicts.iter().find(|v| &v.name == name).expect("verdict");
        assert!(
            !v.ok,
            "{name}: Ray must reject it (else this test cannot fail)"
        );
        assert!(
            verdict_text(v).contains(field),
            "{name}: Ray's error names {field}: {}",
            verdict_text(v)
        );
    }

    let mut refused = Vec::new();
    for (g, v) in generated.iter().zip(&verdicts) {
        assert_eq!(v.name, g.case);
        if !v.ok {
            refused.push(format!(
                "{}: Ray Serve's ServeDeploySchema rejects the serveConfigV2 infergate generated:\n{}\n--- serveConfigV2 ---\n{}",
                g.case,
                verdict_text(v),
                g.yaml
            ));
            continue;
        }
        // Ray (PyYAML, YAML 1.1 as KubeRay's parser) reads the text as infergate meant it.
        let ours: Value = serde_saphyr::from_str(&g.yaml).expect("serveConfigV2 parses");
        assert_eq!(
            v.parsed.as_ref(),
            Some(&ours),
            "{}: Ray reads the YAML differently from infergate:\n{}",
            g.case,
            g.yaml
        );
    }
    assert!(refused.is_empty(), "{}", refused.join("\n\n"));
}
