//! The picker's container bounds and the configuration digest that rolls
//! its pods.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Container;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;
use crate::api::v1beta1::{InferenceServiceSpec, RoutingSpec};
use crate::api::{BackendKind, EndpointPickerSpec};
use crate::reconcile::children::Track;

fn svc(picker: EndpointPickerSpec) -> InferenceService {
    let mut s = InferenceService::new(
        "chat",
        InferenceServiceSpec {
            routing: Some(RoutingSpec {
                backend_kind: Some(BackendKind::InferencePool),
                endpoint_picker: Some(EndpointPickerSpec {
                    image: Some("registry.example.com/epp:v1".into()),
                    ..picker
                }),
                ..RoutingSpec::default()
            }),
            ..InferenceServiceSpec::default()
        },
    );
    s.metadata.namespace = Some("team-a".into());
    s.metadata.uid = Some("8f0a-uid".into());
    s
}

fn container(d: &Deployment) -> &Container {
    &d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("pod spec")
        .containers[0]
}

fn hash_of(d: &Deployment) -> Option<String> {
    d.spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get(ANNOTATION_CONFIG_HASH).cloned())
}

/// `resource -> quantity` of a requests or limits list.
fn figures(list: Option<&BTreeMap<String, Quantity>>) -> Vec<(String, String)> {
    list.into_iter()
        .flatten()
        .map(|(k, q)| (k.clone(), q.0.clone()))
        .collect()
}

fn pair(k: &str, v: &str) -> (String, String) {
    (k.to_owned(), v.to_owned())
}

#[test]
fn the_picker_container_is_bounded_by_the_built_in_figures_or_its_own() {
    let d = endpoint_picker(&svc(EndpointPickerSpec::default()), Track::Primary)
        .unwrap()
        .deployment;
    let r = container(&d).resources.clone().expect("resources");
    assert_eq!(
        figures(r.requests.as_ref()),
        [pair("cpu", "100m"), pair("memory", "256Mi")]
    );
    assert_eq!(figures(r.limits.as_ref()), [pair("memory", "1Gi")]);

    let own = EndpointPickerSpec {
        resources: Some(PickerResources {
            requests: Some(CpuMemory {
                cpu: Some(Quantity("500m".into())),
                memory: None,
            }),
            limits: Some(CpuMemory {
                cpu: Some(Quantity("2".into())),
                memory: Some(Quantity("4Gi".into())),
            }),
        }),
        ..EndpointPickerSpec::default()
    };
    let d = endpoint_picker(&svc(own), Track::Primary)
        .unwrap()
        .deployment;
    let r = container(&d).resources.clone().expect("resources");
    assert_eq!(
        figures(r.requests.as_ref()),
        [pair("cpu", "500m"), pair("memory", "256Mi")]
    );
    assert_eq!(
        figures(r.limits.as_ref()),
        [pair("cpu", "2"), pair("memory", "4Gi")]
    );
}

#[test]
fn a_config_change_changes_the_pod_template_and_nothing_else_does() {
    let with_config = |config: Option<&str>, replicas| {
        endpoint_picker(
            &svc(EndpointPickerSpec {
                config: config.map(str::to_owned),
                replicas: Some(replicas),
                ..EndpointPickerSpec::default()
            }),
            Track::Primary,
        )
        .unwrap()
    };
    let a = with_config(Some("plugins: []\n"), 1);
    let hash = hash_of(&a.deployment).expect("config hash");
    assert_eq!(hash.len(), 32);
    assert!(hash.bytes().all(|b| b.is_ascii_hexdigit()), "{hash}");
    // The same configuration, the same digest (replicas are not part of it).
    assert_eq!(
        hash_of(&with_config(Some("plugins: []\n"), 3).deployment),
        Some(hash.clone())
    );
    // Another configuration (one byte more), another digest: a new pod
    // template, so the Deployment rolls the picker's pods.
    let b = with_config(Some("plugins: [] \n"), 1);
    assert_ne!(hash_of(&b.deployment), Some(hash.clone()));
    assert_ne!(
        a.deployment.spec.as_ref().map(|s| &s.template),
        b.deployment.spec.as_ref().map(|s| &s.template)
    );
    // No configuration is the empty one, with a digest of its own.
    assert_eq!(
        hash_of(&with_config(None, 1).deployment),
        hash_of(&with_config(Some(""), 1).deployment)
    );
    assert_ne!(hash_of(&with_config(None, 1).deployment), Some(hash));
    // The digest is of exactly what the ConfigMap holds: SHA-256 of the
    // empty string, first 16 bytes.
    assert_eq!(
        hash_of(&with_config(None, 1).deployment).as_deref(),
        Some("e3b0c44298fc1c149afbf4c8996fb924")
    );
}
