//! The Ray Serve config (`serveConfigV2`) generated from a validated graph.
//!
//! One application: `name` (the graph's, else the service's), `route_prefix`
//! (the rendered route path), `import_path` (the ingress node's), and one
//! entry in `deployments` per node with its replicas or autoscaling bounds,
//! actor options and user config. Field names are Ray Serve's (snake_case).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::error::GraphError;
use super::proto::{Node, ServingGraph};
use super::validate::{self, Dag};

/// Ray Serve's config file (the subset infergate writes).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ServeConfig {
    /// The applications; infergate writes exactly one.
    pub applications: Vec<ServeApplication>,
}

/// One Ray Serve application.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ServeApplication {
    /// Application name (unique in the cluster).
    pub name: String,
    /// HTTP route prefix.
    pub route_prefix: String,
    /// Import path of the bound application (the ingress deployment).
    pub import_path: String,
    /// Per-deployment option overrides.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deployments: Vec<ServeDeployment>,
}

/// Options of one deployment.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ServeDeployment {
    /// Deployment name as in the application's code.
    pub name: String,
    /// Fixed replica count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_replicas: Option<i32>,
    /// Autoscaling bounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling_config: Option<AutoscalingConfig>,
    /// Resources of each replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ray_actor_options: Option<RayActorOptions>,
    /// Value passed to the deployment's `reconfigure`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_config: Option<serde_json::Value>,
}

/// Ray Serve `autoscaling_config`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct AutoscalingConfig {
    /// Lower bound.
    pub min_replicas: i32,
    /// Upper bound.
    pub max_replicas: i32,
    /// Ongoing requests per replica the autoscaler aims at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_ongoing_requests: Option<f64>,
}

/// Ray `ray_actor_options`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct RayActorOptions {
    /// CPUs per replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_cpus: Option<f64>,
    /// GPUs per replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_gpus: Option<f64>,
    /// Heap memory per replica in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<u64>,
    /// Custom resources per replica.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: BTreeMap<String, f64>,
}

/// Validate `graph` and generate its Ray Serve config.
/// `default_name` is used when the graph has no name (the service's name).
pub fn generate(
    graph: &ServingGraph,
    default_name: &str,
    route_prefix: &str,
) -> Result<ServeConfig, GraphError> {
    let dag = validate::validate(graph, route_prefix).map_err(GraphError::Invalid)?;
    Ok(from_dag(graph, &dag, default_name, route_prefix))
}

/// The config of a graph that passed [`validate::validate`]. Deployments are
/// listed in topological order (dependencies first, the ingress last).
#[must_use]
pub fn from_dag(
    graph: &ServingGraph,
    dag: &Dag,
    default_name: &str,
    route_prefix: &str,
) -> ServeConfig {
    let name = if graph.name.is_empty() {
        default_name.to_owned()
    } else {
        graph.name.clone()
    };
    let import_path = graph
        .nodes
        .get(dag.ingress)
        .map(|n| n.import_path.clone())
        .unwrap_or_default();
    let deployments = dag
        .order
        .iter()
        .filter_map(|&i| graph.nodes.get(i))
        .map(deployment)
        .collect();
    ServeConfig {
        applications: vec![ServeApplication {
            name,
            route_prefix: route_prefix.to_owned(),
            import_path,
            deployments,
        }],
    }
}

fn deployment(node: &Node) -> ServeDeployment {
    let ray_actor_options = node.actor_options.as_ref().map(|o| RayActorOptions {
        num_cpus: o.num_cpus,
        num_gpus: o.num_gpus,
        memory: o.memory_bytes,
        resources: o.resources.clone(),
    });
    ServeDeployment {
        name: node.name.clone(),
        num_replicas: node.num_replicas,
        autoscaling_config: node.autoscaling.as_ref().map(|a| AutoscalingConfig {
            min_replicas: a.min_replicas,
            max_replicas: a.max_replicas,
            target_ongoing_requests: a.target_ongoing_requests,
        }),
        ray_actor_options: ray_actor_options.filter(|o| *o != RayActorOptions::default()),
        // Validated before; an unparseable value cannot reach here.
        user_config: serde_json::from_str(&node.user_config_json).ok(),
    }
}

/// The YAML string that goes into `spec.serveConfigV2`.
pub fn to_yaml(config: &ServeConfig) -> Result<String, GraphError> {
    serde_saphyr::to_string(config).map_err(|e| GraphError::Render(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::super::proto::{ActorOptions, Autoscaling};
    use super::*;

    fn sample() -> ServingGraph {
        ServingGraph {
            name: String::new(),
            ingress: "router".into(),
            nodes: vec![
                Node {
                    name: "router".into(),
                    import_path: "rag.app:app".into(),
                    dependencies: vec!["generator".into()],
                    num_replicas: Some(2),
                    actor_options: Some(ActorOptions {
                        num_cpus: Some(0.5),
                        ..ActorOptions::default()
                    }),
                    ..Node::default()
                },
                Node {
                    name: "generator".into(),
                    import_path: "rag.generate:Generator".into(),
                    autoscaling: Some(Autoscaling {
                        min_replicas: 1,
                        max_replicas: 4,
                        target_ongoing_requests: Some(8.0),
                    }),
                    actor_options: Some(ActorOptions {
                        num_gpus: Some(1.0),
                        memory_bytes: Some(8 << 30),
                        resources: BTreeMap::from([("HPU".to_owned(), 1.0)]),
                        ..ActorOptions::default()
                    }),
                    user_config_json: r#"{"max_tokens": 512, "stop": ["</s>"]}"#.into(),
                    ..Node::default()
                },
            ],
        }
    }

    /// A user config is read by serde_json (at most 127 levels) before it
    /// is rendered (serialising recurses once per level): one that deep
    /// renders, a deeper one makes the graph invalid.
    #[test]
    fn a_user_config_renders_as_deep_as_json_reads() {
        let mut g = sample();
        g.nodes[1].user_config_json = format!("{}1{}", "[".repeat(127), "]".repeat(127));
        let yaml = to_yaml(&generate(&g, "svc", "/").unwrap()).unwrap();
        assert!(yaml.contains("user_config:"), "{yaml}");
        g.nodes[1].user_config_json = "[".repeat(100_000);
        match generate(&g, "svc", "/") {
            Err(GraphError::Invalid(v)) => assert!(
                v.0.iter().any(|v| v.field == "nodes[1].userConfigJson"
                    && v.message.contains("recursion limit exceeded")),
                "{v}"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn one_application_with_the_ingress_import_path_and_every_node() {
        let c = generate(&sample(), "chat", "/team-a/chat").expect("valid");
        assert_eq!(c.applications.len(), 1);
        let app = &c.applications[0];
        assert_eq!(app.name, "chat", "service name when the graph has none");
        assert_eq!(app.route_prefix, "/team-a/chat");
        assert_eq!(app.import_path, "rag.app:app");
        let names: Vec<_> = app.deployments.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["generator", "router"], "dependencies first");
        let g = &app.deployments[0];
        assert_eq!(g.num_replicas, None);
        assert_eq!(
            g.autoscaling_config,
            Some(AutoscalingConfig {
                min_replicas: 1,
                max_replicas: 4,
                target_ongoing_requests: Some(8.0)
            })
        );
        assert_eq!(
            g.user_config,
            Some(serde_json::json!({"max_tokens": 512, "stop": ["</s>"]}))
        );
        let o = g.ray_actor_options.as_ref().expect("options");
        assert_eq!((o.num_gpus, o.memory), (Some(1.0), Some(8 << 30)));
        assert_eq!(app.deployments[1].num_replicas, Some(2));
    }

    #[test]
    fn graph_name_wins_over_the_service_name() {
        let mut g = sample();
        g.name = "rag".into();
        let c = generate(&g, "chat", "/").expect("valid");
        assert_eq!(c.applications[0].name, "rag");
    }

    #[test]
    fn yaml_uses_ray_serve_field_names_and_round_trips() {
        let c = generate(&sample(), "chat", "/team-a/chat").expect("valid");
        let yaml = to_yaml(&c).expect("yaml");
        for key in [
            "applications:",
            "route_prefix: /team-a/chat",
            "import_path: rag.app:app",
            "num_replicas: 2",
            "autoscaling_config:",
            "min_replicas: 1",
            "max_replicas: 4",
            "target_ongoing_requests:",
            "ray_actor_options:",
            "num_gpus:",
            "memory: 8589934592",
            "user_config:",
            "max_tokens: 512",
        ] {
            assert!(yaml.contains(key), "{key} missing in\n{yaml}");
        }
        let back: ServeConfig = serde_saphyr::from_str(&yaml).expect("parses back");
        assert_eq!(back, c);
    }

    #[test]
    fn empty_actor_options_are_left_out() {
        let mut g = sample();
        g.nodes[0].actor_options = Some(ActorOptions::default());
        let c = generate(&g, "chat", "/").expect("valid");
        assert!(c.applications[0].deployments[1].ray_actor_options.is_none());
        assert!(!to_yaml(&c).expect("yaml").contains("ray_actor_options: {}"));
    }

    #[test]
    fn invalid_graphs_are_not_rendered() {
        let mut g = sample();
        g.nodes[1].dependencies.push("router".into());
        let e = generate(&g, "chat", "/").unwrap_err();
        assert_eq!(e.reason(), "InvalidGraph");
        assert!(
            e.to_string().contains("router -> generator -> router"),
            "{e}"
        );
    }

    #[test]
    fn yaml_keeps_strings_that_look_like_other_types() {
        let mut g = sample();
        g.name = "true".into();
        g.nodes[1].name = "123".into();
        g.nodes[0].dependencies = vec!["123".into()];
        g.nodes[1].user_config_json =
            r#"{"a": "yes", "b": "null", "c": "0x10", "d": "~", "e": "1e3", "f": "- x", "g": "a: b", "h": "on", "i": "No", "j": "y", "k": "2001-01-01", "l": "1_000", "m": "012", "n": ".5", "o": "1:20", "p": "Off"}"#
                .into();
        let c = generate(&g, "chat", "/").expect("valid");
        let yaml = to_yaml(&c).expect("yaml");
        let back: ServeConfig = serde_saphyr::from_str(&yaml).expect("parses back");
        assert_eq!(back, c, "{yaml}");
        // Ray Serve reads the config with PyYAML (YAML 1.1): scalars that
        // 1.1 would read as booleans, numbers or dates must be quoted.
        for quoted in [
            "\"true\"",
            "\"123\"",
            "\"yes\"",
            "\"on\"",
            "\"No\"",
            "\"y\"",
            "\"Off\"",
            "\"2001-01-01\"",
            "\"1_000\"",
            "\"012\"",
            "\"1:20\"",
        ] {
            assert!(yaml.contains(quoted), "{quoted} not quoted in\n{yaml}");
        }
        // Read as untyped YAML too, the way Ray Serve reads it.
        let untyped: serde_json::Value = serde_saphyr::from_str(&yaml).expect("untyped");
        assert_eq!(untyped["applications"][0]["name"], "true");
        assert_eq!(untyped["applications"][0]["deployments"][0]["name"], "123");
        assert_eq!(
            untyped["applications"][0]["deployments"][0]["user_config"],
            serde_json::from_str::<serde_json::Value>(&g.nodes[1].user_config_json).expect("json")
        );
    }
}
