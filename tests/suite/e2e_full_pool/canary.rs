//! A canary on a full pool: it waits without a Pending pod, and starts
//! when a Node joins.

use super::*;

/// The backends the service's HTTPRoute names, with their weights.
async fn backends(client: &Client, ns: &str, name: &str) -> Vec<(String, Option<i32>)> {
    let Some(route) = get::<HTTPRoute>(client, ns, name).await else {
        return Vec::new();
    };
    route
        .spec
        .rules
        .iter()
        .flat_map(|r| r.backend_refs.iter())
        .map(|b| (b.name.clone(), b.weight))
        .collect()
}

/// Section 14's canary on a full pool with `Wait` (the default): no
/// canary pod is made, the route stays on the primary and `CanaryReady`
/// says why with the numbers; a Node added lets it start within 30 s, and
/// its weight is routed once it is ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_on_a_full_pool_waits_without_a_pending_pod_and_starts_when_a_node_joins() {
    let (cp, client, sched, kubeconfig, _turn) = setup().await;
    let mut pool = Pool::new(&client, sched, "canary", 2).await;
    let ns = cp.fresh_namespace("full-canary").await;
    let _leader = reconciler(&kubeconfig, "full-canary");
    create_service(
        &client,
        &ns,
        "chat",
        &pool,
        2,
        "v1",
        json!({"routing": {"gateway": {"name": "gw", "namespace": "gateways"}}}),
    )
    .await;
    wait_all_on(&client, sched, &ns, &primary_selector("chat"), 2, "v1").await;

    patch_spec(
        &client,
        &ns,
        "chat",
        json!({"canary": {"model": {"ref": "llama3-70b-ft"}, "weight": 20, "replicas": 1}}),
    )
    .await;
    let numbers = format!("needs 8 nvidia.com/gpu in {}, 0 free", pool.class);
    eventually(
        "CanaryReady CanaryCapacity",
        WAIT,
        async || match condition(&client, &ns, "chat", "CanaryReady").await {
            Some(c) if c.1 == "CanaryCapacity" => Ok(c),
            other => Err(format!("{other:?}")),
        },
    )
    .await;
    let held = Instant::now();
    while held.elapsed() < Duration::from_secs(20) {
        let c = condition(&client, &ns, "chat", "CanaryReady")
            .await
            .expect("CanaryReady");
        assert_eq!((c.0.as_str(), c.1.as_str()), ("False", "CanaryCapacity"));
        assert!(c.2.starts_with(&numbers), "{c:?}");
        assert!(c.2.contains("canary.onFullPool: Wait"), "{c:?}");
        let canary_pods = pods(
            &client,
            &ns,
            "infergate.dev/service=chat,infergate.dev/track=canary",
        )
        .await;
        assert!(
            canary_pods.is_empty(),
            "no canary pod is left Pending: {canary_pods:?}"
        );
        let routed = backends(&client, &ns, "chat").await;
        assert_eq!(
            routed,
            [("chat".to_owned(), Some(100))],
            "the route stays on the primary"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }

    pool.add_node(&client, sched).await;
    let joined = Instant::now();
    eventually(
        "the canary's pod running",
        Duration::from_secs(30),
        async || {
            sched.ensure_running();
            let ps = pods(
                &client,
                &ns,
                "infergate.dev/service=chat,infergate.dev/track=canary",
            )
            .await;
            let running = ps
                .iter()
                .any(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
            if running {
                Ok(())
            } else {
                Err(format!(
                    "{:?}",
                    ps.iter()
                        .map(|p| (
                            p.name_any(),
                            p.status.as_ref().and_then(|s| s.phase.clone())
                        ))
                        .collect::<Vec<_>>()
                ))
            }
        },
    )
    .await;
    eprintln!(
        "the canary started {:?} after the Node joined",
        joined.elapsed()
    );
    eventually("the canary's weight routed", WAIT, async || {
        let routed = backends(&client, &ns, "chat").await;
        if routed
            == [
                ("chat".to_owned(), Some(80)),
                ("chat-canary".to_owned(), Some(20)),
            ]
        {
            Ok(())
        } else {
            Err(format!("{routed:?}"))
        }
    })
    .await;
    let c = condition(&client, &ns, "chat", "CanaryReady")
        .await
        .expect("CanaryReady");
    assert_eq!((c.0.as_str(), c.1.as_str()), ("True", "Available"), "{c:?}");
}
