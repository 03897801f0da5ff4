//! The rollout gate's PromQL: placeholders, and the rewrite that confines a
//! tenant's query to its own namespace. The query is parsed with
//! `promql-parser`; every vector and range selector loses whatever
//! `namespace` matchers it had and gets `namespace="<ns>"`, the way
//! prom-label-proxy enforces a label. The scoped query is the parsed tree
//! printed back.

use promql_parser::label::{MatchOp, Matcher, Matchers};
use promql_parser::parser::{self, Expr, VectorSelector};

use super::field_error::FieldError;

/// The label every selector is confined by.
pub const NAMESPACE_LABEL: &str = "namespace";
/// The most of a parser message an admission error repeats.
const MAX_MESSAGE: usize = 512;
/// The most of the query an admission error repeats.
const MAX_SHOWN_QUERY: usize = 120;

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
/// back unchanged in meaning. The error is the parser's message (or says
/// that `namespace` is empty).
pub fn scope_query(query: &str, namespace: &str) -> Result<String, String> {
    if namespace.is_empty() {
        // `namespace=""` would select the series that have no namespace.
        return Err("no namespace to confine the query to".into());
    }
    let mut expr = parser::parse(query)?;
    scope_expr(&mut expr, namespace)?;
    Ok(expr.to_string())
}

fn scope_expr(expr: &mut Expr, namespace: &str) -> Result<(), String> {
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
        Expr::Extension(_) => return Err("the query has an expression it cannot scope".into()),
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

/// The admission rule: the query, its placeholders filled with sample
/// values, is PromQL the gate can scope. A parse failure is an error on
/// `field` carrying the parser's message.
pub fn check_query(
    errs: &mut Vec<FieldError>,
    field: &str,
    query: &str,
    (namespace, service, canary): (&str, &str, &str),
) {
    if query.trim().is_empty() {
        return;
    }
    let rendered = render_query(query, namespace, service, canary);
    if let Err(e) = scope_query(&rendered, namespace) {
        errs.push(FieldError::invalid(
            field,
            format!("{:?}", cut(query.trim(), MAX_SHOWN_QUERY)),
            &format!("not valid PromQL: {}", cut(e.trim(), MAX_MESSAGE)),
        ));
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
mod tests {
    use super::*;

    /// Every selector's matcher groups (one group, or one per `or`
    /// alternative) in the tree.
    fn selector_groups(expr: &Expr, out: &mut Vec<Vec<Matcher>>) {
        match expr {
            Expr::Aggregate(a) => {
                selector_groups(&a.expr, out);
                if let Some(p) = &a.param {
                    selector_groups(p, out);
                }
            }
            Expr::Unary(u) => selector_groups(&u.expr, out),
            Expr::Binary(b) => {
                selector_groups(&b.lhs, out);
                selector_groups(&b.rhs, out);
            }
            Expr::Paren(p) => selector_groups(&p.expr, out),
            Expr::Subquery(s) => selector_groups(&s.expr, out),
            Expr::Call(c) => c.args.args.iter().for_each(|a| selector_groups(a, out)),
            Expr::VectorSelector(vs) => groups_of(vs, out),
            Expr::MatrixSelector(ms) => groups_of(&ms.vs, out),
            Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => {}
        }
    }

    /// `expr` with every selector's matchers in one order, so that two trees
    /// that differ only in matcher order compare equal.
    fn normalized(mut expr: Expr) -> Expr {
        fn sort(vs: &mut VectorSelector) {
            let key = |m: &Matcher| m.to_string();
            vs.matchers.matchers.sort_by_key(key);
            for group in &mut vs.matchers.or_matchers {
                group.sort_by_key(key);
            }
        }
        fn walk(expr: &mut Expr) {
            match expr {
                Expr::Aggregate(a) => {
                    walk(&mut a.expr);
                    if let Some(p) = a.param.as_mut() {
                        walk(p);
                    }
                }
                Expr::Unary(u) => walk(&mut u.expr),
                Expr::Binary(b) => {
                    walk(&mut b.lhs);
                    walk(&mut b.rhs);
                }
                Expr::Paren(p) => walk(&mut p.expr),
                Expr::Subquery(s) => walk(&mut s.expr),
                Expr::Call(c) => c.args.args.iter_mut().for_each(|a| walk(a)),
                Expr::VectorSelector(vs) => sort(vs),
                Expr::MatrixSelector(ms) => sort(&mut ms.vs),
                Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => {}
            }
        }
        walk(&mut expr);
        expr
    }

    fn groups_of(vs: &VectorSelector, out: &mut Vec<Vec<Matcher>>) {
        if vs.matchers.or_matchers.is_empty() {
            out.push(vs.matchers.matchers.clone());
        } else {
            assert!(vs.matchers.matchers.is_empty(), "{vs}");
            out.extend(vs.matchers.or_matchers.iter().cloned());
        }
    }

    /// Scope `query` to `ns`, then prove the printed text is PromQL whose
    /// every selector carries exactly one namespace matcher, `namespace="ns"`,
    /// and that printing is stable. Returns the scoped text and its
    /// selectors' matcher groups.
    fn scoped(query: &str, ns: &str) -> (String, Vec<Vec<Matcher>>) {
        let text = scope_query(query, ns).unwrap_or_else(|e| panic!("{query}: {e}"));
        let reparsed = parser::parse(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(reparsed.to_string(), text, "printing is stable");
        let mut tree = parser::parse(query).unwrap();
        scope_expr(&mut tree, ns).unwrap();
        assert_eq!(
            normalized(reparsed.clone()),
            normalized(tree),
            "the printed text is the scoped tree: {text}"
        );
        let mut groups = Vec::new();
        selector_groups(&reparsed, &mut groups);
        for group in &groups {
            let ns_matchers: Vec<_> = group.iter().filter(|m| m.name == NAMESPACE_LABEL).collect();
            assert_eq!(ns_matchers.len(), 1, "{text}");
            assert_eq!(ns_matchers[0].op, MatchOp::Equal, "{text}");
            assert_eq!(ns_matchers[0].value, ns, "{text}");
        }
        (text, groups)
    }

    /// The matcher groups of the query as the tenant wrote it.
    fn original_groups(query: &str) -> Vec<Vec<Matcher>> {
        let mut groups = Vec::new();
        selector_groups(&parser::parse(query).unwrap(), &mut groups);
        groups
    }

    /// The scoped query keeps every other matcher of every selector.
    fn keeps_other_matchers(query: &str, ns: &str) -> String {
        let (text, groups) = scoped(query, ns);
        let before = original_groups(query);
        assert_eq!(groups.len(), before.len(), "{text}");
        for (after, before) in groups.iter().zip(&before) {
            let mut want: Vec<_> = before
                .iter()
                .filter(|m| m.name != NAMESPACE_LABEL)
                .map(ToString::to_string)
                .collect();
            let mut got: Vec<_> = after
                .iter()
                .filter(|m| m.name != NAMESPACE_LABEL)
                .map(ToString::to_string)
                .collect();
            want.sort();
            got.sort();
            assert_eq!(got, want, "{text}");
        }
        text
    }

    #[test]
    fn a_selector_without_a_matcher_gets_one() {
        assert_eq!(
            keeps_other_matchers("up", "team-a"),
            r#"up{namespace="team-a"}"#
        );
        assert_eq!(
            keeps_other_matchers(r#"sum(rate(x{job="a"}[5m]))"#, "team-a"),
            r#"sum(rate(x{job="a",namespace="team-a"}[5m]))"#
        );
    }

    #[test]
    fn another_namespace_is_replaced() {
        assert_eq!(
            keeps_other_matchers(r#"x{namespace="team-b",pod=~"c-.*"}"#, "team-a"),
            r#"x{namespace="team-a",pod=~"c-.*"}"#
        );
        assert_eq!(
            keeps_other_matchers(r#"x{namespace="team-b",namespace="team-c"}"#, "team-a"),
            r#"x{namespace="team-a"}"#
        );
    }

    #[test]
    fn every_namespace_operator_is_replaced() {
        for query in [
            r#"x{namespace=~".*"}"#,
            r#"x{namespace=~"team-.+"}"#,
            r#"x{namespace!="team-a"}"#,
            r#"x{namespace!~"kube-.*"}"#,
            r#"{__name__="x",namespace=~".+"}"#,
            r#"x{"namespace"="team-b"}"#,
        ] {
            let (text, groups) = scoped(query, "team-a");
            assert_eq!(groups.len(), 1, "{text}");
            assert!(!text.contains("team-b") && !text.contains(".*"), "{text}");
        }
        assert_eq!(
            scoped(r#"x{namespace=~".*"}"#, "team-a").0,
            r#"x{namespace="team-a"}"#
        );
    }

    #[test]
    fn a_selector_by_name_matcher_is_scoped() {
        assert_eq!(
            keeps_other_matchers(r#"{__name__="x"}"#, "team-a"),
            r#"{__name__="x",namespace="team-a"}"#
        );
        assert_eq!(
            keeps_other_matchers(r#"{__name__=~"x|y",job="a"}[5m]"#, "team-a"),
            r#"{__name__=~"x|y",job="a",namespace="team-a"}[5m]"#
        );
        keeps_other_matchers(r#"{"vllm.latency",namespace="team-b"}"#, "team-a");
    }

    #[test]
    fn subqueries_are_scoped() {
        assert_eq!(
            keeps_other_matchers("max_over_time(rate(x[5m])[30m:1m])", "team-a"),
            r#"max_over_time(rate(x{namespace="team-a"}[5m])[30m:1m])"#
        );
        keeps_other_matchers(
            r#"min_over_time((sum(rate(a{namespace="b"}[1m])) / sum(rate(c[1m])))[1h:] offset 5m)"#,
            "team-a",
        );
    }

    #[test]
    fn joins_scope_both_sides() {
        for query in [
            r#"sum by (pod) (rate(errors[5m])) / on(pod) sum by (pod) (rate(requests{namespace="team-b"}[5m]))"#,
            "a / ignoring(code) b",
            "a * on() group_left(node) b",
            "a * on(pod) group_left b",
            "a + on(pod) group_right(zone) b",
            "a > bool 1",
            "a and on(pod) b or c unless ignoring(x) d",
        ] {
            let text = keeps_other_matchers(query, "team-a");
            assert!(!text.contains("team-b"), "{text}");
        }
        assert_eq!(
            scoped("a / ignoring(code) b", "team-a").1.len(),
            2,
            "both sides"
        );
    }

    #[test]
    fn functions_over_several_selectors_are_scoped() {
        let (text, groups) = scoped(
            "histogram_quantile(0.99, sum by (le) (rate(a[5m])))",
            "team-a",
        );
        assert_eq!(groups.len(), 1, "{text}");
        for query in [
            r#"label_replace(a{namespace="team-b"}, "dst", "$1", "namespace", "(.*)")"#,
            "absent(x)",
            "absent_over_time(x[5m])",
            "clamp_max(a, scalar(b))",
            "vector(1) + on() group_left count(up)",
            r#"topk(scalar(max(k)), a)"#,
            r#"count_values("v", a)"#,
            r#"quantile(0.5, a) - quantile without (pod) (0.9, b)"#,
            "-a",
            "time() - timestamp(x)",
        ] {
            keeps_other_matchers(query, "team-a");
        }
        assert_eq!(scoped("clamp_max(a, scalar(b))", "team-a").1.len(), 2);
    }

    #[test]
    fn offset_and_at_modifiers_survive() {
        for (query, want) in [
            ("x offset 5m", r#"x{namespace="team-a"} offset 5m"#),
            (
                "rate(x[5m] offset 1h)",
                r#"rate(x{namespace="team-a"}[5m] offset 1h)"#,
            ),
            (
                "x @ 1700000000",
                r#"x{namespace="team-a"} @ 1700000000.000"#,
            ),
            ("x @ start()", r#"x{namespace="team-a"} @ start()"#),
            (
                "rate(x[5m] @ end() offset -5m)",
                r#"rate(x{namespace="team-a"}[5m] @ end() offset -5m)"#,
            ),
        ] {
            assert_eq!(keeps_other_matchers(query, "team-a"), want);
        }
    }

    #[test]
    fn or_alternatives_are_each_scoped() {
        let (text, groups) = scoped(r#"x{job="a" or namespace="team-b"}"#, "team-a");
        assert_eq!(groups.len(), 2, "{text}");
        assert!(!text.contains("team-b"), "{text}");
    }

    #[test]
    fn other_matcher_values_survive_printing() {
        let query = r#"x{path="a\"b\\c",msg=~'it''s',tab="a\tb",u="ü"}"#;
        let query = query.replace("''", "\\'");
        keeps_other_matchers(&query, "team-a");
        let (_, groups) = scoped(&query, "team-a");
        let value = |name: &str| {
            groups[0]
                .iter()
                .find(|m| m.name == name)
                .map(|m| m.value.clone())
                .unwrap()
        };
        assert_eq!(value("path"), "a\"b\\c");
        assert_eq!(value("msg"), "it's");
        assert_eq!(value("tab"), "a\tb");
        assert_eq!(value("u"), "ü");
    }

    #[test]
    fn a_query_without_selectors_is_unchanged() {
        assert_eq!(scope_query("1", "team-a").unwrap(), "1");
        assert_eq!(scope_query("2 * 3", "team-a").unwrap(), "2 * 3");
        assert_eq!(scoped("vector(1)", "team-a").1.len(), 0);
    }

    #[test]
    fn an_empty_namespace_is_refused() {
        assert!(scope_query("x", "").is_err());
    }

    #[test]
    fn a_query_that_does_not_parse_is_the_parser_error() {
        for query in ["sum(rate(x[5m])", "x{", "rate(x)", "x[5m", "{}", ""] {
            assert!(scope_query(query, "team-a").is_err(), "{query}");
        }
    }

    #[test]
    fn admission_renders_then_parses() {
        let sample = ("team-a", "chat", "chat-canary");
        let mut errs = Vec::new();
        check_query(
            &mut errs,
            "spec.rollout.analysis.prometheus.query",
            r#"sum(rate(x{namespace="{{namespace}}",pod=~"{{canary}}-.*",svc="{{service}}"}[5m]))"#,
            sample,
        );
        assert!(errs.is_empty(), "{errs:?}");
        check_query(
            &mut errs,
            "spec.rollout.analysis.prometheus.query",
            "sum(",
            sample,
        );
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "spec.rollout.analysis.prometheus.query");
        assert!(errs[0].message.contains("not valid PromQL: "), "{errs:?}");
        let long = format!("sum({}", "x + ".repeat(200));
        errs.clear();
        check_query(&mut errs, "f", &long, sample);
        assert!(errs[0].message.len() < 1024, "{}", errs[0].message);
    }

    #[test]
    fn placeholders_are_replaced() {
        assert_eq!(
            render_query(
                "x{namespace=\"{{namespace}}\",pod=~\"{{canary}}-.*\",svc=\"{{service}}\"}",
                "team-a",
                "chat",
                "chat-canary"
            ),
            "x{namespace=\"team-a\",pod=~\"chat-canary-.*\",svc=\"chat\"}"
        );
    }
}
