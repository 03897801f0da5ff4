//! JSON strings written straight into text, byte for byte as `serde_json`
//! writes them, without its per-byte escaping loop where nothing needs
//! escaping: the defaulted-from annotation and the mutating webhook's patch
//! are written on every `/mutate`, and a JSON text carried inside a JSON
//! string (the annotation in the patch) is mostly quotes to escape.

/// Text to write into: a `String`, or the bytes of a JSON answer.
pub trait Sink {
    /// Append `s`.
    fn push_text(&mut self, s: &str);
}

impl Sink for String {
    fn push_text(&mut self, s: &str) {
        self.push_str(s);
    }
}

impl Sink for Vec<u8> {
    fn push_text(&mut self, s: &str) {
        self.extend_from_slice(s.as_bytes());
    }
}

/// Append `s` as a JSON string (quoted and escaped exactly as
/// `serde_json::to_string(s)` writes it).
pub fn push_string<S: Sink>(out: &mut S, s: &str) {
    // No early exit: the compiler checks many bytes at once.
    let control = s.bytes().fold(false, |any, b| any | (b < 0x20));
    if control {
        // Rare (a user's annotation with a newline): serde_json's escapes.
        // A `str` always serialises.
        out.push_text(&serde_json::to_string(s).unwrap_or_default());
        return;
    }
    out.push_text("\"");
    let mut rest = s;
    // Quote and backslash are ASCII: every index found is a char boundary.
    while let Some(i) = memchr::memchr2(b'"', b'\\', rest.as_bytes()) {
        out.push_text(&rest[..i]);
        out.push_text(if rest.as_bytes()[i] == b'"' {
            "\\\""
        } else {
            "\\\\"
        });
        rest = &rest[i + 1..];
    }
    out.push_text(rest);
    out.push_text("\"");
}

/// Append the JSON object of `entries` (`{"k":"v",...}`, in their order,
/// as `serde_json` writes a map of strings).
pub fn push_string_map<'a, S: Sink>(
    out: &mut S,
    entries: impl IntoIterator<Item = (&'a str, &'a str)>,
) {
    out.push_text("{");
    for (i, (k, v)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push_text(",");
        }
        push_string(out, k);
        out.push_text(":");
        push_string(out, v);
    }
    out.push_text("}");
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
        ] {
            let mut text = String::new();
            push_string(&mut text, s);
            assert_eq!(text, serde_json::to_string(s).unwrap(), "{s:?}");
            let mut bytes = Vec::new();
            push_string(&mut bytes, s);
            assert_eq!(bytes, serde_json::to_vec(s).unwrap(), "{s:?}");
        }
    }

    proptest! {
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
