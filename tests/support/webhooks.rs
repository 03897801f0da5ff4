//! infergate's webhooks registered with the test apiserver by
//! `url: https://127.0.0.1:PORT/...` and `caBundle`, the way an
//! out-of-cluster webhook is registered, and the CRD's conversion webhook
//! pointed back at the in-cluster Service.

use base64::Engine as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};

use super::control_plane::ControlPlane;
use super::fixtures::root;

/// Register infergate's webhooks (`webhooks/*.yaml`) and the CRD's conversion
/// webhook by `url: https://127.0.0.1:PORT/...` with `ca_pem` as caBundle, the way
/// an out-of-cluster webhook is registered. Idempotent (server-side apply / merge patch).
pub async fn register_webhooks(cp: &ControlPlane, port: u16, ca_pem: &str) -> anyhow::Result<()> {
    let client = cp.client().await;
    let params = PatchParams::apply("infergate-tests").force();
    // Each hook keeps the path of its Service reference.
    let by_url = |configs: Vec<&mut WebhookClientConfig>, fallback: &str| {
        for config in configs {
            let path = config.service.as_ref().and_then(|s| s.path.clone());
            *config = WebhookClientConfig {
                url: Some(format!(
                    "https://127.0.0.1:{port}{}",
                    path.as_deref().unwrap_or(fallback)
                )),
                ca_bundle: Some(ByteString(ca_pem.as_bytes().to_vec())),
                service: None,
            };
        }
    };

    let mut mutating: MutatingWebhookConfiguration = read_webhooks("mutating.yaml")?;
    by_url(
        hooks_of(&mut mutating.webhooks, |h| &mut h.client_config),
        "/mutate",
    );
    replace_object(Api::all(client.clone()), &mutating, &params).await?;

    let mut validating: ValidatingWebhookConfiguration = read_webhooks("validating.yaml")?;
    by_url(
        hooks_of(&mut validating.webhooks, |h| &mut h.client_config),
        "/validate",
    );
    replace_object(Api::all(client), &validating, &params).await?;

    register_conversion(cp, port, ca_pem).await
}

/// A webhook configuration from `webhooks/<file>`.
fn read_webhooks<T: serde::de::DeserializeOwned>(file: &str) -> anyhow::Result<T> {
    let text = std::fs::read_to_string(root().join("webhooks").join(file))?;
    Ok(serde_saphyr::from_str(&text)?)
}

/// The client configurations of a configuration's webhooks.
fn hooks_of<H>(
    hooks: &mut Option<Vec<H>>,
    config: fn(&mut H) -> &mut WebhookClientConfig,
) -> Vec<&mut WebhookClientConfig> {
    hooks.iter_mut().flatten().map(config).collect()
}

/// Replace a cluster-scoped object with `obj`: delete it if present, then apply.
/// Registration by URL replaces whatever was registered before (fields owned by
/// another manager, such as a `service` reference, would survive an apply).
async fn replace_object<K>(api: Api<K>, obj: &K, params: &PatchParams) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    let name = obj.meta().name.clone().unwrap_or_default();
    if api.get_opt(&name).await?.is_some() {
        api.delete(&name, &Default::default()).await?;
    }
    api.patch(&name, params, &Patch::Apply(obj)).await?;
    Ok(())
}

/// Point the InferenceService CRD's conversion webhook at `https://127.0.0.1:PORT/convert`.
pub async fn register_conversion(cp: &ControlPlane, port: u16, ca_pem: &str) -> anyhow::Result<()> {
    let ca_b64 = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    patch_conversion(
        cp,
        serde_json::json!({"strategy": "Webhook", "webhook": {
            "conversionReviewVersions": ["v1"],
            "clientConfig": {"service": null, "url": format!("https://127.0.0.1:{port}/convert"), "caBundle": ca_b64}
        }}),
    )
    .await
}

/// Point the CRD's conversion webhook back at the in-cluster Service, as the
/// committed CRD has it (undoes [`register_conversion`]).
pub async fn unregister_conversion(cp: &ControlPlane) -> anyhow::Result<()> {
    use infergate::crdgen::{CONVERT_PATH, SERVICE_NAME, SERVICE_NAMESPACE};
    patch_conversion(
        cp,
        serde_json::json!({"webhook": {"clientConfig": {
            "url": null, "caBundle": null,
            "service": {"name": SERVICE_NAME, "namespace": SERVICE_NAMESPACE, "path": CONVERT_PATH, "port": 443}
        }}}),
    )
    .await
}

/// Merge `conversion` into the InferenceService CRD's `spec.conversion`.
async fn patch_conversion(cp: &ControlPlane, conversion: serde_json::Value) -> anyhow::Result<()> {
    let patch = serde_json::json!({"spec": {"conversion": conversion}});
    Api::<CustomResourceDefinition>::all(cp.client().await)
        .patch(
            "inferenceservices.infergate.dev",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    Ok(())
}
