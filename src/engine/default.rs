//! Defaulting with provenance (API.md section 2).

use crate::api::v1beta1::InferenceService;

use super::{Context, Defaulted};

/// Fill every default of API.md section 2, write/extend the
/// `infergate.dev/defaulted-from` annotation. Idempotent.
#[must_use]
pub fn default_service(svc: &InferenceService, ctx: &Context) -> Defaulted {
    let _ = ctx;
    Defaulted {
        object: svc.clone(),
        filled: Vec::new(),
    }
}
