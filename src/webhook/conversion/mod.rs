//! `POST /convert`: apiextensions.k8s.io/v1 ConversionReview, answered with
//! the engine's lossless conversion, objects in order, in memory bounded by
//! the body.
//!
//! The review is read in one pass with a cursor over the body (`scan`):
//! `objects` is visited element by element (`envelope`), each object read
//! key by key (`object`) and converted at once (`convert`), its answer
//! written straight into the response (`write`, in pieces: `output`);
//! nothing of the whole review is ever held as a tree. The API server
//! writes `uid` and `desiredAPIVersion` before `objects`; a review that
//! does not is read a second time, the objects skipped on the first pass.
//! A review that cannot be answered so gets a failure (`failure`).
//!
//! One object: `apiVersion`, `kind`, `spec` and `status` are read typed
//! (spec and status into the typed structs of their version, by
//! serde_json), `metadata` as one slice, found and checked as JSON by the
//! `scan` module's scanner (faster than serde_json over managed fields and
//! escape-dense annotations). It is written back verbatim but for the
//! `infergate.dev/conversion-data` annotation, which is all the typed
//! conversion ([`crate::api::conversion`]) reads or writes of it. Only when
//! its bytes may hold that annotation, or the conversion has a stash to
//! add, is `metadata` read key by key (`metadata`).

mod answer;
mod convert;
mod envelope;
mod failure;
mod metadata;
mod object;
mod output;
mod scan;
mod seen;
mod write;

pub use answer::{convert_review, convert_review_pieces};
pub use convert::convert_object;
pub use scan::is_json;
