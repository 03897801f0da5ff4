//! Writing a service's status (only when it changed), with the events its
//! conditions call for.

use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use super::writer::Writer;
use crate::api::MANAGER;
use crate::api::v1beta1::InferenceService;
use crate::reconcile::error::Error;
use crate::reconcile::status::{self, Observation, Reason};

impl Writer {
    /// Write the status through the status subresource (server-side apply)
    /// when it changed, with events for condition transitions that matter.
    pub async fn write_status(
        &self,
        svc: &InferenceService,
        obs: &Observation,
    ) -> Result<(), Error> {
        let previous = svc.status.as_ref();
        let mut new = status::compute(previous, obs, Timestamp::now());
        // A status read a moment before this writer's last write landed
        // must not lose the values acted on since.
        self.once.get(svc).fill(&mut new);
        if previous == Some(&new) {
            return Ok(());
        }
        for c in status::conditions_for(obs) {
            let old = status::condition(previous, c.type_.as_str());
            let status = c.status.as_str();
            if old.is_some_and(|o| o.status == status && o.reason == c.reason.as_str()) {
                continue;
            }
            let failed = c.status == status::CondStatus::False;
            if failed && (c.type_ == status::ConditionType::GraphReady || c.reason.is_warning()) {
                self.publish(svc, EventType::Warning, c.reason, c.message.clone())
                    .await;
            } else if c.type_ == status::ConditionType::Ready
                && c.status == status::CondStatus::True
            {
                self.publish(svc, EventType::Normal, Reason::Ready, c.message.clone())
                    .await;
            }
        }
        let api: Api<InferenceService> =
            Api::namespaced(self.client.clone(), &svc.namespace().unwrap_or_default());
        let patch = serde_json::json!({
            "apiVersion": InferenceService::api_version(&()),
            "kind": InferenceService::kind(&()),
            "status": new,
        });
        api.patch_status(
            &svc.name_any(),
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
        self.once.wrote(svc, &new);
        Ok(())
    }
}
