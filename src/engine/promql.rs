//! The rollout gate's PromQL: placeholders, bounds, and the rewrite that
//! confines a tenant's query to its own namespace. The query is parsed with
//! `promql-parser`; every vector and range selector loses whatever
//! `namespace` matchers it had and gets `namespace="<ns>"`, the way
//! prom-label-proxy enforces a label. The scoped query is the parsed tree
//! printed back.
//!
//! The parser, its own checks, the scoping walk, printing and dropping a
//! tree all recurse, one stack frame or more per level, and a stack
//! overflow aborts the whole process. So a query is held to
//! [`MAX_QUERY_BYTES`] and [`MAX_QUERY_DEPTH`] before any of them runs: a
//! lexical pre-scan (no recursion) refuses a longer query or one whose
//! parentheses nest deeper, and proves most queries shallow enough; a query
//! it cannot prove so (at most 4 KiB) is parsed on a stack of its own and
//! its depth measured exactly by a walk with its own stack; a tree too deep
//! is taken apart the same way, never dropped recursively.

use promql_parser::label::{MatchOp, Matcher, Matchers};
use promql_parser::parser::{self, Expr, NumberLiteral, VectorSelector};

use super::field_error::FieldError;

/// The label every selector is confined by.
pub const NAMESPACE_LABEL: &str = "namespace";
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
const MAX_MESSAGE: usize = 512;
/// The most of the query an admission error repeats.
const MAX_SHOWN_QUERY: usize = 120;

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

/// The query with its placeholders replaced.
#[must_use]
pub fn render_query(query: &str, namespace: &str, service: &str, canary: &str) -> String {
    query
        .replace("{{namespace}}", namespace)
        .replace("{{service}}", service)
        .replace("{{canary}}", canary)
}

/// Parse `query` and confine every vector and range selector in it to
/// `namespace`: any `namespace` matcher (`=`, `!=`, `=~`, `!~`) is removed
/// and `namespace="<namespace>"` added. A query without selectors comes
/// back unchanged in meaning. A query longer than [`MAX_QUERY_BYTES`] or
/// deeper than [`MAX_QUERY_DEPTH`] is refused before anything recursive
/// reads it.
pub fn scope_query(query: &str, namespace: &str) -> Result<String, QueryError> {
    if namespace.is_empty() {
        // `namespace=""` would select the series that have no namespace.
        return Err(QueryError::NoNamespace);
    }
    let mut expr = parse_bounded(query)?;
    scope_expr(&mut expr, namespace)?;
    Ok(expr.to_string())
}

/// Hold `query` to the bounds, then parse it: the tree returned is at most
/// [`MAX_QUERY_DEPTH`] deep, so walking, printing and dropping it recurse
/// at most that far.
fn parse_bounded(query: &str) -> Result<Expr, QueryError> {
    if query.len() > MAX_QUERY_BYTES {
        return Err(QueryError::TooLong(query.len()));
    }
    match nesting_bound(query) {
        Nesting::TooDeep => Err(QueryError::TooDeep),
        Nesting::AtMost(levels) if levels <= MAX_QUERY_DEPTH => {
            parser::parse(query).map_err(QueryError::Invalid)
        }
        // Unproven: the parser's own checks (and the copy it makes of an
        // aggregation's argument) recurse once per level of the tree, up to
        // a level per byte, so it runs on a stack of its own.
        Nesting::AtMost(_) => stacker::grow(PARSE_STACK, || {
            let expr = parser::parse(query).map_err(QueryError::Invalid)?;
            if depth_exceeds(&expr, MAX_QUERY_DEPTH) {
                drop_flat(expr);
                return Err(QueryError::TooDeep);
            }
            Ok(expr)
        }),
    }
}

/// The stack a query the pre-scan cannot prove shallow is parsed on,
/// whatever the stack of the calling thread: the worst query of 4 KiB found
/// (64 aggregations around a chain of unary minus signs) needs about
/// 1.5 MiB in a debug build. Mapped for the parse and unmapped after it;
/// only the pages the parse touches are ever backed by memory.
const PARSE_STACK: usize = 16 << 20;

/// What the lexical pre-scan proves of a query's depth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Nesting {
    /// Parentheses nest deeper than [`MAX_QUERY_DEPTH`]: each `(` around
    /// another belongs to a level (a label list such as `by (...)` holds no
    /// parenthesis), so the query is too deep or not PromQL.
    TooDeep,
    /// The tree, if the query parses, is at most this deep.
    AtMost(usize),
}

/// A bound on the depth of `query`'s tree, from its tokens alone, in one
/// pass with a stack of at most [`MAX_QUERY_DEPTH`] groups.
///
/// The text is read as `promql-parser`'s lexer reads it wherever that lexer
/// accepts it: string literals (`"..."`, `'...'` and `` `...` ``, a
/// backslash escaping the next character), `#` comments to the end of the
/// line, label matchers in braces (which hold no level: a selector is
/// none), and brackets (which hold only durations). Each node on the way
/// from the root to a leaf is either a group around that leaf (a
/// parenthesis, call or aggregation: its `(`) or a token at the top of one
/// of those groups (a unary or binary operator, or a subquery's `[`). So
/// the depth is at most, over the chains of nested groups, the sum of each
/// group's own operators plus one per group: what this returns.
fn nesting_bound(query: &str) -> Nesting {
    #[derive(Default)]
    struct Group {
        /// Operator tokens directly inside this group.
        operators: usize,
        /// The deepest bound of a group inside this one.
        inner: usize,
    }
    let b = query.as_bytes();
    let mut groups = Vec::with_capacity(MAX_QUERY_DEPTH + 1);
    groups.push(Group::default());
    let close = |groups: &mut Vec<Group>| {
        if groups.len() > 1 {
            let g = groups.pop().unwrap_or_default();
            let total = 1 + g.operators + g.inner;
            if let Some(parent) = groups.last_mut() {
                parent.inner = parent.inner.max(total);
            }
        }
    };
    let operator = |groups: &mut Vec<Group>| {
        if let Some(g) = groups.last_mut() {
            g.operators += 1;
        }
    };
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        i += 1;
        match c {
            b'"' | b'\'' | b'`' => i = skip_string(b, i, c),
            b'#' => i = skip_line(b, i),
            b'{' => i = skip_braces(b, i),
            b'[' => {
                // A subquery is a level; a range is none (counted anyway).
                operator(&mut groups);
                i = b[i..]
                    .iter()
                    .position(|&c| c == b']')
                    .map_or(b.len(), |p| i + p + 1);
            }
            b'(' => {
                if groups.len() > MAX_QUERY_DEPTH {
                    return Nesting::TooDeep;
                }
                groups.push(Group::default());
            }
            // An unmatched `)` is the lexer's error, before any parse.
            b')' => close(&mut groups),
            b'+' | b'-' | b'*' | b'/' | b'%' | b'^' | b'=' | b'!' | b'<' | b'>' => {
                if matches!(c, b'=' | b'!' | b'<' | b'>') && b.get(i) == Some(&b'=') {
                    i += 1;
                }
                operator(&mut groups);
            }
            c if c.is_ascii_alphanumeric() || c == b'_' || c == b':' || c == b'.' => {
                // A word or a number (a number's own `+` or `-`, as in
                // `1e-3`, is counted as an operator: a bound may be high).
                let start = i - 1;
                while i < b.len()
                    && (b[i].is_ascii_alphanumeric() || matches!(b[i], b'_' | b':' | b'.'))
                {
                    i += 1;
                }
                let word = &b[start..i];
                if ["and", "or", "unless", "atan2"]
                    .iter()
                    .any(|k| word.eq_ignore_ascii_case(k.as_bytes()))
                {
                    operator(&mut groups);
                }
            }
            _ => {}
        }
    }
    // An unclosed `(` is the lexer's error too; the bound counts it closed.
    while groups.len() > 1 {
        close(&mut groups);
    }
    let root = groups.pop().unwrap_or_default();
    Nesting::AtMost(root.operators + root.inner)
}

/// The index after the string literal opened by `quote` just before `i`.
fn skip_string(b: &[u8], mut i: usize, quote: u8) -> usize {
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            c if c == quote => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

/// The index after the line that `i` is on.
fn skip_line(b: &[u8], i: usize) -> usize {
    b[i..]
        .iter()
        .position(|&c| c == b'\n' || c == b'\r')
        .map_or(b.len(), |p| i + p + 1)
}

/// The index after the label matchers opened by `{` just before `i`.
fn skip_braces(b: &[u8], mut i: usize) -> usize {
    while i < b.len() {
        let c = b[i];
        i += 1;
        match c {
            b'"' | b'\'' | b'`' => i = skip_string(b, i, c),
            b'#' => i = skip_line(b, i),
            b'}' => return i,
            _ => {}
        }
    }
    b.len()
}

/// The children of a node, and whether the node is a level.
fn children(expr: &Expr) -> (bool, [Option<&Expr>; 2], &[Box<Expr>]) {
    match expr {
        Expr::Aggregate(a) => (true, [Some(&*a.expr), a.param.as_deref()], &[]),
        Expr::Unary(u) => (true, [Some(&*u.expr), None], &[]),
        Expr::Binary(b) => (true, [Some(&*b.lhs), Some(&*b.rhs)], &[]),
        Expr::Paren(p) => (true, [Some(&*p.expr), None], &[]),
        Expr::Subquery(s) => (true, [Some(&*s.expr), None], &[]),
        Expr::Call(c) => (true, [None, None], &c.args.args),
        Expr::VectorSelector(_)
        | Expr::MatrixSelector(_)
        | Expr::NumberLiteral(_)
        | Expr::StringLiteral(_)
        | Expr::Extension(_) => (false, [None, None], &[]),
    }
}

/// Whether `expr` nests deeper than `max` levels, by a walk with its own
/// stack (no recursion), stopping at the first level too deep.
fn depth_exceeds(expr: &Expr, max: usize) -> bool {
    let mut stack = vec![(expr, 0usize)];
    while let Some((e, above)) = stack.pop() {
        let (level, pair, args) = children(e);
        if !level {
            continue;
        }
        let depth = above + 1;
        if depth > max {
            return true;
        }
        stack.extend(pair.into_iter().flatten().map(|c| (c, depth)));
        stack.extend(args.iter().map(|c| (&**c, depth)));
    }
    false
}

/// Drop `expr` node by node with a stack of its own: the derived `Drop`
/// recurses once per level.
fn drop_flat(expr: Expr) {
    fn take(b: &mut Expr) -> Expr {
        std::mem::replace(b, Expr::NumberLiteral(NumberLiteral::new(0.0)))
    }
    let mut stack = vec![expr];
    while let Some(mut e) = stack.pop() {
        match &mut e {
            Expr::Aggregate(a) => {
                stack.push(take(&mut a.expr));
                if let Some(p) = a.param.as_deref_mut() {
                    stack.push(take(p));
                }
            }
            Expr::Unary(u) => stack.push(take(&mut u.expr)),
            Expr::Binary(b) => {
                stack.push(take(&mut b.lhs));
                stack.push(take(&mut b.rhs));
            }
            Expr::Paren(p) => stack.push(take(&mut p.expr)),
            Expr::Subquery(s) => stack.push(take(&mut s.expr)),
            Expr::Call(c) => stack.extend(c.args.args.iter_mut().map(|a| take(a))),
            Expr::VectorSelector(_)
            | Expr::MatrixSelector(_)
            | Expr::NumberLiteral(_)
            | Expr::StringLiteral(_)
            | Expr::Extension(_) => {}
        }
        // `e` holds no deep child now: dropping it is shallow.
    }
}

fn scope_expr(expr: &mut Expr, namespace: &str) -> Result<(), QueryError> {
    match expr {
        Expr::Aggregate(a) => {
            scope_expr(&mut a.expr, namespace)?;
            if let Some(p) = a.param.as_mut() {
                scope_expr(p, namespace)?;
            }
        }
        Expr::Unary(u) => scope_expr(&mut u.expr, namespace)?,
        Expr::Binary(b) => {
            scope_expr(&mut b.lhs, namespace)?;
            scope_expr(&mut b.rhs, namespace)?;
        }
        Expr::Paren(p) => scope_expr(&mut p.expr, namespace)?,
        Expr::Subquery(s) => scope_expr(&mut s.expr, namespace)?,
        Expr::Call(c) => {
            for arg in &mut c.args.args {
                scope_expr(arg, namespace)?;
            }
        }
        Expr::VectorSelector(vs) => scope_selector(vs, namespace),
        Expr::MatrixSelector(ms) => scope_selector(&mut ms.vs, namespace),
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) => {}
        // The parser never makes one; an unknown node is never sent unscoped.
        Expr::Extension(_) => {
            return Err(QueryError::Invalid(
                "an expression the gate cannot scope".into(),
            ));
        }
    }
    Ok(())
}

/// Confine one selector. With `or` alternatives (`{a="1" or b="2"}`) every
/// alternative is confined, since each one selects series on its own.
fn scope_selector(vs: &mut VectorSelector, namespace: &str) {
    let matchers = std::mem::replace(&mut vs.matchers, Matchers::empty());
    let scoped = |mut group: Vec<Matcher>| {
        group.retain(|m| m.name != NAMESPACE_LABEL);
        group.push(Matcher::new(MatchOp::Equal, NAMESPACE_LABEL, namespace));
        group
    };
    vs.matchers = if matchers.or_matchers.is_empty() {
        Matchers::new(scoped(matchers.matchers))
    } else {
        let common = matchers.matchers;
        Matchers::empty().with_or_matchers(
            matchers
                .or_matchers
                .into_iter()
                .map(|group| scoped(common.iter().cloned().chain(group).collect()))
                .collect(),
        )
    };
}

/// The admission rule: the query is at most [`MAX_QUERY_BYTES`] long as
/// written, and, its placeholders filled with sample values, within the
/// bounds and PromQL the gate can scope. Each failure is an error on
/// `field`: too long, too deep, or the parser's message.
pub fn check_query(
    errs: &mut Vec<FieldError>,
    field: &str,
    query: &str,
    (namespace, service, canary): (&str, &str, &str),
) {
    if query.len() > MAX_QUERY_BYTES {
        errs.push(FieldError::too_long(
            field,
            &format!(
                "may not be more than {MAX_QUERY_BYTES} bytes (is {})",
                query.len()
            ),
        ));
        return;
    }
    if query.trim().is_empty() {
        return;
    }
    let rendered = render_query(query, namespace, service, canary);
    let shown = || format!("{:?}", cut(query.trim(), MAX_SHOWN_QUERY));
    match scope_query(&rendered, namespace) {
        Ok(_) => {}
        Err(QueryError::TooLong(n)) => errs.push(FieldError::too_long(
            field,
            &format!(
                "may not be more than {MAX_QUERY_BYTES} bytes once its placeholders are filled (is {n})"
            ),
        )),
        Err(QueryError::TooDeep) => errs.push(FieldError::invalid(
            field,
            shown(),
            &format!(
                "may not nest more than {MAX_QUERY_DEPTH} levels (each parenthesis, function call, aggregation, subquery, unary and binary operator is one)"
            ),
        )),
        Err(QueryError::Invalid(e)) => errs.push(FieldError::invalid(
            field,
            shown(),
            &format!("not valid PromQL: {}", cut(e.trim(), MAX_MESSAGE)),
        )),
        Err(QueryError::NoNamespace) => errs.push(FieldError::invalid(
            field,
            shown(),
            "no namespace to confine the query to",
        )),
    }
}

/// `s` cut to at most `max` bytes on a character boundary, with an ellipsis.
fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

#[cfg(test)]
mod tests;
