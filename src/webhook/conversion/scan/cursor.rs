//! A JSON document read part by part with the scanner.

use std::borrow::Cow;

use serde::Deserialize;

use super::error::ScanError;
use super::string::string_end;
use super::value::{Scanner, skip_ws};

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
