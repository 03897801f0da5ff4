//! What a RayService's status says, for the InferenceService's conditions.

use kube::ResourceExt;

use crate::api::upstream::kuberay::RayService;
use crate::api::vocabulary::Reason;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RayServiceObserved {
    /// The applications serve traffic.
    pub ready: bool,
    /// CamelCase reason (a [`Reason`]).
    pub reason: String,
    /// Human-readable detail.
    pub message: String,
}

/// Read readiness from a RayService: its `Ready` condition when KubeRay
/// writes one, else `serviceStatus: Running`, and the first unhealthy
/// application's message otherwise.
#[must_use]
pub fn observe(rs: &RayService) -> RayServiceObserved {
    let name = rs.name_any();
    let Some(status) = rs.status.as_ref() else {
        return RayServiceObserved {
            ready: false,
            reason: Reason::RayServicePending.as_str().to_owned(),
            message: format!("RayService {name} has no status yet"),
        };
    };
    let failing = status
        .active_service_status
        .as_ref()
        .and_then(|a| {
            a.application_statuses
                .iter()
                .find(|(_, s)| s.status.as_deref() != Some("RUNNING"))
        })
        .map(|(app, s)| {
            format!(
                "application {app} is {}{}",
                s.status.as_deref().unwrap_or("unknown"),
                s.message
                    .as_deref()
                    .filter(|m| !m.is_empty())
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            )
        });
    if let Some(c) = status.conditions.iter().find(|c| c.type_ == "Ready") {
        let ready = c.status == "True";
        return RayServiceObserved {
            ready,
            reason: if ready {
                Reason::RayServiceReady.as_str().to_owned()
            } else {
                Reason::RayServiceNotReady.as_str().to_owned()
            },
            message: match (&failing, ready) {
                (Some(f), false) => format!("RayService {name}: {f}"),
                _ if c.message.is_empty() => format!("RayService {name} Ready={}", c.status),
                _ => format!("RayService {name}: {}", c.message),
            },
        };
    }
    let running = status.service_status.as_deref() == Some("Running") && failing.is_none();
    RayServiceObserved {
        ready: running,
        reason: if running {
            Reason::RayServiceReady.as_str().to_owned()
        } else {
            Reason::RayServiceNotReady.as_str().to_owned()
        },
        message: match failing {
            Some(f) => format!("RayService {name}: {f}"),
            None => format!(
                "RayService {name} is {}",
                status.service_status.as_deref().unwrap_or("starting")
            ),
        },
    }
}
