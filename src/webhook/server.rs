//! What the listeners serve: the TLS router (`/mutate`, `/validate`,
//! `/convert`) and the plain-HTTP probe router (`/healthz`, `/readyz`,
//! `/metrics`), with the state both share. The listeners themselves are in
//! [`super::listener`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, FromRequest, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use crate::metrics::Webhook;
use crate::webhook::admission::{Admission, BadReview};
use crate::webhook::tls::CertResolver;

/// Largest admission body accepted: an UPDATE review carries the object and
/// the old object, each up to the API server's 3 MiB, plus the envelope.
pub const ADMISSION_BODY_LIMIT: usize = 8 * 1024 * 1024;
/// Largest conversion body accepted: the API server sends whole lists.
pub const CONVERSION_BODY_LIMIT: usize = 32 * 1024 * 1024;

/// Shared state of both listeners.
#[derive(Debug)]
pub struct AppState {
    /// Admission handlers and the watched state they read.
    pub admission: Admission,
    /// The certificate the TLS listener serves.
    pub resolver: Arc<CertResolver>,
    /// Set once the TLS listener is bound.
    pub tls_bound: AtomicBool,
}

impl AppState {
    /// The state of a server not yet bound, answering from the watched
    /// `state` with the flag defaults `server`, serving the certificate
    /// `resolver` holds.
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
            },
            resolver,
            tls_bound: AtomicBool::new(false),
        }
    }

    /// Ready: TLS bound, a certificate loaded, the policy cache synced.
    pub fn readiness(&self) -> Result<(), &'static str> {
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

/// The request body, limited, with every rejection answered as JSON
/// (413 beyond the limit, 400 when unreadable).
pub struct Body(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for Body {
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Bytes::from_request(req, state).await {
            Ok(b) => Ok(Body(b)),
            Err(rejection) => {
                let status = rejection.status();
                let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
                    "request body is larger than the webhook accepts".to_owned()
                } else {
                    format!("failed to read request body: {}", rejection.body_text())
                };
                Err(json_error(status, message))
            }
        }
    }
}

fn admission_response(state: &AppState, webhook: Webhook, body: &[u8]) -> Response {
    match state.admission.handle(webhook, body) {
        Ok(answer) => match answer.to_json() {
            Ok(bytes) => ([(header::CONTENT_TYPE, "application/json")], bytes).into_response(),
            Err(e) => json_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("failed to serialize response: {e}"),
            ),
        },
        Err(e @ (BadReview::Decode(_) | BadReview::WrongType { .. } | BadReview::NoRequest)) => {
            tracing::info!(webhook = webhook.as_str(), error = %e, "rejected malformed admission request");
            json_error(StatusCode::BAD_REQUEST, e.to_string())
        }
    }
}

async fn mutate(State(state): State<Arc<AppState>>, Body(body): Body) -> Response {
    admission_response(&state, Webhook::Mutate, &body)
}

async fn validate(State(state): State<Arc<AppState>>, Body(body): Body) -> Response {
    admission_response(&state, Webhook::Validate, &body)
}

async fn convert(State(state): State<Arc<AppState>>, Body(body): Body) -> Response {
    let review = crate::webhook::conversion::convert_review(&body, &state.admission.metrics);
    axum::Json(review).into_response()
}

async fn not_found() -> Response {
    json_error(StatusCode::NOT_FOUND, "no such endpoint".to_owned())
}

/// The TLS router: `POST /mutate`, `POST /validate`, `POST /convert`.
/// Query strings (`?timeout=10s`) are ignored.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route(
            "/mutate",
            post(mutate).layer(DefaultBodyLimit::max(ADMISSION_BODY_LIMIT)),
        )
        .route(
            "/validate",
            post(validate).layer(DefaultBodyLimit::max(ADMISSION_BODY_LIMIT)),
        )
        .route(
            "/convert",
            post(convert).layer(DefaultBodyLimit::max(CONVERSION_BODY_LIMIT)),
        )
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

/// The plain-HTTP probe router: `/healthz`, `/readyz`, `/metrics`.
pub fn probe_router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}
