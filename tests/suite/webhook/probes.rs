//! The probe endpoints: readiness waits for TLS and a certificate, and the
//! metrics count the requests.

use std::sync::atomic::Ordering;

use axum::http::StatusCode;
use infergate::webhook::tls;

use crate::support::{
    get_probe, install_crypto_provider, pki, post, review, review_fixture, webhook_state,
};

#[tokio::test]
async fn readiness_waits_for_tls_and_certificates_and_metrics_count_requests() {
    install_crypto_provider();
    let st = webhook_state();
    assert_eq!(get_probe(&st, "/healthz").await.0, StatusCode::OK);
    assert_eq!(
        get_probe(&st, "/readyz").await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    st.tls_bound.store(true, Ordering::Release);
    let (status, why) = get_probe(&st, "/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(why.contains("certificate"), "{why}");
    let (ca, leaf) = pki("test-ca");
    let _ = ca;
    st.resolver.set(
        tls::parse_pem_pair(leaf.cert.as_bytes(), leaf.key.as_bytes())
            .unwrap()
            .key,
    );
    assert_eq!(get_probe(&st, "/readyz").await.0, StatusCode::OK);

    review(
        &st,
        "/validate",
        &review_fixture("validate-create-invalid.json"),
    )
    .await;
    review(
        &st,
        "/mutate",
        &review_fixture("mutate-create-minimal.json"),
    )
    .await;
    post(
        &st,
        "/convert",
        &review_fixture("convert-alpha-to-beta.json"),
    )
    .await;
    let (status, text) = get_probe(&st, "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    for needle in [
        r#"infergate_admission_requests_total{webhook="validate",operation="CREATE",allowed="false"} 1"#,
        r#"infergate_admission_requests_total{webhook="mutate",operation="CREATE",allowed="true"} 1"#,
        r#"infergate_admission_duration_seconds_bucket{le="#,
        r#"infergate_conversion_objects_total{from="v1alpha1",to="v1beta1",result="success"} 2"#,
        r#"infergate_conversion_objects_total{from="v1beta1",to="v1beta1",result="success"} 1"#,
        r#"infergate_reconcile_total{result="success"} 0"#,
        "# TYPE infergate_reconcile_duration_seconds histogram",
    ] {
        assert!(text.contains(needle), "missing {needle} in\n{text}");
    }
}
