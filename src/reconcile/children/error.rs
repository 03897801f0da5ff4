//! Why a child could not be built.

/// Why desired state could not be built (the validator normally catches these first).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BuildError {
    /// The object has no name or uid, so no owner reference can point at it.
    #[error("object has no name or uid to own children")]
    NoOwner,
    /// No engine image after defaulting.
    #[error("spec.engine.image is not set: set it, a policy default, or --default-engine-image")]
    MissingEngineImage,
    /// The canary section is missing where a canary child was asked for.
    #[error("spec.canary is not set")]
    NoCanary,
    /// A health check duration does not parse.
    #[error("{field}: {message}")]
    Duration {
        /// The field path.
        field: &'static str,
        /// The parse error.
        message: String,
    },
    /// The route path does not render.
    #[error("{0}")]
    Route(String),
    /// No endpoint picker image after defaulting (`endpointPicker.mode: Owned`).
    #[error(
        "spec.routing.endpointPicker.image is not set: set it, a policy default, or endpointPicker.mode: None"
    )]
    MissingEndpointPickerImage,
    /// A built object could not be serialized for its digest.
    #[error("cannot serialize a built object: {0}")]
    Serialize(String),
}
