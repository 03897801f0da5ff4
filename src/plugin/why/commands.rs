//! The next commands a finding points at, with the service's real
//! namespace and name.

use crate::api::vocabulary::Track;
use crate::api::vocabulary::names::{LABEL_SERVICE, LABEL_TRACK};
use crate::plugin::facts::ServiceFacts;

/// The next commands, with the service's real namespace and name.
pub(super) struct Commands {
    pub(super) ns: String,
    pub(super) name: String,
}

impl Commands {
    pub(super) fn of(f: &ServiceFacts) -> Self {
        Self {
            ns: f.namespace.clone(),
            name: f.name.clone(),
        }
    }

    /// `kubectl ARGS -n NS`.
    pub(super) fn kubectl(&self, args: &str) -> String {
        format!("kubectl {args} -n {}", self.ns)
    }

    /// The service's pods, of one track when given.
    fn selector(&self, track: Option<Track>) -> String {
        match track {
            Some(t) => format!("{LABEL_SERVICE}={},{LABEL_TRACK}={t}", self.name),
            None => format!("{LABEL_SERVICE}={}", self.name),
        }
    }

    pub(super) fn describe_pods(&self, track: Option<Track>) -> String {
        self.kubectl(&format!("describe pod -l {}", self.selector(track)))
    }

    pub(super) fn previous_logs(&self, track: Option<Track>) -> String {
        self.kubectl(&format!("logs -l {} --previous", self.selector(track)))
    }

    pub(super) fn watch_pods(&self, track: Option<Track>) -> String {
        self.kubectl(&format!("get pods -l {} -w", self.selector(track)))
    }

    pub(super) fn events(&self) -> String {
        self.kubectl(&format!(
            "get events --field-selector involvedObject.name={}",
            self.name
        ))
    }

    pub(super) fn watch(&self) -> String {
        format!("kubectl infergate status {} -n {} -w", self.name, self.ns)
    }

    pub(super) fn rollout_status(&self) -> String {
        format!(
            "kubectl infergate rollout status {} -n {}",
            self.name, self.ns
        )
    }

    pub(super) fn rollout_resume(&self) -> String {
        format!(
            "kubectl infergate rollout resume {} -n {}",
            self.name, self.ns
        )
    }

    pub(super) fn describe(&self, kind: &str) -> String {
        self.kubectl(&format!("describe {kind} {}", self.name))
    }

    pub(super) fn edit(&self) -> String {
        self.kubectl(&format!("edit infsvc {}", self.name))
    }
}
