//! The accept loop, and the TLS and plain listeners built on it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::bounds::Limits;
use super::connections::{Admit, Conn, Connections};
use super::serve::{CLOSE_GRACE, Serving, serve_connection};
use super::shutdown::Drain;
use super::workers::Workers;

/// Accept connections on `listener` until `stop` resolves, registering each
/// with `connections` (shedding or refusing at the limit) and handing it
/// to `serve`.
async fn accept_loop(
    listener: &TcpListener,
    connections: &Arc<Connections>,
    stop: impl std::future::Future<Output = ()>,
    mut serve: impl FnMut(TcpStream, SocketAddr, Arc<Conn>),
) {
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => return,
            () = connections.room_for_one_more() => {}
        }
        let (stream, peer) = tokio::select! {
            () = &mut stop => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let conn = match connections.admit() {
            (Admit::Refuse, _) | (_, None) => {
                tracing::warn!(%peer, open = connections.len(), "connection limit reached with every connection busy: refused");
                continue;
            }
            (_, Some(conn)) => conn,
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(%peer, error = %e, "failed to set TCP_NODELAY");
        }
        serve(stream, peer, conn);
    }
}

/// Serve `router` over TLS on `listener` with [`Limits::webhook`], no drain
/// period, and `workers` connection workers, until `shutdown`; then stop
/// accepting and let in-flight requests finish (up to `drain`).
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    router: Router,
    shutdown: CancellationToken,
    drain: Duration,
    workers: usize,
) -> std::io::Result<()> {
    let drain = Drain {
        signal: shutdown,
        period: Duration::ZERO,
        timeout: drain,
    };
    serve_tls_with(listener, tls, router, Limits::webhook(), drain, workers).await
}

/// Serve `router` over TLS on `listener`: HTTP/1.1 and HTTP/2 (ALPN),
/// TCP_NODELAY on every accepted socket, the connection bounds of
/// `limits`, and the drain of `drain`. Connections are served by `workers`
/// threads (one single-threaded runtime each, a connection kept on one from
/// handshake to close); the accept loop runs on the caller's runtime.
pub async fn serve_tls_with(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    router: Router,
    limits: Limits,
    drain: Drain,
    workers: usize,
) -> std::io::Result<()> {
    let acceptor = TlsAcceptor::from(tls);
    let tracker = TaskTracker::new();
    let close = CancellationToken::new();
    let serving = Arc::new(Serving::new(limits, router, close.clone(), drain.timeout));
    let mut pool = Workers::start(workers)?;
    let stop_accepting = {
        let drain = drain.clone();
        async move {
            drain.signal.cancelled().await;
            if !drain.period.is_zero() {
                tracing::info!(period = ?drain.period, "draining: still serving while endpoints update");
                tokio::time::sleep(drain.period).await;
            }
        }
    };
    accept_loop(&listener, &serving.connections, stop_accepting, |stream, peer, conn| {
        // Moved to the worker's runtime: deregistered here, registered there.
        let stream = match stream.into_std() {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(%peer, error = %e, "failed to hand over a connection");
                serving.connections.remove(conn.id);
                return;
            }
        };
        let acceptor = acceptor.clone();
        let serving = Arc::clone(&serving);
        pool.spawn(tracker.track_future(async move {
            let id = conn.id;
            let first_request_by = Instant::now() + serving.limits.first_request_timeout;
            let served = async {
                let stream = TcpStream::from_std(stream).map_err(|e| e.to_string())?;
                let handshake = tokio::time::timeout_at(first_request_by.into(), acceptor.accept(stream));
                let tls = tokio::select! {
                    r = handshake => match r {
                        Ok(Ok(s)) => s,
                        Ok(Err(e)) => return Err(format!("tls handshake failed: {e}")),
                        Err(_) => return Err("tls handshake timed out".to_owned()),
                    },
                    () = conn.shed.cancelled() => return Err("shed during the tls handshake".to_owned()),
                    () = serving.close.cancelled() => return Ok(()),
                };
                serve_connection(tls, peer, Arc::clone(&conn), &serving).await;
                Ok(())
            };
            if let Err(e) = served.await {
                tracing::debug!(%peer, error = %e, "connection closed");
            }
            serving.connections.remove(id);
        }));
    })
    .await;
    drop(listener);
    close.cancel();
    tracker.close();
    tokio::select! {
        () = tracker.wait() => tracing::info!("tls listener drained"),
        () = tokio::time::sleep(drain.timeout + CLOSE_GRACE) => tracing::warn!("drain timeout: closing remaining connections"),
    }
    pool.stop().await;
    Ok(())
}

/// Connection workers for the TLS listener: the cores this process may use.
#[must_use]
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

/// Serve the probe router over plain HTTP on `listener` with `limits`, on
/// the caller's runtime, until `shutdown`.
pub async fn serve_plain(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    shutdown: CancellationToken,
) {
    let tracker = TaskTracker::new();
    let serving = Arc::new(Serving::new(limits, router, shutdown.clone(), CLOSE_GRACE));
    accept_loop(
        &listener,
        &serving.connections,
        shutdown.cancelled_owned(),
        |stream, peer, conn| {
            let serving = Arc::clone(&serving);
            tracker.spawn(async move {
                let id = conn.id;
                serve_connection(stream, peer, conn, &serving).await;
                serving.connections.remove(id);
            });
        },
    )
    .await;
    drop(listener);
    tracker.close();
    let _ = tokio::time::timeout(CLOSE_GRACE * 2, tracker.wait()).await;
}

/// Bind a TCP listener, with a clear error.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("failed to bind {addr}: {e}")))
}
