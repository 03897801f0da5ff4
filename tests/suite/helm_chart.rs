//! The Helm chart (`charts/infergate`) installs the same objects as the
//! kustomize deployment: `helm template` of each mode against `kubectl
//! kustomize` of the matching kustomization (default: `deploy/`;
//! cert-manager: `certs/with-cert-manager`; namespace-scoped: `deploy/` with
//! the `deploy/namespaced` component), object by object and field by field.
//!
//! What may differ, and only that: Helm's own bookkeeping labels
//! (`helm.sh/chart`, `app.kubernetes.io/managed-by`) and the Namespace,
//! which a chart cannot create for its own release (`helm install
//! --create-namespace` does). helm is built from its Go module
//! (`tests/support/build-tool.sh helm`), kubectl with the control plane.

use crate::support;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const NAMESPACE: &str = "infergate-system";
/// The test control plane's version (helm built with `go install` assumes
/// Kubernetes 1.20 otherwise, below the chart's `kubeVersion`).
const KUBE_VERSION: &str = "1.36.3";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn chart() -> String {
    root().join("charts/infergate").display().to_string()
}

/// helm, built from its Go module when missing (`INFERGATE_HELM` names one
/// built elsewhere).
fn helm() -> PathBuf {
    static HELM: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    HELM.get_or_init(|| support::go_tool("helm")).clone()
}

fn run(cmd: &mut Command) -> String {
    let out = support::run(cmd, None);
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        support::text(&out)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// The chart rendered with `--set` values.
fn helm_template(set: &[&str]) -> String {
    let mut cmd = Command::new(helm());
    cmd.args(["template", "infergate", &chart(), "--namespace", NAMESPACE]);
    cmd.args(["--kube-version", KUBE_VERSION]);
    for s in set {
        cmd.args(["--set", s]);
    }
    run(&mut cmd)
}

/// `kubectl kustomize DIR`.
fn kustomize(dir: &Path) -> String {
    let bin = support::build_control_plane().expect("control-plane binaries (kubectl)");
    run(Command::new(bin.join("kubectl")).arg("kustomize").arg(dir))
}

/// Objects by `Kind namespace/name`, without Helm's labels and without the
/// Namespace.
fn objects(yaml: &str) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for doc in yaml.split("\n---") {
        let doc = doc.trim_start_matches("---");
        if doc.trim().is_empty() || doc.lines().all(|l| l.trim_start().starts_with('#')) {
            continue;
        }
        let mut value: Value =
            serde_saphyr::from_str(doc).unwrap_or_else(|e| panic!("{e}: in\n{doc}"));
        if value.is_null() || value["kind"] == "Namespace" {
            continue;
        }
        if let Some(meta) = value["metadata"].as_object_mut()
            && let Some(labels) = meta.get_mut("labels").and_then(Value::as_object_mut)
        {
            labels.remove("helm.sh/chart");
            labels.remove("app.kubernetes.io/managed-by");
            if labels.is_empty() {
                meta.remove("labels");
            }
        }
        let key = format!(
            "{} {}/{}",
            value["kind"].as_str().unwrap_or_default(),
            value["metadata"]["namespace"].as_str().unwrap_or_default(),
            value["metadata"]["name"].as_str().unwrap_or_default()
        );
        assert!(
            out.insert(key.clone(), value).is_none(),
            "{key} rendered twice"
        );
    }
    out
}

/// Every JSON pointer where `a` and `b` differ, with both values.
fn differences(a: &Value, b: &Value, path: &str, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for k in x.keys().chain(y.keys().filter(|k| !x.contains_key(*k))) {
                let p = format!("{path}/{k}");
                match (x.get(k), y.get(k)) {
                    (Some(va), Some(vb)) => differences(va, vb, &p, out),
                    (va, vb) => out.push(format!("{p}: {va:?} vs {vb:?}")),
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                differences(va, vb, &format!("{path}/{i}"), out);
            }
        }
        _ if a != b => out.push(format!("{path}: {a} vs {b}")),
        _ => {}
    }
}

/// The two renderings hold the same objects, field by field.
fn assert_same(helm: &str, kustomize: &str) {
    let (h, k) = (objects(helm), objects(kustomize));
    assert_eq!(
        h.keys().collect::<Vec<_>>(),
        k.keys().collect::<Vec<_>>(),
        "the chart and kustomize render different objects"
    );
    for (key, hv) in &h {
        let kv = &k[key];
        let mut diffs = Vec::new();
        differences(hv, kv, "", &mut diffs);
        assert!(
            diffs.is_empty(),
            "{key} differs (helm vs kustomize):\n{}",
            diffs.join("\n")
        );
    }
    assert!(
        h.len() >= 15,
        "expected the whole install, got {:?}",
        h.keys()
    );
}

#[test]
fn helm_lint_passes_in_every_mode() {
    for set in [
        vec![],
        vec!["certificates.mode=certManager"],
        vec!["namespaces={team-a,team-b}", "logFormat=text"],
    ] {
        let mut cmd = Command::new(helm());
        cmd.args(["lint", "--strict", &chart(), "--kube-version", KUBE_VERSION]);
        for s in &set {
            cmd.args(["--set", s]);
        }
        let out = run(&mut cmd);
        assert!(out.contains("0 chart(s) failed"), "{set:?}: {out}");
    }
}

#[test]
fn default_values_render_what_deploy_installs() {
    assert_same(&helm_template(&[]), &kustomize(&root().join("deploy")));
}

#[test]
fn cert_manager_mode_renders_the_cert_manager_overlay() {
    assert_same(
        &helm_template(&["certificates.mode=certManager"]),
        &kustomize(&root().join("certs/with-cert-manager")),
    );
}

/// `kubectl kustomize` of an overlay of `deploy/` with `component`.
fn kustomize_with(component: &str) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let rel = |p: &str| support::relative_path(&root().join(p), dir.path());
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [{}]\ncomponents: [{}]\n",
            rel("deploy"),
            rel(component)
        ),
    )
    .expect("overlay");
    kustomize(dir.path())
}

#[test]
fn namespace_scoped_mode_renders_the_namespaced_component() {
    assert_same(
        &helm_template(&["namespaces={team-a}"]),
        &kustomize_with("deploy/namespaced"),
    );
}

#[test]
fn the_prometheus_port_value_renders_the_prometheus_port_component() {
    assert_same(
        &helm_template(&["networkPolicy.prometheusPort=10902"]),
        &kustomize_with("deploy/prometheus-port"),
    );
}

/// The ports infergate's NetworkPolicy lets it reach.
fn egress_ports(rendered: &BTreeMap<String, Value>) -> Vec<i64> {
    rendered[&format!("NetworkPolicy {NAMESPACE}/infergate")]["spec"]["egress"]
        .as_array()
        .expect("egress")
        .iter()
        .flat_map(|rule| rule["ports"].as_array().cloned().unwrap_or_default())
        .filter_map(|p| p["port"].as_i64())
        .collect()
}

#[test]
fn prometheus_egress_and_the_admission_policy_follow_their_values() {
    let default = objects(&helm_template(&[]));
    assert!(egress_ports(&default).contains(&9090));
    for kind in [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ] {
        assert!(default.contains_key(&format!("{kind} /infergate-confine")));
    }
    let policy = &default["ValidatingAdmissionPolicy /infergate-confine"];
    assert_eq!(
        policy["spec"]["matchConditions"][0]["expression"],
        format!("request.userInfo.username == 'system:serviceaccount:{NAMESPACE}:infergate'")
    );
    let other = objects(&{
        let mut cmd = Command::new(helm());
        cmd.args([
            "template",
            "infergate",
            &chart(),
            "--namespace",
            "ml-platform",
        ]);
        cmd.args(["--kube-version", KUBE_VERSION]);
        run(&mut cmd)
    });
    assert_eq!(
        other["ValidatingAdmissionPolicy /infergate-confine"]["spec"]["matchConditions"][0]["expression"],
        "request.userInfo.username == 'system:serviceaccount:ml-platform:infergate'"
    );
    assert_eq!(
        confine_webhook(&other).expect("the confining webhook")["matchConditions"][0]["expression"],
        "request.userInfo.username == 'system:serviceaccount:ml-platform:infergate'"
    );

    let without = objects(&helm_template(&[
        "networkPolicy.prometheusPort=null",
        "admissionPolicy.enabled=false",
    ]));
    assert!(!egress_ports(&without).contains(&9090));
    assert!(
        without
            .keys()
            .all(|k| !k.starts_with("ValidatingAdmissionPolicy")),
        "{:?}",
        without.keys()
    );
    assert!(confine_webhook(&without).is_none());
}

/// The webhook that confines infergate's own writes of children, if rendered.
fn confine_webhook(objects: &BTreeMap<String, Value>) -> Option<Value> {
    objects["ValidatingWebhookConfiguration /infergate"]["webhooks"]
        .as_array()?
        .iter()
        .find(|w| w["name"] == "confine.children.infergate.dev")
        .cloned()
}

#[test]
fn values_reach_the_deployment() {
    let rendered = objects(&helm_template(&[
        "image.repository=registry.example.com/infergate",
        "image.tag=1.2.3",
        "replicas=3",
        "resources.limits.memory=512Mi",
        "logFormat=text",
        "namespaces={team-a,team-b}",
        "podDisruptionBudget.enabled=false",
    ]));
    let d = &rendered[&format!("Deployment {NAMESPACE}/infergate")];
    assert_eq!(d["spec"]["replicas"], 3);
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["image"], "registry.example.com/infergate:1.2.3");
    assert_eq!(c["resources"]["limits"]["memory"], "512Mi");
    let args: Vec<&str> = c["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(args.contains(&"--log-format=text"), "{args:?}");
    assert!(args.contains(&"--namespaces=team-a,team-b"), "{args:?}");
    for ns in ["team-a", "team-b"] {
        assert!(rendered.contains_key(&format!("Role {ns}/infergate")));
        assert!(rendered.contains_key(&format!("RoleBinding {ns}/infergate")));
    }
    assert!(!rendered.contains_key("ClusterRole /infergate"));
    assert!(!rendered.contains_key(&format!("PodDisruptionBudget {NAMESPACE}/infergate")));
}

#[test]
fn a_wrong_mode_is_refused_with_its_name() {
    let out = support::run(
        Command::new(helm()).args([
            "template",
            "infergate",
            &chart(),
            "--kube-version",
            KUBE_VERSION,
            "--set",
            "certificates.mode=acme",
        ]),
        None,
    );
    assert!(!out.status.success());
    let text = support::text(&out);
    assert!(
        text.contains("certificates.mode must be selfSigned or certManager"),
        "{text}"
    );
}
