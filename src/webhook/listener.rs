//! The listeners: the accept loops, the connection workers, the limits and
//! deadlines every connection lives under, graceful drain, and the shutdown
//! signal. What is served on them is in [`super::server`].
//!
//! Every connection has a bound on its time and the process a bound on their
//! number (see [`Limits`]): the TLS handshake, the protocol preface and the
//! first request's headers must arrive within
//! [`Limits::first_request_timeout`] of the accept (hyper's own header
//! timeout starts only after the preface, and hyper-util's protocol
//! detection has none); later request headers within
//! [`Limits::header_read_timeout`]; an idle keep-alive connection is closed
//! after [`Limits::idle_timeout`] (longer than the 90 s Go clients, the API
//! server among them, keep theirs, so the client always closes first and
//! never writes into a connection being closed). At
//! [`Limits::max_connections`] the connection idle the longest is shed for a
//! new one; when none is idle, the new one is refused. Request bodies and
//! whole requests have deadlines of their own in [`super::limits`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

/// Time in-flight requests get to finish once the listener stops accepting.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(25);
/// Time an idle or shed connection gets to close cleanly (HTTP/2 GOAWAY).
const CLOSE_GRACE: Duration = Duration::from_secs(1);
/// File descriptors kept free of connections: the API client, watches,
/// certificate files, the probe listener, logs.
pub const FD_RESERVE: u64 = 128;
/// Shed connections still closing, beyond the limit, before the accept
/// loop waits for them (part of [`FD_RESERVE`]).
const CLOSING_SLACK: usize = 32;

/// Bounds on the connections of one listener.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most connections open at once; at the limit the longest-idle one is
    /// shed for a new one, or the new one refused when none is idle.
    pub max_connections: usize,
    /// From accept to the first request's headers: TLS handshake, protocol
    /// preface (HTTP/1.1 or HTTP/2) and headers. A connection that never
    /// sends a request is cut after this.
    pub first_request_timeout: Duration,
    /// Time to read the headers of a later request on a kept-alive HTTP/1.1
    /// connection, from its first byte (see `Watched`).
    pub header_read_timeout: Duration,
    /// An open connection with no request in flight for this long is closed.
    pub idle_timeout: Duration,
    /// HTTP/2 streams (requests) in flight on one connection.
    pub h2_max_concurrent_streams: u32,
}

impl Limits {
    /// The webhook port: the API server keeps up to 25 idle HTTP/1.1
    /// connections per webhook host and closes them after 90 s idle.
    #[must_use]
    pub fn webhook() -> Self {
        Limits {
            max_connections: 1000,
            first_request_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            h2_max_concurrent_streams: 8,
        }
    }

    /// The probe port: the kubelet opens a connection per probe, Prometheus
    /// keeps one per scrape target.
    #[must_use]
    pub fn probe() -> Self {
        Limits {
            max_connections: 64,
            first_request_timeout: Duration::from_secs(5),
            header_read_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(120),
            h2_max_concurrent_streams: 4,
        }
    }

    /// These limits with `max_connections` lowered to what `open_files` (the
    /// soft `RLIMIT_NOFILE`) allows after [`FD_RESERVE`].
    #[must_use]
    pub fn within_open_files(mut self, open_files: u64) -> Self {
        let room = usize::try_from(open_files.saturating_sub(FD_RESERVE)).unwrap_or(usize::MAX);
        self.max_connections = self.max_connections.min(room).max(1);
        self
    }

    fn builder(&self) -> auto::Builder<TokioExecutor> {
        let mut builder = auto::Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            // hyper's header timeout also runs while a kept-alive
            // connection waits for its next request, closing it after
            // this long idle; `Watched` times headers from their first byte.
            .header_read_timeout(None)
            .keep_alive(true);
        builder
            .http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(self.h2_max_concurrent_streams)
            .keep_alive_interval(Some(Duration::from_secs(30)))
            .keep_alive_timeout(Duration::from_secs(10));
        builder
    }
}

/// Raise the soft `RLIMIT_NOFILE` to the hard limit (connections are file
/// descriptors; containers often start with a soft limit of 1024) and
/// return the limit now in force.
pub fn raise_open_files_limit() -> std::io::Result<u64> {
    rlimit::increase_nofile_limit(u64::MAX)
}

/// How the TLS listener stops: on `signal` it keeps serving for `period`
/// (the time an endpoint update takes to reach every API server), answering
/// HTTP/1.1 with `Connection: close` so clients move to other replicas;
/// then it stops accepting, closes idle connections, and gives in-flight
/// requests up to `timeout`.
#[derive(Clone, Debug)]
pub struct Drain {
    /// Cancelled when the process is asked to stop.
    pub signal: CancellationToken,
    /// Serving after the signal.
    pub period: Duration,
    /// Waiting for in-flight requests after that.
    pub timeout: Duration,
}

/// Connections whose socket is still open, shed ones included.
#[derive(Debug, Default)]
struct Live {
    count: std::sync::atomic::AtomicUsize,
    closed: tokio::sync::Notify,
}

/// One open connection, as the accept loop and the connection see it.
/// Dropped (with its last reference, after its socket) it counts as closed.
#[derive(Debug)]
struct Conn {
    id: u64,
    live: Arc<Live>,
    /// Milliseconds since the tracker's epoch at the last request's end
    /// (the accept, before the first request).
    last_active: AtomicU64,
    in_flight: AtomicU32,
    requests: AtomicU64,
    /// Milliseconds since the epoch, plus one, at the first byte of the
    /// next HTTP/1.1 request read while none is in flight (0: none).
    reading_since: AtomicU64,
    /// Poked when `reading_since` is set: the deadline moved closer.
    activity: tokio::sync::Notify,
    shed: CancellationToken,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.live.count.fetch_sub(1, Ordering::AcqRel);
        self.live.closed.notify_waiters();
    }
}

/// The open connections of one listener.
#[derive(Debug)]
struct Connections {
    live: Arc<Live>,
    epoch: Instant,
    next_id: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Conn>>>,
    max: usize,
}

/// What to do with a new connection.
#[derive(Debug, PartialEq, Eq)]
enum Admit {
    /// Serve it.
    Serve,
    /// Serve it; the longest-idle connection (this id) was shed for it.
    Shed(u64),
    /// Refuse it: every connection is busy.
    Refuse,
}

impl Connections {
    fn new(max: usize) -> Self {
        Connections {
            live: Arc::default(),
            epoch: Instant::now(),
            next_id: AtomicU64::new(0),
            open: Mutex::new(HashMap::new()),
            max: max.max(1),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn instant(&self, ms: u64) -> Instant {
        self.epoch + Duration::from_millis(ms)
    }

    fn len(&self) -> usize {
        self.open.lock().map_or(0, |m| m.len())
    }

    /// Register a new connection, shedding the longest-idle one at the limit.
    fn admit(&self) -> (Admit, Option<Arc<Conn>>) {
        let Ok(mut open) = self.open.lock() else {
            return (Admit::Refuse, None);
        };
        let mut admit = Admit::Serve;
        if open.len() >= self.max {
            let idlest = open
                .values()
                .filter(|c| c.in_flight.load(Ordering::Acquire) == 0)
                .min_by_key(|c| c.last_active.load(Ordering::Acquire))
                .map(|c| c.id);
            match idlest.and_then(|id| open.remove(&id)) {
                Some(shed) => {
                    shed.shed.cancel();
                    admit = Admit::Shed(shed.id);
                }
                None => return (Admit::Refuse, None),
            }
        }
        self.live.count.fetch_add(1, Ordering::AcqRel);
        let conn = Arc::new(Conn {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            live: Arc::clone(&self.live),
            last_active: AtomicU64::new(self.now_ms()),
            in_flight: AtomicU32::new(0),
            requests: AtomicU64::new(0),
            reading_since: AtomicU64::new(0),
            activity: tokio::sync::Notify::new(),
            shed: CancellationToken::new(),
        });
        open.insert(conn.id, Arc::clone(&conn));
        (admit, Some(conn))
    }

    /// Wait while the sockets still open (shed ones closing included) are
    /// more than the limit allows: each is a file descriptor.
    async fn room_for_one_more(&self) {
        loop {
            let closed = self.live.closed.notified();
            if self.live.count.load(Ordering::Acquire) < self.max + CLOSING_SLACK {
                return;
            }
            // Notified on every close; the timeout covers a close between
            // the check and the wait.
            let _ = tokio::time::timeout(Duration::from_millis(10), closed).await;
        }
    }

    fn remove(&self, id: u64) {
        if let Ok(mut open) = self.open.lock() {
            open.remove(&id);
        }
    }

    /// When `conn` is next due to be closed, if nothing happens meanwhile.
    fn deadline(&self, conn: &Conn, limits: &Limits) -> Instant {
        let last = self.instant(conn.last_active.load(Ordering::Acquire));
        if conn.in_flight.load(Ordering::Acquire) > 0 {
            // Requests carry their own deadlines; look again later.
            Instant::now() + limits.idle_timeout
        } else if conn.requests.load(Ordering::Acquire) == 0 {
            last + limits.first_request_timeout
        } else {
            let idle = last + limits.idle_timeout;
            match conn.reading_since.load(Ordering::Acquire) {
                0 => idle,
                since => idle.min(self.instant(since - 1) + limits.header_read_timeout),
            }
        }
    }
}

/// Marks a request in flight on its connection for as long as it lives.
struct InFlight {
    conn: Arc<Conn>,
    connections: Arc<Connections>,
}

impl InFlight {
    fn start(conn: &Arc<Conn>, connections: &Arc<Connections>) -> Self {
        conn.in_flight.fetch_add(1, Ordering::AcqRel);
        conn.requests.fetch_add(1, Ordering::AcqRel);
        conn.reading_since.store(0, Ordering::Release);
        InFlight {
            conn: Arc::clone(conn),
            connections: Arc::clone(connections),
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.conn
            .last_active
            .store(self.connections.now_ms(), Ordering::Release);
        self.conn.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

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
struct Serving {
    builder: auto::Builder<TokioExecutor>,
    limits: Limits,
    connections: Arc<Connections>,
    router: Router,
    /// Cancelled when the listener stops: close gracefully within `close_grace`.
    close: CancellationToken,
    close_grace: Duration,
}

impl Serving {
    fn new(
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
async fn serve_connection<I>(io: I, peer: SocketAddr, conn: Arc<Conn>, serving: &Serving)
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

/// Connection workers: `n` threads, each running a single-threaded runtime.
/// Every accepted connection is handed to one of them in turn and stays
/// there from the TLS handshake to the close, so a request never crosses
/// threads and no work is stolen back and forth: on a small machine this
/// serves more requests per core than a work-stealing pool. Work that takes
/// long (large bodies) leaves them: see [`super::limits::Offload`].
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

    #[test]
    fn at_the_limit_the_longest_idle_connection_is_shed_and_busy_ones_never() {
        let connections = Arc::new(Connections::new(3));
        let mut conns = Vec::new();
        for _ in 0..3 {
            let (admit, conn) = connections.admit();
            assert_eq!(admit, Admit::Serve);
            conns.push(conn.unwrap());
        }
        // 0 idle since accept, 1 busy, 2 idle after a request that ended later.
        conns[0].last_active.store(10, Ordering::Release);
        let busy = InFlight::start(&conns[1], &connections);
        conns[2].last_active.store(20, Ordering::Release);
        conns[2].requests.store(1, Ordering::Release);

        let (admit, fourth) = connections.admit();
        assert_eq!(admit, Admit::Shed(conns[0].id));
        assert!(conns[0].shed.is_cancelled());
        assert_eq!(connections.len(), 3);
        let fourth = fourth.unwrap();
        fourth.last_active.store(30, Ordering::Release);

        let (admit, _) = connections.admit();
        assert_eq!(
            admit,
            Admit::Shed(conns[2].id),
            "the older of the idle ones goes next"
        );
        // Now: 1 busy, the fourth and fifth idle since their accept.
        let _fourth_busy = InFlight::start(&fourth, &connections);
        let (admit, sixth) = connections.admit();
        assert!(matches!(admit, Admit::Shed(_)));
        let _sixth_busy = InFlight::start(&sixth.unwrap(), &connections);
        let (admit, none) = connections.admit();
        assert_eq!(
            admit,
            Admit::Refuse,
            "every connection busy: the new one is refused"
        );
        assert!(none.is_none());
        assert!(
            !conns[1].shed.is_cancelled(),
            "a busy connection is never shed"
        );
        drop(busy);
    }

    #[test]
    fn deadlines_follow_the_connection_state() {
        let limits = Limits::webhook();
        let connections = Arc::new(Connections::new(4));
        let (_, conn) = connections.admit();
        let conn = conn.unwrap();
        let accepted = connections.instant(conn.last_active.load(Ordering::Acquire));
        assert_eq!(
            connections.deadline(&conn, &limits),
            accepted + limits.first_request_timeout,
            "no request yet: cut after the first-request timeout"
        );
        conn.requests.store(1, Ordering::Release);
        assert_eq!(
            connections.deadline(&conn, &limits),
            accepted + limits.idle_timeout
        );
        // The next request's first byte: its headers have the header timeout.
        conn.reading_since.store(1000 + 1, Ordering::Release);
        assert_eq!(
            connections.deadline(&conn, &limits),
            connections.instant(1000) + limits.header_read_timeout
        );
        let guard = InFlight::start(&conn, &connections);
        assert_eq!(
            conn.reading_since.load(Ordering::Acquire),
            0,
            "headers read"
        );
        drop(guard);
        conn.in_flight.store(1, Ordering::Release);
        assert!(connections.deadline(&conn, &limits) > Instant::now() + limits.idle_timeout / 2);
    }

    #[test]
    fn idle_keep_alive_outlives_the_api_servers_and_first_requests_are_quick() {
        for limits in [Limits::webhook(), Limits::probe()] {
            assert!(limits.idle_timeout > Duration::from_secs(90), "{limits:?}");
            assert!(
                limits.first_request_timeout <= Duration::from_secs(10),
                "{limits:?}"
            );
        }
        assert_eq!(
            Limits::webhook().within_open_files(1024).max_connections,
            1024 - 128
        );
        assert_eq!(
            Limits::webhook().within_open_files(1 << 20).max_connections,
            1000
        );
        assert_eq!(Limits::webhook().within_open_files(10).max_connections, 1);
    }
}
