//! Serving graphs: the text examples against the committed binary fixtures,
//! `infergate graph` through the binary, and the HTTPS fetcher against a
//! local TLS graph server (rcgen certificates, bearer check, ETag, errors).
//!
//! What the fetcher's tests share (its options, the example graph) is here;
//! the tests, a module per concern:
//!
//! - [`fixtures`]: the committed `.pb` fixtures match the text examples, and
//!   the descriptors agree with the generated types field by field.
//! - [`command`]: `infergate graph` prints the DAG and the serve config,
//!   reads stdin, fits the example service, reports every violation with
//!   exit 1 and unreadable input with exit 2.
//! - [`fetch`]: the HTTPS fetcher against a local graph server: bearer and
//!   ETag, errors by category that never show the token, backoff and
//!   refresh per service, fetches in flight bounded per namespace and in
//!   all and served in the order they asked, the trusted CAs.
//! - [`resolve`]: against the real control plane: the token Secret looked
//!   up and judged, and the built RayService accepted by the API server.

#[path = "graph/command.rs"]
mod command;
#[path = "graph/fetch.rs"]
mod fetch;
#[path = "graph/fixtures.rs"]
mod fixtures;
#[path = "graph/resolve.rs"]
mod resolve;

use std::time::Duration;

use crate::support::read_fixture;
use infergate::graph::fetch::FetchOptions;

/// The fetcher's options scaled down to test time: an 800 ms deadline, a
/// 200 ms backoff doubling to 800 ms, a 1.5 s refresh interval.
fn quick() -> FetchOptions {
    FetchOptions {
        deadline: Duration::from_millis(800),
        max_bytes: 1024 * 1024,
        per_namespace: 2,
        in_flight: 8,
        queued_after: Duration::from_secs(10),
        backoff: Duration::from_millis(200),
        max_backoff: Duration::from_millis(800),
        refresh_interval: Duration::from_millis(1500),
    }
}

/// The RAG example graph, encoded.
fn rag() -> Vec<u8> {
    read_fixture("graph/rag.pb")
}
