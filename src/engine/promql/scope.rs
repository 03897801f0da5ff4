//! Confining a query to a namespace: every selector's `namespace`
//! matchers replaced by `namespace="<ns>"`, in the parsed tree.

use promql_parser::label::{MatchOp, Matcher, Matchers};
use promql_parser::parser::{Expr, VectorSelector};

use super::bounds::parse_bounded;
use super::error::QueryError;

/// The label every selector is confined by.
pub const NAMESPACE_LABEL: &str = "namespace";
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
/// back unchanged in meaning. A query longer than [`MAX_QUERY_BYTES`](super::MAX_QUERY_BYTES) or
/// deeper than [`MAX_QUERY_DEPTH`](super::MAX_QUERY_DEPTH) is refused before anything recursive
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

pub(super) fn scope_expr(expr: &mut Expr, namespace: &str) -> Result<(), QueryError> {
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
