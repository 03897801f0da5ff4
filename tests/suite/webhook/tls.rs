//! The TLS listener over 127.0.0.1 with rcgen certificates: HTTP/1.1 and
//! h2 over TLS 1.2 and 1.3, certificate rotation under load, graceful
//! shutdown, mismatched keys, and the pair `infergate certs` writes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::http::{Request, StatusCode};
use infergate::webhook::listener;
use infergate::webhook::server;
use infergate::webhook::tls::certs;
use infergate::webhook::tls::{self, CertResolver};
use rustls::pki_types::ServerName;
use serde_json::Value;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use crate::support::{
    client_config, connect, install_crypto_provider, pki, review_fixture, send, webhook_state,
};

struct Running {
    addr: SocketAddr,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

async fn start_tls(router: axum::Router, resolver: Arc<CertResolver>) -> Running {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let cfg = tls::server_config(resolver).unwrap();
    let task = tokio::spawn(listener::serve_tls(
        listener,
        cfg,
        router,
        shutdown.clone(),
        Duration::from_secs(5),
        2,
    ));
    Running {
        addr,
        shutdown,
        task,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_serves_http1_and_h2_with_tls12_and_13() {
    install_crypto_provider();
    let (ca, leaf) = pki("test-ca");
    let st = webhook_state();
    st.resolver.set(
        tls::parse_pem_pair(leaf.cert.as_bytes(), leaf.key.as_bytes())
            .unwrap()
            .key,
    );
    let run = start_tls(server::router(Arc::clone(&st)), Arc::clone(&st.resolver)).await;
    let body = serde_json::to_vec(&review_fixture("validate-create-invalid.json")).unwrap();

    for tls12 in [false, true] {
        let (mut conn, _) = connect(run.addr, client_config(&[&ca], &[b"http/1.1"], tls12))
            .await
            .unwrap();
        for _ in 0..3 {
            let (status, bytes) = send(&mut conn, "/validate?timeout=10s", &body)
                .await
                .unwrap();
            assert_eq!(status, StatusCode::OK);
            let v: Value = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(v["response"]["allowed"], false);
        }
    }

    // ALPN h2 is offered and negotiated.
    let tcp = TcpStream::connect(run.addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(client_config(&[&ca], &[b"h2"], false))
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (mut h2, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tls),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    h2.ready().await.unwrap();
    let resp = h2
        .send_request(
            Request::post("https://127.0.0.1/mutate")
                .body(http_body_util::Full::new(axum::body::Bytes::from(
                    serde_json::to_vec(&review_fixture("mutate-create-minimal.json")).unwrap(),
                )))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);

    // An untrusting client fails the handshake; the server keeps serving.
    let (other_ca, _) = pki("test-ca");
    assert!(
        connect(run.addr, client_config(&[&other_ca], &[], false))
            .await
            .is_err()
    );
    assert!(
        connect(run.addr, client_config(&[&ca], &[], false))
            .await
            .is_ok()
    );

    run.shutdown.cancel();
    run.task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_files_rotate_under_load_without_losing_a_request() {
    install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let cert_path = dir.path().join("tls.crt");
    let key_path = dir.path().join("tls.key");
    let (ca1, leaf1) = pki("test-ca");
    let (ca2, leaf2) = pki("test-ca");
    std::fs::write(&cert_path, &leaf1.cert).unwrap();
    std::fs::write(&key_path, &leaf1.key).unwrap();

    let st = webhook_state();
    let initial = tls::load_files(&cert_path, &key_path).unwrap();
    st.resolver.set(initial.key);
    let run = start_tls(server::router(Arc::clone(&st)), Arc::clone(&st.resolver)).await;
    let watcher = tokio::spawn(tls::watch_files(
        cert_path.clone(),
        key_path.clone(),
        Arc::clone(&st.resolver),
        st.admission.metrics.clone(),
        Duration::from_millis(100),
        run.shutdown.clone(),
    ));

    let body = Arc::new(serde_json::to_vec(&review_fixture("mutate-create-minimal.json")).unwrap());
    let trust_both = client_config(&[&ca1, &ca2], &[b"http/1.1"], false);
    let ok = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let stop = CancellationToken::new();
    let mut workers = Vec::new();
    // Long-lived keep-alive connections (as the apiserver holds them) and
    // short-lived ones that handshake again and again.
    for w in 0..6 {
        let (body, cfg, ok, failed, stop) = (
            Arc::clone(&body),
            Arc::clone(&trust_both),
            Arc::clone(&ok),
            Arc::clone(&failed),
            stop.clone(),
        );
        let addr = run.addr;
        workers.push(tokio::spawn(async move {
            let mut conn = None;
            while !stop.is_cancelled() {
                if conn.is_none() || w % 2 == 1 {
                    conn = match connect(addr, Arc::clone(&cfg)).await {
                        Ok((c, _)) => Some(c),
                        Err(e) => {
                            eprintln!("connect failed: {e}");
                            failed.fetch_add(1, Ordering::Relaxed);
                            None
                        }
                    };
                }
                let Some(c) = conn.as_mut() else { continue };
                match send(c, "/mutate", &body).await {
                    Ok((StatusCode::OK, _)) => {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    other => {
                        eprintln!("request failed: {other:?}");
                        failed.fetch_add(1, Ordering::Relaxed);
                        conn = None;
                    }
                }
            }
        }));
    }

    // A connection opened before the rotation.
    let (mut old_conn, served_before) =
        connect(run.addr, client_config(&[&ca1], &[b"http/1.1"], false))
            .await
            .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Rotate: key first, then certificate (a half-written pair must not be served).
    std::fs::write(&key_path, &leaf2.key).unwrap();
    tokio::time::sleep(Duration::from_millis(250)).await;
    std::fs::write(&cert_path, &leaf2.cert).unwrap();

    // New handshakes get the new certificate.
    let mut rotated = false;
    for _ in 0..50 {
        if let Ok((_, served)) = connect(run.addr, client_config(&[&ca2], &[], false)).await {
            assert_ne!(served, served_before);
            rotated = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(rotated, "the new certificate was never served");
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.cancel();
    for w in workers {
        w.await.unwrap();
    }
    // The connection from before the rotation still works.
    let (status, _) = send(&mut old_conn, "/mutate", &body).await.unwrap();
    assert_eq!(status, StatusCode::OK);

    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    assert!(ok > 50, "too few requests under load: {ok}");
    assert_eq!(failed, 0, "{failed} of {} requests failed", ok + failed);
    let metrics = st.admission.metrics.encode().unwrap();
    assert!(
        metrics.contains("infergate_certificate_expiry_timestamp_seconds{certificate=\"serving\"}"),
        "{metrics}"
    );
    run.shutdown.cancel();
    run.task.await.unwrap().unwrap();
    watcher.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_accepting_and_drains_in_flight_requests() {
    install_crypto_provider();
    let (ca, leaf) = pki("test-ca");
    let resolver = Arc::new(CertResolver::new());
    resolver.set(
        tls::parse_pem_pair(leaf.cert.as_bytes(), leaf.key.as_bytes())
            .unwrap()
            .key,
    );
    let started = Arc::new(tokio::sync::Notify::new());
    let notify = Arc::clone(&started);
    let router = axum::Router::new().route(
        "/slow",
        axum::routing::post(move || {
            let notify = Arc::clone(&notify);
            async move {
                notify.notify_one();
                tokio::time::sleep(Duration::from_millis(700)).await;
                "done"
            }
        }),
    );
    let run = start_tls(router, Arc::clone(&resolver)).await;
    let cfg = client_config(&[&ca], &[b"http/1.1"], false);
    let (mut conn, _) = connect(run.addr, Arc::clone(&cfg)).await.unwrap();
    let in_flight = tokio::spawn(async move { send(&mut conn, "/slow", b"").await });
    started.notified().await;
    run.shutdown.cancel();
    let (status, body) = in_flight
        .await
        .unwrap()
        .expect("in-flight request completes");
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, b"done");
    tokio::time::timeout(Duration::from_secs(5), run.task)
        .await
        .expect("server exits after draining")
        .unwrap()
        .unwrap();
    assert!(connect(run.addr, cfg).await.is_err(), "no longer accepting");
}

#[test]
fn a_mismatched_key_is_refused() {
    install_crypto_provider();
    let (_, leaf1) = pki("test-ca");
    let (_, leaf2) = pki("test-ca");
    assert!(tls::parse_pem_pair(leaf1.cert.as_bytes(), leaf2.key.as_bytes()).is_err());
    assert!(tls::parse_pem_pair(b"", leaf1.key.as_bytes()).is_err());
    assert!(tls::parse_pem_pair(leaf1.cert.as_bytes(), b"garbage").is_err());
}

#[test]
fn certs_command_writes_a_usable_pair() {
    install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    certs::write_bundle(
        dir.path(),
        &["infergate.infergate-system.svc".to_owned()],
        &["127.0.0.1".parse().unwrap()],
        Duration::from_secs(86400),
        false,
    )
    .unwrap();
    for f in ["ca.crt", "tls.crt", "tls.key"] {
        assert!(dir.path().join(f).exists(), "{f}");
    }
    assert!(
        !dir.path().join("ca.key").exists(),
        "the CA key is written only when asked"
    );
    let sc = tls::load_files(&dir.path().join("tls.crt"), &dir.path().join("tls.key")).unwrap();
    assert!(sc.not_after > jiff::Timestamp::now().as_second());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |f: &str| {
            std::fs::metadata(dir.path().join(f))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(
            mode("tls.key"),
            0o600,
            "private keys are not world-readable"
        );
        // Files that existed world-readable become 0600 too.
        let again = tempfile::tempdir().unwrap();
        for f in ["tls.key", "ca.key"] {
            std::fs::write(again.path().join(f), "old").unwrap();
            std::fs::set_permissions(again.path().join(f), std::fs::Permissions::from_mode(0o644))
                .unwrap();
        }
        certs::write_bundle(
            again.path(),
            &["a.svc".to_owned()],
            &[],
            Duration::from_secs(86400),
            true,
        )
        .unwrap();
        for f in ["tls.key", "ca.key"] {
            let m = std::fs::metadata(again.path().join(f))
                .unwrap()
                .permissions()
                .mode()
                & 0o777;
            assert_eq!(m, 0o600, "{f}");
            assert!(
                std::fs::read_to_string(again.path().join(f))
                    .unwrap()
                    .contains("PRIVATE KEY")
            );
        }
    }
}
