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

mod bounds;
mod check;
mod error;
mod scope;

pub use check::check_query;
pub use error::{MAX_QUERY_BYTES, MAX_QUERY_DEPTH, QueryError};
pub use scope::{NAMESPACE_LABEL, render_query, scope_query};

#[cfg(test)]
mod tests;
