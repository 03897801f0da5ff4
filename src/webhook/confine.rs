//! infergate's own writes of children, checked against the service that
//! controls them: the webhook `confine.children.infergate.dev`
//! (`webhooks/validating.yaml`), which the API server calls only for
//! requests of infergate's own ServiceAccount whose object has an
//! InferenceService as its controller.
//!
//! The ValidatingAdmissionPolicy `infergate-confine`
//! (`deploy/admissionpolicy.yaml`) checks what a written object says on its
//! own; a policy cannot look another object up. What needs the service is
//! checked here, from the webhook's watch cache of services and, when the
//! cache does not agree, from the API server:
//!
//! - the controlling InferenceService exists in the object's namespace,
//!   with the uid the reference carries;
//! - every pod template runs as a ServiceAccount that service allows: the
//!   one it names (`default` when none), or for an endpoint picker's
//!   Deployment `<service>-epp` / `<service>-canary-epp`, only for a service
//!   whose pickers infergate runs;
//! - a Role or RoleBinding (an endpoint picker's) belongs to a service whose
//!   pickers infergate runs.
//!
//! A stolen token of infergate's ServiceAccount therefore cannot point a
//! child at a service that does not exist to skip these checks. The code
//! that answers is infergate's own, so a compromised infergate process is
//! not bound by this part (docs/security.md says what it can do).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::api::GROUP;
use crate::api::v1beta1::InferenceService;
use crate::engine::names::owns_endpoint_pickers;

// The pod label that marks an endpoint picker's pods.
use crate::api::vocabulary::names::LABEL_COMPONENT as COMPONENT_LABEL;
/// Its value on an endpoint picker's pods.
const PICKER_COMPONENT: &str = "endpoint-picker";
/// How long the API server is asked about a service before the write is
/// denied as unconfirmed (well within the webhook's `timeoutSeconds: 5`).
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(2);

/// A child as far as its checks read it: metadata and pod templates.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Child {
    #[serde(default)]
    metadata: Meta,
    #[serde(default)]
    spec: Option<Spec>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct Meta {
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    owner_references: Vec<OwnerRef>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct OwnerRef {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    uid: String,
    #[serde(default)]
    controller: Option<bool>,
}

/// A Deployment's `spec.template`, or a RayService's cluster's templates.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct Spec {
    #[serde(default)]
    template: Option<Template>,
    #[serde(default)]
    ray_cluster_config: Option<RayCluster>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct RayCluster {
    #[serde(default)]
    head_group_spec: Option<Group>,
    #[serde(default)]
    worker_group_specs: Vec<Group>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct Group {
    #[serde(default)]
    template: Option<Template>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct Template {
    #[serde(default)]
    metadata: Option<TemplateMeta>,
    #[serde(default)]
    spec: Option<PodSpec>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
struct TemplateMeta {
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct PodSpec {
    #[serde(default)]
    service_account_name: Option<String>,
    #[serde(default)]
    service_account: Option<String>,
}

impl Child {
    /// The object's `metadata.namespace`.
    #[must_use]
    pub fn namespace(&self) -> Option<&str> {
        self.metadata.namespace.as_deref()
    }

    fn templates(&self) -> Vec<&Template> {
        let Some(spec) = &self.spec else {
            return Vec::new();
        };
        let ray = spec.ray_cluster_config.as_ref();
        spec.template
            .iter()
            .chain(ray.and_then(|r| r.head_group_spec.as_ref()?.template.as_ref()))
            .chain(
                ray.into_iter()
                    .flat_map(|r| r.worker_group_specs.iter())
                    .filter_map(|g| g.template.as_ref()),
            )
            .collect()
    }
}

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

/// Asks the API server for a service when the cache does not confirm a
/// write (a replica whose watch is behind, a service just recreated).
#[derive(Clone, Default)]
pub struct Owners {
    client: Option<kube::Client>,
}

impl std::fmt::Debug for Owners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Owners")
            .field("can_ask", &self.client.is_some())
            .finish()
    }
}

impl Owners {
    /// Ask with `client`; without one (tests, `check`), the cache decides.
    #[must_use]
    pub fn new(client: Option<kube::Client>) -> Self {
        Owners { client }
    }

    /// Whether there is an API server to ask.
    #[must_use]
    pub fn can_ask(&self) -> bool {
        self.client.is_some()
    }

    /// The service `namespace/name` as the API server has it now, within
    /// [`LOOKUP_TIMEOUT`].
    pub async fn get(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<InferenceService>, String> {
        let Some(client) = &self.client else {
            return Err("no API server to ask".to_owned());
        };
        let api = kube::Api::<InferenceService>::namespaced(client.clone(), namespace);
        match tokio::time::timeout(LOOKUP_TIMEOUT, api.get_opt(name)).await {
            Ok(Ok(found)) => Ok(found),
            Ok(Err(e)) => Err(format!("reading InferenceService {namespace}/{name}: {e}")),
            Err(_) => Err(format!(
                "reading InferenceService {namespace}/{name} took more than {LOOKUP_TIMEOUT:?}"
            )),
        }
    }

    /// Settle `needs` with the API server's answer: `Ok` to admit, `Err`
    /// with the message of the denial.
    pub async fn settle(&self, needs: &Needs) -> Result<(), String> {
        let (namespace, name) = needs.owner();
        match self.get(namespace, name).await {
            Ok(found) => needs.check(found.as_ref()).map_err(|r| needs.denial(&r)),
            Err(e) => Err(needs.denial(&format!(
                "its controlling InferenceService could not be confirmed ({e}); retry"
            ))),
        }
    }
}

#[cfg(test)]
mod tests;
