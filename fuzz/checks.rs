#![allow(dead_code)] // each includer uses some of the checks
//! What each fuzz target checks of one input, shared by the fuzz targets
//! (`fuzz_targets/*.rs`) and the corpus replay (`tests/fuzz_corpus.rs`), so
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

/// A ConversionReview body: always answered with a ConversionReview (JSON)
/// that echoes a uid and says Success with one object per object sent, or
/// Failure with a message.
pub fn conversion(data: &[u8]) {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    let metrics = METRICS.get_or_init(Metrics::new);
    let answer = conversion::convert_review(data, metrics);
    let answer: serde_json::Value = serde_json::from_slice(&answer).expect("the answer is JSON");
    assert_eq!(answer["kind"], "ConversionReview", "{answer}");
    let response = &answer["response"];
    assert!(response["uid"].is_string(), "{answer}");
    match response["result"]["status"].as_str() {
        Some("Success") => {
            // A review repeating a field of its envelope is refused (readers
            // disagree on which copy counts): a success has one `objects`.
            let sent: serde_json::Value =
                serde_json::from_slice(data).expect("a converted review is JSON");
            let objects = sent["request"]["objects"].as_array().map_or(0, Vec::len);
            let converted = response["convertedObjects"].as_array().map_or(0, Vec::len);
            assert_eq!(objects, converted, "{answer}");
        }
        Some("Failure") => assert!(response["result"]["message"].is_string(), "{answer}"),
        _ => panic!("no result status: {answer}"),
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
