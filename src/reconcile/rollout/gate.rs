//! The rollout's Prometheus gate: one instant query against the address a
//! ClusterInferencePolicy or `serve --prometheus-url` names (never a
//! tenant's spec), compared with the threshold. The query sent is the
//! tenant's confined to its namespace ([`crate::engine::promql`]); the
//! messages name neither the address nor the query.

use std::time::Duration;

use serde::Deserialize;

use super::types::Gate;
use crate::api::rollout::PrometheusGate;

/// The whole evaluation's deadline.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of a query answer read.
const MAX_ANSWER: usize = 1 << 20;

pub use crate::engine::promql::render_query;
use crate::engine::promql::scope_query;

#[derive(Deserialize)]
struct Answer {
    status: String,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    data: Option<Data>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Data {
    result_type: String,
    #[serde(default)]
    result: serde_json::Value,
}

/// Judge a Prometheus `/api/v1/query` answer against the gate.
#[must_use]
pub fn judge(body: &[u8], gate: &PrometheusGate) -> Gate {
    let answer: Answer = match serde_json::from_slice(body) {
        Ok(a) => a,
        Err(e) => return Gate::Fail(format!("the Prometheus answer is not JSON: {e}")),
    };
    if answer.status != "success" {
        return Gate::Fail(format!(
            "Prometheus refused the query: {}",
            answer.error.unwrap_or_default()
        ));
    }
    let Some(data) = answer.data else {
        return Gate::NoData;
    };
    let value = match data.result_type.as_str() {
        // [time, "value"]
        "scalar" => data.result.get(1).cloned(),
        "vector" => {
            let samples = data.result.as_array().cloned().unwrap_or_default();
            match samples.len() {
                0 => return Gate::NoData,
                1 => samples[0].get("value").and_then(|v| v.get(1)).cloned(),
                n => {
                    return Gate::Fail(format!(
                        "the query returned {n} samples; the gate needs exactly one"
                    ));
                }
            }
        }
        other => {
            return Gate::Fail(format!(
                "the query returned a {other}; the gate needs one sample"
            ));
        }
    };
    let Some(sample) = value
        .as_ref()
        .and_then(serde_json::Value::as_str)
        .and_then(|s| s.parse::<f64>().ok())
    else {
        return Gate::Fail("the sample is not a number".into());
    };
    if sample.is_nan() {
        return Gate::NoData;
    }
    match (gate.threshold.max, gate.threshold.min) {
        (Some(max), _) if sample > max => {
            Gate::Fail(format!("{sample} is above the maximum {max}"))
        }
        (_, Some(min)) if sample < min => {
            Gate::Fail(format!("{sample} is below the minimum {min}"))
        }
        _ => Gate::Pass,
    }
}

/// One HTTP client for every evaluation (the platform's roots are read once).
fn client() -> &'static Result<reqwest::Client, String> {
    static CLIENT: std::sync::OnceLock<Result<reqwest::Client, String>> =
        std::sync::OnceLock::new();
    CLIENT.get_or_init(|| {
        let tls =
            crate::graph::fetch::platform_tls(Vec::new()).map_err(|e| format!("TLS setup: {e}"))?;
        reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(QUERY_TIMEOUT)
            .user_agent(concat!("infergate/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))
    })
}

/// Confine the rendered query to `namespace`, run it at `address` and
/// judge the answer. Any failure to ask, a query that does not parse or
/// is over its bounds included, is a failed evaluation (the failure limit
/// decides what it does).
pub async fn evaluate(address: &str, query: &str, namespace: &str, gate: &PrometheusGate) -> Gate {
    let query = match scope_query(query, namespace) {
        Ok(q) => q,
        Err(e) => return Gate::Fail(format!("the query {e}")),
    };
    let client = match client() {
        Ok(c) => c,
        Err(e) => return Gate::Fail(e.clone()),
    };
    let mut url = match url::Url::parse(&format!("{}/api/v1/query", address.trim_end_matches('/')))
    {
        Ok(u) => u,
        Err(e) => return Gate::Fail(format!("the Prometheus address is not a URL: {e}")),
    };
    url.query_pairs_mut().append_pair("query", &query);
    let response = match client.get(url).send().await {
        Ok(r) => r,
        Err(e) => return Gate::Fail(format!("querying Prometheus: {}", e.without_url())),
    };
    let status = response.status();
    let mut body = Vec::new();
    let mut response = response;
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > MAX_ANSWER {
                    return Gate::Fail(format!(
                        "the answer from Prometheus is over {MAX_ANSWER} bytes"
                    ));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => break,
            Err(e) => {
                return Gate::Fail(format!(
                    "reading the answer from Prometheus: {}",
                    e.without_url()
                ));
            }
        }
    }
    if !status.is_success() && status.as_u16() != 400 && status.as_u16() != 422 {
        return Gate::Fail(format!("Prometheus answered HTTP {status}"));
    }
    judge(&body, gate)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::rollout::Threshold;

    fn gate(max: Option<f64>, min: Option<f64>) -> PrometheusGate {
        PrometheusGate {
            address: None,
            query: "q".into(),
            threshold: Threshold { max, min },
            failure_limit: None,
            on_no_data: None,
        }
    }

    fn vector(values: &[&str]) -> Vec<u8> {
        let result: Vec<_> = values
            .iter()
            .map(|v| serde_json::json!({"metric": {}, "value": [1.7e9, v]}))
            .collect();
        serde_json::to_vec(&serde_json::json!({"status": "success",
            "data": {"resultType": "vector", "result": result}}))
        .unwrap()
    }

    #[test]
    fn one_sample_is_compared_with_the_threshold() {
        assert_eq!(judge(&vector(&["0.5"]), &gate(Some(1.0), None)), Gate::Pass);
        assert!(
            matches!(judge(&vector(&["2"]), &gate(Some(1.0), None)), Gate::Fail(m) if m.contains("above the maximum 1"))
        );
        assert!(
            matches!(judge(&vector(&["0.9"]), &gate(None, Some(0.99))), Gate::Fail(m) if m.contains("below"))
        );
        assert_eq!(judge(&vector(&[]), &gate(Some(1.0), None)), Gate::NoData);
        assert_eq!(
            judge(&vector(&["NaN"]), &gate(Some(1.0), None)),
            Gate::NoData
        );
        assert!(
            matches!(judge(&vector(&["1", "2"]), &gate(Some(1.0), None)), Gate::Fail(m) if m.contains("2 samples"))
        );
        let refused = br#"{"status":"error","errorType":"bad_data","error":"parse error"}"#;
        assert!(
            matches!(judge(refused, &gate(Some(1.0), None)), Gate::Fail(m) if m.contains("parse error"))
        );
        assert!(matches!(
            judge(b"<html>", &gate(Some(1.0), None)),
            Gate::Fail(_)
        ));
    }
}
