//! A canary on a full pool: it waits without a Pending pod, and starts
//! when a Node joins.

use super::*;

/// The backends the service's HTTPRoute names, with their weights.
async fn backends(client: &Client, ns: &str, name: &str) -> Vec<(String, Option<i32>)> {
    get::<HTTPRoute>(client, ns, name)
        .await
        .map(|route| support::route_weights(&route))
        .unwrap_or_default()
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
    let _leader = support::short_lease_reconciler(&kubeconfig, "full-canary");
    routed_chat(&client, sched, &ns, &pool, 2, json!({})).await;

    support::patch_service_spec(
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
    eventually("CanaryReady True", WAIT, async || {
        match condition(&client, &ns, "chat", "CanaryReady").await {
            Some(c) if (c.0.as_str(), c.1.as_str()) == ("True", "Available") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

/// Ready pods of `track` of service `chat`.
async fn ready_of(client: &Client, ns: &str, track: &str) -> (i32, Vec<Pod>) {
    let ps = pods(
        client,
        ns,
        &format!("infergate.dev/service=chat,infergate.dev/track={track}"),
    )
    .await;
    let ready = ps.iter().filter(|p| is_ready(p)).count();
    (i32::try_from(ready).unwrap_or(i32::MAX), ps)
}

/// Every track the route weights carries no more than its ready replicas:
/// `ceil(w/100 x ready of the weighted tracks) <= the track's ready`.
fn carried(routed: &[(String, Option<i32>)], primary: i32, canary: i32) -> Result<(), String> {
    let weighted: Vec<_> = routed
        .iter()
        .filter(|(_, w)| w.unwrap_or(1) > 0)
        .map(|(name, w)| {
            let ready = if name.ends_with("-canary") {
                canary
            } else {
                primary
            };
            (name, i64::from(w.unwrap_or(1)), i64::from(ready))
        })
        .collect();
    let total: i64 = weighted.iter().map(|(_, _, r)| r).sum();
    let sum: i64 = weighted.iter().map(|(_, w, _)| w).sum();
    for (name, w, ready) in &weighted {
        let sum = sum.max(1);
        if *ready == 0 || (w * total + sum - 1) / sum > *ready {
            return Err(format!(
                "{name} weighted {w} of {sum} with {ready} ready of {total}: {routed:?}"
            ));
        }
    }
    Ok(())
}

/// Section 14's `Borrow` on a full pool: the primary lends the canary one
/// replica (one ready always stays), the canary's replica starts on the
/// freed devices, the route moves only as far as the tracks' ready
/// replicas carry (checked at every route change), and removing the
/// canary gives the replica back the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_borrowing_canary_takes_a_primary_replica_and_gives_it_back() {
    let (cp, client, sched, kubeconfig, _turn) = setup().await;
    let pool = Pool::new(&client, sched, "borrow", 4).await;
    let ns = cp.fresh_namespace("full-borrow").await;
    let _leader = support::short_lease_reconciler(&kubeconfig, "full-borrow");
    routed_chat(&client, sched, &ns, &pool, 4, json!({})).await;

    support::patch_service_spec(
        &client,
        &ns,
        "chat",
        json!({"canary": {"model": {"ref": "llama3-70b-ft"}, "weight": 25, "replicas": 1, "onFullPool": "Borrow"}}),
    )
    .await;
    let mut routes = Vec::new();
    let mut min_primary = i32::MAX;
    let mut pending: BTreeMap<String, (Instant, Instant)> = BTreeMap::new();
    let mut watch = async |want: &[(String, Option<i32>)], within: Duration| {
        let start = Instant::now();
        loop {
            sched.ensure_running();
            let routed = backends(&client, &ns, "chat").await;
            let (primary, primary_pods) = ready_of(&client, &ns, "primary").await;
            let (canary, canary_pods) = ready_of(&client, &ns, "canary").await;
            min_primary = min_primary.min(primary);
            let now = Instant::now();
            for p in primary_pods.iter().chain(&canary_pods) {
                if p.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Running") {
                    pending
                        .entry(p.name_any())
                        .and_modify(|(_, last)| *last = now)
                        .or_insert((now, now));
                }
            }
            if routes.last() != Some(&routed) {
                carried(&routed, primary, canary).unwrap_or_else(|e| {
                    panic!("a route change weights more than ready replicas carry: {e}")
                });
                routes.push(routed.clone());
            }
            if routed == want {
                return;
            }
            assert!(
                start.elapsed() < within,
                "the route never became {want:?}: routes {routes:?}, primary {primary} ready, canary {canary} ready"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    };
    let split = [
        ("chat".to_owned(), Some(75)),
        ("chat-canary".to_owned(), Some(25)),
    ];
    watch(&split, Duration::from_secs(90)).await;
    let d: Deployment = get(&client, &ns, "chat").await.expect("the primary");
    assert_eq!(
        d.spec.as_ref().and_then(|s| s.replicas),
        Some(3),
        "one replica lent"
    );
    eventually("CanaryReady True", WAIT, async || {
        match condition(&client, &ns, "chat", "CanaryReady").await {
            Some(c) if (c.0.as_str(), c.1.as_str()) == ("True", "Available") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    // The canary goes: the route lets go of it, then the primary gets its
    // replica back once the canary's devices are free.
    Api::<InferenceService>::namespaced(client.clone(), &ns)
        .patch(
            "chat",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"canary": null}})),
        )
        .await
        .expect("removing the canary");
    watch(&[("chat".to_owned(), Some(100))], Duration::from_secs(60)).await;
    wait_all_on(&client, sched, &ns, &primary_selector("chat"), 4, "v1").await;
    let d: Deployment = get(&client, &ns, "chat").await.expect("the primary");
    assert_eq!(
        d.spec.as_ref().and_then(|s| s.replicas),
        Some(4),
        "the replica given back"
    );
    assert!(
        !d.metadata
            .annotations
            .unwrap_or_default()
            .contains_key("infergate.dev/lent-replicas"),
        "nothing lent any more"
    );
    assert!(min_primary >= 1, "one primary replica always ready");
    let longest = pending
        .values()
        .map(|(a, b)| b.duration_since(*a))
        .max()
        .unwrap_or_default();
    assert!(
        longest <= Duration::from_secs(15),
        "no pod Pending over 15 s: {pending:?}"
    );
    eprintln!(
        "borrow: routes {routes:?}, fewest primary ready {min_primary}, longest pending {longest:?}"
    );
}

/// `status.rollout` of service `chat`: `(phase, reason)`.
async fn rollout_state(client: &Client, ns: &str) -> Option<(String, String)> {
    let svc: InferenceService = get(client, ns, "chat").await?;
    let r = svc.status?.rollout?;
    Some((r.phase.as_str().to_owned(), r.reason.unwrap_or_default()))
}

/// A `Canary` rollout whose track finds no room waits for it with its
/// progress deadline stopped: twice the deadline later it still
/// progresses, saying it waits for room; a Node added lets the canary
/// start and the rollout walk on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_progressive_rollout_waiting_for_room_does_not_run_its_deadline() {
    let (cp, client, sched, kubeconfig, _turn) = setup().await;
    let mut pool = Pool::new(&client, sched, "deadline", 2).await;
    let ns = cp.fresh_namespace("full-deadline").await;
    let _leader = support::short_lease_reconciler(&kubeconfig, "full-deadline");
    routed_chat(&client, sched, &ns, &pool, 2, json!({
            "rollout": {"strategy": "Canary", "steps": [50], "interval": "10s", "progressDeadline": "20s"}
        })).await;

    support::patch_service_spec(
        &client,
        &ns,
        "chat",
        json!({"model": {"ref": "llama3-70b-ft"}}),
    )
    .await;
    eventually(
        "the rollout waits for room",
        WAIT,
        async || match rollout_state(&client, &ns).await {
            Some((phase, reason)) if phase == "Progressing" && reason == "WaitingForRoom" => Ok(()),
            other => Err(format!("{other:?}")),
        },
    )
    .await;
    let held = Instant::now();
    while held.elapsed() < Duration::from_secs(40) {
        let state = rollout_state(&client, &ns).await;
        assert_eq!(
            state,
            Some(("Progressing".to_owned(), "WaitingForRoom".to_owned())),
            "the deadline (20s) does not run while the canary waits for room"
        );
        let canary = pods(
            &client,
            &ns,
            "infergate.dev/service=chat,infergate.dev/track=canary",
        )
        .await;
        assert!(canary.is_empty(), "no canary pod left Pending: {canary:?}");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    pool.add_node(&client, sched).await;
    eventually(
        "the canary runs and the rollout walks on",
        Duration::from_secs(30),
        async || {
            sched.ensure_running();
            let canary = pods(
                &client,
                &ns,
                "infergate.dev/service=chat,infergate.dev/track=canary",
            )
            .await;
            let state = rollout_state(&client, &ns).await;
            let walking = state
                .as_ref()
                .is_some_and(|(phase, reason)| phase != "RolledBack" && reason != "WaitingForRoom");
            if canary.iter().any(is_ready) && walking {
                Ok(())
            } else {
                Err(format!("{state:?}, canary pods {}", canary.len()))
            }
        },
    )
    .await;
}
