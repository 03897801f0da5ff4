//! Waiting for what a controller or the apiserver does in its own time: one
//! polling loop, [`eventually`], and the waits built on it (objects to exist,
//! to be deleted, to satisfy a condition; servers to be ready; webhooks to be
//! called); reading and merge-patching one object.

use std::fmt::Display;
use std::time::{Duration, Instant};

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use infergate::api::v1beta1::InferenceService;

use super::control_plane::ControlPlane;
use super::crds::service_yaml;
use super::process::text;
use super::servers::http_get;

/// How long a test waits for a controller or the apiserver unless it says otherwise.
pub const WAIT: Duration = Duration::from_secs(60);

/// How often [`eventually`] tries again.
const POLL: Duration = Duration::from_millis(250);

/// The outcome of one attempt of [`eventually`]: `Some`/`Ok` ends the wait
/// with the value; `None`/`Err` tries again (the error is shown on timeout).
pub trait Attempt {
    /// What the wait returns.
    type Output;
    /// The value, or why there is none yet.
    fn into_result(self) -> Result<Self::Output, String>;
}

impl<T> Attempt for Option<T> {
    type Output = T;
    fn into_result(self) -> Result<T, String> {
        self.ok_or_else(String::new)
    }
}

impl<T, E: Display> Attempt for Result<T, E> {
    type Output = T;
    fn into_result(self) -> Result<T, String> {
        self.map_err(|e| e.to_string())
    }
}

/// Run `attempt` every 250 ms until it gives a value; panic naming `what`
/// (and the last error) after `timeout`.
pub async fn eventually<A: Attempt>(
    what: &str,
    timeout: Duration,
    mut attempt: impl AsyncFnMut() -> A,
) -> A::Output {
    let deadline = Instant::now() + timeout;
    loop {
        match attempt().await.into_result() {
            Ok(value) => return value,
            Err(last) => {
                if Instant::now() >= deadline {
                    let last = if last.is_empty() {
                        String::new()
                    } else {
                        format!("; last: {last}")
                    };
                    panic!("timed out after {timeout:?} waiting for {what}{last}");
                }
                tokio::time::sleep(POLL).await;
            }
        }
    }
}

/// A namespaced kind the waits can read.
pub trait Namespaced:
    kube::Resource<Scope = NamespaceResourceScope, DynamicType = ()>
    + Clone
    + serde::de::DeserializeOwned
    + serde::Serialize
    + std::fmt::Debug
{
}

impl<K> Namespaced for K where
    K: kube::Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug
{
}

/// The object `ns/name`, if it exists.
pub async fn get<K: Namespaced>(client: &Client, ns: &str, name: &str) -> Option<K> {
    Api::<K>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap_or_else(|e| panic!("get {ns}/{name}: {e}"))
}

/// Merge-patch the object `name` with `patch`; panics with `what` when the
/// API server refuses.
pub async fn merge_patch<K>(api: &Api<K>, name: &str, patch: serde_json::Value, what: &str)
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .expect(what);
}

/// Wait (up to [`WAIT`]) until `ns/name` exists; return it.
pub async fn wait_exists<K: Namespaced>(client: &Client, ns: &str, name: &str) -> K {
    let kind = K::kind(&()).into_owned();
    eventually(&format!("{kind} {ns}/{name} to exist"), WAIT, || {
        get::<K>(client, ns, name)
    })
    .await
}

/// Wait until `ns/name` is gone.
pub async fn wait_gone<K: Namespaced>(client: &Client, ns: &str, name: &str, timeout: Duration) {
    let kind = K::kind(&()).into_owned();
    eventually(
        &format!("{kind} {ns}/{name} to be deleted"),
        timeout,
        async || get::<K>(client, ns, name).await.is_none().then_some(()),
    )
    .await;
}

/// Wait until `ns/name` exists and satisfies `pred`; return it. On timeout
/// the panic shows the object's last status.
pub async fn wait_for<K: Namespaced>(
    client: &Client,
    ns: &str,
    name: &str,
    what: &str,
    timeout: Duration,
    pred: impl Fn(&K) -> bool,
) -> K {
    eventually(what, timeout, async || {
        match get::<K>(client, ns, name).await {
            Some(obj) if pred(&obj) => Ok(obj),
            Some(obj) => Err(format!(
                "status: {}",
                serde_json::to_value(&obj).unwrap_or_default()["status"]
            )),
            None => Err(format!("{} {ns}/{name} not found", K::kind(&()))),
        }
    })
    .await
}

/// The service's condition `type_`, if set.
pub fn condition(svc: &InferenceService, type_: &str) -> Option<Condition> {
    svc.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .cloned()
}

/// Wait until the service's condition `type_` has `status` and `reason`; return the service.
pub async fn wait_condition(
    client: &Client,
    ns: &str,
    name: &str,
    type_: &str,
    status: &str,
    reason: &str,
    timeout: Duration,
) -> InferenceService {
    wait_for(
        client,
        ns,
        name,
        &format!("{ns}/{name} condition {type_}={status} ({reason})"),
        timeout,
        |svc| condition(svc, type_).is_some_and(|c| c.status == status && c.reason == reason),
    )
    .await
}

/// Wait until the plain-HTTP probe port on 127.0.0.1 answers `/readyz` with 200.
pub async fn wait_readyz(port: u16, timeout: Duration) {
    eventually(
        &format!("/readyz on port {port}"),
        timeout,
        async || match http_get(port, "/readyz").await {
            Ok((200, _)) => Ok(()),
            Ok((code, body)) => Err(format!("{code} {body}")),
            Err(e) => Err(e.to_string()),
        },
    )
    .await;
}

/// Whether the plain-HTTP probe port on 127.0.0.1 answers `/readyz` with
/// 200 within `timeout` (asked every 25 ms).
pub async fn readyz_within(port: u16, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok((200, _)) = http_get(port, "/readyz").await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Wait until the apiserver converts through the webhook: a server-side dry run
/// of a v1alpha1 object must be converted to the storage version v1beta1.
pub async fn wait_conversion_active(cp: &ControlPlane) {
    let probe = "apiVersion: infergate.dev/v1alpha1\nkind: InferenceService\nmetadata:\n  name: conversion-probe\n  namespace: default\nspec:\n  modelRef: probe\n";
    eventually("the conversion webhook to be called", WAIT, async || {
        let out = cp.kubectl_stdin(&["create", "--dry-run=server", "-f", "-"], probe);
        out.status
            .success()
            .then_some(())
            .ok_or_else(|| String::from_utf8_lossy(&out.stderr).into_owned())
    })
    .await;
}

/// Wait until the apiserver calls the registered webhooks (new registrations take
/// effect after a short delay): a server-side dry run of a minimal service in
/// `namespace` must come back defaulted.
pub async fn wait_webhooks_active(cp: &ControlPlane, namespace: &str) {
    let manifest = service_yaml(
        namespace,
        "webhook-probe",
        "  model: {ref: probe}\n  engine: {image: probe/probe}\n",
    );
    eventually("the webhooks to be called", WAIT, async || {
        let out = cp.kubectl_stdin(
            &["apply", "--dry-run=server", "-o", "json", "-f", "-"],
            &manifest,
        );
        let text = text(&out);
        (out.status.success() && text.contains("infergate.dev/defaulted-from"))
            .then_some(())
            .ok_or(text)
    })
    .await;
}

/// Play the kubelet (none runs): mark the pods of `service`'s `track`
/// Ready through pods/status, once at least `want` of them exist.
pub async fn mark_pods_ready(client: &Client, ns: &str, service: &str, track: &str, want: usize) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let selector = format!("infergate.dev/service={service},infergate.dev/track={track}");
    eventually(
        &format!("{want} {track} pod(s) of {ns}/{service} marked Ready"),
        WAIT,
        || async {
            let list = pods
                .list(&ListParams::default().labels(&selector))
                .await
                .ok()?;
            let live: Vec<_> = list
                .items
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .collect();
            if live.len() < want {
                return None;
            }
            let now = k8s_openapi::jiff::Timestamp::now().to_string();
            for p in &live {
                pods.patch_status(
                    &p.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {
                        "phase": "Running",
                        "conditions": [
                            {"type": "Ready", "status": "True", "lastTransitionTime": now},
                            {"type": "ContainersReady", "status": "True", "lastTransitionTime": now}
                        ]
                    }})),
                )
                .await
                .ok()?;
            }
            Some(())
        },
    )
    .await;
}

/// Play the kubelet for `track` of service `chat` (one pod made ready)
/// until its Deployment `name` is complete: the current generation
/// observed, every wanted replica updated and ready, no old pod left.
pub async fn chat_track_complete(client: &Client, ns: &str, track: &str, name: &str) {
    let deployments: kube::Api<k8s_openapi::api::apps::v1::Deployment> =
        kube::Api::namespaced(client.clone(), ns);
    eventually(&format!("{name} ({track}) complete"), WAIT, async || {
        mark_pods_ready(client, ns, "chat", track, 1).await;
        let d = deployments.get(name).await.map_err(|e| e.to_string())?;
        let st = d.status.clone().unwrap_or_default();
        let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        (d.metadata.generation == st.observed_generation
            && st.updated_replicas == Some(want)
            && st.ready_replicas == Some(want)
            && st.replicas == Some(want))
        .then_some(())
        .ok_or(format!("{st:?}"))
    })
    .await;
}
