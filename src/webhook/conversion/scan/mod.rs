//! A validating JSON scanner: where a value ends, without building it
//! ([`value`], strings in [`string`]), and a [`Cursor`] that reads a
//! document part by part on top of it.
//!
//! The conversion copies each object's `metadata` into its answer as it
//! came: it only needs to know where that value ends and that it is JSON.
//! In a typical review that is most of the bytes (managed fields, and a
//! `last-applied-configuration` annotation: JSON inside a string, an escape
//! every few bytes), which serde_json steps over a byte and an escape at a
//! time (`docs/performance.md` has the measurement).
//!
//! [`Scanner::value_end`](value::Scanner::value_end) accepts what
//! serde_json accepts when it skips a value: the JSON grammar, strings
//! without raw control characters, escapes from the JSON set, `\u`
//! followed by four hex digits (a lone surrogate is accepted, as
//! serde_json accepts it when skipping), nesting up to
//! [`MAX_DEPTH`](value::MAX_DEPTH) (the depth Go's `encoding/json`, and so
//! the API server, accepts). Strings are searched 16 or 64 bytes at a time
//! with SSE2 compares (`wide`), so an escape costs a few instructions, not
//! a call. The input is `&str`: UTF-8 is checked once for the whole body.

mod cursor;
mod error;
mod string;
mod value;

pub use cursor::Cursor;
pub use value::is_json;
