//! What one request may cost, and what happens when it asks for more:
//! body limits per endpoint, a process-wide budget of body bytes and of
//! requests in flight, deadlines for reading a body and for a whole
//! request, the bounded reading away of a refused body, and the bounded
//! pool large bodies are worked on.
//!
//! The numbers, and why they are what they are, are in `docs/limits.md`.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use http_body_util::BodyExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// Largest admission body accepted: an UPDATE review carries the object and
/// the old object, each up to the API server's 3 MiB request limit, plus
/// the envelope.
pub const ADMISSION_BODY_LIMIT: usize = 8 * 1024 * 1024;
/// Largest conversion body accepted: the API server converts a whole list
/// (or page) in one review; 32 MiB holds about 10,000 kubectl-shaped
/// services, and clients page lists at 500.
pub const CONVERSION_BODY_LIMIT: usize = 32 * 1024 * 1024;
/// Peak memory of one request, as a multiple of its body: the body, the
/// answer (about the body's size for a conversion), and the typed objects
/// of one request (about the body's size for admission).
pub const PEAK_PER_BODY_BYTE: usize = 4;
/// Memory kept outside the budget: the process at rest with its watch
/// caches, TLS and HTTP buffers of open connections, the allocator's slack.
pub const MEMORY_RESERVE: u64 = 96 * 1024 * 1024;
/// Body bytes in flight when no memory limit is known.
pub const DEFAULT_BUDGET: usize = 64 * 1024 * 1024;
/// Requests in flight (past their headers) across the process.
pub const MAX_REQUESTS_IN_FLIGHT: usize = 256;
/// Longest a request waits for room in the budget before a 503.
pub const ADMIT_WAIT: Duration = Duration::from_secs(2);
/// Deadline for reading a whole body: 32 MiB at 4 MB/s, far slower than
/// any API server on a cluster network. Counted from the request's
/// arrival (a wait for room, at most [`ADMIT_WAIT`], included).
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Deadline for a whole request, body included: the largest
/// `timeoutSeconds` a webhook registration may set.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Deadline for a probe or metrics request.
pub const PROBE_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Bodies up to this size are worked on inline, on the connection's
/// worker; larger ones on the [`Offload`] pool.
pub const INLINE_BODY_LIMIT: usize = 256 * 1024;
/// `Retry-After` of a refusal for lack of room, in seconds.
pub const RETRY_AFTER_SECS: u64 = 1;
/// Most bytes of a refused HTTP/1.1 body read and thrown away after the
/// refusal, so that a client writing its whole body before it reads the
/// answer reads the refusal instead of a reset: twice the largest body
/// limit. A body announced longer than this is not read at all (it could
/// not be read to its end within the bound); past it the connection closes.
pub const DISCARD_LIMIT: usize = 2 * CONVERSION_BODY_LIMIT;
/// Longest a refused HTTP/1.1 body is read and thrown away after the
/// refusal: [`DISCARD_LIMIT`] arrives within it at 13.4 MB/s, far slower
/// than any API server on a cluster network; past it the connection closes.
pub const DISCARD_TIMEOUT: Duration = Duration::from_secs(5);

/// The body bytes the process may hold for requests at once: what the
/// memory limit leaves after [`MEMORY_RESERVE`], divided by
/// [`PEAK_PER_BODY_BYTE`], never less than the largest body one request may
/// send (a limit too small for that is reported at start).
#[must_use]
pub fn budget_for(memory_limit: Option<u64>) -> usize {
    let Some(limit) = memory_limit else {
        return DEFAULT_BUDGET;
    };
    let room = limit.saturating_sub(MEMORY_RESERVE) / PEAK_PER_BODY_BYTE as u64;
    usize::try_from(room)
        .unwrap_or(usize::MAX)
        .max(CONVERSION_BODY_LIMIT)
}

/// The memory limit of this process's cgroup (v2 `memory.max`, else v1
/// `memory.limit_in_bytes`), when it has one.
#[must_use]
pub fn cgroup_memory_limit() -> Option<u64> {
    for path in [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ] {
        if let Ok(text) = std::fs::read_to_string(path) {
            // "max", or v1's "unlimited" (a number near i64::MAX).
            return text.trim().parse::<u64>().ok().filter(|&n| n < (1 << 62));
        }
    }
    None
}

/// Why a request was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// No room in the budget within [`ADMIT_WAIT`] (503, `Retry-After`).
    Busy,
}

/// Bytes of the [`Intake`] not taken. Not a `tokio::sync::Semaphore`: a
/// queued large request takes that semaphore's permits as they come free,
/// so small requests behind it would wait for room they do not need. Here
/// whoever fits takes room at once; the rest wait to be told room came back.
#[derive(Debug)]
struct Room {
    available: std::sync::Mutex<usize>,
    freed: tokio::sync::Notify,
}

impl Room {
    fn try_take(&self, n: usize) -> bool {
        let Ok(mut available) = self.available.lock() else {
            return false;
        };
        if *available >= n {
            *available -= n;
            true
        } else {
            false
        }
    }

    fn give_back(&self, n: usize) {
        if let Ok(mut available) = self.available.lock() {
            *available += n;
        }
        self.freed.notify_waiters();
    }

    fn available(&self) -> usize {
        self.available.lock().map_or(0, |a| *a)
    }
}

/// The process-wide intake: a budget of body bytes and of requests in flight.
#[derive(Debug)]
pub struct Intake {
    bytes: Arc<Room>,
    total_bytes: usize,
    requests: Arc<Semaphore>,
    wait: Duration,
}

/// Room taken in the [`Intake`]; given back when dropped.
#[derive(Debug)]
pub struct Admitted {
    bytes: Arc<Room>,
    taken: usize,
    _request: OwnedSemaphorePermit,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.bytes.give_back(self.taken);
    }
}

impl Intake {
    /// A budget of `bytes` body bytes and `requests` requests, waiting up
    /// to `wait` for room.
    #[must_use]
    pub fn new(bytes: usize, requests: usize, wait: Duration) -> Self {
        let bytes = bytes.max(1);
        Intake {
            bytes: Arc::new(Room {
                available: std::sync::Mutex::new(bytes),
                freed: tokio::sync::Notify::new(),
            }),
            total_bytes: bytes,
            requests: Arc::new(Semaphore::new(requests.max(1))),
            wait,
        }
    }

    /// The budget for a process with `memory_limit` ([`budget_for`]).
    #[must_use]
    pub fn for_memory_limit(memory_limit: Option<u64>) -> Self {
        Intake::new(budget_for(memory_limit), MAX_REQUESTS_IN_FLIGHT, ADMIT_WAIT)
    }

    /// Body bytes this budget holds in all.
    #[must_use]
    pub fn total_bytes(&self) -> usize {
        self.total_bytes
    }

    /// Body bytes free now.
    #[must_use]
    pub fn available_bytes(&self) -> usize {
        self.bytes.available()
    }

    /// Take room for a body of `bytes` (a body larger than the whole budget
    /// takes all of it), waiting up to the budget's wait. Whatever fits
    /// goes ahead of what waits: a small request never queues behind a
    /// large one waiting for room it does not need.
    pub async fn admit(&self, bytes: usize) -> Result<Admitted, Refused> {
        let n = bytes.clamp(1, self.total_bytes);
        // Room free now (nearly every request): taken without a timer or a
        // place in the wait list, both shared by every connection worker.
        if let Ok(request) = Arc::clone(&self.requests).try_acquire_owned()
            && self.bytes.try_take(n)
        {
            return Ok(Admitted {
                bytes: Arc::clone(&self.bytes),
                taken: n,
                _request: request,
            });
        }
        let take = async {
            let request = Arc::clone(&self.requests).acquire_owned().await.ok()?;
            loop {
                let freed = self.bytes.freed.notified();
                tokio::pin!(freed);
                freed.as_mut().enable();
                if self.bytes.try_take(n) {
                    return Some(Admitted {
                        bytes: Arc::clone(&self.bytes),
                        taken: n,
                        _request: request,
                    });
                }
                freed.await;
            }
        };
        match tokio::time::timeout(self.wait, take).await {
            Ok(Some(admitted)) => Ok(admitted),
            Ok(None) | Err(_) => Err(Refused::Busy),
        }
    }
}

/// The body's length as announced by `Content-Length`, if any.
#[must_use]
pub fn content_length(headers: &axum::http::HeaderMap) -> Option<usize> {
    headers
        .get(axum::http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// Why a body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// Longer than the endpoint accepts.
    #[error("request body is larger than the {limit} bytes this endpoint accepts")]
    TooLarge {
        /// The endpoint's limit.
        limit: usize,
    },
    /// Not read within [`BODY_READ_TIMEOUT`].
    #[error("request body was not received within {0:?}")]
    Timeout(Duration),
    /// The connection failed while reading.
    #[error("failed to read request body: {0}")]
    Read(String),
}

/// Read `body` whole, refusing more than `limit` bytes or going on past
/// `deadline` after `arrived` (the request's arrival, the one clock
/// reading its deadlines count from). A body that
/// arrives in one piece (an admission review almost always does) is kept
/// as it came, not copied; pieces are joined in one buffer sized once from
/// `declared`. On a refusal `body` holds what is still to come (see
/// [`discard`]).
pub async fn read_body(
    body: &mut Body,
    declared: Option<usize>,
    limit: usize,
    deadline: Duration,
    arrived: Instant,
) -> Result<Bytes, BodyError> {
    let read = async {
        let mut first: Option<Bytes> = None;
        let mut joined: Vec<u8> = Vec::new();
        let mut len = 0;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| BodyError::Read(e.to_string()))?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            if len + data.len() > limit {
                return Err(BodyError::TooLarge { limit });
            }
            len += data.len();
            if len == data.len() && first.is_none() {
                first = Some(data);
                continue;
            }
            if let Some(first) = first.take() {
                joined.reserve_exact(declared.unwrap_or(0).min(limit).max(len));
                joined.extend_from_slice(&first);
            }
            joined.extend_from_slice(&data);
        }
        Ok(first.unwrap_or_else(|| Bytes::from(joined)))
    };
    within(arrived + deadline, read)
        .await
        .unwrap_or(Err(BodyError::Timeout(deadline)))
}

/// `work`, given up at `until` (`Err` then). The deadline is armed only
/// once the work has waited: work done in its first poll (a body that
/// arrived with its headers, an answer worked out inline: nearly every
/// request) makes no timer, and making one clones the runtime's handle, a
/// counter every worker writes.
pub fn within<F: Future>(until: Instant, work: F) -> Within<F> {
    Within {
        work,
        until,
        timer: None,
    }
}

pin_project_lite::pin_project! {
    /// The future [`within`] returns.
    pub struct Within<F> {
        #[pin]
        work: F,
        until: Instant,
        #[pin]
        timer: Option<tokio::time::Sleep>,
    }
}

impl<F: Future> Future for Within<F> {
    type Output = Result<F::Output, ()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if let Poll::Ready(done) = this.work.poll(cx) {
            return Poll::Ready(Ok(done));
        }
        if this.timer.is_none() {
            this.timer.set(Some(tokio::time::sleep_until(*this.until)));
        }
        // Set just above when it was not: `None` does not happen.
        match this.timer.as_pin_mut() {
            Some(timer) => timer.poll(cx).map(Err),
            None => Poll::Pending,
        }
    }
}

/// What became of a refused body read and thrown away by [`discard`], and
/// how many of its bytes were read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discarded {
    /// Read to its end: the connection can close without a reset.
    Ended(u64),
    /// More than the bound arrived: reading stopped.
    TooLong(u64),
    /// Still arriving at the deadline: reading stopped.
    TimedOut(u64),
    /// The connection failed while reading.
    Failed(u64),
}

/// Read what is left of a refused `body` and throw it away, up to `limit`
/// bytes and for at most `deadline`. Nothing is kept: what it costs is the
/// connection's time and the reading, never memory.
pub async fn discard(mut body: Body, limit: usize, deadline: Duration) -> Discarded {
    let until = tokio::time::Instant::now() + deadline;
    let mut read = 0u64;
    let limit = limit as u64;
    loop {
        match tokio::time::timeout_at(until, body.frame()).await {
            Err(_) => return Discarded::TimedOut(read),
            Ok(None) => return Discarded::Ended(read),
            Ok(Some(Err(_))) => return Discarded::Failed(read),
            Ok(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    read += data.len() as u64;
                    if read > limit {
                        return Discarded::TooLong(read);
                    }
                }
            }
        }
    }
}

/// A bounded pool for work too long to do on a connection's worker:
/// decoding and answering large bodies, converting large lists. At most
/// `threads` jobs run at once (on tokio's blocking threads), the rest wait
/// in arrival order, so one client's large requests cannot hold the
/// workers that answer everyone's small ones.
#[derive(Debug)]
pub struct Offload {
    slots: Arc<Semaphore>,
}

impl Offload {
    /// A pool running at most `threads` jobs at once.
    #[must_use]
    pub fn new(threads: usize) -> Self {
        Offload {
            slots: Arc::new(Semaphore::new(threads.max(1))),
        }
    }

    /// A pool with one thread for every two cores (at least one), so
    /// large work never takes every core from small work.
    #[must_use]
    pub fn for_cores(cores: usize) -> Self {
        Offload::new(cores / 2)
    }

    /// Whether a body of `len` bytes is worked on in the pool.
    #[must_use]
    pub fn offloads(len: usize) -> bool {
        len > INLINE_BODY_LIMIT
    }

    /// Run `job` in the pool, waiting for a free thread. Work on a body
    /// [`Offload::offloads`] does not send here is done by the caller, on
    /// its own worker.
    pub async fn run<T: Send + 'static>(
        &self,
        job: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, String> {
        let _slot = Arc::clone(&self.slots)
            .acquire_owned()
            .await
            .map_err(|e| e.to_string())?;
        tokio::task::spawn_blocking(job)
            .await
            .map_err(|e| format!("worker failed: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);
    const FIFTY_MS: Duration = Duration::from_millis(50);

    #[test]
    fn the_budget_follows_the_memory_limit_and_always_fits_one_largest_body() {
        const MIB: u64 = 1024 * 1024;
        assert_eq!(budget_for(None), DEFAULT_BUDGET);
        assert_eq!(budget_for(Some(256 * MIB)), 40 * 1024 * 1024);
        assert_eq!(budget_for(Some(1024 * MIB)), 232 * 1024 * 1024);
        assert_eq!(budget_for(Some(64 * MIB)), CONVERSION_BODY_LIMIT);
        assert!(budget_for(Some(256 * MIB)) >= CONVERSION_BODY_LIMIT);
    }

    #[tokio::test]
    async fn room_is_taken_given_back_and_refused_when_short() {
        let budget = Intake::new(100, 2, Duration::from_millis(50));
        let a = budget.admit(60).await.unwrap();
        assert_eq!(budget.available_bytes(), 40);
        assert_eq!(budget.admit(50).await.unwrap_err(), Refused::Busy);
        let b = budget.admit(40).await.unwrap();
        assert_eq!(
            budget.admit(1).await.unwrap_err(),
            Refused::Busy,
            "two requests in flight"
        );
        drop(a);
        drop(b);
        assert_eq!(budget.available_bytes(), 100);
        // A body larger than the whole budget takes all of it, alone.
        let all = budget.admit(1000).await.unwrap();
        assert_eq!(budget.available_bytes(), 0);
        drop(all);
        // A small request goes ahead of a large one waiting for room.
        let held = budget.admit(50).await.unwrap();
        let (large, small) = tokio::join!(budget.admit(100), async {
            tokio::task::yield_now().await;
            budget.admit(10).await
        });
        assert!(
            small.is_ok(),
            "the small request waited behind the large one"
        );
        assert_eq!(large.unwrap_err(), Refused::Busy);
        drop((held, small));
        // A waiter gets the room as soon as it is given back.
        let held = budget.admit(100).await.unwrap();
        let waiting = budget.admit(100);
        let release = async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            drop(held);
        };
        let (got, ()) = tokio::join!(waiting, release);
        assert!(got.is_ok());
    }

    /// Many requests taking turns at room for one, on several threads:
    /// every one gets it (room given back while one waits always wakes it),
    /// and all the room is back afterwards, a refused wait's included.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn waiters_are_woken_whenever_room_comes_back() {
        let budget = Arc::new(Intake::new(10, 64, Duration::from_secs(5)));
        let turns: Vec<_> = (0..200)
            .map(|_| {
                let budget = Arc::clone(&budget);
                tokio::spawn(async move {
                    let room = budget.admit(10).await?;
                    tokio::task::yield_now().await;
                    drop(room);
                    Ok::<_, Refused>(())
                })
            })
            .collect();
        for turn in turns {
            assert_eq!(turn.await.unwrap(), Ok(()));
        }
        assert_eq!(budget.available_bytes(), 10);
        let short = Intake::new(10, 4, Duration::from_millis(20));
        let held = short.admit(10).await.unwrap();
        assert_eq!(short.admit(5).await.unwrap_err(), Refused::Busy);
        drop(held);
        assert_eq!(short.available_bytes(), 10);
    }

    #[tokio::test]
    async fn bodies_are_read_within_their_limit_and_deadline() {
        let mut body = Body::from(vec![b'x'; 10]);
        assert_eq!(
            read_body(&mut body, Some(10), 10, SECOND, Instant::now())
                .await
                .unwrap()
                .len(),
            10
        );
        let mut body = Body::from(vec![b'x'; 11]);
        assert!(matches!(
            read_body(&mut body, None, 10, SECOND, Instant::now()).await,
            Err(BodyError::TooLarge { limit: 10 })
        ));
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<axum::body::Bytes, std::io::Error>>(1);
        let mut body = Body::from_stream(tokio_stream_from(rx));
        tx.send(Ok(axum::body::Bytes::from_static(b"x")))
            .await
            .unwrap();
        let slow = read_body(&mut body, None, 10, FIFTY_MS, Instant::now()).await;
        assert!(matches!(slow, Err(BodyError::Timeout(_))), "{slow:?}");
        drop(tx);
    }

    /// A body in one piece is kept as it came; pieces are joined in order,
    /// empty ones included, and the limit counts them all.
    #[tokio::test]
    async fn bodies_in_pieces_are_joined_in_order() {
        let mut body = Body::from(axum::body::Bytes::from_static(b"whole"));
        let read = read_body(&mut body, Some(5), 5, SECOND, Instant::now()).await;
        assert_eq!(&read.unwrap()[..], b"whole");
        for (pieces, declared) in [
            (vec!["ab", "cd", "e"], Some(5)),
            (vec!["", "ab", "", "cde"], None),
            (vec!["", "", "abcde"], None),
        ] {
            let (tx, mut body) = channel_body();
            let sending = tokio::spawn(async move {
                for p in pieces {
                    tx.send(Ok(axum::body::Bytes::from_static(p.as_bytes())))
                        .await
                        .unwrap();
                }
            });
            let read = read_body(&mut body, declared, 5, SECOND, Instant::now()).await;
            assert_eq!(&read.unwrap()[..], b"abcde");
            sending.await.unwrap();
        }
        let (tx, mut body) = channel_body();
        for p in ["abc", "def"] {
            tx.send(Ok(axum::body::Bytes::from_static(p.as_bytes())))
                .await
                .unwrap();
        }
        drop(tx);
        assert!(matches!(
            read_body(&mut body, None, 5, SECOND, Instant::now()).await,
            Err(BodyError::TooLarge { limit: 5 })
        ));
    }

    /// A body streamed from a channel, and the channel's sender.
    fn channel_body() -> (
        tokio::sync::mpsc::Sender<Result<axum::body::Bytes, std::io::Error>>,
        Body,
    ) {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        (tx, Body::from_stream(tokio_stream_from(rx)))
    }

    #[tokio::test]
    async fn refused_bodies_are_read_away_within_their_bounds() {
        let chunk = axum::body::Bytes::from(vec![b'x'; 100]);
        // A body that grows over its limit, then what is still to come of
        // it: read to its end.
        let (tx, mut body) = channel_body();
        let sending = {
            let chunk = chunk.clone();
            tokio::spawn(async move {
                for _ in 0..6 {
                    tx.send(Ok(chunk.clone())).await.unwrap();
                }
            })
        };
        assert!(matches!(
            read_body(&mut body, None, 250, SECOND, Instant::now()).await,
            Err(BodyError::TooLarge { limit: 250 })
        ));
        assert_eq!(
            discard(body, 300, Duration::from_secs(1)).await,
            Discarded::Ended(300)
        );
        sending.await.unwrap();
        // More than the bound: reading stops past it.
        let (tx, body) = channel_body();
        let sending =
            tokio::spawn(async move { while tx.send(Ok(chunk.clone())).await.is_ok() {} });
        assert_eq!(
            discard(body, 250, Duration::from_secs(1)).await,
            Discarded::TooLong(300)
        );
        sending.await.unwrap();
        // Still arriving at the deadline: reading stops then.
        let (tx, body) = channel_body();
        tx.send(Ok(axum::body::Bytes::from_static(b"x")))
            .await
            .unwrap();
        assert_eq!(
            discard(body, 250, Duration::from_millis(50)).await,
            Discarded::TimedOut(1)
        );
        drop(tx);
    }

    fn tokio_stream_from<T: Send + 'static>(
        mut rx: tokio::sync::mpsc::Receiver<T>,
    ) -> impl futures::Stream<Item = T> + Send + 'static {
        futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
    }

    /// Work done in its first poll makes no timer: it runs outside any
    /// runtime, where making one would panic.
    #[test]
    fn work_done_at_once_makes_no_timer() {
        let answer = futures::executor::block_on(within(Instant::now(), async { 7 }));
        assert_eq!(answer, Ok(7));
    }

    /// Work done at once is not given up, even past its deadline (as
    /// `timeout_at` polls the work before the timer); work that waits is
    /// woken when it is ready, or given up at the deadline.
    #[tokio::test(flavor = "current_thread")]
    async fn work_is_given_up_at_its_deadline_only_when_it_waits() {
        let past = Instant::now() - SECOND;
        assert_eq!(within(past, async { 7 }).await, Ok(7));
        let (tx, rx) = tokio::sync::oneshot::channel::<u8>();
        let later = tokio::spawn(within(Instant::now() + SECOND, rx));
        tokio::task::yield_now().await;
        tx.send(3).unwrap();
        assert_eq!(later.await.unwrap(), Ok(Ok(3)));
        let start = Instant::now();
        let never = std::future::pending::<()>();
        assert_eq!(within(start + FIFTY_MS, never).await, Err(()));
        assert!(start.elapsed() >= FIFTY_MS);
        // Pending once, then ready: the timer armed after the first poll
        // does not stop it.
        let mut polls = 0;
        let twice = std::future::poll_fn(|cx| {
            polls += 1;
            if polls == 1 {
                cx.waker().wake_by_ref();
                Poll::Pending
            } else {
                Poll::Ready(polls)
            }
        });
        assert_eq!(within(Instant::now() + SECOND, twice).await, Ok(2));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn large_work_leaves_the_worker_free() {
        let pool = Offload::new(1);
        assert!(Offload::offloads(INLINE_BODY_LIMIT + 1));
        assert!(!Offload::offloads(10));
        let (release, blocked) = std::sync::mpsc::channel::<()>();
        let large = pool.run(move || {
            blocked.recv().ok();
            "large"
        });
        // On this single-threaded runtime, small work (done by the caller,
        // as the server does it) runs while the large job still blocks its
        // pool thread.
        let small = async {
            tokio::task::yield_now().await;
            let answer: Result<&str, String> = Ok("small");
            release.send(()).ok();
            answer
        };
        let (large, small) = tokio::join!(large, small);
        assert_eq!(small.unwrap(), "small");
        assert_eq!(large.unwrap(), "large");
    }
}
