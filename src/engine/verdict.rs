//! The outcome of validation: errors that deny and warnings that admit.

use super::field_error::FieldError;

/// Outcome of validation: `errors` deny, `warnings` admit with warnings
/// (Warn-enforcement policy violations, identical canary, ...).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Violations that deny admission.
    pub errors: Vec<FieldError>,
    /// Messages admitted as warnings.
    pub warnings: Vec<String>,
}

impl Verdict {
    /// True when there is no error (warnings do not deny).
    #[must_use]
    pub fn allowed(&self) -> bool {
        self.errors.is_empty()
    }

    /// All errors joined, Kubernetes style: `[a: ..., b: ...]` for several, the error alone for one.
    #[must_use]
    pub fn message(&self) -> String {
        match self.errors.as_slice() {
            [] => String::new(),
            [one] => one.to_string(),
            many => format!(
                "[{}]",
                many.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}
