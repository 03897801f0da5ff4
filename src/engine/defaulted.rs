//! What defaulting returns: the defaulted spec (or the whole object) and
//! where each filled-in value came from.

use std::sync::Arc;

use crate::api::v1beta1::{InferenceService, InferenceServiceSpec};

/// Where a filled-in value came from: a fixed name (`"flag"`,
/// `"built-in"`), or a name made for the request (a policy's, an
/// AcceleratorClass's) and shared by every field it fills, so a source is
/// written once per request however many fields it fills.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A name known when the server was built.
    Fixed(&'static str),
    /// A name made for the request.
    Shared(Arc<str>),
}

impl std::ops::Deref for Source {
    type Target = str;
    fn deref(&self) -> &str {
        match self {
            Source::Fixed(s) => s,
            Source::Shared(s) => s,
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self)
    }
}

impl From<&'static str> for Source {
    fn from(s: &'static str) -> Self {
        Source::Fixed(s)
    }
}

impl From<String> for Source {
    fn from(s: String) -> Self {
        Source::Shared(Arc::from(s))
    }
}

/// One defaulted field and where its value came from
/// (`"InferencePolicy/team-a/defaults"`, `"ClusterInferencePolicy/platform"`, `"flag"`, `"built-in"`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Provenance {
    /// Field path such as `spec.engine.image`.
    pub field: &'static str,
    /// Where the value came from.
    pub source: Source,
    /// Where the value filled in is, as JSON text, in [`DefaultedSpec::values`]
    /// (`None` only if it failed to serialise): every value of a call is
    /// written into one buffer, not a string each.
    pub value: Option<std::ops::Range<usize>>,
}

/// The defaulted spec and the fields filled in now
/// ([`super::default_spec`]): all the mutating webhook's patch needs (it
/// changes only the spec and one annotation), without a copy of the rest
/// of the object.
#[derive(Clone, Debug)]
pub struct DefaultedSpec {
    /// The spec with every default applied.
    pub spec: InferenceServiceSpec,
    /// Fields filled in by this call (empty for an already defaulted object).
    pub filled: Vec<Provenance>,
    /// What a user should know about a value filled in (the fit shortened the context).
    pub warnings: Vec<String>,
    /// The `infergate.dev/defaulted-from` annotation after this call
    /// (the entries already there and the fields filled now); `None` when
    /// nothing was filled.
    pub annotation: Option<DefaultedFrom>,
    /// The values filled in, as JSON text, one after another (see
    /// [`DefaultedSpec::value`]).
    pub values: Vec<u8>,
}

/// The `infergate.dev/defaulted-from` annotation's value as the mutating
/// webhook's patch carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DefaultedFrom {
    /// The annotation's value (a JSON object of field paths and sources)
    /// as a JSON string: quoted and escaped.
    pub quoted: String,
}

impl DefaultedSpec {
    /// The value `filled` was filled with, as JSON text.
    #[must_use]
    pub fn value(&self, filled: &Provenance) -> Option<&str> {
        let bytes = self.values.get(filled.value.clone()?)?;
        std::str::from_utf8(bytes).ok()
    }
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
}
