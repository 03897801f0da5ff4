//! The listeners: the TLS accept loop with its connection workers, limits,
//! timeouts and graceful drain, the plain-HTTP probe listener, and the
//! shutdown signal. What is served on them is in [`super::server`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

/// Time a client has to send the request headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Time a client has to finish the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Time in-flight requests get to finish after a shutdown signal.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(25);

/// Connection workers: `n` threads, each running a single-threaded runtime.
/// Every accepted connection is handed to one of them in turn and stays
/// there from the TLS handshake to the close, so a request never crosses
/// threads and no work is stolen back and forth: on a small machine this
/// serves more requests per core than a work-stealing pool.
struct Workers {
    handles: Vec<tokio::runtime::Handle>,
    threads: Vec<std::thread::JoinHandle<()>>,
    next: usize,
    stop: CancellationToken,
}

impl Workers {
    fn start(n: usize) -> std::io::Result<Self> {
        let stop = CancellationToken::new();
        let mut workers = Workers {
            handles: Vec::with_capacity(n),
            threads: Vec::with_capacity(n),
            next: 0,
            stop: stop.clone(),
        };
        for i in 0..n.max(1) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            workers.handles.push(runtime.handle().clone());
            let stop = stop.clone();
            let thread = std::thread::Builder::new()
                .name(format!("webhook-{i}"))
                .spawn(move || runtime.block_on(stop.cancelled()))?;
            workers.threads.push(thread);
        }
        Ok(workers)
    }

    /// Run `task` on the next worker.
    fn spawn(&mut self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        let handle = &self.handles[self.next % self.handles.len()];
        self.next = self.next.wrapping_add(1);
        drop(handle.spawn(task));
    }

    /// Stop the workers (dropping any connection still open) and wait for them.
    async fn stop(mut self) {
        self.stop.cancel();
        let threads = std::mem::take(&mut self.threads);
        let joined = tokio::task::spawn_blocking(move || {
            for t in threads {
                let _ = t.join();
            }
        });
        if let Err(e) = joined.await {
            tracing::warn!(error = %e, "failed to join the connection workers");
        }
    }
}

/// Workers dropped without [`Workers::stop`] (a failed start, or the serving
/// future dropped before it returns) still end their threads.
impl Drop for Workers {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Serve `router` over TLS on `listener` until `shutdown`, then stop
/// accepting, let in-flight requests finish (up to `drain`), and return.
/// HTTP/1.1 and HTTP/2 (ALPN), TCP_NODELAY on every accepted socket, a
/// header-read timeout and a handshake timeout. Connections are served by
/// `workers` threads (one single-threaded runtime each, a connection kept
/// on one from handshake to close); the accept loop runs on the
/// caller's runtime.
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    router: Router,
    shutdown: CancellationToken,
    drain: Duration,
    workers: usize,
) -> std::io::Result<()> {
    let acceptor = TlsAcceptor::from(tls);
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(Some(HEADER_READ_TIMEOUT))
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(Duration::from_secs(30)));
    let builder = Arc::new(builder);
    let mut pool = Workers::start(workers)?;
    loop {
        let (stream, peer) = tokio::select! {
            () = shutdown.cancelled() => break,
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
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(%peer, error = %e, "failed to set TCP_NODELAY");
        }
        // Moved to the worker's runtime: deregistered here, registered there.
        let stream = match stream.into_std() {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(%peer, error = %e, "failed to hand over a connection");
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let builder = Arc::clone(&builder);
        let router = router.clone();
        let watcher = graceful.watcher();
        pool.spawn(async move {
            let stream = match tokio::net::TcpStream::from_std(stream) {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "failed to register a connection");
                    return;
                }
            };
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "tls handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "tls handshake timed out");
                    return;
                }
            };
            let service = TowerToHyperService::new(router);
            let conn = builder.serve_connection(TokioIo::new(tls), service);
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("tls listener drained"),
        () = tokio::time::sleep(drain) => tracing::warn!("drain timeout: closing remaining connections"),
    }
    pool.stop().await;
    Ok(())
}

/// Connection workers for the TLS listener: the cores this process may use.
#[must_use]
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

/// Serve the probe router on `listener` until `shutdown`.
pub async fn serve_plain(listener: TcpListener, router: Router, shutdown: CancellationToken) {
    let result = axum::serve(listener, router)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await;
    if let Err(e) = result {
        tracing::warn!(error = %e, "probe listener failed");
    }
}

/// Bind a TCP listener, with a clear error.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("failed to bind {addr}: {e}")))
}

/// Install the SIGTERM and SIGINT handlers now (call inside the runtime,
/// before anything is served, so a signal sent as soon as the server is
/// ready is never met by the default action) and return the future that
/// waits for either and then cancels `token`.
pub fn signal_shutdown(
    token: CancellationToken,
) -> std::io::Result<impl std::future::Future<Output = ()>> {
    #[cfg(unix)]
    let (mut term, mut int) = {
        use tokio::signal::unix::{SignalKind, signal};
        (
            signal(SignalKind::terminate())?,
            signal(SignalKind::interrupt())?,
        )
    };
    Ok(async move {
        #[cfg(unix)]
        tokio::select! {
            _ = int.recv() => tracing::info!("SIGINT received: shutting down"),
            _ = term.recv() => tracing::info!("SIGTERM received: shutting down"),
            () = token.cancelled() => return,
        }
        #[cfg(not(unix))]
        tokio::select! {
            _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received: shutting down"),
            () = token.cancelled() => return,
        }
        token.cancel();
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether a task spawned on `handle` still runs (its runtime is alive).
    async fn alive(handle: &tokio::runtime::Handle) -> bool {
        handle.spawn(async {}).await.is_ok()
    }

    #[tokio::test]
    async fn workers_end_when_stopped_or_dropped() {
        let mut workers = Workers::start(2).unwrap();
        assert_eq!(workers.handles.len(), 2);
        let handles = workers.handles.clone();
        for h in &handles {
            assert!(alive(h).await);
        }
        // Connections go round the workers.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for _ in 0..4 {
            let tx = tx.clone();
            workers.spawn(async move {
                let _ = tx.send(std::thread::current().name().map(str::to_owned));
            });
        }
        let mut names = Vec::new();
        for _ in 0..4 {
            names.push(rx.recv().await.unwrap().unwrap());
        }
        names.sort();
        assert_eq!(names, ["webhook-0", "webhook-0", "webhook-1", "webhook-1"]);

        workers.stop().await;
        for h in &handles {
            assert!(!alive(h).await, "stopped worker still runs tasks");
        }

        let workers = Workers::start(1).unwrap();
        let handle = workers.handles[0].clone();
        drop(workers);
        let mut ended = false;
        for _ in 0..200 {
            if !alive(&handle).await {
                ended = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(ended, "a dropped worker's thread did not end");
    }
}
