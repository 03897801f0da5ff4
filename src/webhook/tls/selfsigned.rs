//! `serve --self-signed`: the CA and serving certificate live in one Secret
//! shared by every replica; what it should hold next (serving certificate
//! reissued well before expiry, the CA rotated with an overlap, a partial or
//! corrupt Secret repaired, the union of every replica's SANs) is
//! [`super::rotation::step`]. The lease holder writes the trust bundle into
//! the `caBundle` of the webhook configurations and the CRD's conversion
//! webhook, and records in the Secret which bundle it wrote.
//!
//! Replicas converge without coordination on the Secret: it is created only
//! if absent and replaced only with the `resourceVersion` that was read
//! (optimistic concurrency); a replica that loses a race rereads and serves
//! what the winner wrote.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;

use crate::metrics::{CertificateKind, Metrics};
use crate::webhook::tls::certs;
use crate::webhook::tls::rotation;
use crate::webhook::tls::serving::{self, CertResolver};

/// Name of the Secret holding `ca.crt`, `ca.key`, `tls.crt`, `tls.key`.
pub const SECRET_NAME: &str = "infergate-webhook-tls";
/// Name of the Lease whose holder writes `caBundle`.
pub const LEASE_NAME: &str = "infergate-webhook-ca-bundle";
/// Name of the MutatingWebhookConfiguration in `webhooks/`.
pub const MUTATING_WEBHOOK_CONFIGURATION: &str = "infergate";
/// Name of the ValidatingWebhookConfiguration in `webhooks/`.
pub const VALIDATING_WEBHOOK_CONFIGURATION: &str = "infergate";
/// Name of the InferenceService CRD (conversion webhook).
pub const CRD_NAME: &str = "inferenceservices.infergate.dev";

/// Errors of the self-signed mode.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed.
    #[error("kubernetes api error: {0}")]
    Kube(#[from] kube::Error),
    /// Generating a certificate failed.
    #[error(transparent)]
    Cert(#[from] certs::CertError),
    /// The Secret holds something that is not a usable certificate pair.
    #[error("secret {0} holds an unusable certificate: {1}")]
    BadSecret(String, String),
    /// Leader election failed.
    #[error("lease error: {0}")]
    Lease(String),
}

/// Settings of the self-signed mode.
#[derive(Clone, Debug)]
pub struct SelfSignedConfig {
    /// Namespace of the Secret and the Lease.
    pub namespace: String,
    /// Secret name.
    pub secret_name: String,
    /// DNS SANs of the serving certificate.
    pub dns_names: Vec<String>,
    /// IP SANs of the serving certificate.
    pub ips: Vec<IpAddr>,
    /// Validity of a serving certificate; it is reissued when less than a third remains.
    pub serving_validity: Duration,
    /// Validity of the CA; a next CA is made when a third is left.
    pub ca_validity: Duration,
    /// How long a next CA is in every caBundle before it signs.
    pub ca_overlap: Duration,
    /// How often the Secret, the rotation deadline and the caBundles are checked.
    pub check_interval: Duration,
    /// MutatingWebhookConfiguration to inject the CA into.
    pub mutating_webhook: String,
    /// ValidatingWebhookConfiguration to inject the CA into.
    pub validating_webhook: String,
    /// CRD whose conversion webhook gets the CA.
    pub crd_name: String,
    /// This replica's identity in the Lease.
    pub identity: String,
    /// Lease name.
    pub lease_name: String,
    /// Lease duration in seconds.
    pub lease_duration_seconds: u64,
}

impl SelfSignedConfig {
    /// Defaults for `namespace`, the in-cluster Service names and `identity`.
    #[must_use]
    pub fn new(namespace: &str, identity: &str) -> Self {
        Self {
            namespace: namespace.to_owned(),
            secret_name: SECRET_NAME.to_owned(),
            dns_names: certs::service_dns_names(crate::crdgen::SERVICE_NAME, namespace),
            ips: Vec::new(),
            serving_validity: certs::SERVING_VALIDITY,
            ca_validity: certs::CA_VALIDITY,
            ca_overlap: Duration::from_secs(3600),
            check_interval: Duration::from_secs(60),
            mutating_webhook: MUTATING_WEBHOOK_CONFIGURATION.to_owned(),
            validating_webhook: VALIDATING_WEBHOOK_CONFIGURATION.to_owned(),
            crd_name: CRD_NAME.to_owned(),
            identity: identity.to_owned(),
            lease_name: LEASE_NAME.to_owned(),
            lease_duration_seconds: 15,
        }
    }
}

/// What the Secret holds: CA, serving pair, and during a rotation the next
/// and previous CA.
pub type Bundle = rotation::Stored;

fn settings(cfg: &SelfSignedConfig) -> rotation::Settings {
    rotation::Settings {
        dns_names: cfg.dns_names.clone(),
        ips: cfg.ips.clone(),
        serving_validity: cfg.serving_validity,
        ca_validity: cfg.ca_validity,
        ca_overlap: cfg.ca_overlap,
    }
}

fn secret_text(secret: &Secret) -> BTreeMap<String, String> {
    secret
        .data
        .iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), String::from_utf8(v.0.clone()).ok()?)))
        .collect()
}

fn secret_data(b: &Bundle) -> BTreeMap<String, ByteString> {
    b.data()
        .into_iter()
        .map(|(k, v)| (k.to_owned(), ByteString(v.as_bytes().to_vec())))
        .collect()
}

/// Make sure the Secret holds what [`rotation::step`] says it should and
/// return that. Creates it if absent, repairs it if partial or corrupt
/// (never fails on its contents), rotates what is due; writes carry the
/// `resourceVersion` read, so a lost race rereads.
pub async fn ensure_secret(api: &Api<Secret>, cfg: &SelfSignedConfig) -> Result<Bundle, Error> {
    sync_secret(api, cfg).await.map(|(b, _)| b)
}

/// [`ensure_secret`], and the Secret's [`rotation::INJECTED_ANNOTATION`].
async fn sync_secret(
    api: &Api<Secret>,
    cfg: &SelfSignedConfig,
) -> Result<(Bundle, Option<String>), Error> {
    for _ in 0..5 {
        let existing = api.get_opt(&cfg.secret_name).await?;
        let data = existing.as_ref().map(secret_text).unwrap_or_default();
        let injected = existing
            .as_ref()
            .and_then(|s| s.metadata.annotations.as_ref())
            .and_then(|a| a.get(rotation::INJECTED_ANNOTATION))
            .map(String::as_str);
        let step = rotation::step(
            &data,
            injected,
            &settings(cfg),
            time::OffsetDateTime::now_utc(),
        )?;
        let recorded = injected.map(str::to_owned);
        if step.changes.is_empty() {
            return Ok((step.stored, recorded));
        }
        let result = match existing {
            None => {
                let secret = Secret {
                    metadata: ObjectMeta {
                        name: Some(cfg.secret_name.clone()),
                        namespace: Some(cfg.namespace.clone()),
                        labels: Some(BTreeMap::from([(
                            "app.kubernetes.io/managed-by".to_owned(),
                            "infergate".to_owned(),
                        )])),
                        ..ObjectMeta::default()
                    },
                    type_: Some("kubernetes.io/tls".to_owned()),
                    data: Some(secret_data(&step.stored)),
                    ..Secret::default()
                };
                api.create(&PostParams::default(), &secret)
                    .await
                    .map(|_| ())
            }
            Some(mut secret) => {
                secret.data = Some(secret_data(&step.stored));
                // `replace` carries the resourceVersion read above: a
                // concurrent writer makes this fail with 409, then reread.
                api.replace(&cfg.secret_name, &PostParams::default(), &secret)
                    .await
                    .map(|_| ())
            }
        };
        match result {
            Ok(()) => {
                for change in &step.changes {
                    tracing::info!(secret = %cfg.secret_name, change = %change, "certificate secret updated");
                }
                return Ok((step.stored, recorded));
            }
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::BadSecret(
        cfg.secret_name.clone(),
        "kept conflicting with concurrent writers".to_owned(),
    ))
}

/// Record in the Secret that every `caBundle` holds `bundle`'s trust bundle
/// (the next CA may sign once the overlap has passed).
pub async fn record_injected(
    api: &Api<Secret>,
    cfg: &SelfSignedConfig,
    bundle: &Bundle,
) -> Result<(), Error> {
    let patch = serde_json::json!({"metadata": {"annotations": {
        rotation::INJECTED_ANNOTATION: rotation::bundle_id(bundle)
    }}});
    api.patch(
        &cfg.secret_name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

/// Write `ca_pem` (the trust bundle) into the caBundle of every webhook of both configurations
/// and of the CRD's conversion webhook, where it differs. Missing objects are
/// skipped (they may be installed later; the next check catches up).
pub async fn inject_ca_bundle(
    client: &Client,
    cfg: &SelfSignedConfig,
    ca_pem: &str,
) -> Result<usize, Error> {
    let bundle = ByteString(ca_pem.as_bytes().to_vec());
    let mut changed = 0;
    let pp = PostParams {
        field_manager: Some("infergate".to_owned()),
        ..PostParams::default()
    };

    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    if let Some(mut m) = mutating.get_opt(&cfg.mutating_webhook).await? {
        let mut dirty = false;
        for w in m.webhooks.iter_mut().flatten() {
            if w.client_config.ca_bundle.as_ref() != Some(&bundle) {
                w.client_config.ca_bundle = Some(bundle.clone());
                dirty = true;
            }
        }
        if dirty {
            mutating.replace(&cfg.mutating_webhook, &pp, &m).await?;
            changed += 1;
        }
    }

    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    if let Some(mut v) = validating.get_opt(&cfg.validating_webhook).await? {
        let mut dirty = false;
        for w in v.webhooks.iter_mut().flatten() {
            if w.client_config.ca_bundle.as_ref() != Some(&bundle) {
                w.client_config.ca_bundle = Some(bundle.clone());
                dirty = true;
            }
        }
        if dirty {
            validating.replace(&cfg.validating_webhook, &pp, &v).await?;
            changed += 1;
        }
    }

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    if let Some(mut crd) = crds.get_opt(&cfg.crd_name).await? {
        let cc = crd
            .spec
            .conversion
            .as_mut()
            .and_then(|c| c.webhook.as_mut())
            .and_then(|w| w.client_config.as_mut());
        if let Some(cc) = cc
            && cc.ca_bundle.as_ref() != Some(&bundle)
        {
            cc.ca_bundle = Some(bundle.clone());
            crds.replace(&cfg.crd_name, &pp, &crd).await?;
            changed += 1;
        }
    }
    if changed > 0 {
        tracing::info!(objects = changed, "wrote CA into caBundle");
    }
    Ok(changed)
}

fn apply_bundle(bundle: &Bundle, resolver: &CertResolver, metrics: &Metrics) -> Result<(), Error> {
    let sc = serving::parse_pem_pair(
        bundle.serving.cert.as_bytes(),
        bundle.serving.key.as_bytes(),
    )
    .map_err(|e| Error::BadSecret(SECRET_NAME.to_owned(), e.to_string()))?;
    resolver.set(sc.key);
    metrics.set_certificate_expiry(CertificateKind::Serving, sc.not_after);
    if let Ok((_, ca_after)) = serving::pem_validity(bundle.ca.cert.as_bytes()) {
        metrics.set_certificate_expiry(CertificateKind::Ca, ca_after);
    }
    Ok(())
}

/// Load (or create) the certificate, serve it, and keep it current until
/// `shutdown`: reread and rotate every `check_interval`, and, while holding
/// the lease, keep the caBundles current. Returns once the first certificate
/// is served.
pub async fn start(
    client: Client,
    cfg: SelfSignedConfig,
    resolver: Arc<CertResolver>,
    metrics: Metrics,
    shutdown: CancellationToken,
) -> Result<tokio::task::JoinHandle<()>, Error> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &cfg.namespace);
    let (mut current, mut recorded) = sync_secret(&secrets, &cfg).await?;
    apply_bundle(&current, &resolver, &metrics)?;

    let lease = kube_lease_manager::LeaseManagerBuilder::new(client.clone(), &cfg.lease_name)
        .with_namespace(&cfg.namespace)
        .with_identity(&cfg.identity)
        .with_duration(cfg.lease_duration_seconds)
        .with_grace(cfg.lease_duration_seconds.div_ceil(3).max(1))
        .build()
        .await
        .map_err(|e| Error::Lease(e.to_string()))?;
    let (mut leader, lease_task) = lease.watch().await;

    Ok(tokio::spawn(async move {
        let mut injected_for: Option<String> = None;
        loop {
            let is_leader = *leader.borrow_and_update();
            let bundle = current.bundle();
            if is_leader && injected_for.as_deref() != Some(bundle.as_str()) {
                match inject_ca_bundle(&client, &cfg, &bundle).await {
                    Ok(_) => injected_for = Some(bundle.clone()),
                    Err(e) => tracing::warn!(error = %e, "failed to write caBundle; retrying"),
                }
            }
            // The record is compared with what the Secret says, so a Secret
            // replaced without it is recorded again.
            let id = rotation::bundle_id(&current);
            if is_leader
                && injected_for.as_deref() == Some(bundle.as_str())
                && recorded.as_deref() != Some(id.as_str())
            {
                match record_injected(&secrets, &cfg, &current).await {
                    Ok(()) => recorded = Some(id),
                    Err(e) => tracing::warn!(error = %e, "failed to record the caBundle; retrying"),
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => break,
                r = leader.changed() => {
                    if r.is_err() {
                        tracing::warn!("lease manager stopped");
                        tokio::time::sleep(cfg.check_interval).await;
                    }
                    // Re-check the bundles as soon as we become leader.
                    injected_for = None;
                    continue;
                }
                () = tokio::time::sleep(cfg.check_interval) => {}
            }
            match sync_secret(&secrets, &cfg).await {
                Ok((b, r)) => {
                    recorded = r;
                    if b != current {
                        match apply_bundle(&b, &resolver, &metrics) {
                            Ok(()) => {
                                tracing::info!("serving the rotated certificate");
                                current = b;
                            }
                            Err(e) => tracing::warn!(error = %e, "keeping the current certificate"),
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "certificate check failed; retrying"),
            }
            // The leader re-verifies the caBundles on every tick: someone may
            // have reapplied the manifests with an empty caBundle.
            if *leader.borrow() {
                injected_for = None;
            }
        }
        drop(leader);
        // Dropping the receiver makes the lease manager release the lease.
        let _ = tokio::time::timeout(Duration::from_secs(5), lease_task).await;
    }))
}
