//! Defaulting with provenance (the defaults are listed field by field in
//! `docs/api-reference.md`; the built-in values are in [`super::builtin`]).
//!
//! Each field takes its value from the first layer that sets it: the
//! service's own spec, then the namespace's InferencePolicy objects, then
//! the matching ClusterInferencePolicy objects, then server flags and
//! built-in values. Every field filled in now is recorded in the
//! `infergate.dev/defaulted-from` annotation; entries already there are
//! kept, so defaulting an already defaulted object changes nothing.
//!
//! The result is values and their provenance ([`super::DefaultedSpec`],
//! or [`super::Defaulted`] with the whole object); the
//! webhook turns it into a JSONPatch (`webhook::patch`).
//!
//! `service` defaults each group of fields in turn (`fit`, `placement` and
//! `picker` the groups that depend on others), each given its fields'
//! paths from `paths`; `filler` fills one field, `provenance` keeps the
//! annotation.

mod filler;
mod fit;
mod paths;
mod picker;
mod placement;
mod provenance;
mod service;

pub use filler::{SOURCE_BUILT_IN, SOURCE_FLAG};
pub use provenance::provenance_of;
pub use service::{default_service, default_spec};

#[cfg(test)]
mod full_pool_tests;
#[cfg(test)]
mod tests;
