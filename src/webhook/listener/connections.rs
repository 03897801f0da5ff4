//! The open connections of one listener: each registered at its accept,
//! shed or refused at the limit, and its next deadline.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::bounds::Limits;

/// Shed connections still closing, beyond the limit, before the accept
/// loop waits for them (part of [`FD_RESERVE`](super::bounds::FD_RESERVE)).
const CLOSING_SLACK: usize = 32;

/// Connections whose socket is still open, shed ones included.
#[derive(Debug, Default)]
struct Live {
    count: std::sync::atomic::AtomicUsize,
    closed: tokio::sync::Notify,
}

/// One open connection, as the accept loop and the connection see it.
/// Dropped (with its last reference, after its socket) it counts as closed.
#[derive(Debug)]
pub(super) struct Conn {
    pub(super) id: u64,
    live: Arc<Live>,
    /// Milliseconds since the tracker's epoch at the last request's end
    /// (the accept, before the first request).
    last_active: AtomicU64,
    pub(super) in_flight: AtomicU32,
    pub(super) requests: AtomicU64,
    /// Milliseconds since the epoch, plus one, at the first byte of the
    /// next HTTP/1.1 request read while none is in flight (0: none).
    pub(super) reading_since: AtomicU64,
    /// Poked when `reading_since` is set: the deadline moved closer.
    pub(super) activity: tokio::sync::Notify,
    pub(super) shed: CancellationToken,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.live.count.fetch_sub(1, Ordering::AcqRel);
        self.live.closed.notify_waiters();
    }
}

/// The open connections of one listener.
#[derive(Debug)]
pub(super) struct Connections {
    live: Arc<Live>,
    epoch: Instant,
    next_id: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Conn>>>,
    max: usize,
}

/// What to do with a new connection.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Admit {
    /// Serve it.
    Serve,
    /// Serve it; the longest-idle connection (this id) was shed for it.
    Shed(u64),
    /// Refuse it: every connection is busy.
    Refuse,
}

impl Connections {
    pub(super) fn new(max: usize) -> Self {
        Connections {
            live: Arc::default(),
            epoch: Instant::now(),
            next_id: AtomicU64::new(0),
            open: Mutex::new(HashMap::new()),
            max: max.max(1),
        }
    }

    pub(super) fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn instant(&self, ms: u64) -> Instant {
        self.epoch + Duration::from_millis(ms)
    }

    pub(super) fn len(&self) -> usize {
        self.open.lock().map_or(0, |m| m.len())
    }

    /// Register a new connection, shedding the longest-idle one at the limit.
    pub(super) fn admit(&self) -> (Admit, Option<Arc<Conn>>) {
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
    pub(super) async fn room_for_one_more(&self) {
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

    pub(super) fn remove(&self, id: u64) {
        if let Ok(mut open) = self.open.lock() {
            open.remove(&id);
        }
    }

    /// When `conn` is next due to be closed, if nothing happens meanwhile.
    pub(super) fn deadline(&self, conn: &Conn, limits: &Limits) -> Instant {
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
pub(super) struct InFlight {
    conn: Arc<Conn>,
    connections: Arc<Connections>,
}

impl InFlight {
    pub(super) fn start(conn: &Arc<Conn>, connections: &Arc<Connections>) -> Self {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
