//! The `admission.k8s.io/v1` AdmissionReview on the wire: [`decode`] turns
//! a request body into a typed [`Review`], [`encode`] writes a [`Response`]
//! back as an AdmissionReview.
//!
//! One set of wire types, read with serde_json: the request's fields, and
//! each object decoded once, straight into the type of the request's kind
//! (no `serde_json::Value` is built and nothing of the body is copied).
//! Fields no admission rule reads are skipped unparsed: `options`, and of
//! an InferenceService its `managedFields` and `status`
//! (which do not exist at admission: see the route templates in
//! `docs/api-reference.md`). See [`decode`] for the one-pass reading of the
//! common review.
//!
//! - `request`: the typed [`Review`] and its [`Object`]s;
//! - `incoming`: [`decode`], [`decode_by_slices`] and the wire types they
//!   read, and [`BadReview`];
//! - `answer`: the [`Response`] and [`encode`].

mod answer;
mod incoming;
mod request;

pub use answer::{Response, encode};
pub use incoming::{BadReview, decode, decode_by_slices};
pub use request::{API_VERSION, KIND, Name, Object, ObjectKind, ObjectResource, Review};

#[cfg(test)]
mod tests;
