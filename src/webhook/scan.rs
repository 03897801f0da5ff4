//! A validating JSON scanner: where a value ends, without building it,
//! and a [`Cursor`] that reads a document part by part on top of it.
//!
//! The conversion webhook copies each object's `metadata` into its answer
//! as it came: it only needs to know where that value ends and that it is
//! JSON. In a typical review that is three quarters of the bytes (managed
//! fields, and a `last-applied-configuration` annotation: JSON inside a
//! string, an escape every few bytes), and serde_json, stepping over it a
//! byte and an escape at a time, spent a third of a conversion there.
//!
//! [`Scanner::value_end`] accepts what serde_json accepts when it skips a
//! value: the JSON grammar, strings without raw control characters, escapes
//! from the JSON set, `\u` followed by four hex digits (a lone surrogate is
//! accepted, as serde_json accepts it when skipping), nesting up to
//! [`MAX_DEPTH`] (the depth Go's `encoding/json`, and so the API server,
//! accepts). Strings are searched 16 or 64 bytes at a time with SSE2
//! compares (`wide`), so an escape costs a few instructions, not a call.
//! The input is `&str`: UTF-8 is checked once for the whole body.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use wide::u8x16;

/// The deepest nesting accepted: Go's `encoding/json` limit, so nothing the
/// API server sends is refused for its depth.
pub const MAX_DEPTH: usize = 10_000;

/// Why a text is not JSON, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanError {
    /// Byte offset of the problem in the text scanned.
    pub at: usize,
    /// What was wrong there.
    pub what: &'static str,
}

impl fmt::Display for ScanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at byte {}", self.what, self.at)
    }
}

impl std::error::Error for ScanError {}

fn fail<T>(at: usize, what: &'static str) -> Result<T, ScanError> {
    Err(ScanError { at, what })
}

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

/// Scans values; its stack of open containers is kept between calls so a
/// review's objects cost no allocation each.
#[derive(Debug, Default)]
pub struct Scanner {
    /// `{` or `[` for each container open.
    open: Vec<u8>,
    /// Whether a string of the last value scanned holds a `\u` escape.
    unicode: bool,
}

/// What escapes a string holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Escapes {
    /// Any escape.
    pub any: bool,
    /// A `\u` escape.
    pub unicode: bool,
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

/// Bit `k` set when byte `k` of the 16 is `"`, `\` or a control character.
#[inline]
fn special16(bytes: [u8; 16]) -> u64 {
    let x = u8x16::from(bytes);
    let quote = x.simd_eq(u8x16::splat(b'"'));
    let backslash = x.simd_eq(u8x16::splat(b'\\'));
    let control = x.simd_lt(u8x16::splat(0x20));
    u64::from((quote | backslash | control).to_bitmask())
}

/// [`special16`] of up to 16 bytes (the rest read as plain bytes).
#[inline]
fn special_tail(bytes: &[u8]) -> u64 {
    let mut block = [b'a'; 16];
    let n = bytes.len().min(16);
    block[..n].copy_from_slice(&bytes[..n]);
    special16(block)
}

#[inline]
fn block16(b: &[u8], at: usize) -> [u8; 16] {
    let mut block = [0; 16];
    block.copy_from_slice(&b[at..at + 16]);
    block
}

/// The length of the escape at `at` (a backslash), checked.
#[inline]
fn escape_len(b: &[u8], at: usize) -> Result<usize, ScanError> {
    match b.get(at + 1) {
        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => Ok(2),
        Some(b'u') => match b.get(at + 2..at + 6) {
            Some(hex) if hex.iter().all(u8::is_ascii_hexdigit) => Ok(6),
            Some(_) => fail(at, "invalid \\u escape in a string"),
            None => fail(b.len(), "end of input in a string"),
        },
        Some(_) => fail(at, "invalid escape in a string"),
        None => fail(b.len(), "end of input in a string"),
    }
}

/// Where the string whose content starts at `i` (just past its opening
/// quote) ends (just past its closing quote), and what escapes it holds.
/// A short string is looked at 16 bytes at a time; once a string proves
/// long or holds an escape, 64 bytes at a time. Inlined into the scanner's
/// loop: most strings of a review are short keys, and a call cost as much
/// as looking at one.
#[inline(always)]
pub fn string_end(b: &[u8], mut i: usize) -> Result<(usize, Escapes), ScanError> {
    let mut escapes = Escapes::default();
    let mut wide_blocks = false;
    loop {
        let left = b.len() - i;
        let (mut mask, width) = if wide_blocks && left >= 64 {
            let mask = special16(block16(b, i))
                | special16(block16(b, i + 16)) << 16
                | special16(block16(b, i + 32)) << 32
                | special16(block16(b, i + 48)) << 48;
            (mask, 64)
        } else if left >= 16 {
            (special16(block16(b, i)), 16)
        } else if left > 0 {
            (special_tail(&b[i..]) & ((1 << left) - 1), left)
        } else {
            return fail(i, "end of input in a string");
        };
        let mut next = width;
        while mask != 0 {
            let p = mask.trailing_zeros() as usize;
            match b[i + p] {
                b'"' => return Ok((i + p + 1, escapes)),
                b'\\' => {
                    let len = escape_len(b, i + p)?;
                    escapes.any = true;
                    escapes.unicode |= len == 6;
                    let after = p + len;
                    if after >= width {
                        next = after;
                        break;
                    }
                    mask &= !0u64 << after;
                }
                _ => return fail(i + p, "control character in a string"),
            }
        }
        wide_blocks = true;
        i += next;
    }
}

/// A JSON text read part by part: objects key by key, values as slices
/// (checked by the [`Scanner`]), strings and typed values decoded by
/// serde_json. Errors are messages that say where.
#[derive(Debug)]
pub struct Cursor<'a> {
    text: &'a str,
    at: usize,
    scanner: Scanner,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `text`.
    #[must_use]
    pub fn new(text: &'a str) -> Self {
        Cursor {
            text,
            at: 0,
            scanner: Scanner::default(),
        }
    }

    /// The next byte that is not whitespace, not consumed.
    pub fn peek(&mut self) -> Option<u8> {
        self.at = skip_ws(self.text.as_bytes(), self.at);
        self.text.as_bytes().get(self.at).copied()
    }

    /// The next value as a slice of the text, checked as JSON.
    pub fn value(&mut self) -> Result<&'a str, ScanError> {
        let start = skip_ws(self.text.as_bytes(), self.at);
        let end = self.scanner.value_end(self.text.as_bytes(), start)?;
        self.at = end;
        Ok(&self.text[start..end])
    }

    /// The next value, which must be a string, decoded (borrowed when it
    /// holds no escape).
    pub fn string(&mut self) -> Result<Cow<'a, str>, String> {
        let start = skip_ws(self.text.as_bytes(), self.at);
        if self.text.as_bytes().get(start) != Some(&b'"') {
            let found = self.value().map_or("something else", kind_of);
            return Err(format!("expected a string at byte {start}, found {found}"));
        }
        let (end, escapes) =
            string_end(self.text.as_bytes(), start + 1).map_err(|e| e.to_string())?;
        self.at = end;
        if escapes.any {
            serde_json::from_str::<String>(&self.text[start..end])
                .map(Cow::Owned)
                .map_err(|e| format!("string at byte {start}: {e}"))
        } else {
            Ok(Cow::Borrowed(&self.text[start + 1..end - 1]))
        }
    }

    /// Whether a string of the last [`Cursor::value`] holds a `\u` escape.
    #[must_use]
    pub fn saw_unicode_escape(&self) -> bool {
        self.scanner.saw_unicode_escape()
    }

    /// The next value decoded as `T` by serde_json (its error as is).
    pub fn typed<T: Deserialize<'a>>(&mut self) -> Result<T, String> {
        let start = skip_ws(self.text.as_bytes(), self.at);
        let mut values = serde_json::Deserializer::from_str(&self.text[start..]).into_iter::<T>();
        match values.next() {
            Some(Ok(value)) => {
                self.at = start + values.byte_offset();
                Ok(value)
            }
            Some(Err(e)) => Err(e.to_string()),
            None => Err(format!(
                "end of input where a value was expected at byte {start}"
            )),
        }
    }

    /// Read an object: `entry` is called with each key and must read its
    /// value.
    pub fn object(
        &mut self,
        mut entry: impl FnMut(&mut Self, Cow<'a, str>) -> Result<(), String>,
    ) -> Result<(), String> {
        self.open(b'{', "an object")?;
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Ok(());
        }
        loop {
            if self.peek() != Some(b'"') {
                return Err(format!("expected a string key at byte {}", self.at));
            }
            let key = self.string()?;
            if self.peek() != Some(b':') {
                return Err(format!("expected `:` after a key at byte {}", self.at));
            }
            self.at += 1;
            entry(self, key)?;
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    return Ok(());
                }
                _ => {
                    return Err(format!(
                        "expected `,` or `}}` in an object at byte {}",
                        self.at
                    ));
                }
            }
        }
    }

    /// Read a list: `element` is called for each element and must read it.
    pub fn list(
        &mut self,
        mut element: impl FnMut(&mut Self) -> Result<(), String>,
    ) -> Result<(), String> {
        self.open(b'[', "a list")?;
        if self.peek() == Some(b']') {
            self.at += 1;
            return Ok(());
        }
        loop {
            element(self)?;
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    return Ok(());
                }
                _ => return Err(format!("expected `,` or `]` in a list at byte {}", self.at)),
            }
        }
    }

    /// Skip the next value, checked.
    pub fn skip(&mut self) -> Result<(), String> {
        self.value().map(drop).map_err(|e| e.to_string())
    }

    /// Only whitespace is left.
    pub fn end(&mut self) -> Result<(), String> {
        match self.peek() {
            None => Ok(()),
            Some(_) => Err(format!("trailing characters at byte {}", self.at)),
        }
    }

    fn open(&mut self, bracket: u8, what: &str) -> Result<(), String> {
        if self.peek() == Some(bracket) {
            self.at += 1;
            return Ok(());
        }
        let at = self.at;
        let found = self.value().map_or("something else", kind_of);
        Err(format!("expected {what} at byte {at}, found {found}"))
    }
}

/// What a JSON value is, for messages.
fn kind_of(value: &str) -> &'static str {
    match value.as_bytes().first() {
        Some(b'{') => "an object",
        Some(b'[') => "a list",
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        Some(_) => "a number",
        None => "nothing",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serde_accepts(text: &str) -> bool {
        serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok()
    }

    fn scanner_accepts(text: &str) -> bool {
        value_end(text, 0).is_ok_and(|end| skip_ws(text.as_bytes(), end) == text.len())
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
    fn random_strings_end_where_serde_json_says() {
        // Strings of quotes, backslash runs, escape names, hex digits,
        // control characters and multi-byte text, at lengths around the
        // 16- and 64-byte blocks: where they end (or whether they fail)
        // and what they decode to agree with serde_json.
        let alphabet: [&str; 12] = [
            "a", "\"", "\\", "\\", "u", "0", "F", "n", "/", "\u{1}", "é", "漢",
        ];
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..40_000 {
            let len = (next() % 200) as usize;
            let mut text = String::from("\"");
            for _ in 0..len {
                text.push_str(alphabet[(next() % alphabet.len() as u64) as usize]);
            }
            text.push('"');
            let ours = string_end(text.as_bytes(), 1);
            let mut theirs = serde_json::Deserializer::from_str(&text).into_iter::<String>();
            match (ours, theirs.next()) {
                (Ok((end, escapes)), Some(Ok(decoded))) => {
                    assert_eq!(end, theirs.byte_offset(), "{text:?}");
                    assert_eq!(escapes.any, decoded != text[1..end - 1], "{text:?}");
                }
                (Err(_), Some(Err(_))) => {}
                // A lone surrogate: skipped by both, refused by a decode.
                (Ok((end, _)), Some(Err(e))) if e.to_string().contains("surrogate") => {
                    assert!(serde_accepts(&text[..end]), "{text:?}");
                }
                (ours, theirs) => panic!("{text:?}: {ours:?} / {theirs:?}"),
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

    #[test]
    fn the_cursor_reads_objects_lists_and_typed_values() {
        let text =
            r#" {"a\u0062": [1, {"x": "y"}], "n": 7, "s": "t\"u", "skip": {"deep": [null]}} "#;
        let mut cur = Cursor::new(text);
        let mut seen = Vec::new();
        cur.object(|cur, key| {
            match key.as_ref() {
                "ab" => cur.list(|cur| {
                    cur.value()
                        .map(|v| seen.push(v.to_owned()))
                        .map_err(|e| e.to_string())
                })?,
                "n" => seen.push(cur.typed::<i32>()?.to_string()),
                "s" => seen.push(cur.string()?.into_owned()),
                _ => cur.skip()?,
            }
            Ok(())
        })
        .unwrap();
        cur.end().unwrap();
        assert_eq!(seen, ["1", r#"{"x": "y"}"#, "7", "t\"u"]);

        let e = Cursor::new("[1]").object(|_, _| Ok(())).unwrap_err();
        assert_eq!(e, "expected an object at byte 0, found a list");
        let e = Cursor::new(r#"{"a":1 "b":2}"#)
            .object(|cur, _| cur.skip())
            .unwrap_err();
        assert_eq!(e, "expected `,` or `}` in an object at byte 7");
        let e = Cursor::new(r#"{"a":"b"}"#)
            .object(|cur, _| cur.typed::<i32>().map(drop))
            .unwrap_err();
        assert!(
            e.starts_with("invalid type: string \"b\", expected i32"),
            "{e}"
        );
        let mut cur = Cursor::new("{} x");
        cur.object(|cur, _| cur.skip()).unwrap();
        assert_eq!(cur.end().unwrap_err(), "trailing characters at byte 3");
    }
}
