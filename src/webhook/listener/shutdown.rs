//! How the listeners stop: the shutdown signal and the TLS listener's drain.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// Time in-flight requests get to finish once the listener stops accepting.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(25);

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
