//! The rollout gate's PromQL, confined to the service's namespace: the
//! query is parsed (promql-parser) and every vector and range selector
//! gets the matcher `namespace="<ns>"`, any `namespace` matcher it had
//! replaced, as prom-label-proxy does. The query is the tenant's, the
//! Prometheus the platform's: the rewritten query sees one namespace only.

use promql_parser::label::{MatchOp, Matcher, Matchers};
use promql_parser::parser::{self, Expr, VectorSelector};

/// The label every selector is pinned to.
pub const NAMESPACE_LABEL: &str = "namespace";

/// The query with its placeholders (`{{namespace}}`, `{{service}}`,
/// `{{canary}}`) replaced.
#[must_use]
pub fn render(query: &str, namespace: &str, service: &str, canary: &str) -> String {
    query
        .replace("{{namespace}}", namespace)
        .replace("{{service}}", service)
        .replace("{{canary}}", canary)
}

/// Whether `query` parses (the parser's message when it does not).
pub fn check(query: &str) -> Result<(), String> {
    parser::parse(query).map(|_| ())
}

/// `query` (placeholders already replaced) with every vector and range
/// selector pinned to `namespace`, printed back as PromQL. Fails with the
/// parser's message when it does not parse, or when the printed query
/// would not parse back to the same tree (nothing is sent then).
pub fn scope_to_namespace(query: &str, namespace: &str) -> Result<String, String> {
    let mut expr = parser::parse(query)?;
    pin(&mut expr, namespace);
    let printed = expr.to_string();
    match parser::parse(&printed) {
        Ok(again) if again == expr => Ok(printed),
        Ok(_) => Err(format!(
            "the query cannot be confined to its namespace faithfully: it prints back as {printed:?}"
        )),
        Err(e) => Err(format!(
            "the query confined to its namespace does not parse: {e}"
        )),
    }
}

/// Pin every selector under `expr` to `namespace`.
fn pin(expr: &mut Expr, namespace: &str) {
    match expr {
        Expr::VectorSelector(vs) => pin_selector(vs, namespace),
        Expr::MatrixSelector(ms) => pin_selector(&mut ms.vs, namespace),
        Expr::Aggregate(a) => {
            pin(&mut a.expr, namespace);
            if let Some(p) = a.param.as_mut() {
                pin(p, namespace);
            }
        }
        Expr::Unary(u) => pin(&mut u.expr, namespace),
        Expr::Binary(b) => {
            pin(&mut b.lhs, namespace);
            pin(&mut b.rhs, namespace);
        }
        Expr::Paren(p) => pin(&mut p.expr, namespace),
        Expr::Subquery(s) => pin(&mut s.expr, namespace),
        Expr::Call(c) => {
            for arg in &mut c.args.args {
                pin(arg, namespace);
            }
        }
        // The parser makes no extension nodes; literals select nothing.
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => {}
    }
}

/// Drop the selector's `namespace` matchers (of any kind) and add
/// `namespace="<ns>"`, to each alternative of an `or` selector too.
fn pin_selector(vs: &mut VectorSelector, namespace: &str) {
    let pinned = || Matcher::new(MatchOp::Equal, NAMESPACE_LABEL, namespace);
    let Matchers {
        matchers,
        or_matchers,
    } = &mut vs.matchers;
    if or_matchers.is_empty() {
        matchers.retain(|m| m.name != NAMESPACE_LABEL);
        matchers.push(pinned());
        // In the order the printer writes them, so the printed query
        // parses back to this very tree.
        matchers.sort_by_cached_key(ToString::to_string);
    } else {
        for alternative in or_matchers.iter_mut() {
            alternative.retain(|m| m.name != NAMESPACE_LABEL);
            alternative.push(pinned());
        }
        matchers.retain(|m| m.name != NAMESPACE_LABEL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scoped(q: &str) -> String {
        scope_to_namespace(q, "team-a").unwrap()
    }

    /// Every selector of `printed` (parsed again) names exactly `team-a`.
    fn only_team_a(printed: &str) {
        fn selectors(e: &Expr, out: &mut Vec<VectorSelector>) {
            match e {
                Expr::VectorSelector(vs) => out.push(vs.clone()),
                Expr::MatrixSelector(ms) => out.push(ms.vs.clone()),
                Expr::Aggregate(a) => {
                    selectors(&a.expr, out);
                    if let Some(p) = &a.param {
                        selectors(p, out);
                    }
                }
                Expr::Unary(u) => selectors(&u.expr, out),
                Expr::Binary(b) => {
                    selectors(&b.lhs, out);
                    selectors(&b.rhs, out);
                }
                Expr::Paren(p) => selectors(&p.expr, out),
                Expr::Subquery(s) => selectors(&s.expr, out),
                Expr::Call(c) => c.args.args.iter().for_each(|a| selectors(a, out)),
                _ => {}
            }
        }
        let mut found = Vec::new();
        selectors(&parser::parse(printed).unwrap(), &mut found);
        assert!(!found.is_empty(), "{printed}");
        for vs in found {
            let groups: Vec<&Vec<Matcher>> = if vs.matchers.or_matchers.is_empty() {
                vec![&vs.matchers.matchers]
            } else {
                vs.matchers.or_matchers.iter().collect()
            };
            for g in groups {
                let ns: Vec<&Matcher> = g.iter().filter(|m| m.name == NAMESPACE_LABEL).collect();
                assert_eq!(ns.len(), 1, "{printed}");
                assert_eq!(ns[0].op, MatchOp::Equal, "{printed}");
                assert_eq!(ns[0].value, "team-a", "{printed}");
            }
        }
    }

    #[test]
    fn a_selector_without_a_namespace_gets_one() {
        let q = scoped("sum(rate(http_requests_total[5m]))");
        assert_eq!(
            q,
            "sum(rate(http_requests_total{namespace=\"team-a\"}[5m]))"
        );
        only_team_a(&q);
    }

    #[test]
    fn another_namespace_regex_and_negative_matchers_are_replaced() {
        for q in [
            "up{namespace=\"team-b\"}",
            "up{namespace=~\".+\"}",
            "up{namespace!=\"team-a\"}",
            "up{namespace!~\"team-a\",job=\"x\"}",
            "up{namespace=\"team-b\",namespace=~\"team-.*\"}",
            "{__name__=~\"up|down\",namespace=~\"team-b|team-a\"}",
        ] {
            let out = scoped(q);
            only_team_a(&out);
            assert!(!out.contains("team-b"), "{out}");
        }
        assert!(scoped("up{namespace!~\"team-a\",job=\"x\"}").contains("job=\"x\""));
    }

    #[test]
    fn subqueries_joins_and_functions_over_several_selectors_are_all_pinned() {
        for q in [
            "max_over_time(rate(errors_total{namespace=\"kube-system\"}[1m])[10m:30s])",
            "sum(rate(errors_total[5m])) / on() group_left sum(rate(requests_total{namespace=\"other\"}[5m]))",
            "rate(a[5m]) * ignoring(namespace) rate(b[5m])",
            "histogram_quantile(0.99, sum by (le) (rate(latency_bucket{pod=~\"chat-canary-.*\"}[5m])))",
            "label_replace(up, \"namespace\", \"team-b\", \"\", \"\") or absent(down{namespace=\"x\"})",
            "clamp_max(x, scalar(y{namespace=\"z\"}))",
            "-a offset 5m + b @ 1700000000",
            "topk(3, x) and count_values(\"v\", y)",
            "up{job=\"a\" or job=\"b\",namespace=\"other\"}",
        ] {
            only_team_a(&scoped(q));
        }
    }

    #[test]
    fn a_scalar_query_is_left_as_it_is_and_bad_queries_give_the_parsers_message() {
        assert_eq!(scoped("1 + 2"), "1 + 2");
        let err = scope_to_namespace("sum(rate(x[5m])", "team-a").unwrap_err();
        assert!(!err.is_empty());
        assert!(check("sum(").is_err());
        assert!(check("up").is_ok());
    }

    #[test]
    fn a_namespace_with_quotes_stays_one_label_value() {
        // Namespaces are DNS labels, but the printed value is escaped anyway.
        let out = scope_to_namespace("up", "a\"b").unwrap();
        let e = parser::parse(&out).unwrap();
        let Expr::VectorSelector(vs) = e else {
            panic!("{out}")
        };
        assert!(
            vs.matchers
                .matchers
                .iter()
                .any(|m| m.name == NAMESPACE_LABEL && m.value == "a\"b")
        );
    }

    #[test]
    fn placeholders_are_replaced() {
        assert_eq!(
            render(
                "x{namespace=\"{{namespace}}\",pod=~\"{{canary}}-.*\",svc=\"{{service}}\"}",
                "team-a",
                "chat",
                "chat-canary"
            ),
            "x{namespace=\"team-a\",pod=~\"chat-canary-.*\",svc=\"chat\"}"
        );
    }
}
