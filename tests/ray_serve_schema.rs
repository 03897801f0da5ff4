//! Every Serve config infergate generates is one Ray itself accepts: the
//! `serveConfigV2` of the RayService the reconciler builds, for each example
//! graph (their encodings in `tests/fixtures/graph/`), with the route prefix
//! of a service reached directly (the rendered path) and through a gateway
//! (`/`), validated by `ray.serve.schema.ServeDeploySchema` from the pinned
//! `ray[serve]` (installed into the test cache when missing). Graphs
//! infergate rejects never reach Ray; configs Ray rejects are caught here.

mod support;

use serde_json::Value;

use infergate::api::AcceleratorType;
use infergate::api::v1beta1::{
    AcceleratorSpec, Backend, EngineSpec, GraphSpec, InferenceService, InferenceServiceSpec,
    ModelSpec, ParallelismSpec,
};
use infergate::reconcile::children::rayservice::desired_rayservice;
use support::{root, validate_with_ray};

/// A RayService-backed service whose workers hold the example graphs
/// (8 GPUs: rag.pb's generator asks 8).
fn service() -> InferenceService {
    let mut s = InferenceService::new(
        "rag",
        InferenceServiceSpec {
            model: ModelSpec {
                r#ref: "llama3-70b".into(),
                image: None,
            },
            engine: Some(EngineSpec {
                image: Some("registry.example.com/ray-vllm:2.40".into()),
                ..EngineSpec::default()
            }),
            backend: Some(Backend::RayService),
            replicas: Some(2),
            accelerator: Some(AcceleratorSpec {
                r#type: Some(AcceleratorType::Nvidia),
                class: None,
            }),
            parallelism: Some(ParallelismSpec {
                tensor: Some(8),
                pipeline: Some(1),
            }),
            graph: Some(GraphSpec {
                url: "https://graphs.example.com/rag".into(),
                bearer_token_secret_ref: None,
            }),
            ..InferenceServiceSpec::default()
        },
    );
    s.metadata.namespace = Some("team-a".into());
    s.metadata.uid = Some("5d1c7e0a-2b3f-4c5d-8e9f-0a1b2c3d4e5f".into());
    s
}

/// The graph fixtures: `(file name, bytes)`.
fn fixtures() -> Vec<(String, Vec<u8>)> {
    let dir = root().join("tests/fixtures/graph");
    let mut out: Vec<_> = std::fs::read_dir(&dir)
        .expect("graph fixtures")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "pb"))
        .map(|p| {
            let name = p.file_name().expect("name").to_string_lossy().into_owned();
            (name, std::fs::read(&p).expect("read"))
        })
        .collect();
    out.sort();
    assert!(out.len() >= 4, "the example graphs' encodings: {out:?}");
    out
}

/// The RayService's `serveConfigV2` as JSON.
fn serve_config(yaml: &str) -> Value {
    serde_saphyr::from_str(yaml).expect("serveConfigV2 parses")
}

#[test]
fn ray_accepts_every_serve_config_infergate_generates() {
    let svc = service();
    let mut cases = Vec::new();
    let mut rejected = Vec::new();
    for (file, bytes) in fixtures() {
        let graph = infergate::graph::decode(&bytes).expect("decodes");
        // The rendered path (a client calls the serve Service directly) and
        // `/` (a gateway route rewrites the path to it).
        for prefix in ["/team-a/rag", "/"] {
            match desired_rayservice(&svc, &graph, prefix, None) {
                Ok(rs) => cases.push((
                    format!("{file} at {prefix}"),
                    serve_config(&rs.spec.serve_config_v2),
                )),
                Err(e) => rejected.push((file.clone(), e.to_string())),
            }
        }
    }
    // The invalid examples never reach Ray: infergate refuses them itself.
    let refused: Vec<&str> = rejected.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(
        refused,
        ["cyclic.pb", "cyclic.pb", "invalid.pb", "invalid.pb"],
        "{rejected:#?}"
    );
    assert_eq!(cases.len(), 4, "rag.pb and rag-v2.pb at two prefixes");

    // Controls: what Ray must refuse, so this check can fail.
    let (_, first) = &cases[0];
    let mut zero_replicas = first.clone();
    zero_replicas["applications"][0]["deployments"][0]["num_replicas"] = 0.into();
    zero_replicas["applications"][0]["deployments"][0]
        .as_object_mut()
        .expect("deployment")
        .remove("autoscaling_config");
    let mut bad_import = first.clone();
    bad_import["applications"][0]["import_path"] = "app".into();
    let mut negative_cpus = first.clone();
    negative_cpus["applications"][0]["deployments"][0]["ray_actor_options"] =
        serde_json::json!({"num_cpus": -1});
    let controls = [
        ("control: num_replicas 0".to_owned(), zero_replicas),
        (
            "control: import_path without a module".to_owned(),
            bad_import,
        ),
        ("control: num_cpus -1".to_owned(), negative_cpus),
    ];

    let all: Vec<(String, Value)> = cases.iter().cloned().chain(controls).collect();
    let verdicts = validate_with_ray(&all);
    for (name, verdict) in &verdicts {
        if name.starts_with("control: ") {
            assert!(verdict.is_err(), "Ray accepted the {name}");
        } else if let Err(e) = verdict {
            panic!("Ray rejects the Serve config of {name}:\n{e}");
        }
    }
}
