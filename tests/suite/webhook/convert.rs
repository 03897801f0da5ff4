//! `/convert`: order and round trips, reviews that cannot be converted or
//! are malformed, and metadata checked as JSON before it is copied.

use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::support::{post, post_raw, review_fixture, webhook_state};

#[tokio::test]
async fn convert_keeps_order_and_round_trips() {
    let st = webhook_state();
    let req = review_fixture("convert-alpha-to-beta.json");
    let (status, v) = post(&st, "/convert", &req).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["kind"], "ConversionReview");
    let resp = &v["response"];
    assert_eq!(resp["uid"], req["request"]["uid"]);
    assert_eq!(resp["result"]["status"], "Success", "{v}");
    let objects = resp["convertedObjects"].as_array().unwrap();
    assert_eq!(objects.len(), 3);
    let names: Vec<&str> = objects
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["first", "second", "third"]);
    for o in objects {
        assert_eq!(o["apiVersion"], "infergate.dev/v1beta1");
    }
    assert_eq!(objects[0]["spec"]["model"]["ref"], "llama3-8b-q4");
    assert_eq!(objects[0]["spec"]["autoscaling"]["maxReplicas"], 4);
    assert_eq!(objects[0]["metadata"]["labels"]["a"], "b");
    assert_eq!(objects[0]["metadata"]["resourceVersion"], "10");
    assert_eq!(objects[2]["spec"]["replicas"], 0);

    // And back: the v1alpha1 originals come out identical.
    let mut back = req.clone();
    back["request"]["desiredAPIVersion"] = json!("infergate.dev/v1alpha1");
    back["request"]["objects"] = json!([objects[0].clone(), objects[2].clone()]);
    let (_, v) = post(&st, "/convert", &back).await;
    let objects = v["response"]["convertedObjects"].as_array().unwrap();
    assert_eq!(objects[0], req["request"]["objects"][0]);
    assert_eq!(objects[1], req["request"]["objects"][2]);
}

/// The message of a ConversionReview answer that failed (asserted).
fn failure_message(answer: &Value) -> &str {
    assert_eq!(
        answer["response"]["result"]["status"], "Failure",
        "{answer}"
    );
    answer["response"]["result"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("a failure without a message: {answer}"))
}

#[tokio::test]
async fn unconvertible_or_malformed_reviews_fail_with_a_message() {
    let st = webhook_state();
    let mut req = review_fixture("convert-alpha-to-beta.json");
    req["request"]["desiredAPIVersion"] = json!("infergate.dev/v9");
    let (status, v) = post(&st, "/convert", &req).await;
    assert_eq!(status, StatusCode::OK);
    assert!(failure_message(&v).contains("v9"), "{v}");
    assert_eq!(v["response"]["uid"], req["request"]["uid"]);

    // No uid or no desired version (absent or empty, before or after the
    // objects, with or without objects): a failure naming the field, never
    // a success.
    let object = r#"{"apiVersion":"infergate.dev/v1alpha1","kind":"InferenceService","metadata":{"name":"x"},"spec":{"modelRef":"m"}}"#;
    for field in ["uid", "desiredAPIVersion"] {
        for objects in [None, Some("[]".to_owned()), Some(format!("[{object}]"))] {
            for (value, missing) in [(None, "no"), (Some(r#""""#), "an empty")] {
                for objects_first in [false, true] {
                    let mut fields: Vec<String> = [
                        ("uid", r#""u-1""#),
                        ("desiredAPIVersion", r#""infergate.dev/v1beta1""#),
                    ]
                    .into_iter()
                    .filter_map(|(name, v)| {
                        let v = if name == field { value? } else { v };
                        Some(format!(r#""{name}":{v}"#))
                    })
                    .collect();
                    if let Some(objects) = &objects {
                        let at = if objects_first { 0 } else { fields.len() };
                        fields.insert(at, format!(r#""objects":{objects}"#));
                    }
                    let body = format!(
                        r#"{{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{{{}}}}}"#,
                        fields.join(",")
                    );
                    let (status, v) = post_raw(&st, "/convert", body.clone().into_bytes()).await;
                    assert_eq!(status, StatusCode::OK);
                    assert_eq!(
                        failure_message(&v),
                        format!("ConversionReview has {missing} request.{field}"),
                        "{body}"
                    );
                    assert_eq!(v["response"]["convertedObjects"], json!([]), "{v}");
                    if field == "desiredAPIVersion" {
                        assert_eq!(v["response"]["uid"], "u-1", "the uid is echoed: {v}");
                    }
                }
            }
        }
    }
    // Bytes that are not UTF-8 (a lone continuation byte inside a name):
    // refused as a whole, saying where the bytes stop being text.
    let mut bytes = br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"u","desiredAPIVersion":"infergate.dev/v1beta1","objects":[{"apiVersion":"infergate.dev/v1alpha1","kind":"InferenceService","metadata":{"name":"x"},"spec":{"modelRef":"m"}}]}}"#.to_vec();
    let at = bytes.iter().position(|&b| b == b'x').unwrap();
    bytes[at] = 0x80;
    let (status, v) = post_raw(&st, "/convert", bytes).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        failure_message(&v).contains(&format!(
            "invalid utf-8 sequence of 1 bytes from index {at}"
        )),
        "{v}"
    );
    // A repeated field of the envelope: refused, whichever copy a reader keeps.
    let repeated = br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"u","desiredAPIVersion":"infergate.dev/v1beta1","objects":[],"objects":[0]}}"#;
    let (_, v) = post_raw(&st, "/convert", repeated.to_vec()).await;
    assert!(
        failure_message(&v).contains("duplicate field `objects`"),
        "{v}"
    );

    // A spec that does not decode in its version: the object is named,
    // with its version and the field.
    let mut req = review_fixture("convert-alpha-to-beta.json");
    req["request"]["objects"][2]["spec"]["replicas"] = json!("two");
    let (_, v) = post(&st, "/convert", &req).await;
    let message = failure_message(&v);
    let name = req["request"]["objects"][2]["metadata"]["name"]
        .as_str()
        .unwrap();
    assert!(
        message.starts_with(&format!(
            "failed to convert object 2 (\"{name}\") from \"infergate.dev/v1alpha1\""
        )) && message.contains("spec: invalid type"),
        "{message}"
    );
    // An object repeating its apiVersion: refused, whichever copy counts.
    let twice = br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"u","desiredAPIVersion":"infergate.dev/v1beta1","objects":[{"apiVersion":"infergate.dev/v1alpha1","kind":"InferenceService","apiVersion":"infergate.dev/v1beta1","spec":{"modelRef":"m"}}]}}"#;
    let (_, v) = post_raw(&st, "/convert", twice.to_vec()).await;
    assert!(
        failure_message(&v).contains("duplicate field `apiVersion`"),
        "{v}"
    );
    // `spec` and `status` before `apiVersion` (read as slices, decoded
    // once the version is known): converted all the same.
    let late = br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"u","desiredAPIVersion":"infergate.dev/v1beta1","objects":[{"spec":{"modelRef":"m","replicas":2},"status":{"ready":true,"replicas":2},"kind":"InferenceService","apiVersion":"infergate.dev/v1alpha1","metadata":{"name":"late"}}]}}"#;
    let (_, v) = post_raw(&st, "/convert", late.to_vec()).await;
    assert_eq!(v["response"]["result"]["status"], "Success", "{v}");
    let converted = &v["response"]["convertedObjects"][0];
    assert_eq!(converted["spec"]["model"]["ref"], "m", "{v}");
    assert_eq!(
        converted["status"]["conditions"][0]["status"], "True",
        "{v}"
    );

    for body in [b"garbage".to_vec(), b"{}".to_vec()] {
        let (status, v) = post_raw(&st, "/convert", body).await;
        assert_eq!(status, StatusCode::OK);
        assert!(!failure_message(&v).is_empty(), "{v}");
    }
}

/// A review of one v1alpha1 object whose `metadata` is `metadata`.
fn review_with_metadata(metadata: &str) -> Vec<u8> {
    format!(
        r#"{{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{{"uid":"u","desiredAPIVersion":"infergate.dev/v1beta1","objects":[{{"apiVersion":"infergate.dev/v1alpha1","kind":"InferenceService","metadata":{metadata},"spec":{{"modelRef":"m"}}}}]}}}}"#
    )
    .into_bytes()
}

#[tokio::test]
async fn metadata_is_checked_as_json_before_it_is_copied() {
    let st = webhook_state();
    // Copied as it came (the scanner checked it): escapes, nesting (as
    // deep as this test's own reader reads), text beyond ASCII.
    let deep = format!("{}1{}", "[".repeat(100), "]".repeat(100));
    let metadata = format!(
        r#"{{"name":"x","annotations":{{"a":"q\"uote\\d \u00e9 漢"}},"labels":{{"deep":{deep}}}}}"#
    );
    let (status, v) = post_raw(&st, "/convert", review_with_metadata(&metadata)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["response"]["result"]["status"], "Success", "{v}");
    let copied = &v["response"]["convertedObjects"][0]["metadata"];
    assert_eq!(copied["annotations"]["a"], "q\"uote\\d é 漢");
    assert_eq!(copied["name"], "x");
    // Not JSON, or deeper than the API server could have sent: refused,
    // saying what and where.
    for (metadata, says) in [
        (
            r#"{"name":"x","a":"\q"}"#.to_owned(),
            "invalid escape in a string at byte",
        ),
        (
            "{\"name\":\"x\u{1}\"}".to_owned(),
            "control character in a string at byte",
        ),
        (
            r#"{"name":"x",}"#.to_owned(),
            "expected a string key at byte",
        ),
        (r#"{"name":01}"#.to_owned(), "at byte"),
        ("[".repeat(20_000), "nested too deeply at byte"),
    ] {
        let (status, v) = post_raw(&st, "/convert", review_with_metadata(&metadata)).await;
        assert_eq!(status, StatusCode::OK);
        let message = failure_message(&v);
        assert!(
            message.starts_with(
                "failed to convert object 0 to \"infergate.dev/v1beta1\": invalid object: "
            ) && message.contains(says),
            "{message}"
        );
    }
}
