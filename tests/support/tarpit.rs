//! A tarpit: a TCP server on 127.0.0.1 that accepts connections and never
//! answers, noting when each came and when its close was noticed (a graph
//! host that holds infergate's fetches for their whole deadline).

use std::io::Read;
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How late the tarpit may notice a connection's close. The fetcher closes
/// a connection before it hands its slot to the next fetch, but the thread
/// reading the closed connection can wake after the next one was accepted;
/// a fetch beyond the limit would stay open for the whole deadline (4 s or
/// more), far longer than this.
pub const CLOSE_NOTICED_WITHIN: Duration = Duration::from_millis(500);

/// When one connection was accepted and when its close was noticed.
#[derive(Clone, Copy)]
pub struct Span {
    /// When it was accepted.
    pub start: Instant,
    /// When its close was noticed.
    pub end: Option<Instant>,
}

/// Connections, of one tarpit or of several sharing them.
pub type Spans = Arc<Mutex<Vec<Span>>>;

/// The most connections open at one instant, a close counted
/// [`CLOSE_NOTICED_WITHIN`] before it was noticed.
pub fn most_at_once(spans: &Spans) -> usize {
    let now = Instant::now();
    let mut edges: Vec<(Instant, i32)> = Vec::new();
    for span in spans.lock().expect("lock").iter() {
        let end = span
            .end
            .map_or(now, |e| e.checked_sub(CLOSE_NOTICED_WITHIN).unwrap_or(e))
            .max(span.start);
        if end > span.start {
            edges.push((span.start, 1));
            edges.push((end, -1));
        }
    }
    // At one instant, closes before opens.
    edges.sort();
    let (mut open, mut most) = (0i32, 0i32);
    for (_, d) in edges {
        open += d;
        most = most.max(open);
    }
    usize::try_from(most).unwrap_or(0)
}

/// Accepts connections and never answers; notes when each came and when
/// its close was noticed (in `spans`, shared with other tarpits or not).
pub struct Tarpit {
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Connections open now.
    pub open: Arc<AtomicUsize>,
    /// Its connections (maybe shared with other tarpits).
    pub spans: Spans,
    came: Arc<Mutex<Vec<Instant>>>,
}

impl Tarpit {
    /// A tarpit of its own.
    pub fn start() -> Self {
        Self::sharing(Spans::default())
    }

    /// A tarpit noting its connections in `spans`.
    pub fn sharing(spans: Spans) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind tarpit");
        let port = listener.local_addr().expect("addr").port();
        let came = Arc::new(Mutex::new(Vec::new()));
        let open = Arc::new(AtomicUsize::new(0));
        let (o, sp, c) = (open.clone(), spans.clone(), came.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let start = Instant::now();
                c.lock().expect("lock").push(start);
                o.fetch_add(1, Ordering::SeqCst);
                let index = {
                    let mut spans = sp.lock().expect("lock");
                    spans.push(Span { start, end: None });
                    spans.len() - 1
                };
                let (o, sp) = (o.clone(), sp.clone());
                // Read (the ClientHello) and say nothing until the peer gives up.
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    while matches!(stream.read(&mut buf), Ok(n) if n > 0) {}
                    sp.lock().expect("lock")[index].end = Some(Instant::now());
                    o.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        Self {
            port,
            open,
            spans,
            came,
        }
    }

    /// Connections so far.
    pub fn total(&self) -> usize {
        self.came.lock().expect("lock").len()
    }

    /// When the first connection came.
    pub fn first(&self) -> Option<Instant> {
        self.came.lock().expect("lock").first().copied()
    }
}
