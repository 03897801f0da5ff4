//! Where a JSON string ends, and what escapes it holds: 16 or 64 bytes
//! looked at a time with SSE2 compares (`wide`), so an escape costs a few
//! instructions, not a call.

use wide::u8x16;

use super::error::{ScanError, fail};

/// What escapes a string holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Escapes {
    /// Any escape.
    pub any: bool,
    /// A `\u` escape.
    pub unicode: bool,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn serde_accepts(text: &str) -> bool {
        serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok()
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
}
