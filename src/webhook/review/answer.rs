//! Writing the answer: a [`Response`] as an `admission.k8s.io/v1`
//! AdmissionReview ([`encode`]).

use kube::core::Status;

use super::request::{API_VERSION, KIND, Review};
use crate::engine::json_text;

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

/// Write `response` as an `admission.k8s.io/v1` AdmissionReview. The patch
/// is base64, as the API server expects (kube-core's own response type
/// writes it as an array of numbers), encoded straight into the answer:
/// base64 never needs escaping. The envelope is written field by field in
/// the order a `Serialize` derive of it writes (`tests` checks it byte for
/// byte against one); the status goes through serde.
pub fn encode(response: &Response) -> Result<Vec<u8>, serde_json::Error> {
    let b64 = base64_simd::STANDARD;
    let patch_len = response
        .patch
        .as_ref()
        .map_or(0, |p| b64.encoded_length(p.len()) + 40);
    let mut out = Vec::with_capacity(160 + response.uid.len() + patch_len);
    out.extend_from_slice(b"{\"apiVersion\":");
    json_text::push_string(&mut out, API_VERSION);
    out.extend_from_slice(b",\"kind\":");
    json_text::push_string(&mut out, KIND);
    out.extend_from_slice(b",\"response\":{\"uid\":");
    json_text::push_string(&mut out, &response.uid);
    out.extend_from_slice(if response.allowed {
        b",\"allowed\":true"
    } else {
        b",\"allowed\":false"
    });
    if let Some(status) = &response.status {
        out.extend_from_slice(b",\"status\":");
        serde_json::to_writer(&mut out, status)?;
    }
    if let Some(patch) = &response.patch {
        out.extend_from_slice(b",\"patch\":\"");
        b64.encode_append(patch, &mut out);
        out.extend_from_slice(b"\",\"patchType\":\"JSONPatch\"");
    }
    if !response.warnings.is_empty() {
        out.extend_from_slice(b",\"warnings\":[");
        for (i, w) in response.warnings.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            json_text::push_string(&mut out, w);
        }
        out.push(b']');
    }
    out.extend_from_slice(b"}}");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use kube::core::response::{StatusCause, StatusDetails, StatusSummary};
    use serde::Serialize;
    use serde_json::value::RawValue;

    use super::*;

    /// The envelope as a `Serialize` derive writes it: the reference.
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

    fn by_derive(response: &Response) -> Vec<u8> {
        let patch = response.patch.as_deref().map(|p| {
            RawValue::from_string(format!("\"{}\"", base64_simd::STANDARD.encode_to_string(p)))
                .unwrap()
        });
        serde_json::to_vec(&ReviewOut {
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
        })
        .unwrap()
    }

    /// Every shape of answer, written byte for byte as the derive writes it.
    #[test]
    fn answers_are_written_as_a_serialize_derive_writes_them() {
        let allowed = Response {
            uid: "705ab4f5-6393-11e8-b7cc-42010a800002".to_owned(),
            allowed: true,
            ..Response::default()
        };
        let patched = Response {
            patch: Some(br#"[{"op":"add","path":"/spec/replicas","value":1}]"#.to_vec()),
            warnings: vec!["one \"quoted\"".to_owned(), "two\nlines".to_owned()],
            ..allowed.clone()
        };
        let denied = Response {
            uid: "odd \\ uid \u{1}".to_owned(),
            allowed: false,
            status: Some(Status {
                status: Some(StatusSummary::Failure),
                code: 422,
                message: "InferenceService.infergate.dev \"chat\" is invalid".to_owned(),
                metadata: None,
                reason: "Invalid".to_owned(),
                details: Some(StatusDetails {
                    name: "chat".to_owned(),
                    group: "infergate.dev".to_owned(),
                    kind: "InferenceService".to_owned(),
                    uid: String::new(),
                    causes: vec![StatusCause {
                        reason: "FieldValueInvalid".to_owned(),
                        message: "Invalid value: 0".to_owned(),
                        field: "spec.replicas".to_owned(),
                    }],
                    retry_after_seconds: 0,
                }),
            }),
            patch: None,
            warnings: vec!["w".to_owned()],
        };
        let empty_patch = Response {
            patch: Some(Vec::new()),
            ..allowed.clone()
        };
        for response in [allowed, patched, denied, empty_patch] {
            let written = encode(&response).unwrap();
            assert_eq!(
                String::from_utf8(written).unwrap(),
                String::from_utf8(by_derive(&response)).unwrap()
            );
        }
    }
}
