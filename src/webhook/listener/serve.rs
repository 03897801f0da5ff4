//! Serving one connection: HTTP/1.1 or HTTP/2 under the connection's
//! deadlines, until it closes, idles out, is shed, or the listener closes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use super::bounds::Limits;
use super::connections::{Conn, Connections, InFlight};

/// Time an idle or shed connection gets to close cleanly (HTTP/2 GOAWAY).
pub(super) const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// A connection's (plaintext) stream that notes when the bytes of a new
/// HTTP/1.1 request start arriving while none is in flight, so its headers
/// can be timed from their first byte rather than from the end of the last
/// request. HTTP/2 (recognised by its preface) sends frames of its own
/// while idle and is left untimed here.
struct Watched<I> {
    io: I,
    conn: Arc<Conn>,
    connections: Arc<Connections>,
    /// Whether the client speaks HTTP/2, once its first bytes tell.
    h2: Option<bool>,
}

impl<I: AsyncRead + Unpin> AsyncRead for Watched<I> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        const H2_PREFACE: &[u8] = b"PRI ";
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.io).poll_read(cx, buf);
        let read = &buf.filled()[before..];
        if read.is_empty() {
            return polled;
        }
        if self.h2.is_none() {
            let n = read.len().min(H2_PREFACE.len());
            self.h2 = Some(read[..n] == H2_PREFACE[..n]);
        }
        let conn = &self.conn;
        if self.h2 == Some(false)
            && conn.requests.load(Ordering::Acquire) > 0
            && conn.in_flight.load(Ordering::Acquire) == 0
            && conn.reading_since.load(Ordering::Acquire) == 0
        {
            conn.reading_since
                .store(self.connections.now_ms() + 1, Ordering::Release);
            conn.activity.notify_one();
        }
        polled
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Watched<I> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// What every connection of one listener shares.
pub(super) struct Serving {
    builder: auto::Builder<TokioExecutor>,
    pub(super) limits: Limits,
    pub(super) connections: Arc<Connections>,
    router: Router,
    /// Cancelled when the listener stops: close gracefully within `close_grace`.
    pub(super) close: CancellationToken,
    close_grace: Duration,
}

impl Serving {
    pub(super) fn new(
        limits: Limits,
        router: Router,
        close: CancellationToken,
        close_grace: Duration,
    ) -> Self {
        Serving {
            builder: limits.builder(),
            connections: Arc::new(Connections::new(limits.max_connections)),
            limits,
            router,
            close,
            close_grace,
        }
    }
}

/// Serve HTTP/1.1 or HTTP/2 on one accepted (and, for TLS, handshaken)
/// stream until the client closes it, it idles out, it is shed, or the
/// listener closes.
pub(super) async fn serve_connection<I>(io: I, peer: SocketAddr, conn: Arc<Conn>, serving: &Serving)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (connections, limits, close) = (&serving.connections, &serving.limits, &serving.close);
    let service = {
        let conn = Arc::clone(&conn);
        let connections = Arc::clone(connections);
        let router = serving.router.clone();
        tower::service_fn(move |req: hyper::Request<Incoming>| {
            let guard = InFlight::start(&conn, &connections);
            let router = router.clone();
            async move {
                let response = router.oneshot(req).await;
                drop(guard);
                response
            }
        })
    };
    let io = Watched {
        io,
        conn: Arc::clone(&conn),
        connections: Arc::clone(connections),
        h2: None,
    };
    let connection = serving
        .builder
        .serve_connection(TokioIo::new(io), TowerToHyperService::new(service));
    tokio::pin!(connection);
    let grace = loop {
        let due = connections.deadline(&conn, limits);
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
                return;
            }
            () = tokio::time::sleep_until(due.into()) => {
                if connections.deadline(&conn, limits) <= Instant::now() {
                    tracing::debug!(%peer, "closing an idle connection");
                    break CLOSE_GRACE;
                }
            }
            () = conn.activity.notified() => {}
            () = conn.shed.cancelled() => {
                tracing::debug!(%peer, "shedding the longest-idle connection for a new one");
                break CLOSE_GRACE;
            }
            () = close.cancelled() => break serving.close_grace,
        }
    };
    connection.as_mut().graceful_shutdown();
    match tokio::time::timeout(grace, connection).await {
        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "connection ended with an error"),
        Err(_) => tracing::debug!(%peer, "connection did not close in time: dropped"),
        Ok(Ok(())) => {}
    }
}
