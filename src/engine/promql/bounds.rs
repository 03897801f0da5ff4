//! The bounds a query is held to before anything recursive reads it: a
//! lexical pre-scan of its nesting, a parse on a stack of its own when the
//! pre-scan proves nothing, and a walk and a drop with their own stacks.

use promql_parser::parser::{self, Expr, NumberLiteral};

use super::error::{MAX_QUERY_BYTES, MAX_QUERY_DEPTH, QueryError};

/// Hold `query` to the bounds, then parse it: the tree returned is at most
/// [`MAX_QUERY_DEPTH`] deep, so walking, printing and dropping it recurse
/// at most that far.
pub(super) fn parse_bounded(query: &str) -> Result<Expr, QueryError> {
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
pub(super) enum Nesting {
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
pub(super) fn nesting_bound(query: &str) -> Nesting {
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
    while let Some(c) = next_code(b, &mut i) {
        match c {
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

/// The next byte of `b` from `*i` that is outside string literals and
/// comments, with `*i` moved past it; `None` at the end.
fn next_code(b: &[u8], i: &mut usize) -> Option<u8> {
    while *i < b.len() {
        let c = b[*i];
        *i += 1;
        match c {
            b'"' | b'\'' | b'`' => *i = skip_string(b, *i, c),
            b'#' => *i = skip_line(b, *i),
            _ => return Some(c),
        }
    }
    None
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
    while let Some(c) = next_code(b, &mut i) {
        if c == b'}' {
            return i;
        }
    }
    b.len()
}

/// The children of a node, and whether the node is a level.
pub(super) fn children(expr: &Expr) -> (bool, [Option<&Expr>; 2], &[Box<Expr>]) {
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
pub(super) fn depth_exceeds(expr: &Expr, max: usize) -> bool {
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
