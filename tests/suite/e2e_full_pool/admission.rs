//! The numbers of a change the pool cannot hold, at `kubectl apply`.

use super::*;

/// `kubectl apply` of `manifest` (with `--dry-run=server` when `dry`):
/// its whole output, warnings included.
fn apply(cp: &ControlPlane, manifest: &str, dry: bool) -> String {
    let mut args = vec!["apply", "-f", "-"];
    if dry {
        args.push("--dry-run=server");
    }
    let out = cp.kubectl_stdin(&args, manifest);
    let all = support::text(&out);
    assert!(out.status.success(), "kubectl apply failed: {all}");
    all
}

/// Section 14's numbers at `kubectl apply`: on a full pool, a change that
/// rolls the primary and a canary added are admitted with a warning
/// naming the class, the devices needed and free and the mode (dry runs
/// included), never denied; a scale adds Pending pods as any scale-up
/// and says nothing of room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_says_the_numbers_of_a_change_the_pool_cannot_hold() {
    let (cp, client, sched, kubeconfig, _turn) = setup().await;
    let pool = Pool::new(&client, sched, "admit", 2).await;
    let ns = cp.fresh_namespace("full-admit").await;
    let _leader = support::short_lease_reconciler(&kubeconfig, "full-admit");
    let manifest = |image: &str, extra: &str| {
        support::service_yaml(
            &ns,
            "chat",
            &format!(
                "  model: {{ref: llama3-70b}}\n  engine: {{image: \"{ENGINE}:{image}\"}}\n  accelerator: {{class: {}}}\n  parallelism: {{tensor: 8}}\n{extra}",
                pool.class
            ),
        )
    };
    let created = apply(cp, &manifest("v1", "  replicas: 2\n"), false);
    assert!(
        !created.contains("Warning"),
        "a create that fits says nothing: {created}"
    );
    wait_all_on(&client, sched, &ns, &primary_selector("chat"), 2, "v1").await;

    let rolling = format!(
        "Warning: spec.engine.image: rolling out needs 8 nvidia.com/gpu in AcceleratorClass {}, 0 free: replacing 1 of 2 replicas at a time (rollout.onFullPool: Replace, maxUnavailable: 1)",
        pool.class
    );
    let dry = apply(cp, &manifest("v2", "  replicas: 2\n"), true);
    assert!(dry.contains(&rolling), "a dry run says it: {dry}");
    let waiting = apply(
        cp,
        &manifest("v2", "  replicas: 2\n  rollout: {onFullPool: Wait}\n"),
        true,
    );
    assert!(
        waiting.contains("rolling out needs 8 nvidia.com/gpu")
            && waiting.contains("(rollout.onFullPool: Wait)"),
        "{waiting}"
    );
    let canary = apply(
        cp,
        &manifest(
            "v1",
            "  replicas: 2\n  canary: {model: {ref: llama3-70b-ft}, weight: 10, replicas: 1}\n",
        ),
        true,
    );
    assert!(
        canary.contains(&format!(
            "Warning: spec.canary: adding a canary of 1 replica needs 8 nvidia.com/gpu in AcceleratorClass {}, 0 free: it waits for room and the route stays on the primary (canary.onFullPool: Wait)",
            pool.class
        )),
        "{canary}"
    );
    let scaled = apply(cp, &manifest("v1", "  replicas: 3\n"), true);
    assert!(
        !scaled.contains("needs 8"),
        "a scale-up says nothing of room: {scaled}"
    );

    // The real write: admitted with the warning, and rolled in place.
    let written = apply(cp, &manifest("v2", "  replicas: 2\n"), false);
    assert!(written.contains(&rolling), "{written}");
    wait_all_on(&client, sched, &ns, &primary_selector("chat"), 2, "v2").await;
}
