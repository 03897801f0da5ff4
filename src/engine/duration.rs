//! Durations: Go-style (`healthCheck`) and Gateway API GEP-2257 (`requestTimeout`).
//!
//! Both parsers are hand-rolled character scanners: no regex, no allocation
//! on success.

use std::time::Duration;

/// Parse a Gateway API (GEP-2257) duration: `^([0-9]{1,5}(h|m|s|ms)){1,4}$`.
///
/// No sign, no fractions, no spaces; `0s` is zero.
pub fn parse_gateway_duration(s: &str) -> Result<Duration, String> {
    const HINT: &str = "must be a Gateway API duration such as 30s, 5m or 1h30m";
    let bytes = s.as_bytes();
    if bytes.is_empty() {
        return Err(format!("{HINT} (empty)"));
    }
    let mut i = 0;
    let mut parts = 0;
    let mut total_ms: u64 = 0;
    while i < bytes.len() {
        let start = i;
        let mut n: u64 = 0;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            n = n * 10 + u64::from(bytes[i] - b'0');
            i += 1;
            if i - start > 5 {
                return Err(format!("{HINT} (at most 5 digits per unit)"));
            }
        }
        if i == start {
            return Err(HINT.to_owned());
        }
        let unit_ms = match bytes.get(i) {
            Some(b'h') => {
                i += 1;
                3_600_000
            }
            Some(b'm') if bytes.get(i + 1) == Some(&b's') => {
                i += 2;
                1
            }
            Some(b'm') => {
                i += 1;
                60_000
            }
            Some(b's') => {
                i += 1;
                1_000
            }
            _ => return Err(format!("{HINT} (units are h, m, s, ms)")),
        };
        parts += 1;
        if parts > 4 {
            return Err(format!("{HINT} (at most 4 units)"));
        }
        total_ms += n * unit_ms;
    }
    Ok(Duration::from_millis(total_ms))
}

/// The canonical GEP-2257 form of a duration: hours, minutes, seconds and
/// milliseconds, largest first, zero components omitted, `0s` for zero.
/// Sub-millisecond parts are dropped.
#[must_use]
pub fn format_gateway_duration(d: Duration) -> String {
    let total_ms = d.as_millis();
    if total_ms == 0 {
        return "0s".to_owned();
    }
    let h = total_ms / 3_600_000;
    let m = (total_ms / 60_000) % 60;
    let s = (total_ms / 1_000) % 60;
    let ms = total_ms % 1_000;
    let mut out = String::new();
    for (v, unit) in [(h, "h"), (m, "m"), (s, "s"), (ms, "ms")] {
        if v > 0 {
            out.push_str(&v.to_string());
            out.push_str(unit);
        }
    }
    out
}

/// Parse a GEP-2257 duration and return its canonical form (`90m` -> `1h30m`).
pub fn canonical_gateway_duration(s: &str) -> Result<String, String> {
    parse_gateway_duration(s).map(format_gateway_duration)
}

/// Parse a Go duration (`time.ParseDuration`): a sequence of decimal numbers
/// with optional fraction and a unit (`ns`, `us`, `µs`, `μs`, `ms`, `s`, `m`,
/// `h`), such as `1.5s` or `1m30s`; `0` alone is zero. Negative durations are
/// rejected (nothing in infergate can use one).
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
    const HINT: &str = "must be a duration such as 10s, 1m30s or 500ms";
    let mut rest = s;
    if let Some(r) = rest.strip_prefix('+') {
        rest = r;
    } else if rest.starts_with('-') {
        return Err("must not be negative".to_owned());
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(format!("{HINT} (empty)"));
    }
    let mut total: u128 = 0; // nanoseconds
    while !rest.is_empty() {
        let b = rest.as_bytes();
        let mut i = 0;
        let mut whole: u128 = 0;
        while i < b.len() && b[i].is_ascii_digit() {
            whole = whole
                .checked_mul(10)
                .and_then(|w| w.checked_add(u128::from(b[i] - b'0')))
                .ok_or_else(|| "duration is out of range".to_owned())?;
            i += 1;
        }
        let int_digits = i;
        let mut frac: u128 = 0;
        let mut frac_scale: u128 = 1;
        let mut frac_digits = 0;
        if i < b.len() && b[i] == b'.' {
            i += 1;
            while i < b.len() && b[i].is_ascii_digit() {
                if frac_scale < 1_000_000_000_000_000_000 {
                    frac = frac * 10 + u128::from(b[i] - b'0');
                    frac_scale *= 10;
                }
                frac_digits += 1;
                i += 1;
            }
        }
        if int_digits == 0 && frac_digits == 0 {
            return Err(HINT.to_owned());
        }
        rest = &rest[i..];
        let unit_len = rest
            .char_indices()
            .find(|(_, c)| *c == '.' || c.is_ascii_digit())
            .map_or(rest.len(), |(idx, _)| idx);
        let unit = &rest[..unit_len];
        let nanos: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(format!("{HINT} (missing unit)")),
            other => return Err(format!("{HINT} (unknown unit {other:?})")),
        };
        rest = &rest[unit_len..];
        let part = whole
            .checked_mul(nanos)
            .and_then(|w| w.checked_add(frac * nanos / frac_scale))
            .ok_or_else(|| "duration is out of range".to_owned())?;
        total = total
            .checked_add(part)
            .ok_or_else(|| "duration is out of range".to_owned())?;
    }
    // Go's time.Duration is an int64 of nanoseconds.
    if total > i64::MAX as u128 {
        return Err("duration is out of range".to_owned());
    }
    let secs = u64::try_from(total / 1_000_000_000).map_err(|_| "duration is out of range")?;
    let nanos = u32::try_from(total % 1_000_000_000).map_err(|_| "duration is out of range")?;
    Ok(Duration::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gateway_accepts_the_gep_grammar() {
        assert_eq!(parse_gateway_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_gateway_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(
            parse_gateway_duration("1h30m"),
            Ok(Duration::from_secs(5400))
        );
        assert_eq!(
            parse_gateway_duration("500ms"),
            Ok(Duration::from_millis(500))
        );
        assert_eq!(
            parse_gateway_duration("1h1m1s1ms"),
            Ok(Duration::from_millis(3_661_001))
        );
        assert_eq!(
            parse_gateway_duration("99999s"),
            Ok(Duration::from_secs(99_999))
        );
    }

    #[test]
    fn gateway_rejects_everything_else() {
        for bad in [
            "",
            "5",
            "m",
            "1.5s",
            "-1s",
            "+1s",
            "1d",
            "1 s",
            "100000s",
            "1h1m1s1ms1h",
            "1us",
            "5M",
            "1hh",
            " 1s",
        ] {
            assert!(parse_gateway_duration(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn gateway_canonical_form() {
        assert_eq!(format_gateway_duration(Duration::ZERO), "0s");
        assert_eq!(format_gateway_duration(Duration::from_secs(300)), "5m");
        assert_eq!(format_gateway_duration(Duration::from_secs(5400)), "1h30m");
        assert_eq!(
            format_gateway_duration(Duration::from_millis(3_661_001)),
            "1h1m1s1ms"
        );
        assert_eq!(canonical_gateway_duration("90m").as_deref(), Ok("1h30m"));
        assert_eq!(canonical_gateway_duration("0h0m").as_deref(), Ok("0s"));
        assert!(canonical_gateway_duration("1.5h").is_err());
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_go_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_go_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_go_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_go_duration("3us"), Ok(Duration::from_micros(3)));
        assert_eq!(parse_go_duration("3µs"), Ok(Duration::from_micros(3)));
        assert_eq!(parse_go_duration("7ns"), Ok(Duration::from_nanos(7)));
        assert_eq!(parse_go_duration(".5h"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_go_duration("+2h"), Ok(Duration::from_secs(7200)));
    }

    #[test]
    fn go_rejects() {
        for bad in [
            "",
            "10",
            "s",
            "1x",
            "-1s",
            "1.s.",
            ".s",
            "10 s",
            "1d",
            "9999999999h",
        ] {
            assert!(parse_go_duration(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
