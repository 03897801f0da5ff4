//! The serving certificate at the real API server: a rotation under load
//! loses no admission request; in self-signed mode two replicas share one
//! Secret, a corrupt one is repaired, the CA rotates with an overlap (every
//! served certificate trusted by every `caBundle` throughout) and the lease
//! holder injects the bundles.

use crate::support;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::{
    client_config, connect, control_plane, conversion_ca_bundle, eventually, serving_pair,
    write_pair,
};
use infergate::api::v1beta1::InferenceService;
use infergate::metrics::Metrics;
use infergate::webhook::tls::CertResolver;
use infergate::webhook::tls::certs::{self, PemPair};
use infergate::webhook::tls::rotation;
use infergate::webhook::tls::selfsigned::{self, SelfSignedConfig};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{ENGINE_IMAGE, apply_image_policy, webhook};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_rotation_under_load_loses_no_request() {
    let cp = control_plane().await;
    let wh = webhook().await;
    let ns = cp.fresh_namespace("rotate").await;
    apply_image_policy(cp, &ns).await;

    let client = cp.client().await;
    let ok = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let stop = CancellationToken::new();
    let mut workers = Vec::new();
    for w in 0..4 {
        let api: Api<InferenceService> = Api::namespaced(client.clone(), &ns);
        let (ok, failed, stop) = (Arc::clone(&ok), Arc::clone(&failed), stop.clone());
        workers.push(tokio::spawn(async move {
            let pp = PostParams {
                dry_run: true,
                ..PostParams::default()
            };
            let mut i = 0;
            while !stop.is_cancelled() {
                i += 1;
                let svc: InferenceService = serde_json::from_value(json!({
                    "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
                    "metadata": {"name": format!("load-{w}-{i}")},
                    "spec": {"model": {"ref": "m"}}
                }))
                .unwrap();
                match api.create(&pp, &svc).await {
                    Ok(s)
                        if s.spec.engine.as_ref().and_then(|e| e.image.as_deref())
                            == Some(ENGINE_IMAGE) =>
                    {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    other => {
                        eprintln!("request failed during rotation: {other:?}");
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = served_leaf(wh.port, &wh.ca).await;
    let next = serving_pair(&wh.ca);
    write_pair(&wh.cert_dir, &next);
    let next_der = {
        use rustls_pki_types::pem::PemObject;
        rustls_pki_types::CertificateDer::from_pem_slice(next.cert.as_bytes())
            .unwrap()
            .to_vec()
    };
    eventually(
        "the new certificate is served",
        Duration::from_secs(15),
        || {
            let (port, ca, want) = (wh.port, wh.ca.clone(), next_der.clone());
            async move {
                (served_leaf(port, &ca).await == want)
                    .then_some(())
                    .ok_or_else(|| "old certificate".to_owned())
            }
        },
    )
    .await;
    assert_ne!(before, next_der);
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.cancel();
    for w in workers {
        w.await.unwrap();
    }
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    assert!(ok >= 20, "too little load: {ok} requests");
    assert_eq!(
        failed,
        0,
        "{failed} of {} admission requests failed",
        ok + failed
    );
}

/// The PEM certificates in the caBundle of each webhook registration and of
/// the CRD's conversion webhook.
async fn ca_bundles(client: &kube::Client, hook: &str, crd: &str) -> Vec<(String, Vec<String>)> {
    let split = |b: Option<&ByteString>| -> Vec<String> {
        let text = b
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .unwrap_or_default();
        text.split_inclusive("-----END CERTIFICATE-----\n")
            .map(str::to_owned)
            .filter(|c| c.contains("BEGIN CERTIFICATE"))
            .collect()
    };
    let m = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get(hook)
        .await
        .unwrap();
    let v = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get(hook)
        .await
        .unwrap();
    let c = Api::<CustomResourceDefinition>::all(client.clone())
        .get(crd)
        .await
        .unwrap();
    let mut out = Vec::new();
    for w in m.webhooks.unwrap_or_default() {
        out.push((
            format!("mutating {}", w.name),
            split(w.client_config.ca_bundle.as_ref()),
        ));
    }
    for w in v.webhooks.unwrap_or_default() {
        out.push((
            format!("validating {}", w.name),
            split(w.client_config.ca_bundle.as_ref()),
        ));
    }
    out.push((
        "the CRD".to_owned(),
        split(conversion_ca_bundle(c).as_ref()),
    ));
    out
}

/// Whether the DER certificate `leaf` is signed by one of the PEM `cas`.
fn signed_by_one_of(leaf: &[u8], cas: &[String]) -> bool {
    use rustls_pki_types::pem::PemObject;
    let (_, leaf) = x509_parser::parse_x509_certificate(leaf).unwrap();
    cas.iter().any(|pem| {
        let der = rustls_pki_types::CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
        let (_, ca) = x509_parser::parse_x509_certificate(&der).unwrap();
        leaf.verify_signature(Some(ca.public_key())).is_ok()
    })
}

/// The leaf certificate the server presents to a new connection.
async fn served_leaf(port: u16, ca: &PemPair) -> Vec<u8> {
    let addr = ([127, 0, 0, 1], port).into();
    connect(addr, client_config(&[ca], &[], false))
        .await
        .unwrap()
        .1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_signed_mode_shares_one_secret_repairs_it_rotates_the_ca_with_an_overlap_and_injects_ca_bundles()
 {
    support::install_crypto_provider();
    support::init_tracing();
    let cp = control_plane().await;
    let client = cp.client().await;
    let ns = cp.fresh_namespace("selfsigned").await;
    let pp = PatchParams::apply("infergate-e2e").force();

    // Registrations of our own (the shared ones must keep the test CA).
    let hook_name = format!("infergate-selfsigned-{ns}");
    let mutating: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": hook_name},
        "webhooks": [{
            "name": "never.infergate.dev", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "clientConfig": {"url": "https://127.0.0.1:1/mutate"},
            "rules": [{"apiGroups": ["infergate.dev"], "apiVersions": ["v1beta1"], "operations": ["CREATE"], "resources": ["nothing"]}]
        }]
    }))
    .unwrap();
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .patch(&hook_name, &pp, &Patch::Apply(&mutating))
        .await
        .unwrap();
    let mut validating: Value = serde_json::to_value(&mutating).unwrap();
    validating["kind"] = json!("ValidatingWebhookConfiguration");
    validating["webhooks"][0]
        .as_object_mut()
        .unwrap()
        .remove("reinvocationPolicy");
    let validating: ValidatingWebhookConfiguration = serde_json::from_value(validating).unwrap();
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .patch(&hook_name, &pp, &Patch::Apply(&validating))
        .await
        .unwrap();
    let crd_name = format!("widgets.{ns}.infergate.dev");
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": crd_name},
        "spec": {
            "group": format!("{ns}.infergate.dev"),
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
            "scope": "Namespaced",
            "versions": [
                {"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
                {"name": "v2", "served": true, "storage": false, "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}
            ],
            "conversion": {"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": {"url": "https://127.0.0.1:1/convert"}}}
        }
    }))
    .unwrap();
    Api::<CustomResourceDefinition>::all(client.clone())
        .patch(&crd_name, &pp, &Patch::Apply(&crd))
        .await
        .unwrap();

    let config = |identity: &str| {
        let mut c = SelfSignedConfig::new(&ns, identity);
        c.ips = vec!["127.0.0.1".parse().unwrap()];
        c.mutating_webhook = hook_name.clone();
        c.validating_webhook = hook_name.clone();
        c.crd_name = crd_name.clone();
        c.serving_validity = Duration::from_secs(3600);
        c.ca_overlap = Duration::from_secs(2);
        c.check_interval = Duration::from_millis(500);
        c.lease_duration_seconds = 3;
        c
    };
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);

    // Two replicas starting at once converge on one Secret.
    let (cfg_a, cfg_b) = (config("replica-a"), config("replica-b"));
    let (a, b) = tokio::join!(
        selfsigned::ensure_secret(&secrets, &cfg_a),
        selfsigned::ensure_secret(&secrets, &cfg_b),
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a, b, "replicas serve the same certificate");
    let secret = secrets.get(selfsigned::SECRET_NAME).await.unwrap();
    let keys: Vec<&String> = secret.data.as_ref().unwrap().keys().collect();
    assert_eq!(keys, ["ca.crt", "ca.key", "tls.crt", "tls.key"]);
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));

    // Run two managers; the lease holder injects the CA everywhere.
    let shutdown = CancellationToken::new();
    let metrics = Metrics::new();
    let ra = Arc::new(CertResolver::new());
    let rb = Arc::new(CertResolver::new());
    let ta = selfsigned::start(
        client.clone(),
        config("replica-a"),
        Arc::clone(&ra),
        metrics.clone(),
        shutdown.clone(),
    )
    .await
    .unwrap();
    let tb = selfsigned::start(
        client.clone(),
        config("replica-b"),
        Arc::clone(&rb),
        Metrics::new(),
        shutdown.clone(),
    )
    .await
    .unwrap();
    assert!(ra.is_loaded() && rb.is_loaded());
    let ca_bundle = ByteString(a.bundle().into_bytes());
    eventually("caBundle injected", Duration::from_secs(30), || {
        let client = client.clone();
        let (hook_name, crd_name, ca_bundle) =
            (hook_name.clone(), crd_name.clone(), ca_bundle.clone());
        async move {
            let m = Api::<MutatingWebhookConfiguration>::all(client.clone())
                .get(&hook_name)
                .await
                .map_err(|e| e.to_string())?;
            let v = Api::<ValidatingWebhookConfiguration>::all(client.clone())
                .get(&hook_name)
                .await
                .map_err(|e| e.to_string())?;
            let c = Api::<CustomResourceDefinition>::all(client)
                .get(&crd_name)
                .await
                .map_err(|e| e.to_string())?;
            let m_ok = m
                .webhooks
                .unwrap_or_default()
                .iter()
                .all(|w| w.client_config.ca_bundle.as_ref() == Some(&ca_bundle));
            let v_ok = v
                .webhooks
                .unwrap_or_default()
                .iter()
                .all(|w| w.client_config.ca_bundle.as_ref() == Some(&ca_bundle));
            let c_ok = conversion_ca_bundle(c).as_ref() == Some(&ca_bundle);
            (m_ok && v_ok && c_ok)
                .then_some(())
                .ok_or_else(|| format!("mutating {m_ok} validating {v_ok} crd {c_ok}"))
        }
    })
    .await;
    // The URL and everything else of the registration is left alone.
    let m = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get(&hook_name)
        .await
        .unwrap();
    assert_eq!(
        m.webhooks.unwrap()[0].client_config.url.as_deref(),
        Some("https://127.0.0.1:1/mutate")
    );

    // Rotation: a serving certificate near its end is reissued under the same CA,
    // and both replicas pick it up from the Secret.
    let short = config("rotator");
    let mut near_expiry = secret.clone();
    let old_leaf = certs::issue_serving(
        &a.ca,
        &[],
        &["127.0.0.1".parse().unwrap()],
        Duration::from_secs(1),
    )
    .unwrap();
    near_expiry
        .data
        .as_mut()
        .unwrap()
        .insert("tls.crt".into(), ByteString(old_leaf.cert.into_bytes()));
    near_expiry
        .data
        .as_mut()
        .unwrap()
        .insert("tls.key".into(), ByteString(old_leaf.key.into_bytes()));
    near_expiry.metadata.resource_version = None;
    secrets
        .replace(
            selfsigned::SECRET_NAME,
            &PostParams::default(),
            &near_expiry,
        )
        .await
        .unwrap();
    let rotated = selfsigned::ensure_secret(&secrets, &short).await.unwrap();
    assert_eq!(rotated.ca, a.ca, "the CA stays stable");
    assert_ne!(rotated.serving, a.serving);
    let want = rotated.serving.cert.clone();
    eventually(
        "both replicas serve the rotated certificate",
        Duration::from_secs(15),
        || {
            let (ra, rb, want) = (Arc::clone(&ra), Arc::clone(&rb), want.clone());
            async move {
                use rustls_pki_types::pem::PemObject;
                let der =
                    rustls_pki_types::CertificateDer::from_pem_slice(want.as_bytes()).unwrap();
                let served = |r: &CertResolver| r.current().map(|k| k.cert[0].to_vec());
                (served(&ra) == Some(der.to_vec()) && served(&rb) == Some(der.to_vec()))
                    .then_some(())
                    .ok_or_else(|| "old certificate".to_owned())
            }
        },
    )
    .await;
    let text = metrics.encode().unwrap();
    assert!(
        text.contains("infergate_certificate_expiry_timestamp_seconds{certificate=\"ca\"}"),
        "{text}"
    );

    // The lease holder records which trust bundle every caBundle holds.
    eventually(
        "the injected bundle recorded",
        Duration::from_secs(15),
        async || {
            let s = secrets
                .get(selfsigned::SECRET_NAME)
                .await
                .map_err(|e| e.to_string())?;
            let recorded = s
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(rotation::INJECTED_ANNOTATION).cloned());
            (recorded == Some(rotation::bundle_id(&rotated)))
                .then_some(())
                .ok_or_else(|| format!("{recorded:?}"))
        },
    )
    .await;

    // A corrupt Secret (tls.key overwritten) is repaired, not crashed on:
    // the CA is kept and both replicas go on serving.
    let mut partial = secrets.get(selfsigned::SECRET_NAME).await.unwrap();
    partial
        .data
        .as_mut()
        .unwrap()
        .insert("tls.key".into(), ByteString(b"not a key".to_vec()));
    secrets
        .replace(selfsigned::SECRET_NAME, &PostParams::default(), &partial)
        .await
        .unwrap();
    eventually("the Secret repaired", Duration::from_secs(15), async || {
        let s = secrets
            .get(selfsigned::SECRET_NAME)
            .await
            .map_err(|e| e.to_string())?;
        let d = s.data.unwrap_or_default();
        match (d.get("tls.key"), d.get("ca.crt")) {
            (Some(k), Some(ca)) if k.0 != b"not a key" && ca.0 == a.ca.cert.as_bytes() => Ok(()),
            _ => Err("not repaired yet".to_owned()),
        }
    })
    .await;
    assert!(
        !ta.is_finished() && !tb.is_finished(),
        "the managers keep running"
    );

    // The CA rotates with an overlap: a CA with a sixth of its life left
    // gets a successor, which enters every caBundle before any certificate
    // it signs is served.
    let now = time::OffsetDateTime::now_utc();
    let old_ca = certs::generate_ca_at(
        "infergate-webhook-ca",
        Duration::from_secs(300),
        now - time::Duration::seconds(250),
    )
    .unwrap();
    let old_leaf = certs::issue_serving_at(
        &old_ca,
        &[],
        &["127.0.0.1".parse().unwrap()],
        now,
        now + time::Duration::seconds(40),
    )
    .unwrap();
    let mut aging = secrets.get(selfsigned::SECRET_NAME).await.unwrap();
    for (k, v) in [
        ("ca.crt", &old_ca.cert),
        ("ca.key", &old_ca.key),
        ("tls.crt", &old_leaf.cert),
        ("tls.key", &old_leaf.key),
    ] {
        aging
            .data
            .as_mut()
            .unwrap()
            .insert(k.into(), ByteString(v.clone().into_bytes()));
    }
    secrets
        .replace(selfsigned::SECRET_NAME, &PostParams::default(), &aging)
        .await
        .unwrap();
    // (The test swapped the CA by hand, as if the old one were lost: the
    // bundles drop the old CA while a replica may still serve a certificate
    // it signed, until that replica's next look at the Secret. From the
    // moment the bundles hold the swapped CA and both replicas serve from
    // it, every served certificate must be trusted, through the rotation.)
    eventually(
        "the swapped CA in every caBundle and served",
        Duration::from_secs(15),
        async || {
            let bundles = ca_bundles(&client, &hook_name, &crd_name).await;
            let in_bundles = bundles.iter().all(|(_, b)| b.contains(&old_ca.cert));
            let served = [&ra, &rb].iter().all(|r| {
                let leaf = r.current().unwrap().cert[0].to_vec();
                bundles.iter().all(|(_, b)| signed_by_one_of(&leaf, b))
            });
            (in_bundles && served)
                .then_some(())
                .ok_or_else(|| format!("in bundles {in_bundles}, served {served}"))
        },
    )
    .await;
    let started = std::time::Instant::now();
    let mut checks = 0;
    let new_ca = loop {
        assert!(
            started.elapsed() < Duration::from_secs(40),
            "the CA did not rotate"
        );
        let bundles = ca_bundles(&client, &hook_name, &crd_name).await;
        for r in [&ra, &rb] {
            let served = r.current().unwrap().cert[0].to_vec();
            for (what, bundle) in &bundles {
                assert!(
                    signed_by_one_of(&served, bundle),
                    "a served certificate is not trusted by the caBundle of {what}"
                );
            }
            checks += 1;
        }
        let s = secrets.get(selfsigned::SECRET_NAME).await.unwrap();
        let d = s.data.unwrap_or_default();
        let ca_now = String::from_utf8(d["ca.crt"].0.clone()).unwrap();
        let previous = d.get("previous-ca.crt").map(|p| p.0.clone());
        if ca_now != old_ca.cert
            && previous.as_deref() == Some(old_ca.cert.as_bytes())
            && [&ra, &rb].iter().all(|r| {
                signed_by_one_of(&r.current().unwrap().cert[0], std::slice::from_ref(&ca_now))
            })
        {
            break ca_now;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(checks > 10, "{checks} checks");
    let bundles = ca_bundles(&client, &hook_name, &crd_name).await;
    for (what, bundle) in &bundles {
        assert!(bundle.contains(&new_ca), "{what}");
        assert!(
            bundle.contains(&old_ca.cert),
            "{what}: the old CA stays trusted"
        );
    }

    shutdown.cancel();
    let _ = tokio::join!(ta, tb);
    let _ = cp.kubectl(&["delete", "crd", &crd_name]);
    let _ = cp.kubectl(&[
        "delete",
        "mutatingwebhookconfiguration,validatingwebhookconfiguration",
        &hook_name,
    ]);
}
