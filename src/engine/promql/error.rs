//! The bounds on a gate query, why one is refused, and how much of it an
//! error repeats.

/// The longest query the gate runs, in bytes: as written (the CRD's
/// `maxLength`, also for a review posted straight to the webhook) and once
/// its placeholders are filled.
pub const MAX_QUERY_BYTES: usize = 4096;
/// The deepest a query may nest: each parenthesis, function call,
/// aggregation, subquery, unary and binary operator on the way from the
/// top of the expression to a selector or literal is one level; a selector
/// or literal is none.
pub const MAX_QUERY_DEPTH: usize = 64;

/// The most of a parser message an admission error repeats.
pub(super) const MAX_MESSAGE: usize = 512;

/// Why a query cannot be scoped. `Display` reads after "the query ".
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueryError {
    /// Longer than [`MAX_QUERY_BYTES`] (its length in bytes).
    TooLong(usize),
    /// Nests deeper than [`MAX_QUERY_DEPTH`].
    TooDeep,
    /// No namespace to confine it to.
    NoNamespace,
    /// Not PromQL the gate can scope (the parser's message).
    Invalid(String),
}

impl std::fmt::Display for QueryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TooLong(n) => write!(f, "is {n} bytes, over the limit of {MAX_QUERY_BYTES}"),
            Self::TooDeep => write!(f, "nests deeper than {MAX_QUERY_DEPTH} levels"),
            Self::NoNamespace => f.write_str("has no namespace to be confined to"),
            Self::Invalid(e) => write!(f, "is not valid PromQL: {}", cut(e.trim(), MAX_MESSAGE)),
        }
    }
}

/// `s` cut to at most `max` bytes on a character boundary, with an ellipsis.
pub(super) fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}
