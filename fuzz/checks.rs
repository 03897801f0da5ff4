#![allow(dead_code)] // each includer uses some of the checks
//! What each fuzz target checks of one input, shared by the fuzz targets
//! (`fuzz_targets/*.rs`) and the corpus replay (`tests/suite/fuzz_corpus.rs`), so
//! both run the same code. Each check panics when the input finds a bug:
//! a panic inside infergate, or two readings that disagree.

use std::sync::{Arc, OnceLock};

use infergate::engine::ServerDefaults;
use infergate::metrics::{Metrics, Webhook};
use infergate::state::ClusterState;
use infergate::state::files;
use infergate::webhook::admission::Admission;
use infergate::webhook::{conversion, review};

fn admission() -> &'static Admission {
    static ADMISSION: OnceLock<Admission> = OnceLock::new();
    ADMISSION.get_or_init(|| Admission {
        state: Arc::new(ClusterState::default()),
        server: ServerDefaults {
            engine_image: Some("registry.example.com/vllm:0.9".to_owned()),
            replicas: None,
        },
        metrics: Metrics::new(),
        access: infergate::webhook::access::AccessReviewer::default(),
        ledger: infergate::state::ledger::Ledger::default(),
        names: infergate::state::names::NamesLedger::default(),
        owners: infergate::webhook::confine::Owners::default(),
    })
}

/// An AdmissionReview body: the one-pass and the by-slices decoders give
/// the same review or both refuse it, and both webhooks answer it with
/// JSON that reads back.
pub fn review_decode(data: &[u8]) {
    let fast = review::decode(data);
    let slices = review::decode_by_slices(data);
    match (&fast, &slices) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "the two decoders read the review differently"),
        (Err(_), Err(_)) => {}
        _ => panic!("one decoder accepts what the other refuses: {fast:?} / {slices:?}"),
    }
    if fast.is_err() {
        return;
    }
    for webhook in [Webhook::Mutate, Webhook::Validate] {
        let answer = admission()
            .handle(webhook, data)
            .expect("a body that decodes is answered");
        let json = answer.to_json().expect("the answer serializes");
        let _: serde_json::Value = serde_json::from_slice(&json).expect("the answer is JSON");
    }
}

/// The answer to a ConversionReview, as far as the check reads it; the
/// converted objects only counted (read as JSON grammar: values passed
/// through verbatim, such as a number too large for a float, are not
/// re-read).
#[derive(serde::Deserialize)]
struct ConversionAnswer {
    kind: String,
    response: ConversionResponse,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConversionResponse {
    uid: String,
    result: ConversionResult,
    converted_objects: Vec<serde::de::IgnoredAny>,
}

#[derive(serde::Deserialize)]
struct ConversionResult {
    status: String,
    message: Option<String>,
}

/// The objects a review sends, counted the same way.
#[derive(serde::Deserialize)]
struct SentReview {
    request: SentRequest,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct SentRequest {
    uid: Option<String>,
    #[serde(rename = "desiredAPIVersion")]
    desired_api_version: Option<String>,
    #[serde(default)]
    objects: Vec<serde::de::IgnoredAny>,
}

/// A ConversionReview body: always answered with a ConversionReview (JSON)
/// that echoes a uid and says Success with one object per object sent (a
/// review with a uid and a desired version, the uid echoed), or Failure
/// with a message. The conversion's JSON scanner accepts the body
/// exactly when serde_json does.
pub fn conversion(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let scanned = conversion::is_json(text);
        let parsed = serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok();
        // serde_json skips any depth; the scanner stops at Go's limit,
        // which no input of the fuzzer's length reaches.
        assert_eq!(scanned, parsed, "the scanner and serde_json disagree");
    }
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    let metrics = METRICS.get_or_init(Metrics::new);
    let bytes = conversion::convert_review(data, metrics);
    let text = String::from_utf8_lossy(&bytes);
    let answer: ConversionAnswer = serde_json::from_slice(&bytes)
        .unwrap_or_else(|e| panic!("the answer is not a ConversionReview: {e}: {text}"));
    assert_eq!(answer.kind, "ConversionReview", "{text}");
    match answer.response.result.status.as_str() {
        "Success" => {
            // A review repeating a field of its envelope is refused (readers
            // disagree on which copy counts): a success has one `objects`.
            // The reference reader (serde derive) refuses what the converter
            // reads leniently, as Go's reader does (a lone surrogate in a
            // `\u` escape, say): only what it reads is compared.
            if let Ok(sent) = serde_json::from_slice::<SentReview>(data) {
                assert_eq!(
                    sent.request.objects.len(),
                    answer.response.converted_objects.len(),
                    "{text}"
                );
                // A review without a uid or a desired version is a failure.
                let uid = sent.request.uid.unwrap_or_default();
                assert!(!uid.is_empty(), "a success without a uid: {text}");
                assert_eq!(answer.response.uid, uid, "{text}");
                let desired = sent.request.desired_api_version.unwrap_or_default();
                assert!(
                    !desired.is_empty(),
                    "a success without a desired version: {text}"
                );
            }
        }
        "Failure" => assert!(answer.response.result.message.is_some(), "{text}"),
        other => panic!("result status {other:?}: {text}"),
    }
}

/// A manifest file as `infergate check` and `serve --policy-file` read it:
/// parsed into documents, each classified, without a panic.
pub fn policy_files(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(documents) = files::parse_documents("fuzz.yaml", text) {
        for doc in &documents {
            let _ = files::classify(doc);
        }
    }
}
