//! `serve` without a cluster: policies from files, admission over TLS,
//! the certificate's expiry exported, and the binary draining and exiting
//! zero on SIGTERM.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use axum::http::StatusCode;
use infergate::state::ClusterState;
use infergate::state::files::load_policies;
use infergate::webhook::tls;
use infergate::webhook::tls::certs::PemPair;
use serde_json::Value;

use crate::support::{
    ENGINE_IMAGE, Serve, apply_patch, binary, client_config, connect, decode_patch, free_port,
    http_get, install_crypto_provider, pki, readyz_within, review_fixture, send, send_with_headers,
    serve_args, serve_command_line, wait_readyz, write_pair,
};

#[test]
fn policy_files_load_both_kinds_and_reject_other_kinds() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("policies.yaml");
    std::fs::write(
        &good,
        "apiVersion: infergate.dev/v1beta1\nkind: ClusterInferencePolicy\nmetadata: {name: platform}\nspec: {priority: 1}\n---\napiVersion: infergate.dev/v1beta1\nkind: InferencePolicy\nmetadata: {name: d, namespace: team-a}\nspec: {defaults: {replicas: 2}}\n",
    )
    .unwrap();
    let policies = load_policies(std::slice::from_ref(&good)).unwrap().policies;
    assert_eq!(policies.cluster.len(), 1);
    assert_eq!(policies.namespaced.len(), 1);
    assert!(ClusterState::new(policies).is_synced());

    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
    )
    .unwrap();
    let err = load_policies(&[bad]).unwrap_err().to_string();
    assert!(err.contains("ConfigMap"), "{err}");
    assert!(load_policies(&[dir.path().join("missing.yaml")]).is_err());
}

/// Files for `serve` in `dir`: a fresh certificate pair and `policy.yaml`
/// with defaults for team-a; returns the CA.
fn write_serve_files(dir: &Path) -> PemPair {
    let (ca, leaf) = pki("test-ca");
    write_pair(dir, &leaf);
    std::fs::write(
        dir.join("policy.yaml"),
        format!(
            "apiVersion: infergate.dev/v1beta1\nkind: InferencePolicy\nmetadata: {{name: defaults, namespace: team-a}}\nspec: {{defaults: {{replicas: 4, engine: {{image: {ENGINE_IMAGE}}}}}}}\n"
        ),
    )
    .unwrap();
    ca
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_runs_without_a_cluster_from_policy_files() {
    install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let (port, probe) = (free_port().unwrap(), free_port().unwrap());
    let ca = write_serve_files(dir.path());
    let cert = std::fs::read(dir.path().join("tls.crt")).unwrap();
    let policy = dir.path().join("policy.yaml");
    let server = Serve::start(serve_args(port, probe, dir.path(), vec![policy]), None);
    wait_readyz(probe, Duration::from_secs(5)).await;

    // Admission over TLS with the defaults of the policy file.
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let (mut conn, _) = connect(addr, client_config(&[&ca], &[b"http/1.1"], false))
        .await
        .unwrap();
    let req = review_fixture("mutate-create-minimal.json");
    let (status, body) = send(
        &mut conn,
        "/mutate?timeout=10s",
        &serde_json::to_vec(&req).unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(status, StatusCode::OK);
    let v: Value = serde_json::from_slice(&body).unwrap();
    let out = apply_patch(
        req["request"]["object"].clone(),
        &decode_patch(&v["response"]).unwrap(),
    );
    assert_eq!(out["spec"]["replicas"], 4, "{out}");
    assert_eq!(out["spec"]["engine"]["image"], ENGINE_IMAGE, "{out}");

    // The certificate from the files is exported.
    let (_, metrics) = http_get(probe, "/metrics").await.unwrap();
    assert!(
        metrics.contains("infergate_certificate_expiry_timestamp_seconds{certificate=\"serving\"}"),
        "{metrics}"
    );
    let not_after = tls::pem_validity(&cert).unwrap().1;
    assert!(metrics.contains(&not_after.to_string()), "{metrics}");

    let result = server
        .stop(Duration::from_secs(10))
        .await
        .expect("serve returns after shutdown");
    assert!(result.is_ok(), "{result:?}");
    assert!(
        http_get(probe, "/healthz").await.is_err(),
        "probe listener closed"
    );
}

#[test]
fn the_binary_drains_and_exits_zero_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let (port, probe) = (free_port().unwrap(), free_port().unwrap());
    let ca = write_serve_files(dir.path());
    let policy = dir.path().join("policy.yaml");
    // Its own default log level: the test reads its "SIGTERM" line.
    let mut child = std::process::Command::new(binary())
        .args(serve_command_line(port, probe, dir.path(), &policy))
        .args(["--drain-period", "2s"])
        .env_remove("RUST_LOG")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let ready = rt.block_on(readyz_within(probe, Duration::from_secs(10)));
    if !ready {
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        panic!("not ready: {}", String::from_utf8_lossy(&out.stderr));
    }
    let status = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    // Draining: not ready at once, the webhooks still answer (HTTP/1.1
    // with `Connection: close`), then the process exits.
    let signalled = std::time::Instant::now();
    rt.block_on(async {
        let mut not_ready = false;
        for _ in 0..40 {
            if let Ok((503, why)) = http_get(probe, "/readyz").await {
                assert!(why.contains("shutting down"), "{why}");
                not_ready = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert!(not_ready, "/readyz still 200 after SIGTERM");
        let body = serde_json::to_vec(&review_fixture("validate-create-invalid.json")).unwrap();
        let (mut conn, _) = connect(
            ([127, 0, 0, 1], port).into(),
            client_config(&[&ca], &[b"http/1.1"], false),
        )
        .await
        .unwrap();
        let (status, headers, answer) = send_with_headers(&mut conn, "/validate", &body)
            .await
            .unwrap();
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
        assert_eq!(
            headers.get("connection").map(|v| v.to_str().unwrap()),
            Some("close"),
            "draining answers close HTTP/1.1 connections"
        );
        assert!(signalled.elapsed() < Duration::from_secs(2));
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(code) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            let log = String::from_utf8_lossy(&out.stderr);
            assert!(code.success(), "exit {code}: {log}");
            assert!(log.contains("SIGTERM"), "{log}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "did not exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
