use promql_parser::label::{MatchOp, Matcher};
use promql_parser::parser::{self, Expr, VectorSelector};

use super::bounds::{Nesting, children, depth_exceeds, nesting_bound};
use super::scope::scope_expr;
use super::*;
use crate::engine::field_path::Path;

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
        &Path::new("spec.rollout.analysis.prometheus.query"),
        r#"sum(rate(x{namespace="{{namespace}}",pod=~"{{canary}}-.*",svc="{{service}}"}[5m]))"#,
        sample,
    );
    assert!(errs.is_empty(), "{errs:?}");
    check_query(
        &mut errs,
        &Path::new("spec.rollout.analysis.prometheus.query"),
        "sum(",
        sample,
    );
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].field, "spec.rollout.analysis.prometheus.query");
    assert!(errs[0].message.contains("not valid PromQL: "), "{errs:?}");
    let long = format!("sum({}", "x + ".repeat(200));
    errs.clear();
    check_query(&mut errs, &Path::new("f"), &long, sample);
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

/// The depth of a (small) tree, as the bound counts it.
fn depth(expr: &Expr) -> usize {
    let (level, pair, args) = children(expr);
    let below = pair
        .into_iter()
        .flatten()
        .chain(args.iter().map(|a| &**a))
        .map(depth)
        .max()
        .unwrap_or(0);
    below + usize::from(level)
}

/// `open` `n` times, then `middle`, then `close` `n` times.
fn nested(open: &str, n: usize, middle: &str, close: &str) -> String {
    format!("{}{middle}{}", open.repeat(n), close.repeat(n))
}

/// A left-leaning chain of `n` binary operators.
fn chain(op: &str, n: usize) -> String {
    format!("x{}", format!(" {op} x").repeat(n))
}

/// Every kind of level, `n` deep.
fn every_kind(n: usize) -> Vec<(&'static str, String)> {
    vec![
        ("parentheses", nested("(", n, "x", ")")),
        ("sum", nested("sum(", n, "x", ")")),
        ("aggregation by", nested("sum by (a) (", n, "x", ")")),
        ("calls", nested("abs(", n, "x", ")")),
        ("unary minus", format!("{}x", "-".repeat(n))),
        ("binary +", chain("+", n)),
        ("binary and", chain("and", n)),
        ("binary ^ (right)", chain("^", n)),
        ("unary in parentheses", nested("-(", n / 2, "x", ")")),
        (
            "subqueries",
            nested("max_over_time(", n / 2, "x", "[5m:1m])"),
        ),
    ]
}

#[test]
fn the_depth_counts_every_kind_of_level() {
    for (query, want) in [
        ("x", 0),
        ("1", 0),
        ("-1", 0),
        (r#"x{a="1"}[5m]"#, 0),
        ("-x", 1),
        ("(x)", 1),
        ("x + y", 1),
        ("rate(x[5m])", 1),
        ("sum by (le) (x)", 1),
        ("topk(3, -x)", 2),
        ("max_over_time(rate(x[5m])[30m:1m])", 3),
        ("histogram_quantile(0.99, sum by (le) (rate(x[5m])))", 3),
        ("a + b * c", 2),
        ("-(a + b) / c", 4),
    ] {
        let tree = parser::parse(query).unwrap();
        assert_eq!(depth(&tree), want, "{query}");
        assert!(!depth_exceeds(&tree, want), "{query}");
        assert_eq!(
            depth_exceeds(&tree, want.saturating_sub(1)),
            want > 0,
            "{query}"
        );
    }
}

#[test]
fn sixty_four_levels_of_every_kind_are_scoped_and_sixty_five_refused() {
    for (n, kind_of) in [(MAX_QUERY_DEPTH, "deep"), (MAX_QUERY_DEPTH + 1, "too deep")] {
        for (kind, query) in every_kind(n) {
            let tree = parser::parse(&query).unwrap_or_else(|e| panic!("{kind}: {e}"));
            let levels = depth(&tree);
            assert!(levels == n || levels == n - 1, "{kind}: {levels} levels");
            let scoped = scope_query(&query, "team-a");
            if levels <= MAX_QUERY_DEPTH {
                let text = scoped.unwrap_or_else(|e| panic!("{kind} ({kind_of}): {e}"));
                assert!(text.contains(r#"x{namespace="team-a"}"#), "{kind}");
            } else {
                assert_eq!(scoped, Err(QueryError::TooDeep), "{kind} ({kind_of})");
            }
        }
    }
}

#[test]
fn the_issues_queries_are_refused_by_length_before_any_parse() {
    let field = "spec.rollout.analysis.prometheus.query";
    let sample = ("team-a", "chat", "chat-canary");
    for query in [
        nested("(", 100_000, "x", ")"),
        format!("{}x", "-".repeat(100_000)),
        nested("sum(", 20_000, "x", ")"),
        chain("+", 50_000),
    ] {
        let started = std::time::Instant::now();
        assert_eq!(
            scope_query(&query, "team-a"),
            Err(QueryError::TooLong(query.len()))
        );
        let mut errs = Vec::new();
        check_query(&mut errs, &Path::new(field), &query, sample);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].field, field);
        assert_eq!(
            errs[0].reason,
            super::super::field_error::FieldErrorReason::TooLong
        );
        assert_eq!(
            errs[0].message,
            format!(
                "Too long: may not be more than 4096 bytes (is {})",
                query.len()
            )
        );
        assert!(started.elapsed() < std::time::Duration::from_millis(500));
    }
}

#[test]
fn a_query_too_deep_is_a_field_error_naming_the_bound() {
    let mut errs = Vec::new();
    let sample = ("team-a", "chat", "chat-canary");
    let deep = nested("sum(", 65, "x", ")");
    check_query(&mut errs, &Path::new("f"), &deep, sample);
    check_query(&mut errs, &Path::new("f"), &chain("+", 65), sample);
    assert_eq!(errs.len(), 2, "{errs:?}");
    for e in &errs {
        assert!(
            e.message.starts_with("Invalid value: \"")
                && e.message.ends_with(
                    ": may not nest more than 64 levels (each parenthesis, function call, aggregation, subquery, unary and binary operator is one)"
                ),
            "{e}"
        );
        assert!(e.message.len() < 400, "{e}");
    }
    // The limit holds once the placeholders are filled, too.
    errs.clear();
    let query = format!("{}{}", "x + ".repeat(1020), "{{namespace}}");
    assert!(query.len() <= MAX_QUERY_BYTES);
    check_query(
        &mut errs,
        &Path::new("f"),
        &query,
        ("a".repeat(63).as_str(), "chat", "c"),
    );
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].message.starts_with(
            "Too long: may not be more than 4096 bytes once its placeholders are filled (is "
        ),
        "{}",
        errs[0]
    );
    // At the limit, a query is judged on its content.
    errs.clear();
    let long = format!("x{}", " ".repeat(MAX_QUERY_BYTES - 1));
    check_query(&mut errs, &Path::new("f"), &long, sample);
    assert!(errs.is_empty(), "{errs:?}");
}

#[test]
fn the_pre_scan_skips_strings_comments_and_matchers() {
    for (query, bound) in [
        ("x", 0),
        (r#"x{a="((((-+-+", b=~'[)]+', c!="\"(("}"#, 0),
        ("x # ((((( - + - \n", 0),
        (r#"label_replace(x, "d", "$1", "s", "((-)))")"#, 1),
        ("rate(x[5m])", 2),
        ("max_over_time((a - b)[5m:1m])", 4),
        ("1e-3 * x", 2),
        ("a AND b Or c unless d atan2 e", 4),
        ("a >= bool b", 1),
        (r#"x{a="1" or b="2"}"#, 0),
        ("sum by (a) (x) + sum(y) without (b)", 2),
    ] {
        assert_eq!(nesting_bound(query), Nesting::AtMost(bound), "{query}");
    }
    assert_eq!(
        nesting_bound(&nested("(", MAX_QUERY_DEPTH + 1, "x", ")")),
        Nesting::TooDeep
    );
    // Brackets inside strings and matchers nest nothing.
    let quoted = format!(r#"x{{a="{}"}}"#, "(".repeat(1000));
    assert_eq!(nesting_bound(&quoted), Nesting::AtMost(0));
}

#[test]
fn a_query_the_pre_scan_cannot_prove_is_measured() {
    // Ten products of ten: 99 operators at one level, 18 levels deep.
    let product = ["x"; 10].join(" * ");
    let query = [product.as_str(); 10].join(" + ");
    assert!(matches!(nesting_bound(&query), Nesting::AtMost(n) if n > MAX_QUERY_DEPTH));
    assert_eq!(depth(&parser::parse(&query).unwrap()), 18);
    assert!(scope_query(&query, "team-a").is_ok());
}

/// The worst queries of at most 4 KiB: each refused or scoped on a
/// thread with a 256 KiB stack (the webhook's and the reconciler's
/// threads have 2 MiB). A stack overflow would abort this test binary.
/// (Parsed on the caller's stack, 64 aggregations around a chain of
/// unary minus signs needed about 1.5 MiB in a debug build.)
#[test]
fn the_worst_queries_within_the_length_fit_a_small_stack() {
    let max = MAX_QUERY_BYTES;
    let worst: Vec<(&str, String)> = vec![
        ("unary minus", format!("{}x", "-".repeat(max - 1))),
        ("unary plus", format!("{}x", "+".repeat(max - 1))),
        ("binary chain", format!("x{}", "+x".repeat((max - 1) / 2))),
        ("scalar chain", format!("1{}", "+1".repeat((max - 1) / 2))),
        ("right-leaning", format!("x{}", "^x".repeat((max - 1) / 2))),
        ("comparisons", format!("x{}", ">x".repeat((max - 1) / 2))),
        ("sets", format!("x{}", " or x".repeat((max - 1) / 5))),
        (
            "unary in 64 parentheses",
            nested("(", 64, &format!("{}x", "-".repeat(max - 1 - 128)), ")"),
        ),
        (
            "64 sums of unary",
            nested(
                "sum(",
                64,
                &format!("{}x", "-".repeat(max - 1 - 5 * 64)),
                ")",
            ),
        ),
        (
            "a deep tree, then a syntax error",
            format!("x{} x", "+x".repeat((max - 3) / 2)),
        ),
        (
            "a deep unary, then a syntax error",
            format!("{}x x", "-".repeat(max - 3)),
        ),
        (
            "a deep tree, then a type error",
            format!("x{} + \"s\"", "+x".repeat((max - 7) / 2)),
        ),
        ("unclosed", format!("{}x", "-(".repeat((max - 1) / 2))),
        (
            "64 levels, scoped and printed",
            nested("sum(", 64, "x", ")"),
        ),
        ("64 levels of calls", nested("abs(", 64, "x", ")")),
    ];
    let judged = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || {
            worst
                .into_iter()
                .map(|(kind, query)| {
                    assert!(query.len() <= MAX_QUERY_BYTES, "{kind}: {}", query.len());
                    let mut errs = Vec::new();
                    check_query(
                        &mut errs,
                        &Path::new("f"),
                        &query,
                        ("team-a", "chat", "chat-canary"),
                    );
                    (kind, scope_query(&query, "team-a"), errs)
                })
                .collect::<Vec<_>>()
        })
        .unwrap()
        .join()
        .expect("the thread returns");
    for (kind, scoped, errs) in judged {
        match kind {
            "64 levels, scoped and printed" | "64 levels of calls" => {
                assert!(
                    scoped.is_ok() && errs.is_empty(),
                    "{kind}: {scoped:?} {errs:?}"
                );
            }
            "unclosed"
            | "a deep tree, then a syntax error"
            | "a deep unary, then a syntax error"
            | "a deep tree, then a type error" => {
                assert!(
                    matches!(scoped, Err(QueryError::Invalid(_) | QueryError::TooDeep)),
                    "{kind}: {scoped:?}"
                );
                assert_eq!(errs.len(), 1, "{kind}");
            }
            // `+x` is `x`, and `-1` a number: neither is a level.
            "unary plus" | "scalar chain" if scoped.is_ok() => {
                assert!(errs.is_empty(), "{kind}")
            }
            _ => {
                assert_eq!(scoped, Err(QueryError::TooDeep), "{kind}");
                assert_eq!(errs.len(), 1, "{kind}");
            }
        }
    }
}

/// Queries built from every kind of level, with strings, matchers and
/// comments holding brackets and operators.
fn arb_query() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    let leaf = prop_oneof![
        Just("x".to_owned()),
        Just(r#"x{a="(-(", b=~'[)]+'}"#.to_owned()),
        Just("rate(x[5m])".to_owned()),
        Just("1".to_owned()),
        Just("1e-3".to_owned()),
        Just(r#"{__name__="a-b"}"#.to_owned()),
        Just("time()".to_owned()),
        Just(r#""s(-""#.to_owned()),
    ];
    let op = prop_oneof![
        Just("+"),
        Just("-"),
        Just("*"),
        Just("/"),
        Just("%"),
        Just("^"),
        Just("== bool"),
        Just("> bool"),
        Just("<="),
        Just("!="),
        Just("and"),
        Just("or"),
        Just("unless"),
        Just("atan2"),
        Just("+ on(a) group_left(b)"),
        Just("* ignoring(c)"),
    ];
    leaf.prop_recursive(8, 96, 3, move |inner| {
        prop_oneof![
            inner.clone().prop_map(|e| format!("({e})")).boxed(),
            inner.clone().prop_map(|e| format!("-{e}")).boxed(),
            inner.clone().prop_map(|e| format!("+{e}")).boxed(),
            inner.clone().prop_map(|e| format!("sum({e})")).boxed(),
            inner
                .clone()
                .prop_map(|e| format!("sum by (a) ({e})"))
                .boxed(),
            inner
                .clone()
                .prop_map(|e| format!("max({e}) without (b)"))
                .boxed(),
            inner.clone().prop_map(|e| format!("abs({e})")).boxed(),
            inner.clone().prop_map(|e| format!("({e})[5m:1m]")).boxed(),
            inner
                .clone()
                .prop_map(|e| format!("{e} offset -5m"))
                .boxed(),
            inner
                .clone()
                .prop_map(|e| format!("{e} # ( - \" '\n"))
                .boxed(),
            (inner.clone(), inner.clone(), op.clone())
                .prop_map(|(a, b, op)| format!("{a} {op} {b}"))
                .boxed(),
            (inner.clone(), inner.clone())
                .prop_map(|(a, b)| format!("topk({a}, {b})"))
                .boxed(),
            (inner.clone(), inner.clone())
                .prop_map(|(a, b)| format!("clamp_max({a}, {b})"))
                .boxed(),
        ]
    })
}

proptest::proptest! {
    /// The pre-scan's bound is never below the depth of the tree the
    /// parser builds: a query it proves shallow is shallow.
    #[test]
    fn the_pre_scan_never_undercounts(query in arb_query()) {
        if let (true, Ok(tree)) = (query.len() <= MAX_QUERY_BYTES, parser::parse(&query)) {
            let levels = depth(&tree);
            match nesting_bound(&query) {
                Nesting::AtMost(n) => proptest::prop_assert!(n >= levels, "{} < {}: {}", n, levels, query),
                Nesting::TooDeep => proptest::prop_assert!(levels > MAX_QUERY_DEPTH, "{}", query),
            }
            proptest::prop_assert_eq!(
                scope_query(&query, "team-a").is_ok(),
                levels <= MAX_QUERY_DEPTH
            );
        }
    }
}
