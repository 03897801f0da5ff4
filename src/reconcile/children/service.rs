//! The Service in front of a track's engine pods.

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::deployment::{PORT_NAME, engine_port};
use super::error::BuildError;
use super::meta::{Track, child_meta, child_name, selector_labels};
use crate::api::v1beta1::InferenceService;

/// Service `S` or `S-canary`: ClusterIP on the engine port.
pub fn service(svc: &InferenceService, track: Track) -> Result<Service, BuildError> {
    if track == Track::Canary && svc.spec.canary.is_none() {
        return Err(BuildError::NoCanary);
    }
    Ok(Service {
        metadata: child_meta(svc, child_name(svc, track), track)?,
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".to_owned()),
            selector: Some(selector_labels(svc, track)),
            ports: Some(vec![ServicePort {
                name: Some(PORT_NAME.to_owned()),
                port: engine_port(svc),
                target_port: Some(IntOrString::String(PORT_NAME.to_owned())),
                protocol: Some("TCP".to_owned()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    })
}
