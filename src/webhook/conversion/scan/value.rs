//! Where a JSON value ends, checked as JSON, without building it.

use super::error::{ScanError, fail};
use super::string::string_end;

/// The deepest nesting accepted: Go's `encoding/json` limit, so nothing the
/// API server sends is refused for its depth.
pub const MAX_DEPTH: usize = 10_000;

/// The first byte at or after `i` that is not JSON whitespace.
#[inline]
#[must_use]
pub fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while let Some(b' ' | b'\n' | b'\r' | b'\t') = b.get(i) {
        i += 1;
    }
    i
}

/// Where the value starting at or after `at` ends (just past its last
/// byte), checked as JSON. Whitespace after it is not read.
pub fn value_end(text: &str, at: usize) -> Result<usize, ScanError> {
    Scanner::default().value_end(text.as_bytes(), at)
}

/// Whether `text` is one JSON value, whitespace around it allowed, as the
/// conversion's scanner reads reviews: the grammar serde_json accepts when
/// it skips a value, nested up to the depth Go's `encoding/json` accepts.
#[must_use]
pub fn is_json(text: &str) -> bool {
    value_end(text, 0).is_ok_and(|end| skip_ws(text.as_bytes(), end) == text.len())
}

/// Scans values; its stack of open containers is kept between calls so a
/// review's objects cost no allocation each.
#[derive(Debug, Default)]
pub struct Scanner {
    /// `{` or `[` for each container open.
    open: Vec<u8>,
    /// Whether a string of the last value scanned holds a `\u` escape.
    unicode: bool,
}

impl Scanner {
    /// Where the value starting at or after `at` ends, checked as JSON.
    pub fn value_end(&mut self, b: &[u8], at: usize) -> Result<usize, ScanError> {
        self.open.clear();
        self.unicode = false;
        let mut i = skip_ws(b, at);
        'value: loop {
            match b.get(i) {
                Some(&open @ (b'{' | b'[')) => {
                    self.may_open(i)?;
                    i = skip_ws(b, i + 1);
                    let close = if open == b'{' { b'}' } else { b']' };
                    if b.get(i) == Some(&close) {
                        i += 1;
                    } else {
                        self.open.push(open);
                        if open == b'{' {
                            i = self.after_key(b, i)?;
                        }
                        continue 'value;
                    }
                }
                Some(b'"') => i = self.string_end(b, i + 1)?,
                Some(b'-' | b'0'..=b'9') => i = number_end(b, i)?,
                Some(b't') => i = literal_end(b, i, b"true")?,
                Some(b'f') => i = literal_end(b, i, b"false")?,
                Some(b'n') => i = literal_end(b, i, b"null")?,
                Some(_) => return fail(i, "expected a value"),
                None => return fail(i, "end of input where a value was expected"),
            }
            // A value ended: close containers until one goes on.
            loop {
                let Some(&open) = self.open.last() else {
                    return Ok(i);
                };
                i = skip_ws(b, i);
                match (open, b.get(i)) {
                    (_, Some(b',')) => {
                        i = skip_ws(b, i + 1);
                        if open == b'{' {
                            i = self.after_key(b, i)?;
                        }
                        continue 'value;
                    }
                    (b'{', Some(b'}')) | (b'[', Some(b']')) => {
                        self.open.pop();
                        i += 1;
                    }
                    (b'{', _) => return fail(i, "expected `,` or `}` in an object"),
                    _ => return fail(i, "expected `,` or `]` in a list"),
                }
            }
        }
    }

    /// Whether a string in the last value scanned holds a `\u` escape.
    #[must_use]
    pub fn saw_unicode_escape(&self) -> bool {
        self.unicode
    }

    /// A key at `i` and its colon: where its value starts.
    #[inline(always)]
    fn after_key(&mut self, b: &[u8], i: usize) -> Result<usize, ScanError> {
        if b.get(i) != Some(&b'"') {
            return fail(i, "expected a string key");
        }
        let i = skip_ws(b, self.string_end(b, i + 1)?);
        if b.get(i) != Some(&b':') {
            return fail(i, "expected `:` after a key");
        }
        Ok(skip_ws(b, i + 1))
    }

    #[inline(always)]
    fn string_end(&mut self, b: &[u8], i: usize) -> Result<usize, ScanError> {
        let (end, escapes) = string_end(b, i)?;
        self.unicode |= escapes.unicode;
        Ok(end)
    }

    /// Whether one more container may open (at `at`).
    fn may_open(&self, at: usize) -> Result<(), ScanError> {
        if self.open.len() >= MAX_DEPTH {
            return fail(at, "nested too deeply");
        }
        Ok(())
    }
}

fn literal_end(b: &[u8], i: usize, literal: &[u8]) -> Result<usize, ScanError> {
    if b.get(i..i + literal.len()) == Some(literal) {
        Ok(i + literal.len())
    } else {
        fail(i, "expected a value")
    }
}

fn digits_end(b: &[u8], mut i: usize) -> usize {
    while let Some(b'0'..=b'9') = b.get(i) {
        i += 1;
    }
    i
}

/// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?` at `i`.
fn number_end(b: &[u8], mut i: usize) -> Result<usize, ScanError> {
    if b.get(i) == Some(&b'-') {
        i += 1;
    }
    match b.get(i) {
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => i = digits_end(b, i + 1),
        _ => return fail(i, "invalid number"),
    }
    if b.get(i) == Some(&b'.') {
        if !matches!(b.get(i + 1), Some(b'0'..=b'9')) {
            return fail(i + 1, "invalid number");
        }
        i = digits_end(b, i + 1);
    }
    if let Some(b'e' | b'E') = b.get(i) {
        i += 1;
        if let Some(b'+' | b'-') = b.get(i) {
            i += 1;
        }
        if !matches!(b.get(i), Some(b'0'..=b'9')) {
            return fail(i, "invalid number");
        }
        i = digits_end(b, i);
    }
    Ok(i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serde_accepts(text: &str) -> bool {
        serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok()
    }

    fn scanner_accepts(text: &str) -> bool {
        is_json(text)
    }

    #[test]
    fn the_scanner_accepts_what_serde_json_accepts() {
        let long = "x".repeat(100);
        let escapes = r#"{\"a\":\"b\"}"#.repeat(20);
        let cases = [
            "0",
            "-0",
            "01",
            "-",
            "1.",
            "1.5",
            "1e",
            "1e+",
            "1E-7",
            "-12.5e10",
            "1.e3",
            ".5",
            "true",
            "tru",
            "false",
            "null",
            "nul",
            "nulls",
            r#""""#,
            r#"""#,
            r#""\""#,
            r#""\"""#,
            r#""\\""#,
            r#""\/\b\f\n\r\t""#,
            r#""\x""#,
            r#""\u12""#,
            r#""\u12g4""#,
            r#""\uD800""#,
            r#""\u00e9""#,
            "\"a\u{1}b\"",
            "\"a\tb\"",
            "\"é ü 漢\"",
            "[]",
            "[1,]",
            "[,1]",
            "[1 2]",
            "[1,[2,[3]]]",
            "{}",
            r#"{"a"}"#,
            r#"{"a":}"#,
            r#"{"a":1,}"#,
            r#"{"a":1 "b":2}"#,
            r#"{a:1}"#,
            r#"{"a":1}"#,
            r#" { "a" : [ 1 , { } ] } "#,
            r#"{"a":{"b":{"c":[true,false,null]}}}"#,
            "[}",
            "{]",
            "[[]",
            "]",
            "\"abc",
        ];
        for case in cases {
            assert_eq!(scanner_accepts(case), serde_accepts(case), "{case:?}");
        }
        for case in [
            format!("\"{long}\""),
            format!("\"{long}\\\"{long}\""),
            format!("\"{escapes}\""),
            format!("[\"{escapes}\",\"{long}\\u0041\"]"),
            format!("\"{}\\", "y".repeat(63)),
            format!("\"{}\\u004", "y".repeat(62)),
            format!("\"{}\u{7}\"", "y".repeat(70)),
        ] {
            assert_eq!(scanner_accepts(&case), serde_accepts(&case), "{case:?}");
        }
    }

    #[test]
    fn escapes_across_blocks_are_found_at_every_offset() {
        // An escaped quote, an escaped backslash before a closing quote,
        // and a control character, each placed at every offset around the
        // 16- and 64-byte blocks.
        for pad in 0..140 {
            let p = "p".repeat(pad);
            for body in [
                format!("\"{p}\\\"tail\""),
                format!("\"{p}\\\\\""),
                format!("\"{p}\\u00e9{p}\""),
                format!("\"{p}\n\""),
                format!("\"{p}\\\"{p}\\\\\\\"{p}\""),
                format!("\"{p}\\"),
            ] {
                let ours = value_end(&body, 0);
                assert_eq!(ours.is_ok(), serde_accepts(&body), "{body:?}");
                if let Ok(end) = ours {
                    assert_eq!(end, body.len(), "{body:?}");
                }
            }
        }
    }

    #[test]
    fn unicode_escapes_are_noticed_in_keys_and_values() {
        let mut scanner = Scanner::default();
        for (text, unicode) in [
            (r#"{"a":"b","c":["d\"e"]}"#, false),
            (r#"{"a":"b","c":["d\u0065"]}"#, true),
            (r#"{"\u0061":1}"#, true),
            (r#"["\\u"]"#, false),
        ] {
            scanner.value_end(text.as_bytes(), 0).unwrap();
            assert_eq!(scanner.saw_unicode_escape(), unicode, "{text}");
        }
    }

    #[test]
    fn nesting_is_bounded_without_recursion() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(value_end(&deep(MAX_DEPTH), 0).is_ok());
        let e = value_end(&deep(MAX_DEPTH + 1), 0).unwrap_err();
        assert_eq!(e.what, "nested too deeply");
        let e = value_end(&"[".repeat(1 << 20), 0).unwrap_err();
        assert_eq!(e.what, "nested too deeply");
    }
}
