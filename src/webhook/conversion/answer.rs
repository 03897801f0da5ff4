//! The entry points: a ConversionReview body in, its answer out.

use super::envelope::read_and_convert;
use super::failure::Failure;
use super::output::{PIECE, Pieces, Tally};
use crate::metrics::Metrics;
use crate::telemetry::Bounded;

/// Answer a ConversionReview body: the response's JSON bytes. Always a
/// ConversionReview: a body that cannot be read, or an object that cannot
/// be converted, gets `result.status: Failure` with the reason (the first
/// failing object fails the whole review, as the API server needs all or
/// nothing).
#[must_use]
pub fn convert_review(body: &[u8], metrics: &Metrics) -> Vec<u8> {
    convert_review_pieces(body, metrics).concat()
}

/// [`convert_review`] as consecutive pieces of about 1 MiB, to be sent one
/// after the other.
#[must_use]
pub fn convert_review_pieces(body: &[u8], metrics: &Metrics) -> Vec<Vec<u8>> {
    let mut pieces = Pieces {
        done: Vec::new(),
        current: Vec::with_capacity((body.len() + 256).min(PIECE + PIECE / 4)),
    };
    let mut tally = Tally::default();
    // simdutf8's checker: fewer instructions than std's on a review's
    // mostly ASCII bytes (docs/performance.md has the measurement); its
    // `compat` error says where the bytes stop being UTF-8, as std's does.
    let answer = match simdutf8::compat::from_utf8(body) {
        Err(e) => Err(Box::new(Failure::unreadable(&e.to_string()))),
        Ok(text) => read_and_convert(text, &mut pieces, &mut tally),
    };
    tally.record(metrics);
    match answer {
        Ok(()) => pieces.finish(),
        Err(failure) => {
            if let Some(object) = &failure.object {
                tracing::warn!(
                    index = object.index,
                    name = %Bounded(&object.name),
                    from = %Bounded(&object.from),
                    to = %Bounded(&failure.desired),
                    error = %Bounded(&failure.message),
                    "conversion failed"
                );
            }
            let mut out = Vec::new();
            failure.write(&mut out);
            vec![out]
        }
    }
}
