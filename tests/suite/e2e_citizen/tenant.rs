//! A tenant's spec reaches only what its policies allow: a team's `edit`
//! ServiceAccount (the cluster's own role, which infergate's aggregated
//! roles extend to InferenceServices) applies services past each of its
//! namespace's limits and is told which field and why, at `kubectl apply`.

use std::collections::BTreeMap;

use super::{TURN, Who, apply_yaml};
use crate::support::{self, Hooks, WAIT, text};

/// One of the platform's pools: nodes labelled and tainted with `pool`.
fn class(name: &str, memory: &str, per_node: u32, pool: &str, cost: &str) -> String {
    format!(
        "apiVersion: infergate.dev/v1beta1
kind: AcceleratorClass
metadata: {{name: {name}}}
spec:
  vendor: nvidia
  memoryPerDevice: {memory}
  devicesPerNode: {per_node}
  nodeSelector: {{pool.example.com/gpu: {pool}}}
  tolerations: [{{key: pool.example.com/{pool}, operator: Exists, effect: NoSchedule}}]
  costPerDeviceHour: \"{cost}\"
"
    )
}

fn policy(ns: &str) -> String {
    format!(
        "apiVersion: infergate.dev/v1beta1\nkind: InferencePolicy\nmetadata: {{name: limits, namespace: {ns}}}\nspec:\n  defaults:\n    engine: {{image: registry.example.com/vllm:0.9}}\n  limits:\n    allowedAcceleratorClasses: [citizen-l4]\n    allowedPriorityClasses: [team-normal]\n"
    )
}

fn service(ns: &str, name: &str, spec: &str) -> String {
    support::service_yaml(ns, name, &format!("  model: {{ref: llama3-8b}}\n{spec}"))
}

/// A query nested `depth` parentheses deep around one selector.
fn deep_query(depth: usize) -> String {
    format!("{}up{}", "(".repeat(depth), ")".repeat(depth))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_spec_reaches_only_what_its_policies_allow() {
    let _turn = TURN.lock().await;
    support::init_tracing();
    let cp = support::control_plane().await;
    cp.install_crds().await;
    let _server = support::start_infergate(cp, support::binary(), &["--no-reconcile"], Hooks::All)
        .await
        .unwrap_or_else(|e| panic!("starting infergate: {e:#}"));
    let team = cp
        .fresh_namespace_with_labels("citizen-team", BTreeMap::new())
        .await;

    // The platform: its pools, the team's limits, the roles of deploy/.
    let roles = std::fs::read_to_string(support::root().join("deploy/user-roles.yaml"))
        .expect("deploy/user-roles.yaml");
    apply_yaml(cp, &roles);
    // The platform's two pools: H100s (allowed nowhere in the test) and L4s.
    apply_yaml(cp, &class("citizen-h100", "80Gi", 8, "h100", "4.10"));
    apply_yaml(cp, &class("citizen-l4", "24Gi", 1, "l4", "0.80"));
    apply_yaml(cp, &policy(&team));
    cp.kubectl(&["create", "serviceaccount", "developer", "-n", &team]);
    let out = cp.kubectl(&[
        "create",
        "rolebinding",
        "developer-edit",
        "--clusterrole=edit",
        &format!("--serviceaccount={team}:developer"),
        "-n",
        &team,
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let kubeconfig = support::service_account_kubeconfig(cp, &team, "developer").expect("token");
    let tenant = Who::User("the team's developer", kubeconfig);

    // Denied at apply, with the field and the reason; waits until the
    // webhook's caches hold the policy and classes and the aggregated role
    // reaches `edit`.
    let denied = async |what: &str, spec: &str, says: &[&str]| {
        let yaml = service(&team, "chat", spec);
        let all = support::eventually(what, WAIT, async || {
            let out = tenant.kubectl(cp, &["apply", "--dry-run=server", "-f", "-"], Some(&yaml));
            let all = text(&out);
            (!out.status.success() && says.iter().all(|s| all.contains(s)))
                .then_some(all.clone())
                .ok_or(all)
        })
        .await;
        eprintln!("denied, {what}: {all}");
    };

    denied(
        "a GPU service without a class where the policy allows classes",
        "  accelerator: {type: nvidia}\n",
        &["spec.accelerator.class: Required value"],
    )
    .await;
    denied(
        "a nodeSelector that reaches a pool the policy does not allow",
        "  accelerator: {class: citizen-l4}\n  placement:\n    nodeSelector: {pool.example.com/gpu: h100}\n",
        &["spec.placement.nodeSelector", "citizen-h100"],
    )
    .await;
    denied(
        "a toleration that reaches a pool the policy does not allow",
        "  accelerator: {class: citizen-l4}\n  placement:\n    tolerations: [{key: pool.example.com/h100, operator: Exists, effect: NoSchedule}]\n",
        &["spec.placement.tolerations", "citizen-h100"],
    )
    .await;
    denied(
        "a priority class the policy does not allow",
        "  accelerator: {class: citizen-l4}\n  placement: {priorityClassName: system-cluster-critical}\n",
        &["spec.placement.priorityClassName", "system-cluster-critical"],
    )
    .await;
    denied(
        "a rollout query nested past the bound",
        &format!(
            "  accelerator: {{class: citizen-l4}}\n  rollout:\n    strategy: Canary\n    steps: [10, 50]\n    analysis:\n      prometheus:\n        query: '{}'\n        threshold: {{max: 1}}\n",
            deep_query(100)
        ),
        &["spec.rollout.analysis.prometheus.query"],
    )
    .await;

    // What the policy allows is admitted, for the tenant, for real.
    let good = service(
        &team,
        "chat",
        "  accelerator: {class: citizen-l4}\n  placement: {priorityClassName: team-normal}\n",
    );
    tenant.must(
        cp,
        "apply an allowed GPU service",
        &["apply", "-f", "-"],
        Some(&good),
    );
    let _ = cp.kubectl(&["delete", "acceleratorclass", "citizen-h100", "citizen-l4"]);
}
