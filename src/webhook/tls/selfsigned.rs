//! `serve --self-signed`: the CA and serving certificate live in one Secret
//! shared by every replica, the serving certificate is rotated well before
//! expiry under the same CA, and the lease holder writes the CA into the
//! `caBundle` of the webhook configurations and the CRD's conversion webhook.
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
use crate::webhook::tls::certs::{self, PemPair};
use crate::webhook::tls::{self, CertResolver};

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
    /// Validity of the CA.
    pub ca_validity: Duration,
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

/// The CA and serving pair read from (or written to) the Secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bundle {
    /// The CA (stable across rotations).
    pub ca: PemPair,
    /// The serving certificate.
    pub serving: PemPair,
}

fn get_str(data: &BTreeMap<String, ByteString>, key: &str) -> Option<String> {
    data.get(key)
        .and_then(|b| String::from_utf8(b.0.clone()).ok())
        .filter(|s| !s.is_empty())
}

fn bundle_from_secret(secret: &Secret) -> Option<Bundle> {
    let data = secret.data.as_ref()?;
    Some(Bundle {
        ca: PemPair {
            cert: get_str(data, "ca.crt")?,
            key: get_str(data, "ca.key")?,
        },
        serving: PemPair {
            cert: get_str(data, "tls.crt")?,
            key: get_str(data, "tls.key")?,
        },
    })
}

fn secret_data(b: &Bundle) -> BTreeMap<String, ByteString> {
    [
        ("ca.crt", &b.ca.cert),
        ("ca.key", &b.ca.key),
        ("tls.crt", &b.serving.cert),
        ("tls.key", &b.serving.key),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), ByteString(v.clone().into_bytes())))
    .collect()
}

/// Whether a serving certificate must be reissued at `now` (Unix seconds):
/// less than a third of its validity left, unreadable, or missing a SAN.
#[must_use]
pub fn needs_rotation(serving_cert_pem: &str, dns: &[String], ips: &[IpAddr], now: i64) -> bool {
    let Ok((not_before, not_after)) = tls::pem_validity(serving_cert_pem.as_bytes()) else {
        return true;
    };
    let lifetime = (not_after - not_before).max(0);
    if not_after - now < lifetime / 3 {
        return true;
    }
    !has_sans(serving_cert_pem, dns, ips)
}

fn has_sans(cert_pem: &str, dns: &[String], ips: &[IpAddr]) -> bool {
    use rustls_pki_types::pem::PemObject;
    use x509_parser::extensions::GeneralName;
    let Ok(der) = rustls_pki_types::CertificateDer::from_pem_slice(cert_pem.as_bytes()) else {
        return false;
    };
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(&der) else {
        return false;
    };
    let Ok(Some(san)) = cert.subject_alternative_name() else {
        return dns.is_empty() && ips.is_empty();
    };
    let names = &san.value.general_names;
    let dns_ok = dns.iter().all(|d| {
        names
            .iter()
            .any(|n| matches!(n, GeneralName::DNSName(x) if *x == d.as_str()))
    });
    let ips_ok = ips.iter().all(|ip| {
        let want: Vec<u8> = match ip {
            IpAddr::V4(v4) => v4.octets().to_vec(),
            IpAddr::V6(v6) => v6.octets().to_vec(),
        };
        names
            .iter()
            .any(|n| matches!(n, GeneralName::IPAddress(x) if *x == want.as_slice()))
    });
    dns_ok && ips_ok
}

fn now_unix() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// Make sure the Secret holds a CA and a current serving certificate and
/// return what it holds. Creates it if absent; reissues the serving
/// certificate (same CA) when it needs rotation; a lost race rereads.
pub async fn ensure_secret(api: &Api<Secret>, cfg: &SelfSignedConfig) -> Result<Bundle, Error> {
    for _ in 0..5 {
        let existing = api.get_opt(&cfg.secret_name).await?;
        let Some(secret) = existing else {
            let ca = certs::generate_ca("infergate-webhook-ca", cfg.ca_validity)?;
            let serving =
                certs::issue_serving(&ca, &cfg.dns_names, &cfg.ips, cfg.serving_validity)?;
            let bundle = Bundle { ca, serving };
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
                data: Some(secret_data(&bundle)),
                ..Secret::default()
            };
            match api.create(&PostParams::default(), &secret).await {
                Ok(_) => {
                    tracing::info!(secret = %cfg.secret_name, "created CA and serving certificate");
                    return Ok(bundle);
                }
                Err(kube::Error::Api(e)) if e.code == 409 => continue,
                Err(e) => return Err(e.into()),
            }
        };
        let Some(current) = bundle_from_secret(&secret) else {
            return Err(Error::BadSecret(
                cfg.secret_name.clone(),
                "missing one of ca.crt, ca.key, tls.crt, tls.key".to_owned(),
            ));
        };
        if !needs_rotation(&current.serving.cert, &cfg.dns_names, &cfg.ips, now_unix()) {
            return Ok(current);
        }
        let serving =
            certs::issue_serving(&current.ca, &cfg.dns_names, &cfg.ips, cfg.serving_validity)?;
        let bundle = Bundle {
            ca: current.ca.clone(),
            serving,
        };
        let mut updated = secret.clone();
        updated.data = Some(secret_data(&bundle));
        // `replace` carries the resourceVersion read above: a concurrent
        // rotation by another replica makes this fail with 409, then reread.
        match api
            .replace(&cfg.secret_name, &PostParams::default(), &updated)
            .await
        {
            Ok(_) => {
                tracing::info!(secret = %cfg.secret_name, "rotated serving certificate");
                return Ok(bundle);
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

/// Write `ca_pem` into the caBundle of every webhook of both configurations
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
    let sc = tls::parse_pem_pair(
        bundle.serving.cert.as_bytes(),
        bundle.serving.key.as_bytes(),
    )
    .map_err(|e| Error::BadSecret(SECRET_NAME.to_owned(), e.to_string()))?;
    resolver.set(sc.key);
    metrics.set_certificate_expiry(CertificateKind::Serving, sc.not_after);
    if let Ok((_, ca_after)) = tls::pem_validity(bundle.ca.cert.as_bytes()) {
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
    let mut current = ensure_secret(&secrets, &cfg).await?;
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
            if is_leader && injected_for.as_deref() != Some(current.ca.cert.as_str()) {
                match inject_ca_bundle(&client, &cfg, &current.ca.cert).await {
                    Ok(_) => injected_for = Some(current.ca.cert.clone()),
                    Err(e) => tracing::warn!(error = %e, "failed to write caBundle; retrying"),
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
            match ensure_secret(&secrets, &cfg).await {
                Ok(b) if b != current => match apply_bundle(&b, &resolver, &metrics) {
                    Ok(()) => {
                        tracing::info!("serving the rotated certificate");
                        current = b;
                    }
                    Err(e) => tracing::warn!(error = %e, "keeping the current certificate"),
                },
                Ok(_) => {}
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
