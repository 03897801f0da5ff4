//! `POST /convert`: apiextensions.k8s.io/v1 ConversionReview, answered with
//! the engine's lossless conversion, objects in order.

use kube::core::conversion::{ConversionRequest, ConversionResponse, ConversionReview};
use kube::core::{Status, TypeMeta};

use crate::metrics::Metrics;

fn failure(message: String) -> Status {
    Status::failure(&message, "ConversionFailed")
}

/// The incoming envelope: kube-core's `ConversionReview` flattens
/// `TypeMeta`, which makes serde buffer the whole body (whole lists) first;
/// this decodes in one pass into the same [`ConversionRequest`].
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReviewIn {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    request: Option<ConversionRequest>,
}

/// Answer a ConversionReview body. Always returns a ConversionReview: a body
/// that cannot be read gets `result.status: Failure` with the reason.
#[must_use]
pub fn convert_review(body: &[u8], metrics: &Metrics) -> ConversionReview {
    let review: ReviewIn = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => {
            return ConversionResponse::invalid(failure(format!(
                "request body is not an apiextensions.k8s.io/v1 ConversionReview: {e}"
            )))
            .into_review();
        }
    };
    if review.api_version != "apiextensions.k8s.io/v1" || review.kind != "ConversionReview" {
        let msg = format!(
            "unsupported review type {:?}/{:?}: expected apiextensions.k8s.io/v1 ConversionReview",
            review.api_version, review.kind
        );
        return ConversionResponse::invalid(failure(msg)).into_review();
    }
    let Some(mut request) = review.request else {
        return ConversionResponse::invalid(failure("ConversionReview has no request".into()))
            .into_review();
    };
    request.types = Some(TypeMeta {
        api_version: review.api_version,
        kind: review.kind,
    });
    convert_request(request, metrics).into_review()
}

/// Convert every object of `request`; the first failure fails the whole review
/// (the API server needs all or nothing) and names the object.
#[must_use]
pub fn convert_request(mut request: ConversionRequest, metrics: &Metrics) -> ConversionResponse {
    let desired = request.desired_api_version.clone();
    let objects = std::mem::take(&mut request.objects);
    let response = ConversionResponse::for_request(request);
    let mut converted = Vec::with_capacity(objects.len());
    for (i, obj) in objects.into_iter().enumerate() {
        let from = obj
            .get("apiVersion")
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_owned();
        let name = obj
            .pointer("/metadata/name")
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_owned();
        match crate::api::conversion::convert(obj, &desired) {
            Ok(out) => {
                metrics.conversion(&from, &desired, true);
                converted.push(out);
            }
            Err(e) => {
                metrics.conversion(&from, &desired, false);
                tracing::warn!(index = i, name = %name, from = %from, to = %desired, error = %e, "conversion failed");
                return response.failure(failure(format!(
                    "failed to convert object {i} ({name:?}) from {from:?} to {desired:?}: {e}"
                )));
            }
        }
    }
    response.success(converted)
}
