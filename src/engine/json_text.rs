//! JSON strings written straight into text, byte for byte as `serde_json`
//! writes them, without its per-byte escaping loop where nothing needs
//! escaping: the defaulted-from annotation and the mutating webhook's patch
//! are written on every `/mutate`, and a JSON text carried inside a JSON
//! string (the annotation in the patch) is mostly quotes to escape.

/// Text to write into: a `String`, or the bytes of a JSON answer.
pub trait Sink {
    /// Append `s`.
    fn push_text(&mut self, s: &str);
    /// Append one ASCII byte.
    fn push_ascii(&mut self, b: u8);
    /// Make room for `n` more bytes.
    fn reserve(&mut self, n: usize);
}

impl Sink for String {
    fn push_text(&mut self, s: &str) {
        self.push_str(s);
    }
    fn push_ascii(&mut self, b: u8) {
        self.push(char::from(b));
    }
    fn reserve(&mut self, n: usize) {
        String::reserve(self, n);
    }
}

impl Sink for Vec<u8> {
    fn push_text(&mut self, s: &str) {
        self.extend_from_slice(s.as_bytes());
    }
    fn push_ascii(&mut self, b: u8) {
        self.push(b);
    }
    fn reserve(&mut self, n: usize) {
        Vec::reserve(self, n);
    }
}

/// Strings this long or shorter are checked byte by byte (a field path, a
/// policy's name) for a fast path; longer ones are escaped in one loop.
const SHORT: usize = 64;

/// Append `s` as a JSON string (quoted and escaped exactly as
/// `serde_json::to_string(s)` writes it).
pub fn push_string<S: Sink>(out: &mut S, s: &str) {
    let bytes = s.as_bytes();
    if bytes.len() <= SHORT && plain(s) {
        out.push_ascii(b'"');
        out.push_text(s);
        out.push_ascii(b'"');
        return;
    }
    // No early exit: the compiler checks many bytes at once.
    if bytes.iter().fold(false, |any, &b| any | (b < 0x20)) {
        // Rare (a user's annotation with a newline): serde_json's escapes.
        // A `str` always serialises.
        out.push_text(&serde_json::to_string(s).unwrap_or_default());
        return;
    }
    out.reserve(bytes.len() + bytes.len() / 8 + 2);
    out.push_ascii(b'"');
    let mut from = 0;
    // Quote and backslash are ASCII: every index found is a char boundary;
    // each is written after its backslash, with the run that follows it.
    // A byte loop, not a SIMD search: in JSON text quotes are dense.
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'"' || b == b'\\' {
            out.push_text(&s[from..i]);
            out.push_ascii(b'\\');
            from = i;
        }
    }
    out.push_text(&s[from..]);
    out.push_ascii(b'"');
}

/// Append the JSON object of `entries` (`{"k":"v",...}`, in their order,
/// as `serde_json` writes a map of strings).
pub fn push_string_map<'a, S: Sink>(
    out: &mut S,
    entries: impl IntoIterator<Item = (&'a str, &'a str)>,
) {
    out.push_ascii(b'{');
    for (i, (k, v)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push_ascii(b',');
        }
        push_string(out, k);
        out.push_ascii(b':');
        push_string(out, v);
    }
    out.push_ascii(b'}');
}

/// Whether `s` is written into a JSON string as it is (no quote,
/// backslash or control character). No early exit: the compiler checks
/// many bytes at once, and the strings checked are mostly plain.
fn plain(s: &str) -> bool {
    !s.bytes().fold(false, |any, b| {
        any | (b < 0x20) | (b == b'"') | (b == b'\\')
    })
}

/// The JSON object of `entries` (as [`push_string_map`] writes it) as a
/// JSON string (that text as [`push_string`] writes it): in one pass when
/// every key and value is plain, the object's quotes escaped as they are
/// written.
pub fn string_map_as_string<'a>(
    entries: impl IntoIterator<Item = (&'a str, &'a str)> + Clone,
) -> String {
    let mut size = 4;
    let mut all_plain = true;
    for (k, v) in entries.clone() {
        size += k.len() + v.len() + 10;
        all_plain &= plain(k) && plain(v);
    }
    if !all_plain {
        let mut json = String::with_capacity(size);
        push_string_map(&mut json, entries);
        let mut quoted = String::with_capacity(json.len() + json.len() / 4 + 2);
        push_string(&mut quoted, &json);
        return quoted;
    }
    // The marks between a key and its value, and between entries, written
    // as one piece each; each entry opens with the marks that close the
    // one before it.
    let mut quoted = String::with_capacity(size);
    quoted.push_str("\"{");
    let mut open = "\\\"";
    for (k, v) in entries {
        quoted.push_str(open);
        quoted.push_str(k);
        quoted.push_str("\\\":\\\"");
        quoted.push_str(v);
        open = "\\\",\\\"";
    }
    if open.len() > 2 {
        quoted.push_str("\\\"");
    }
    quoted.push_str("}\"");
    quoted
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn strings_are_written_as_serde_json_writes_them() {
        for s in [
            "",
            "plain",
            r#"{"spec.replicas":"built-in"}"#,
            "back\\slash",
            "\"",
            "line\nbreak\ttab\u{1}",
            "\u{7f} del and é ünïcode 🦀",
            "\\\"\\\"",
        ]
        .into_iter()
        .map(str::to_owned)
        .chain([
            "{\"spec.engine.image\":\"ClusterInferencePolicy/platform\"}".repeat(30),
            "\\".repeat(70),
            "x".repeat(200),
            format!("{}\n", "y".repeat(100)),
            format!("{}\"", "z".repeat(64)),
        ]) {
            let s = s.as_str();
            let mut text = String::new();
            push_string(&mut text, s);
            assert_eq!(text, serde_json::to_string(s).unwrap(), "{s:?}");
            let mut bytes = Vec::new();
            push_string(&mut bytes, s);
            assert_eq!(bytes, serde_json::to_vec(s).unwrap(), "{s:?}");
        }
    }

    proptest! {
        /// The string, plain entries or not, is what serde_json writes.
        #[test]
        fn a_map_as_a_string_is_written_as_serde_json_writes_it(
            map in proptest::collection::btree_map("[a-z.]{0,12}|.{0,6}", "[A-Za-z/-]{0,12}|.{0,6}", 0..6),
        ) {
            let quoted =
                string_map_as_string(map.iter().map(|(k, v)| (k.as_str(), v.as_str())));
            let json = serde_json::to_string(&map).unwrap();
            prop_assert_eq!(&quoted, &serde_json::to_string(&json).unwrap());
        }

        #[test]
        fn any_string_and_map_is_written_as_serde_json_writes_it(
            map in proptest::collection::btree_map(any::<String>(), any::<String>(), 0..6),
        ) {
            let mut text = String::new();
            push_string_map(&mut text, map.iter().map(|(k, v)| (k.as_str(), v.as_str())));
            prop_assert_eq!(&text, &serde_json::to_string(&map).unwrap());
            let back: BTreeMap<String, String> = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(back, map);
        }
    }
}
