//! `infergate check` over the examples and over malformed input, through
//! the built binary, as CI would run it (the full-pool fields among them).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::{binary, root, run};

fn policy_flags() -> Vec<String> {
    let good = root().join("examples/good");
    vec![
        "--policy".into(),
        good.join("cluster-policy.yaml").display().to_string(),
        "--policy".into(),
        good.join("namespace-policy.yaml").display().to_string(),
        "--policy".into(),
        good.join("catalogue-policy.yaml").display().to_string(),
        "--namespace-labels".into(),
        "tier=prod".into(),
    ]
}

/// `infergate check ARGS`, with `stdin` as its input.
fn check(args: &[String], stdin: Option<&str>) -> Output {
    run(
        Command::new(binary()).arg("check").args(args),
        stdin.map(str::as_bytes),
    )
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn f(path: &Path) -> Vec<String> {
    vec!["-f".into(), path.display().to_string()]
}

#[test]
fn good_examples_pass() {
    let mut args = f(&root().join("examples/good"));
    args.extend(policy_flags());
    let out = check(&args, None);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    // every service in the directory was checked and passed
    for name in [
        "team-a/chat:",
        "team-a/chat-canary-demo:",
        "team-a/summarize:",
        "team-a/rag-pipeline:",
        "team-a/legacy:",
        "team-a/embed:",
        "team-a/chat-27b:",
        "team-a/chat-lora:",
    ] {
        assert!(
            err.lines().any(|l| l.contains(name) && l.ends_with(": ok")),
            "{name} not ok in:\n{err}"
        );
    }
    assert!(
        err.contains("v1alpha1 InferenceService is deprecated"),
        "{err}"
    );
}

/// Each bad example names the rule it breaks, lists the exact field errors
/// it must produce (`# expect:`), and produces nothing else.
#[test]
fn bad_examples_fail_with_their_rule() {
    let dir = root().join("examples/bad");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("examples/bad")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 30, "expected many bad examples");
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read example");
        let expects: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# expect: "))
            .collect();
        assert!(
            !expects.is_empty(),
            "{} has no # expect: line",
            file.display()
        );
        let mut args = f(&file);
        if !text.contains("# check-flags: no-policies") {
            args.extend(policy_flags());
        }
        let out = check(&args, None);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{}:\n{err}", file.display());
        for e in &expects {
            assert!(
                err.contains(e),
                "{} should report\n  {e}\nbut said:\n{err}",
                file.display()
            );
        }
        let errors: Vec<&str> = err
            .lines()
            .filter(|l| l.contains(" [doc ") && !l.ends_with(": ok") && !l.contains(": warning: "))
            .collect();
        assert_eq!(
            errors.len(),
            expects.len(),
            "{}: unexpected extra errors:\n{err}",
            file.display()
        );
        // Every error line says where: file, document index, kind and name.
        let shown = file.display().to_string();
        for l in errors {
            assert!(l.starts_with(&format!("{shown} [doc ")), "{l}");
            assert!(
                l.contains("InferenceService ")
                    || l.contains("ClusterInferencePolicy ")
                    || l.contains("InferencePolicy "),
                "{l}"
            );
        }
    }
}

#[test]
fn ci_line_format() {
    let file = root().join("examples/bad/canary-weight-over-cluster-limit.yaml");
    let mut args = f(&file);
    args.extend(policy_flags());
    let err = stderr(&check(&args, None));
    let want = format!(
        "{} [doc 0] InferenceService team-b/chat: spec.canary.weight: Invalid value: 60: must be at most 50 (ClusterInferencePolicy \"platform\")",
        file.display()
    );
    assert!(err.lines().any(|l| l == want), "{err}");
}

#[test]
fn malformed_yaml_is_exit_2() {
    let out = check(
        &["-f".into(), "-".into()],
        Some("apiVersion: [unclosed\nkind: x\n"),
    );
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("-: malformed YAML"), "{err}");
}

#[test]
fn malformed_json_is_exit_2() {
    let out = check(&["-f".into(), "-".into()], Some("{\"apiVersion\": "));
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("malformed JSON"));
}

#[test]
fn missing_file_is_exit_2() {
    let out = check(&["-f".into(), "/nonexistent/infergate.yaml".into()], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("cannot read"));
}

#[test]
fn bad_namespace_labels_is_exit_2() {
    let out = check(
        &[
            "-f".into(),
            "-".into(),
            "--namespace-labels".into(),
            "tier".into(),
        ],
        Some(""),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("is not key=value"));
}

#[test]
fn document_without_kind_is_exit_2() {
    let out = check(
        &["-f".into(), "-".into()],
        Some("apiVersion: v1\nmetadata: {name: x}\n"),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("not a Kubernetes object: kind is missing"));
}

const GOOD_SVC: &str = "apiVersion: infergate.dev/v1beta1
kind: InferenceService
metadata: {name: chat, namespace: team-a}
spec:
  model: {ref: m}
  engine: {image: registry.example.com/vllm:1}
";

#[test]
fn unknown_kinds_and_other_objects_are_skipped() {
    let input = format!(
        "apiVersion: infergate.dev/v1beta1\nkind: ModelCache\nmetadata: {{name: c}}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm}}\n---\n{GOOD_SVC}"
    );
    let out = check(&["-f".into(), "-".into()], Some(&input));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("- [doc 0] ModelCache c: unknown kind ModelCache"),
        "{err}"
    );
    assert!(
        err.contains("- [doc 1] ConfigMap cm: not an infergate object (v1 ConfigMap); skipped"),
        "{err}"
    );
    assert!(
        err.contains("- [doc 2] InferenceService team-a/chat: ok"),
        "{err}"
    );
}

#[test]
fn json_and_list_input() {
    let input = r#"{"apiVersion":"v1","kind":"List","items":[
        {"apiVersion":"infergate.dev/v1beta1","kind":"InferenceService",
         "metadata":{"name":"a","namespace":"ns"},"spec":{"model":{"ref":"m"},"replicas":-3}}]}"#;
    let out = check(
        &[
            "-f".into(),
            "-".into(),
            "--default-engine-image".into(),
            "img:1".into(),
        ],
        Some(input),
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("- [doc 0, item 0] InferenceService ns/a: spec.replicas: Invalid value: -3"),
        "{err}"
    );
}

#[test]
fn output_json_is_defaulted_and_stable() {
    let out = check(
        &["-f".into(), "-".into(), "-o".into(), "json".into()],
        Some(GOOD_SVC),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json output");
    assert_eq!(v["spec"]["engine"]["port"], 8000);
    assert_eq!(v["spec"]["routing"]["requestTimeout"], "5m");
    let prov = v["metadata"]["annotations"]["infergate.dev/defaulted-from"]
        .as_str()
        .expect("provenance annotation");
    assert!(prov.contains("\"spec.engine.port\":\"built-in\""), "{prov}");
    // Checking the defaulted output again changes nothing.
    let again = check(
        &["-f".into(), "-".into(), "-o".into(), "json".into()],
        Some(&String::from_utf8_lossy(&out.stdout)),
    );
    assert_eq!(again.status.code(), Some(0));
    let v2: serde_json::Value = serde_json::from_slice(&again.stdout).expect("json output");
    assert_eq!(v, v2);
}

#[test]
fn output_yaml_and_explain() {
    let out = check(
        &[
            "-f".into(),
            "-".into(),
            "-o".into(),
            "yaml".into(),
            "--explain".into(),
            "--default-replicas".into(),
            "3".into(),
        ],
        Some(GOOD_SVC),
    );
    assert_eq!(out.status.code(), Some(0));
    let yaml = String::from_utf8_lossy(&out.stdout);
    assert!(yaml.contains("replicas: 3"), "{yaml}");
    let err = stderr(&out);
    assert!(err.contains("  spec.replicas = 3 from flag"), "{err}");
    assert!(
        err.contains("  spec.engine.port = 8000 from built-in"),
        "{err}"
    );
}

#[test]
fn invalid_policy_is_reported_and_not_applied() {
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = dir.path().join("p.yaml");
    std::fs::write(
        &policy,
        "apiVersion: infergate.dev/v1beta1\nkind: ClusterInferencePolicy\nmetadata: {name: broken}\nspec:\n  defaults: {replicas: 9}\n  limits: {maxReplicas: 2}\n",
    )
    .expect("write");
    let out = check(
        &[
            "-f".into(),
            "-".into(),
            "--policy".into(),
            policy.display().to_string(),
        ],
        Some(GOOD_SVC),
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("policy is invalid and is not applied"),
        "{err}"
    );
    assert!(err.contains("InferenceService team-a/chat: ok"), "{err}");
}

#[test]
fn warn_policy_admits_with_warning() {
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = dir.path().join("p.yaml");
    std::fs::write(
        &policy,
        "apiVersion: infergate.dev/v1beta1\nkind: ClusterInferencePolicy\nmetadata: {name: soft}\nspec:\n  enforcement: Warn\n  limits: {maxReplicas: 2}\n",
    )
    .expect("write");
    let input = GOOD_SVC.replace("spec:\n", "spec:\n  replicas: 5\n");
    let out = check(
        &[
            "-f".into(),
            "-".into(),
            "--policy".into(),
            policy.display().to_string(),
        ],
        Some(&input),
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("warning: spec.replicas: Invalid value: 5: must be at most 2 (ClusterInferencePolicy \"soft\")"),
        "{err}"
    );
}

#[test]
fn a_rollout_query_that_is_not_promql_fails_with_the_parsers_message() {
    let manifest = r#"apiVersion: infergate.dev/v1beta1
kind: InferenceService
metadata: {name: chat, namespace: team-a}
spec:
  model: {ref: "llama-3-8b"}
  engine: {image: "registry.example.com/vllm:0.9"}
  rollout:
    strategy: Canary
    steps: [10]
    analysis:
      prometheus:
        query: 'sum(rate(latency{namespace="{{namespace}}"}[5m])'
        threshold: {max: 1}
"#;
    let out = check(&["-f".into(), "-".into()], Some(manifest));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("spec.rollout.analysis.prometheus.query") && err.contains("PromQL"),
        "{err}"
    );
}

/// `infergate check` defaults and bounds the full-pool fields as the
/// webhook does: a policy's defaults field by field (visible with their
/// provenance), its `maxUnavailable` a warning under Warn and an error
/// under Deny, one replica always serving.
#[test]
fn full_pool_fields_are_defaulted_and_bounded_as_admission_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = dir.path().join("p.yaml");
    let write = |enforcement: &str| {
        std::fs::write(
            &policy,
            format!(
                "apiVersion: infergate.dev/v1beta1\nkind: ClusterInferencePolicy\nmetadata: {{name: pool}}\nspec:\n  enforcement: {enforcement}\n  defaults:\n    rollout: {{onFullPool: Wait}}\n    canary: {{onFullPool: Borrow}}\n  limits: {{maxUnavailable: 1}}\n"
            ),
        )
        .expect("write");
    };
    let input = GOOD_SVC.replace(
        "spec:\n",
        "spec:\n  replicas: 3\n  rollout: {maxUnavailable: 2}\n  canary: {model: {ref: m2}, weight: 10}\n",
    );
    let args = |extra: &[&str]| {
        let mut a: Vec<String> = vec!["-f".into(), "-".into(), "--policy".into()];
        a.push(policy.display().to_string());
        a.extend(extra.iter().map(|s| (*s).to_owned()));
        a
    };
    write("Warn");
    let out = check(&args(&["-o", "json"]), Some(&input));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("warning: spec.rollout.maxUnavailable: Invalid value: 2: must be at most 1 (ClusterInferencePolicy \"pool\")"),
        "{err}"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json output");
    assert_eq!(v["spec"]["rollout"]["onFullPool"], "Wait");
    assert_eq!(v["spec"]["rollout"]["maxUnavailable"], 2);
    assert_eq!(v["spec"]["canary"]["onFullPool"], "Borrow");
    let prov = v["metadata"]["annotations"]["infergate.dev/defaulted-from"]
        .as_str()
        .expect("provenance annotation");
    for entry in [
        "\"spec.rollout.onFullPool\":\"ClusterInferencePolicy/pool\"",
        "\"spec.canary.onFullPool\":\"ClusterInferencePolicy/pool\"",
    ] {
        assert!(prov.contains(entry), "{entry} missing from {prov}");
    }
    assert!(!prov.contains("spec.rollout.maxUnavailable"), "{prov}");
    // Under Deny the same limit is an error.
    write("Deny");
    let out = check(&args(&[]), Some(&input));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("InferenceService team-a/chat: spec.rollout.maxUnavailable: Invalid value: 2: must be at most 1 (ClusterInferencePolicy \"pool\")"),
        "{err}"
    );
    // Without policies: built-in values, and one replica always serves.
    let out = check(
        &["-f".into(), "-".into(), "-o".into(), "json".into()],
        Some(GOOD_SVC),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json output");
    assert_eq!(
        v["spec"]["rollout"],
        serde_json::json!({"onFullPool": "Replace", "maxUnavailable": 1})
    );
    let too_many = GOOD_SVC.replace(
        "spec:\n",
        "spec:\n  replicas: 2\n  rollout: {maxUnavailable: 2}\n",
    );
    let out = check(&["-f".into(), "-".into()], Some(&too_many));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("spec.rollout.maxUnavailable: Invalid value: 2: must be at most 1 (spec.replicas 2 - 1: one replica always serves)"),
        "{err}"
    );
}

#[test]
fn a_replica_that_spans_nodes_is_judged_as_admission_judges_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = dir.path().join("p.yaml");
    std::fs::write(
        &policy,
        "apiVersion: infergate.dev/v1beta1\nkind: ClusterInferencePolicy\nmetadata: {name: multi-node}\nspec:\n  limits: {maxNodesPerReplica: 2}\n",
    )
    .expect("write");
    let class = "apiVersion: infergate.dev/v1beta1\nkind: AcceleratorClass\nmetadata: {name: h100}\nspec: {vendor: nvidia, memoryPerDevice: 80Gi, devicesPerNode: 8}\n";
    let svc = |tensor: i32, pipeline: i32| {
        format!(
            "{class}---\napiVersion: infergate.dev/v1beta1\nkind: InferenceService\nmetadata: {{name: chat, namespace: team-a}}\nspec:\n  model: {{ref: llama-405b}}\n  engine: {{image: registry.example.com/vllm:0.11.1}}\n  accelerator: {{class: h100}}\n  parallelism: {{tensor: {tensor}, pipeline: {pipeline}}}\n"
        )
    };
    let with_policy = |input: &str| {
        check(
            &[
                "-f".into(),
                "-".into(),
                "--policy".into(),
                policy.display().to_string(),
            ],
            Some(input),
        )
    };
    let out = with_policy(&svc(8, 2));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for (tensor, pipeline, want) in [
        (
            16,
            1,
            "spec.parallelism.tensor: Invalid value: 16: must be at most the 8 devices per node",
        ),
        (
            8,
            3,
            "spec.parallelism: Invalid value: 24: tensor 8 x pipeline 3 devices per replica span 3 nodes",
        ),
    ] {
        let out = with_policy(&svc(tensor, pipeline));
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(stderr(&out).contains(want), "{}", stderr(&out));
    }
    // Without the policy, one node per replica, as before.
    let out = check(&["-f".into(), "-".into()], Some(&svc(8, 2)));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(
            "tensor 8 x pipeline 2 devices per replica must be at most the 8 devices per node"
        ),
        "{}",
        stderr(&out)
    );
}

/// A service routed by name through Gateway `gateways/GATEWAY`.
fn named_service(ns: &str, name: &str, gateway: &str, extra_model: &str) -> String {
    format!(
        "apiVersion: infergate.dev/v1beta1\nkind: InferenceService\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  model: {{ref: llama-3-70b{extra_model}}}\n  engine: {{image: registry.example.com/vllm:0.11.1}}\n  routing:\n    match: ModelName\n    gateway: {{name: {gateway}, namespace: gateways}}\n"
    )
}

/// Two files serving one name through one Gateway: the later is denied,
/// naming the holder only in its own namespace; through two Gateways both
/// pass.
#[test]
fn two_files_serving_one_name_through_one_gateway_deny_the_later() {
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |file: &str, text: &str| {
        let p = dir.path().join(file);
        std::fs::write(&p, text).expect("write");
        p
    };
    let a = write(
        "a.yaml",
        &named_service("team-a", "chat", "inference-gw", ""),
    );
    let b = write(
        "b.yaml",
        &named_service("team-b", "chat", "inference-gw", ""),
    );
    let c = write(
        "c.yaml",
        &named_service(
            "team-a",
            "chat-2",
            "inference-gw",
            ", servedName: other, adapters: [{name: llama-3-70b, source: org/x}]",
        ),
    );
    let mut args = f(&a);
    args.extend(f(&b));
    args.extend(f(&c));
    let out = check(&args, None);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("InferenceService team-a/chat: ok"), "{err}");
    let want = format!(
        "{} [doc 0] InferenceService team-b/chat: spec.model.servedName: Duplicate value: \"llama-3-70b\": served through Gateway gateways/inference-gw by a service in another namespace",
        b.display()
    );
    assert!(err.lines().any(|l| l == want), "{err}");
    // In the holder's namespace the holder is named; an adapter clashes too.
    let want = format!(
        "{} [doc 0] InferenceService team-a/chat-2: spec.model.adapters[0].name: Duplicate value: \"llama-3-70b\": served through Gateway gateways/inference-gw by team-a/chat",
        c.display()
    );
    assert!(err.lines().any(|l| l == want), "{err}");
    assert!(err.contains("checked: 1 valid, 2 violation(s)"), "{err}");

    // Through another Gateway, both are admitted.
    let other = write("d.yaml", &named_service("team-b", "chat", "other-gw", ""));
    let mut args = f(&a);
    args.extend(f(&other));
    let out = check(&args, None);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// The policy's adapter rules apply offline as at admission: a source the
/// policy does not allow, and more adapters than it allows.
#[test]
fn an_adapter_source_the_policy_does_not_allow_is_denied_with_its_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = dir.path().join("p.yaml");
    std::fs::write(
        &policy,
        "apiVersion: infergate.dev/v1beta1\nkind: ClusterInferencePolicy\nmetadata: {name: adapters}\nspec:\n  limits:\n    maxAdapters: 1\n    allowedAdapterSources: [\"org/*\", \"/models/*\"]\n",
    )
    .expect("write");
    let with_policy = |input: &str| {
        check(
            &[
                "-f".into(),
                "-".into(),
                "--policy".into(),
                policy.display().to_string(),
            ],
            Some(input),
        )
    };
    let allowed = named_service(
        "team-a",
        "chat",
        "inference-gw",
        ", adapters: [{name: sql, source: org/sql-lora}]",
    );
    let out = with_policy(&allowed);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let denied = allowed.replace("org/sql-lora", "someone-else/sql-lora");
    let out = with_policy(&denied);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("InferenceService team-a/chat: spec.model.adapters[0].source: Invalid value: \"someone-else/sql-lora\": must match one of \"org/*\", \"/models/*\" (limits.allowedAdapterSources of ClusterInferencePolicy \"adapters\")"),
        "{err}"
    );
    let two = allowed.replace(
        "source: org/sql-lora}",
        "source: org/sql-lora}, {name: chat-lora, source: org/chat-lora}",
    );
    let out = with_policy(&two);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("spec.model.adapters: Too many: must have at most 1 items (limits.maxAdapters of ClusterInferencePolicy \"adapters\"), has 2"),
        "{err}"
    );
}

/// A policy's `defaults.routing.match` and `modelNameHeader` are in the
/// defaulted output, with their provenance.
#[test]
fn a_policy_routing_by_name_shows_in_the_defaulted_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = dir.path().join("p.yaml");
    std::fs::write(
        &policy,
        "apiVersion: infergate.dev/v1beta1\nkind: ClusterInferencePolicy\nmetadata: {name: by-name}\nspec:\n  defaults:\n    routing:\n      match: ModelName\n      modelNameHeader: X-Model\n      gateway: {name: inference-gw, namespace: gateways}\n",
    )
    .expect("write");
    let out = check(
        &[
            "-f".into(),
            "-".into(),
            "--policy".into(),
            policy.display().to_string(),
            "-o".into(),
            "yaml".into(),
        ],
        Some(GOOD_SVC),
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let yaml = String::from_utf8_lossy(&out.stdout);
    assert!(yaml.contains("match: ModelName"), "{yaml}");
    assert!(yaml.contains("modelNameHeader: X-Model"), "{yaml}");
    assert!(
        yaml.contains("\\\"spec.routing.match\\\":\\\"ClusterInferencePolicy/by-name\\\"")
            || yaml.contains("\"spec.routing.match\":\"ClusterInferencePolicy/by-name\""),
        "{yaml}"
    );
}
