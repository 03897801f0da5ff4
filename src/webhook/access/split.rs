//! The references of one write, split by what the cache already knows.

use crate::engine::FieldError;
use crate::engine::references::Reference;

/// The references of one write, split by what the cache already knows
/// ([`AccessReviewer::from_cache`](super::AccessReviewer::from_cache)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Split {
    /// The field errors of references the user may not use, known from the cache.
    pub denied: Vec<FieldError>,
    /// References whose answer is not known yet.
    pub ask: Vec<Reference>,
    /// The field of every reference, in the spec's order.
    pub(super) fields: Vec<String>,
}

impl Split {
    /// The known denials and `more` (errors of the references asked
    /// about), in the order of the spec's fields.
    #[must_use]
    pub fn with(self, more: Vec<FieldError>) -> Vec<FieldError> {
        let mut errors = self.denied;
        errors.extend(more);
        errors.sort_by_key(|e| {
            self.fields
                .iter()
                .position(|f| *f == e.field)
                .unwrap_or(usize::MAX)
        });
        errors
    }
}
