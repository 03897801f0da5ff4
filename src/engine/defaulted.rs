//! What defaulting returns: the defaulted object and where each filled-in
//! value came from.

use std::borrow::Cow;

use crate::api::v1beta1::InferenceService;

/// One defaulted field and where its value came from
/// (`"InferencePolicy/team-a/defaults"`, `"ClusterInferencePolicy/platform"`, `"flag"`, `"built-in"`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Provenance {
    /// Field path such as `spec.engine.image`.
    pub field: &'static str,
    /// Where the value came from.
    pub source: Cow<'static, str>,
    /// The value filled in, as JSON text (`None` only if it failed to serialise).
    pub value: Option<String>,
}

/// The defaulted object and the fields filled in now.
#[derive(Clone, Debug)]
pub struct Defaulted {
    /// The object with every default applied and the annotation updated.
    pub object: InferenceService,
    /// Fields filled in by this call (empty for an already defaulted object).
    pub filled: Vec<Provenance>,
    /// What a user should know about a value filled in (the fit shortened the context).
    pub warnings: Vec<String>,
    /// The defaulted-from annotation of `object` as a JSON string (quoted
    /// and escaped, as a patch carries it), written with the annotation;
    /// `None` when nothing was filled.
    pub annotation_json: Option<String>,
}
