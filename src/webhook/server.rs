//! What the listeners serve: the TLS router (`/mutate`, `/validate`,
//! `/convert`) and the plain-HTTP probe router (`/healthz`, `/readyz`,
//! `/metrics`), with the state both share. The listeners themselves are in
//! [`super::listener`]; what a request may cost is in [`super::limits`].
//!
//! Every webhook request goes the same way: a body announced over the
//! endpoint's limit is refused (413) before it is read; room for it is
//! taken in the process-wide [`Intake`] (503 with `Retry-After` when there
//! is none in time); the body is read within its deadline (413 when it
//! grows over the limit); the work runs inline when the body is small and
//! in the [`Offload`] pool when it is not; the answer holds its room in the
//! budget until it is written.
//!
//! A refusal sent before the body is read whole must still reach a client
//! that writes its whole body before it reads (most do): closing a socket
//! with unread bytes makes the kernel send a reset, which the client meets
//! on its write or read before it reads the answer. So on HTTP/1.1 a
//! refusal closes the connection (`Connection: close`) only after what is
//! still arriving of the body has been read and thrown away, within
//! [`limits::DISCARD_LIMIT`] bytes and [`limits::DISCARD_TIMEOUT`]
//! (`Leftover`). On HTTP/2 the stream alone ends: the answer is sent,
//! then the stream is reset with `NO_ERROR`, the protocol's "stop sending",
//! and the connection stays open.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, Version, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::time::Instant;

use crate::metrics::Webhook;
use crate::telemetry::Bounded;
use crate::webhook::admission::{Admission, Answer, BadReview};
use crate::webhook::limits::{self, Admitted, BodyError, Discarded, Intake, Offload, Refused};
use crate::webhook::tls::CertResolver;

pub use crate::webhook::limits::{ADMISSION_BODY_LIMIT, CONVERSION_BODY_LIMIT};

/// Shared state of both listeners.
#[derive(Debug)]
pub struct AppState {
    /// Admission handlers and the watched state they read.
    pub admission: Admission,
    /// The certificate the TLS listener serves.
    pub resolver: Arc<CertResolver>,
    /// Set once the TLS listener is bound.
    pub tls_bound: AtomicBool,
    /// Set on SIGTERM: `/readyz` answers 503 and HTTP/1.1 answers carry
    /// `Connection: close`, while the webhooks keep answering.
    pub draining: AtomicBool,
    /// Body bytes and requests in flight.
    pub intake: Intake,
    /// Where large bodies are worked on.
    pub offload: Offload,
}

impl AppState {
    /// The state of a server not yet bound, answering from the watched
    /// `state` with the flag defaults `server`, serving the certificate
    /// `resolver` holds, with the budget of a process without a memory
    /// limit and an offload pool for the cores this process may use.
    #[must_use]
    pub fn new(
        state: Arc<crate::state::ClusterState>,
        server: crate::engine::ServerDefaults,
        metrics: crate::metrics::Metrics,
        resolver: Arc<CertResolver>,
    ) -> Self {
        AppState {
            admission: Admission {
                state,
                server,
                metrics,
                access: crate::webhook::access::AccessReviewer::default(),
                ledger: crate::state::ledger::Ledger::default(),
                names: crate::state::names::NamesLedger::default(),
                owners: crate::webhook::confine::Owners::default(),
            },
            resolver,
            tls_bound: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            intake: Intake::for_memory_limit(None),
            offload: Offload::for_cores(crate::webhook::listener::default_workers()),
        }
    }

    /// This state with `intake` in place of the default one.
    #[must_use]
    pub fn with_intake(mut self, intake: Intake) -> Self {
        self.intake = intake;
        self
    }

    /// This state asking `access` about references (the default has no
    /// API server to ask, and denies every reference).
    #[must_use]
    pub fn with_access(mut self, access: crate::webhook::access::AccessReviewer) -> Self {
        self.admission.access = access;
        self
    }

    /// This state charging service writes in `ledger` (the default has no
    /// API server to write to, and denies every charge it must record).
    #[must_use]
    pub fn with_ledger(mut self, ledger: crate::state::ledger::Ledger) -> Self {
        self.admission.ledger = ledger;
        self
    }

    /// This state records the names of services routed by name in `names`
    /// (the default has no API server: such a write is denied).
    #[must_use]
    pub fn with_names(mut self, names: crate::state::names::NamesLedger) -> Self {
        self.admission.names = names;
        self
    }

    /// This state asking the API server with `owners` about the services
    /// that control infergate's own child writes (the default has none to
    /// ask, and denies what the watch cache does not confirm).
    #[must_use]
    pub fn with_owners(mut self, owners: crate::webhook::confine::Owners) -> Self {
        self.admission.owners = owners;
        self
    }

    /// This state with `offload` in place of the default pool.
    #[must_use]
    pub fn with_offload(mut self, offload: Offload) -> Self {
        self.offload = offload;
        self
    }

    /// Ready: not draining, TLS bound, a certificate loaded, the policy
    /// cache synced.
    pub fn readiness(&self) -> Result<(), &'static str> {
        if self.draining.load(Ordering::Acquire) {
            return Err("shutting down");
        }
        if !self.tls_bound.load(Ordering::Acquire) {
            return Err("tls listener not bound");
        }
        if !self.resolver.is_loaded() {
            return Err("no serving certificate loaded");
        }
        if !self.admission.state.is_synced() {
            return Err("policy cache not synced");
        }
        Ok(())
    }
}

/// A JSON error body: `{"error": "..."}`.
fn json_error(status: StatusCode, message: String) -> Response {
    (status, axum::Json(serde_json::json!({ "error": message }))).into_response()
}

/// The webhook endpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Endpoint {
    Mutate,
    Validate,
    Convert,
}

impl Endpoint {
    fn body_limit(self) -> usize {
        match self {
            Endpoint::Mutate | Endpoint::Validate => limits::ADMISSION_BODY_LIMIT,
            Endpoint::Convert => limits::CONVERSION_BODY_LIMIT,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Endpoint::Mutate => "mutate",
            Endpoint::Validate => "validate",
            Endpoint::Convert => "convert",
        }
    }
}

/// An answer's body that keeps its request's room in the budget until the
/// last byte is handed to the connection.
struct Held {
    pieces: Pieces,
    _room: Admitted,
}

/// An answer's bytes, in the order they are sent: one piece (every
/// admission answer: no list to allocate) or several (a conversion's).
enum Pieces {
    One(Option<Bytes>),
    Many(std::collections::VecDeque<Bytes>),
}

impl Pieces {
    /// One piece. Its buffer is trimmed to its length first (in place for
    /// an answer sized close to its length), so that it becomes `Bytes`
    /// without an allocation of its own.
    fn one(mut bytes: Vec<u8>) -> Self {
        bytes.shrink_to_fit();
        Pieces::One(Some(Bytes::from(bytes)))
    }

    fn many(pieces: Vec<Vec<u8>>) -> Self {
        Pieces::Many(pieces.into_iter().map(Bytes::from).collect())
    }

    fn next(&mut self) -> Option<Bytes> {
        match self {
            Pieces::One(one) => one.take(),
            Pieces::Many(many) => many.pop_front(),
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            Pieces::One(one) => one.is_none(),
            Pieces::Many(many) => many.is_empty(),
        }
    }

    fn len(&self) -> u64 {
        match self {
            Pieces::One(one) => one.as_ref().map_or(0, |b| b.len() as u64),
            Pieces::Many(many) => many.iter().map(|b| b.len() as u64).sum(),
        }
    }
}

impl http_body::Body for Held {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.pieces.next().map(|b| Ok(http_body::Frame::data(b))))
    }

    fn is_end_stream(&self) -> bool {
        self.pieces.is_empty()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.pieces.len())
    }
}

/// What the synchronous part of a request worked out.
enum Worked {
    /// The answer, in pieces to be sent in order.
    Done(StatusCode, Pieces),
    /// An admission answer that waits for access reviews.
    Pending(Box<Answer>),
}

/// Work out the answer to `body` (synchronous: inline or in the pool).
fn answer(state: &AppState, endpoint: Endpoint, body: &[u8], start: Instant) -> Worked {
    let webhook = match endpoint {
        Endpoint::Mutate => Webhook::Mutate,
        Endpoint::Validate => Webhook::Validate,
        Endpoint::Convert => {
            return Worked::Done(
                StatusCode::OK,
                Pieces::many(crate::webhook::conversion::convert_review_pieces(
                    body,
                    &state.admission.metrics,
                )),
            );
        }
    };
    match state
        .admission
        .handle_since(webhook, body, start.into_std())
    {
        Ok(answer) if answer.pending.is_some() => Worked::Pending(Box::new(answer)),
        Ok(answer) => {
            let (status, bytes) = encode_answer(&answer);
            Worked::Done(status, Pieces::one(bytes))
        }
        Err(e @ (BadReview::Decode(_) | BadReview::WrongType { .. } | BadReview::NoRequest)) => {
            let message = e.to_string();
            tracing::info!(webhook = webhook.as_str(), error = %Bounded(&message), "rejected malformed admission request");
            let (status, bytes) =
                error_bytes(StatusCode::BAD_REQUEST, &Bounded(&message).to_string());
            Worked::Done(status, Pieces::one(bytes))
        }
    }
}

fn encode_answer(answer: &Answer) -> (StatusCode, Vec<u8>) {
    match answer.to_json() {
        Ok(bytes) => (StatusCode::OK, bytes),
        Err(e) => error_bytes(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("failed to serialize response: {e}"),
        ),
    }
}

fn error_bytes(status: StatusCode, message: &str) -> (StatusCode, Vec<u8>) {
    let bytes = serde_json::to_vec(&serde_json::json!({ "error": message }))
        .unwrap_or_else(|_| b"{\"error\":\"internal error\"}".to_vec());
    (status, bytes)
}

/// What is left of a body whose request is refused before it was read
/// whole, and how it is dealt with once the refusal is sent.
struct Leftover {
    body: Body,
    endpoint: Endpoint,
    http1: bool,
    /// The client waits for `100 Continue` before it sends the body, and
    /// none was sent (nothing of the body was read).
    awaits_continue: bool,
    /// Body bytes announced and not read yet.
    announced: Option<usize>,
}

impl Leftover {
    /// Send `response` as the answer, dealing with the rest of the body
    /// (see the module docs).
    fn refuse(self, mut response: Response) -> Response {
        if !self.http1 {
            // Dropped here: once the answer is sent, hyper resets the
            // stream with NO_ERROR and the client stops sending.
            return response;
        }
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        if self.awaits_continue {
            // No `100 Continue` goes out: the body never comes.
            return response;
        }
        if self.announced.is_some_and(|n| n > limits::DISCARD_LIMIT) {
            // It could not be read to its end within the bound.
            return response;
        }
        let (body, endpoint) = (self.body, self.endpoint);
        tokio::spawn(async move {
            let discarded =
                limits::discard(body, limits::DISCARD_LIMIT, limits::DISCARD_TIMEOUT).await;
            match discarded {
                Discarded::Ended(_) => {}
                Discarded::TooLong(n) | Discarded::TimedOut(n) => tracing::info!(
                    endpoint = endpoint.as_str(),
                    discarded = n,
                    limit = limits::DISCARD_LIMIT,
                    timeout = ?limits::DISCARD_TIMEOUT,
                    "a refused body was still arriving past its bound: connection closed"
                ),
                Discarded::Failed(n) => tracing::debug!(
                    endpoint = endpoint.as_str(),
                    discarded = n,
                    "connection failed while a refused body was read"
                ),
            }
        });
        response
    }
}

fn busy(endpoint: Endpoint) -> Response {
    tracing::warn!(
        endpoint = endpoint.as_str(),
        "no room for the request in the in-flight budget: refused with 503"
    );
    let mut response = json_error(
        StatusCode::SERVICE_UNAVAILABLE,
        "too much work in flight: retry shortly".to_owned(),
    );
    response.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(limits::RETRY_AFTER_SECS),
    );
    response
}

fn too_large(limit: usize) -> Response {
    json_error(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("request body is larger than the {limit} bytes this endpoint accepts"),
    )
}

/// One webhook request, from headers to answer (see the module docs).
async fn webhook(
    state: Arc<AppState>,
    endpoint: Endpoint,
    request: Request,
    start: Instant,
) -> Response {
    let limit = endpoint.body_limit();
    let declared = limits::content_length(request.headers());
    let http1 = request.version() <= Version::HTTP_11;
    let awaits_continue = http1
        && request
            .headers()
            .get(header::EXPECT)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let mut body = request.into_body();
    let unread = |body| Leftover {
        body,
        endpoint,
        http1,
        awaits_continue,
        announced: declared,
    };
    if declared.is_some_and(|n| n > limit) {
        return unread(body).refuse(too_large(limit));
    }
    let room = match state.intake.admit(declared.unwrap_or(limit)).await {
        Ok(room) => room,
        Err(Refused::Busy) => return unread(body).refuse(busy(endpoint)),
    };
    let body = match limits::read_body(&mut body, declared, limit, limits::BODY_READ_TIMEOUT, start)
        .await
    {
        Ok(body) => body,
        Err(e @ BodyError::TooLarge { .. }) => {
            // Read in part: `100 Continue` went out, and no length was
            // announced (a body over an announced length does not frame).
            let rest = Leftover {
                awaits_continue: false,
                announced: None,
                ..unread(body)
            };
            return rest.refuse(json_error(StatusCode::PAYLOAD_TOO_LARGE, e.to_string()));
        }
        Err(e @ BodyError::Timeout(_)) => {
            return json_error(StatusCode::REQUEST_TIMEOUT, e.to_string());
        }
        Err(e @ BodyError::Read(_)) => return json_error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let len = body.len();
    let (worked, room) = if Offload::offloads(len) {
        // The job owns the body and the room: a request abandoned at its
        // deadline still holds its room until the work on it has ended.
        let job_state = Arc::clone(&state);
        let job = move || {
            let worked = answer(&job_state, endpoint, &body, start);
            drop(body);
            (worked, room)
        };
        match state.offload.run(job).await {
            Ok(done) => done,
            Err(e) => {
                return json_error(StatusCode::INTERNAL_SERVER_ERROR, e);
            }
        }
    } else {
        // Answered on this worker, within this poll: no job to own the
        // state (a clone of the state's `Arc` is a write to a counter every
        // worker shares).
        let worked = answer(&state, endpoint, &body, start);
        drop(body);
        (worked, room)
    };
    let (status, pieces) = match worked {
        Worked::Done(status, pieces) => (status, pieces),
        Worked::Pending(pending) => {
            // Boxed: its waits (access reviews, the ledgers) would
            // otherwise size every request's future, moved whole.
            let answer = Box::pin(state.admission.finish(*pending)).await;
            let (status, bytes) = encode_answer(&answer);
            (status, Pieces::one(bytes))
        }
    };
    let held = Held {
        pieces,
        _room: room,
    };
    let mut response = Response::new(Body::new(held));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if http1 && state.draining.load(Ordering::Acquire) {
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// Bound a webhook request by [`limits::REQUEST_TIMEOUT`] from `start`.
async fn deadline(
    endpoint: Endpoint,
    start: Instant,
    work: impl Future<Output = Response>,
) -> Response {
    match limits::within(start + limits::REQUEST_TIMEOUT, work).await {
        Ok(response) => response,
        Err(()) => {
            tracing::warn!(
                endpoint = endpoint.as_str(),
                "request did not complete within its deadline"
            );
            json_error(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "request did not complete within {:?}",
                    limits::REQUEST_TIMEOUT
                ),
            )
        }
    }
}

/// One request to `endpoint`: the clock is read once, at its start, for
/// every deadline and the time it took.
async fn serve_endpoint(state: Arc<AppState>, endpoint: Endpoint, request: Request) -> Response {
    let start = Instant::now();
    deadline(endpoint, start, webhook(state, endpoint, request, start)).await
}

async fn mutate(State(state): State<Arc<AppState>>, request: Request) -> Response {
    serve_endpoint(state, Endpoint::Mutate, request).await
}

async fn validate(State(state): State<Arc<AppState>>, request: Request) -> Response {
    serve_endpoint(state, Endpoint::Validate, request).await
}

async fn convert(State(state): State<Arc<AppState>>, request: Request) -> Response {
    serve_endpoint(state, Endpoint::Convert, request).await
}

async fn not_found() -> Response {
    json_error(StatusCode::NOT_FOUND, "no such endpoint".to_owned())
}

/// The TLS router: `POST /mutate`, `POST /validate`, `POST /convert`.
/// Query strings (`?timeout=10s`) are ignored.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/mutate", post(mutate))
        .route("/validate", post(validate))
        .route("/convert", post(convert))
        .fallback(not_found)
        .with_state(state)
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    match state.readiness() {
        Ok(()) => (StatusCode::OK, "ok").into_response(),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why).into_response(),
    }
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    match state.admission.metrics.encode() {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// The plain-HTTP probe router: `/healthz`, `/readyz`, `/metrics`, each
/// within [`limits::PROBE_REQUEST_TIMEOUT`].
pub fn probe_router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            limits::PROBE_REQUEST_TIMEOUT,
        ))
        .with_state(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of the future `handler` returns.
    fn future_size<F, Fut>(_: &F) -> usize
    where
        F: Fn(State<Arc<AppState>>, Request) -> Fut,
    {
        std::mem::size_of::<Fut>()
    }

    /// A request's future is moved into its box whole, on every request:
    /// the rare waits (access reviews, the ledgers) are boxed apart so
    /// they do not size it. 16 KB with them inline, about 2 KB without.
    #[test]
    fn a_webhook_request_future_stays_small() {
        for (name, size) in [
            ("mutate", future_size(&mutate)),
            ("validate", future_size(&validate)),
            ("convert", future_size(&convert)),
        ] {
            assert!(size <= 4096, "/{name}: a request's future is {size} bytes");
        }
    }
}
