//! Writing the answer: a [`Response`] as an `admission.k8s.io/v1`
//! AdmissionReview ([`encode`]).

use kube::core::Status;
use serde::Serialize;
use serde_json::value::RawValue;

use super::request::{API_VERSION, KIND, Review};

/// The answer to one review.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Response {
    /// The request's uid.
    pub uid: String,
    /// Whether the request is admitted.
    pub allowed: bool,
    /// Why not, when it is denied: code, reason, message and field causes.
    pub status: Option<Status>,
    /// A JSONPatch (JSON text) to apply to the object; never empty.
    pub patch: Option<Vec<u8>>,
    /// Warnings shown to the user.
    pub warnings: Vec<String>,
}

impl Response {
    /// Allow `review`, with nothing to say.
    #[must_use]
    pub fn allow(review: &Review) -> Self {
        Self {
            uid: review.uid.clone(),
            allowed: true,
            ..Self::default()
        }
    }
}

/// The envelope as written.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ReviewOut<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: ResponseOut<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResponseOut<'a> {
    uid: &'a str,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<&'a Status>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<Box<RawValue>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    warnings: &'a [String],
}

/// `bytes` as a JSON string of their base64 (which never needs escaping,
/// so it is written into the answer as it is, not scanned again).
fn base64_string(bytes: &[u8]) -> Result<Box<RawValue>, serde_json::Error> {
    let b64 = base64_simd::STANDARD;
    let mut json = String::with_capacity(b64.encoded_length(bytes.len()) + 2);
    json.push('"');
    json.push_str(b64.encode_to_string(bytes).as_str());
    json.push('"');
    RawValue::from_string(json)
}

/// Write `response` as an `admission.k8s.io/v1` AdmissionReview. The patch
/// is base64, as the API server expects (kube-core's own response type
/// writes it as an array of numbers).
pub fn encode(response: &Response) -> Result<Vec<u8>, serde_json::Error> {
    let patch = response.patch.as_deref().map(base64_string).transpose()?;
    let out = ReviewOut {
        api_version: API_VERSION,
        kind: KIND,
        response: ResponseOut {
            uid: &response.uid,
            allowed: response.allowed,
            status: response.status.as_ref(),
            patch_type: patch.as_ref().map(|_| "JSONPatch"),
            patch,
            warnings: &response.warnings,
        },
    };
    let mut bytes =
        Vec::with_capacity(256 + out.response.patch.as_ref().map_or(0, |p| p.get().len()));
    serde_json::to_writer(&mut bytes, &out)?;
    Ok(bytes)
}
