//! The endpoint picker (EPP) infergate runs for each InferencePool
//! (`endpointPicker.mode: Owned`): Deployment, Service, ServiceAccount,
//! Role, RoleBinding and ConfigMap, all named `<pool>-epp`.
//!
//! Upstream an EPP serves exactly one pool (`--pool-name`) and a pool's
//! `endpointPickerRef` names a Service in its own namespace, so each pool
//! gets its own. Its pods carry `infergate.dev/component: endpoint-picker`
//! and no track label, so no pool (and no PodMonitor) selects them.
//!
//! The picker reads its configuration once, at start: the pod template
//! carries a digest of it (`infergate.dev/config-hash`), so a change of
//! the configuration rolls the picker's pods. Its container gets the
//! service's (defaulted) requests and limits, the built-in figures for
//! any still unset.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, GRPCAction, PodSpec,
    PodTemplateSpec, Probe, ResourceRequirements, Service, ServiceAccount, ServicePort,
    ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use super::error::BuildError;
use super::inferencepool::{EPP_GRPC_PORT, GROUP as POOL_GROUP, PLURAL as POOL_PLURAL};
use super::meta::{LABEL_MANAGED_BY, LABEL_NAME, LABEL_SERVICE, Track, child_meta, child_name};
use crate::api::v1beta1::InferenceService;
use crate::api::{CpuMemory, MANAGER, PickerResources};
use crate::engine::builtin::{
    DEFAULT_PICKER_CPU_REQUEST, DEFAULT_PICKER_MEMORY_LIMIT, DEFAULT_PICKER_MEMORY_REQUEST,
    DEFAULT_PICKER_REPLICAS,
};
use crate::engine::names::epp_name;

pub use crate::api::vocabulary::names::{ANNOTATION_CONFIG_HASH, LABEL_COMPONENT, LABEL_POOL};
/// The component label's value.
pub const COMPONENT: &str = "endpoint-picker";
/// The picker's gRPC health port.
pub const HEALTH_PORT: i32 = 9003;
/// The picker's metrics port.
pub const METRICS_PORT: i32 = 9090;
/// The ConfigMap key holding the picker's configuration.
pub const CONFIG_KEY: &str = "config.yaml";
/// Where the configuration is mounted.
pub const CONFIG_DIR: &str = "/config";

/// Every object of one pool's endpoint picker.
#[derive(Clone, Debug, PartialEq)]
pub struct EndpointPicker {
    /// ServiceAccount `<pool>-epp`.
    pub service_account: ServiceAccount,
    /// Role `<pool>-epp`: what the picker reads.
    pub role: Role,
    /// RoleBinding `<pool>-epp` of the Role to the ServiceAccount.
    pub role_binding: RoleBinding,
    /// ConfigMap `<pool>-epp` with the plugin configuration.
    pub config_map: ConfigMap,
    /// Deployment `<pool>-epp`.
    pub deployment: Deployment,
    /// Service `<pool>-epp` (gRPC, health, metrics).
    pub service: Service,
}

fn pod_labels(svc: &InferenceService, pool: &str) -> BTreeMap<String, String> {
    let name = svc.name_any();
    BTreeMap::from([
        (LABEL_NAME.to_owned(), name.clone()),
        (LABEL_MANAGED_BY.to_owned(), MANAGER.to_owned()),
        (LABEL_SERVICE.to_owned(), name),
        (LABEL_COMPONENT.to_owned(), COMPONENT.to_owned()),
        (LABEL_POOL.to_owned(), pool.to_owned()),
    ])
}

/// SHA-256 of the configuration, first 16 bytes, hex.
fn config_hash(config: &str) -> String {
    let sum = ring::digest::digest(&ring::digest::SHA256, config.as_bytes());
    let mut head = [0u8; 16];
    head.copy_from_slice(&sum.as_ref()[..16]);
    format!("{:032x}", u128::from_be_bytes(head))
}

/// The container's requests and limits: the service's, the built-in
/// figures for any unset (no CPU limit unless one is set).
fn requirements(res: Option<PickerResources>) -> ResourceRequirements {
    let res = res.unwrap_or_default();
    let (requests, limits) = (
        res.requests.unwrap_or_default(),
        res.limits.unwrap_or_default(),
    );
    let quantity = |q: Option<Quantity>, built_in: Option<&str>| {
        q.or_else(|| built_in.map(|b| Quantity(b.to_owned())))
    };
    let list = |cpu: Option<Quantity>, memory: Option<Quantity>| {
        let list: BTreeMap<String, Quantity> = [("cpu", cpu), ("memory", memory)]
            .into_iter()
            .filter_map(|(k, q)| Some((k.to_owned(), q?)))
            .collect();
        (!list.is_empty()).then_some(list)
    };
    let CpuMemory { cpu, memory } = requests;
    let requested = list(
        quantity(cpu, Some(DEFAULT_PICKER_CPU_REQUEST)),
        quantity(memory, Some(DEFAULT_PICKER_MEMORY_REQUEST)),
    );
    let CpuMemory { cpu, memory } = limits;
    let limited = list(
        quantity(cpu, None),
        quantity(memory, Some(DEFAULT_PICKER_MEMORY_LIMIT)),
    );
    ResourceRequirements {
        requests: requested,
        limits: limited,
        ..ResourceRequirements::default()
    }
}

fn rule(groups: &[&str], resources: &[&str], names: &[&str], verbs: &[&str]) -> PolicyRule {
    let strings = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    PolicyRule {
        api_groups: Some(strings(groups)),
        resources: Some(strings(resources)),
        resource_names: (!names.is_empty()).then(|| strings(names)),
        verbs: strings(verbs),
        ..PolicyRule::default()
    }
}

/// The endpoint picker of `track`'s pool.
pub fn endpoint_picker(svc: &InferenceService, track: Track) -> Result<EndpointPicker, BuildError> {
    if track == Track::Canary && svc.spec.canary.is_none() {
        return Err(BuildError::NoCanary);
    }
    let pool = child_name(svc, track);
    let name = epp_name(&pool);
    let ns = svc.namespace().unwrap_or_default();
    let spec = svc
        .spec
        .routing
        .as_ref()
        .and_then(|r| r.endpoint_picker.clone())
        .unwrap_or_default();
    let image = spec
        .image
        .filter(|i| !i.is_empty())
        .ok_or(BuildError::MissingEndpointPickerImage)?;
    let replicas = spec.replicas.unwrap_or(DEFAULT_PICKER_REPLICAS).max(1);
    let config = spec.config.unwrap_or_default();
    let hash = config_hash(&config);
    let meta = child_meta(svc, name.clone(), track)?;
    let labels = pod_labels(svc, &pool);
    let selector = BTreeMap::from([
        (LABEL_SERVICE.to_owned(), svc.name_any()),
        (LABEL_COMPONENT.to_owned(), COMPONENT.to_owned()),
        (LABEL_POOL.to_owned(), pool.clone()),
    ]);

    let service_port = |port_name: &str, number: i32, protocol: Option<&str>| ServicePort {
        name: Some(port_name.to_owned()),
        port: number,
        target_port: Some(IntOrString::String(port_name.to_owned())),
        protocol: Some("TCP".to_owned()),
        app_protocol: protocol.map(str::to_owned),
        ..ServicePort::default()
    };
    Ok(EndpointPicker {
        service_account: ServiceAccount {
            metadata: meta.clone(),
            ..ServiceAccount::default()
        },
        role: Role {
            metadata: meta.clone(),
            rules: Some(picker_rules(&pool, replicas)),
        },
        role_binding: RoleBinding {
            metadata: meta.clone(),
            role_ref: RoleRef {
                api_group: Some("rbac.authorization.k8s.io".to_owned()),
                kind: "Role".to_owned(),
                name: name.clone(),
            },
            subjects: Some(vec![Subject {
                kind: "ServiceAccount".to_owned(),
                name: name.clone(),
                namespace: Some(ns.clone()),
                ..Subject::default()
            }]),
        },
        config_map: ConfigMap {
            metadata: meta.clone(),
            data: Some(BTreeMap::from([(CONFIG_KEY.to_owned(), config)])),
            ..ConfigMap::default()
        },
        deployment: Deployment {
            metadata: meta.clone(),
            spec: Some(DeploymentSpec {
                replicas: Some(replicas),
                selector: LabelSelector {
                    match_labels: Some(selector.clone()),
                    ..LabelSelector::default()
                },
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(labels),
                        annotations: Some(BTreeMap::from([(
                            ANNOTATION_CONFIG_HASH.to_owned(),
                            hash,
                        )])),
                        ..ObjectMeta::default()
                    }),
                    spec: Some(PodSpec {
                        service_account_name: Some(name.clone()),
                        containers: vec![picker_container(
                            image,
                            &pool,
                            &ns,
                            requirements(spec.resources),
                        )],
                        volumes: Some(vec![Volume {
                            name: "config".to_owned(),
                            config_map: Some(ConfigMapVolumeSource {
                                name: name.clone(),
                                ..ConfigMapVolumeSource::default()
                            }),
                            ..Volume::default()
                        }]),
                        ..PodSpec::default()
                    }),
                },
                ..DeploymentSpec::default()
            }),
            status: None,
        },
        service: Service {
            metadata: meta,
            spec: Some(ServiceSpec {
                type_: Some("ClusterIP".to_owned()),
                selector: Some(selector),
                ports: Some(vec![
                    service_port("grpc", EPP_GRPC_PORT, Some("kubernetes.io/h2c")),
                    service_port("grpc-health", HEALTH_PORT, Some("kubernetes.io/h2c")),
                    service_port("metrics", METRICS_PORT, None),
                ]),
                ..ServiceSpec::default()
            }),
            status: None,
        },
    })
}

/// The picker's Role rules: its pods and its pool (read), the objectives
/// it reads, and with more than one replica its leader election.
fn picker_rules(pool: &str, replicas: i32) -> Vec<PolicyRule> {
    let mut rules = vec![
        rule(&[""], &["pods"], &[], &["get", "list", "watch"]),
        rule(
            &[POOL_GROUP],
            &[POOL_PLURAL],
            &[pool],
            &["get", "list", "watch"],
        ),
        rule(
            &["llm-d.ai"],
            &["inferenceobjectives", "inferencemodelrewrites"],
            &[],
            &["get", "list", "watch"],
        ),
    ];
    if replicas > 1 {
        // Leader election among the picker's replicas.
        rules.push(rule(
            &["coordination.k8s.io"],
            &["leases"],
            &[],
            &["get", "create", "update"],
        ));
        rules.push(rule(&[""], &["events"], &[], &["create", "patch"]));
    }
    rules
}

/// The picker's one container: its pool, its config file, its probes.
fn picker_container(
    image: String,
    pool: &str,
    ns: &str,
    resources: ResourceRequirements,
) -> Container {
    Container {
        name: COMPONENT.to_owned(),
        image: Some(image),
        args: Some(vec![
            format!("--pool-name={pool}"),
            format!("--pool-namespace={ns}"),
            format!("--pool-group={POOL_GROUP}"),
            format!("--config-file={CONFIG_DIR}/{CONFIG_KEY}"),
        ]),
        ports: Some(vec![
            container_port("grpc", EPP_GRPC_PORT),
            container_port("grpc-health", HEALTH_PORT),
            container_port("metrics", METRICS_PORT),
        ]),
        readiness_probe: Some(Probe {
            grpc: Some(GRPCAction {
                port: HEALTH_PORT,
                service: Some("inference-extension".to_owned()),
            }),
            period_seconds: Some(5),
            ..Probe::default()
        }),
        liveness_probe: Some(Probe {
            grpc: Some(GRPCAction {
                port: HEALTH_PORT,
                service: Some("inference-extension".to_owned()),
            }),
            period_seconds: Some(10),
            ..Probe::default()
        }),
        resources: Some(resources),
        volume_mounts: Some(vec![VolumeMount {
            name: "config".to_owned(),
            mount_path: CONFIG_DIR.to_owned(),
            read_only: Some(true),
            ..VolumeMount::default()
        }]),
        ..Container::default()
    }
}

/// A named TCP port of the picker's container.
fn container_port(port_name: &str, number: i32) -> ContainerPort {
    ContainerPort {
        name: Some(port_name.to_owned()),
        container_port: number,
        protocol: Some("TCP".to_owned()),
        ..ContainerPort::default()
    }
}

#[cfg(test)]
mod tests {
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
}
