//! The answer to a review that failed: `result.status: Failure`, the
//! reason, the uid echoed and no converted objects.

use crate::telemetry::Bounded;

/// The review's `apiVersion`.
pub(super) const API_VERSION: &str = "apiextensions.k8s.io/v1";
/// The review's `kind`.
pub(super) const KIND: &str = "ConversionReview";

/// Why a review failed, and which object.
pub(super) struct Failure {
    pub(super) uid: String,
    pub(super) desired: String,
    pub(super) message: String,
    pub(super) object: Option<FailedObject>,
}

/// The object a review failed on.
pub(super) struct FailedObject {
    pub(super) index: usize,
    pub(super) name: String,
    pub(super) from: String,
}

impl Failure {
    pub(super) fn unreadable(e: &str) -> Self {
        Failure {
            uid: String::new(),
            desired: String::new(),
            message: format!(
                "request body is not an apiextensions.k8s.io/v1 ConversionReview: {}",
                Bounded(e)
            ),
            object: None,
        }
    }

    /// The failed ConversionReview (uid echoed, `convertedObjects` empty).
    pub(super) fn write(&self, out: &mut Vec<u8>) {
        let answer = serde_json::json!({
            "apiVersion": API_VERSION,
            "kind": KIND,
            "response": {
                "uid": self.uid,
                "result": {"status": "Failure", "message": self.message, "reason": "ConversionFailed"},
                "convertedObjects": [],
            }
        });
        // Serializing a json! value into a Vec cannot fail.
        let _ = serde_json::to_writer(out, &answer);
    }
}
