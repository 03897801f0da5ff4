//! The admission rule on a gate's query.

use crate::engine::field_error::FieldError;
use crate::engine::field_path::Path;

use super::error::{MAX_MESSAGE, QueryError, cut};
use super::error::{MAX_QUERY_BYTES, MAX_QUERY_DEPTH};
use super::scope::{render_query, scope_query};

/// The most of the query an admission error repeats.
const MAX_SHOWN_QUERY: usize = 120;

/// The admission rule: the query is at most [`MAX_QUERY_BYTES`] long as
/// written, and, its placeholders filled with sample values, within the
/// bounds and PromQL the gate can scope. Each failure is an error on
/// `field`: too long, too deep, or the parser's message.
pub fn check_query(
    errs: &mut Vec<FieldError>,
    field: &Path<'_>,
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
