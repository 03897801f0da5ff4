//! Rules of a service on its own: an identical canary is a warning, the
//! backend is immutable, a route path taken on the same Gateway names the
//! other service, all violations are reported at once, the GPU and name
//! helpers, and v1beta1 is the storage shape.

use std::collections::BTreeMap;

use infergate::api::v1beta1::{
    self, AcceleratorSpec, AutoscalingSpec, Backend, CanarySpec, EngineSpec, EnvVar, GraphSpec,
    InferenceServiceStatus, ModelSpec, ParallelismSpec, RoutingSpec,
};
use infergate::api::{AcceleratorType, GatewayRef, HealthCheckSpec, ResourcesSpec};
use infergate::engine::{self, NoRoutes, PolicySnapshot, RouteIndex};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::{ctx_run, errors, valid_service, validate};

#[test]
fn identical_canary_is_a_warning() {
    let mut s = valid_service();
    s.spec.canary = Some(CanarySpec {
        model: s.spec.model.clone(),
        weight: 10,
        ..Default::default()
    });
    let v = validate(&s, &PolicySnapshot::default());
    assert!(v.allowed());
    assert_eq!(v.warnings.len(), 1);
    assert!(v.warnings[0].contains("identical to the primary"));
    // a different engine image makes it a real canary
    if let Some(c) = s.spec.canary.as_mut() {
        c.engine_image = Some("registry.example.com/vllm:1.0".to_owned());
    }
    assert!(validate(&s, &PolicySnapshot::default()).warnings.is_empty());
}

#[test]
fn backend_is_immutable() {
    let old = valid_service();
    let mut new = old.clone();
    new.spec.backend = Some(Backend::RayService);
    new.spec.graph = Some(GraphSpec {
        url: "https://g.example.com/x".to_owned(),
        bearer_token_secret_ref: None,
    });
    let labels = BTreeMap::new();
    let v = ctx_run(&PolicySnapshot::default(), &labels, &NoRoutes, |c| {
        engine::validate_service(&new, Some(&old), c)
    });
    assert_eq!(
        errors(&v),
        vec![
            "spec.backend: Invalid value: \"RayService\": field is immutable (was \"Deployment\")"
        ]
    );
    // unset and explicit Deployment are the same backend
    let mut explicit = old.clone();
    explicit.spec.backend = Some(Backend::Deployment);
    let v = ctx_run(&PolicySnapshot::default(), &labels, &NoRoutes, |c| {
        engine::validate_service(&explicit, Some(&old), c)
    });
    assert!(v.allowed());
}

struct OneRoute;
impl RouteIndex for OneRoute {
    fn owner(
        &self,
        gw: &GatewayRef,
        path: &str,
        exclude: (&str, &str),
    ) -> Option<(String, String)> {
        (gw.name == "gw"
            && gw.namespace.as_deref() == Some("gateways")
            && path == "/team-a/chat"
            && exclude != ("team-b", "other"))
            .then(|| ("team-b".to_owned(), "other".to_owned()))
    }
}

#[test]
fn route_collision_names_the_other_service() {
    let mut s = valid_service();
    s.spec.routing = Some(RoutingSpec {
        gateway: Some(GatewayRef {
            name: "gw".to_owned(),
            namespace: Some("gateways".to_owned()),
        }),
        ..Default::default()
    });
    let labels = BTreeMap::new();
    let v = ctx_run(&PolicySnapshot::default(), &labels, &OneRoute, |c| {
        engine::validate_service(&s, None, c)
    });
    assert_eq!(
        errors(&v),
        vec![
            "spec.routing.pathTemplate: Duplicate value: \"/team-a/chat\": route path on Gateway gateways/gw is already used by InferenceService team-b/other"
        ]
    );
    assert_eq!(v.errors[0].reason.as_str(), "FieldValueDuplicate");
    // A RayService-backed service is routed like any other: the same check.
    let mut ray = s.clone();
    ray.spec.backend = Some(Backend::RayService);
    ray.spec.graph = Some(GraphSpec {
        url: "https://graphs.example.com/chat".to_owned(),
        bearer_token_secret_ref: None,
    });
    let v = ctx_run(&PolicySnapshot::default(), &labels, &OneRoute, |c| {
        engine::validate_service(&ray, None, c)
    });
    assert_eq!(
        errors(&v),
        vec![
            "spec.routing.pathTemplate: Duplicate value: \"/team-a/chat\": route path on Gateway gateways/gw is already used by InferenceService team-b/other"
        ]
    );
    // without a gateway there is nothing to collide on
    s.spec.routing = None;
    let v = ctx_run(&PolicySnapshot::default(), &labels, &OneRoute, |c| {
        engine::validate_service(&s, None, c)
    });
    assert!(v.allowed());
}

#[test]
fn all_violations_are_reported_at_once() {
    let mut s = valid_service();
    s.spec.replicas = Some(-1);
    s.spec.engine = Some(EngineSpec {
        image: None,
        port: Some(0),
        ..Default::default()
    });
    s.spec.resources = Some(ResourcesSpec {
        cpu: Some(Quantity("-1".to_owned())),
        ..Default::default()
    });
    s.spec.parallelism = Some(ParallelismSpec {
        tensor: Some(0),
        pipeline: None,
    });
    s.spec.health_check = Some(HealthCheckSpec {
        interval: Some("0s".to_owned()),
        ..Default::default()
    });
    s.spec.engine.as_mut().unwrap().env = vec![
        EnvVar {
            name: "A".to_owned(),
            value: None,
            value_from: None,
        },
        EnvVar {
            name: "A".to_owned(),
            value: None,
            value_from: None,
        },
    ];
    let v = validate(&s, &PolicySnapshot::default());
    let fields: Vec<&str> = v.errors.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(
        fields,
        vec![
            "spec.engine.image",
            "spec.engine.port",
            "spec.engine.env[1].name",
            "spec.replicas",
            "spec.resources.cpu",
            "spec.parallelism.tensor",
            "spec.healthCheck.interval",
        ]
    );
    assert!(
        v.message()
            .starts_with("[spec.engine.image: Required value: ")
    );
    assert_eq!(v.errors[0].reason.as_str(), "FieldValueRequired");
    assert!(
        v.errors[4]
            .to_string()
            .ends_with("must be greater than or equal to 0")
    );
}

#[test]
fn gpu_helpers() {
    let mut s = valid_service();
    assert_eq!(engine::gpus_per_replica(&s), 0);
    s.spec.parallelism = Some(ParallelismSpec {
        tensor: Some(2),
        pipeline: Some(3),
    });
    assert_eq!(engine::gpus_per_replica(&s), 0, "no accelerator, no GPUs");
    s.spec.accelerator = Some(AcceleratorSpec {
        r#type: Some(AcceleratorType::IntelGaudi),
        class: None,
    });
    assert_eq!(engine::gpus_per_replica(&s), 6);
    s.spec.replicas = Some(3);
    s.spec.canary = Some(CanarySpec {
        model: ModelSpec {
            r#ref: "c".to_owned(),
            image: None,
            ..Default::default()
        },
        weight: 10,
        ..Default::default()
    });
    assert_eq!(engine::canary_replicas(&s), 1, "ceil(3*10/100) = 1");
    s.spec.autoscaling = Some(AutoscalingSpec {
        min_replicas: 15,
        max_replicas: 20,
        target_cpu_utilization_percent: None,
    });
    assert_eq!(
        engine::canary_replicas(&s),
        2,
        "base is minReplicas: ceil(1.5)"
    );
    if let Some(c) = s.spec.canary.as_mut() {
        c.weight = 0;
    }
    assert_eq!(engine::canary_replicas(&s), 0);
    if let Some(c) = s.spec.canary.as_mut() {
        c.replicas = Some(4);
    }
    assert_eq!(engine::canary_replicas(&s), 4);
    assert_eq!(engine::primary_name(&s), "chat");
    assert_eq!(engine::canary_name(&s), "chat-canary");
}

#[test]
fn v1beta1_module_is_the_storage_shape() {
    // The status written by the reconciler round-trips through JSON unchanged.
    let mut s = valid_service();
    s.status = Some(InferenceServiceStatus {
        route_path: Some("/team-a/chat".to_owned()),
        ..Default::default()
    });
    let j = serde_json::to_value(&s).unwrap();
    let back: v1beta1::InferenceService = serde_json::from_value(j).unwrap();
    assert_eq!(back, s);
}
