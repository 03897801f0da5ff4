//! Durations: Go-style (`healthCheck`) and Gateway API GEP-2257 (`requestTimeout`).

use std::time::Duration;

/// Parse a Gateway API (GEP-2257) duration: `^([0-9]{1,5}(h|m|s|ms)){1,4}$`.
pub fn parse_gateway_duration(s: &str) -> Result<Duration, String> {
    let _ = s;
    Err("not implemented".to_owned())
}

/// Parse a Go duration (`time.ParseDuration`) into a non-negative duration.
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
    let _ = s;
    Err("not implemented".to_owned())
}
