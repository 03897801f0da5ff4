//! The bounds on one listener's connections: how many, and how long each
//! may take to send its first request, its next headers, or nothing.

use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;

/// File descriptors kept free of connections: the API client, watches,
/// certificate files, the probe listener, logs.
pub const FD_RESERVE: u64 = 128;

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

    pub(super) fn builder(&self) -> auto::Builder<TokioExecutor> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
