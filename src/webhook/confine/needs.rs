//! What a child's write needs of its controlling InferenceService
//! ([`Needs`]), and the check of a service against it.

use super::child::{COMPONENT_LABEL, Child, PICKER_COMPONENT};
use crate::api::GROUP;
use crate::api::v1beta1::InferenceService;
use crate::engine::names::owns_endpoint_pickers;

/// A ServiceAccount a pod template runs as.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Account {
    name: String,
    /// Named by an endpoint picker's Deployment.
    picker: bool,
}

/// What the controlling service must allow for a child to be written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Needs {
    namespace: String,
    kind: String,
    name: String,
    owner: String,
    uid: String,
    accounts: Vec<Account>,
    /// A Role or RoleBinding: only for a service whose pickers infergate runs.
    rbac: bool,
}

impl Needs {
    /// What `child`, a `kind` named `name` written in `namespace`, needs of
    /// its controlling InferenceService; `None` when an InferenceService is
    /// not its controller (the admission policy decides whether it must be).
    #[must_use]
    pub fn of(child: &Child, kind: &str, name: &str, namespace: &str) -> Option<Needs> {
        let controller = child
            .metadata
            .owner_references
            .iter()
            .find(|r| r.controller == Some(true))?;
        let group = controller.api_version.split('/').next().unwrap_or_default();
        if controller.kind != "InferenceService" || group != GROUP {
            return None;
        }
        let accounts = child
            .templates()
            .into_iter()
            .flat_map(|t| {
                let picker = t
                    .metadata
                    .as_ref()
                    .and_then(|m| m.labels.get(COMPONENT_LABEL))
                    .is_some_and(|c| c == PICKER_COMPONENT)
                    && kind == "Deployment";
                let spec = t.spec.as_ref();
                let named: Vec<String> = [
                    spec.and_then(|s| s.service_account_name.clone()),
                    spec.and_then(|s| s.service_account.clone()),
                ]
                .into_iter()
                .flatten()
                .filter(|n| !n.is_empty())
                .collect();
                let names = if named.is_empty() {
                    vec!["default".to_owned()]
                } else {
                    named
                };
                names.into_iter().map(move |name| Account { name, picker })
            })
            .collect();
        Some(Needs {
            namespace: namespace.to_owned(),
            kind: kind.to_owned(),
            name: name.to_owned(),
            owner: controller.name.clone(),
            uid: controller.uid.clone(),
            accounts,
            rbac: matches!(kind, "Role" | "RoleBinding"),
        })
    }

    /// The namespace and name of the controlling service.
    #[must_use]
    pub fn owner(&self) -> (&str, &str) {
        (&self.namespace, &self.owner)
    }

    /// Whether `service` (the namespace's service of the controller's
    /// name, if any) allows the write; `Err` says why not.
    pub fn check(&self, service: Option<&InferenceService>) -> Result<(), String> {
        let Some(svc) = service else {
            return Err(format!(
                "the controller reference names InferenceService {}, which does not exist in namespace {}",
                self.owner, self.namespace
            ));
        };
        let uid = svc.metadata.uid.as_deref().unwrap_or_default();
        if uid != self.uid {
            return Err(format!(
                "the controller reference names InferenceService {} with uid {:?}; that service has uid {:?}",
                self.owner, self.uid, uid
            ));
        }
        let pickers = if owns_endpoint_pickers(svc) {
            vec![
                format!("{}-epp", self.owner),
                format!("{}-canary-epp", self.owner),
            ]
        } else {
            Vec::new()
        };
        if self.rbac && pickers.is_empty() {
            return Err(format!(
                "InferenceService {} runs no endpoint pickers, so infergate writes no {} for it",
                self.owner, self.kind
            ));
        }
        let engine = svc
            .spec
            .service_account_name
            .as_deref()
            .filter(|n| !n.is_empty())
            .unwrap_or("default");
        let allowed = |a: &Account| {
            if a.picker {
                pickers.contains(&a.name)
            } else {
                a.name == engine
            }
        };
        if let Some(bad) = self.accounts.iter().find(|a| !allowed(a)) {
            let also = if pickers.is_empty() {
                String::new()
            } else {
                format!(", or {} for its endpoint pickers", pickers.join(" or "))
            };
            return Err(format!(
                "a pod template runs as ServiceAccount {}, not one InferenceService {} runs its pods as ({engine}{also})",
                bad.name, self.owner
            ));
        }
        Ok(())
    }

    /// The message of a denial for `reason`.
    #[must_use]
    pub fn denial(&self, reason: &str) -> String {
        format!(
            "infergate may not write {} {}/{}: {reason}",
            self.kind, self.namespace, self.name
        )
    }
}
