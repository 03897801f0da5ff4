//! A change of the primary's template on a full pool: a plain Deployment
//! stays stuck, infergate replaces in place through a restart, surges with
//! room, and waits when asked to.

use super::*;

/// What a second-by-second watch of a rollout saw.
#[derive(Debug, Default)]
struct Seen {
    /// The fewest ready pods at any sample.
    min_ready: Option<usize>,
    /// The most pods (not being deleted) at any sample.
    max_pods: usize,
    /// How long each pod was seen Pending (first to last sample).
    pending: BTreeMap<String, (Instant, Instant)>,
    /// The `RolloutCapacity` conditions seen, in order, without repeats.
    capacity: Vec<(String, String, String)>,
}

impl Seen {
    async fn sample(&mut self, client: &Client, ns: &str, service: &str) -> Vec<Pod> {
        let ps = pods(client, ns, &primary_selector(service)).await;
        let ready = ps.iter().filter(|p| is_ready(p)).count();
        self.min_ready = Some(self.min_ready.map_or(ready, |m| m.min(ready)));
        self.max_pods = self.max_pods.max(ps.len());
        let now = Instant::now();
        for p in &ps {
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            if phase == Some("Pending") || phase.is_none() {
                self.pending
                    .entry(p.name_any())
                    .and_modify(|(_, last)| *last = now)
                    .or_insert((now, now));
            }
        }
        if let Some(c) = condition(client, ns, service, "RolloutCapacity").await
            && self.capacity.last() != Some(&c)
        {
            self.capacity.push(c);
        }
        ps
    }

    fn longest_pending(&self) -> Duration {
        self.pending
            .values()
            .map(|(first, last)| last.duration_since(*first))
            .max()
            .unwrap_or_default()
    }
}

/// Sample every second until every primary pod of `service` runs `tag`
/// and is ready and `RolloutCapacity` is True, or `within` passes (then
/// panic with what was seen). `each` runs after every sample.
async fn watch_rollout(
    client: &Client,
    sched: &Scheduling,
    ns: &str,
    (service, replicas, tag): (&str, usize, &str),
    within: Duration,
    mut each: impl AsyncFnMut(&[Pod]),
) -> (Seen, Duration) {
    let want = format!("{ENGINE}:{tag}");
    let start = Instant::now();
    let mut seen = Seen::default();
    loop {
        sched.ensure_running();
        let ps = seen.sample(client, ns, service).await;
        each(&ps).await;
        let done = ps.len() == replicas
            && ps.iter().all(|p| image(p) == want && is_ready(p))
            && seen.capacity.last().is_some_and(|c| c.0 == "True");
        if done {
            return (seen, start.elapsed());
        }
        assert!(
            start.elapsed() < within,
            "the rollout of {ns}/{service} to {tag} did not complete within {within:?}: pods {:?}, seen {seen:?}; {}",
            ps.iter()
                .map(|p| (p.name_any(), image(p), is_ready(p)))
                .collect::<Vec<_>>(),
            sched.logs(10)
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// A plain Deployment of two 8-GPU pods with the default strategy, on a
/// full pool: its image change adds a pod no Node can hold, which stays
/// Unschedulable while the old pods go on running the old image.
async fn a_plain_deployment_stays_stuck(
    client: &Client,
    sched: &Scheduling,
    ns: &str,
    pool: &Pool,
) {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let d: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "plain"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "plain"}},
            "template": {
                "metadata": {"labels": {"app": "plain"}},
                "spec": {
                    "nodeSelector": {ACCELERATOR_LABEL: pool.label},
                    "tolerations": [{"key": GPU_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [{"name": "engine", "image": format!("{ENGINE}:v1"),
                        "resources": {"limits": {"nvidia.com/gpu": "8"}}}]
                }
            }
        }
    }))
    .expect("deployment json");
    deployments
        .create(&PostParams::default(), &d)
        .await
        .expect("creating the plain Deployment");
    wait_all_on(client, sched, ns, "app=plain", 2, "v1").await;
    deployments
        .patch(
            "plain",
            &PatchParams::default(),
            // As `kubectl set image` does: a strategic merge, by container name.
            &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [
                {"name": "engine", "image": format!("{ENGINE}:v2")}
            ]}}}})),
        )
        .await
        .expect("changing the plain Deployment's image");
    let stuck = eventually(
        "the plain Deployment's new pod Unschedulable",
        WAIT,
        async || {
            let ps = pods(client, ns, "app=plain").await;
            ps.into_iter()
                .find(|p| image(p).ends_with(":v2") && unschedulable(p))
                .map(|p| p.name_any())
        },
    )
    .await;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        sched.ensure_running();
        let ps = pods(client, ns, "app=plain").await;
        let new: Vec<_> = ps.iter().filter(|p| image(p).ends_with(":v2")).collect();
        assert!(
            new.len() == 1 && new[0].name_any() == stuck && unschedulable(new[0]),
            "the plain Deployment's new pod {stuck} stays Unschedulable: {:?}",
            ps.iter()
                .map(|p| (p.name_any(), image(p), pod_condition(p, "PodScheduled")))
                .collect::<Vec<_>>()
        );
        let old_ready = ps
            .iter()
            .filter(|p| image(p).ends_with(":v1") && is_ready(p))
            .count();
        assert_eq!(
            old_ready,
            2,
            "the old pods go on serving the old image: {:?}",
            ps.iter()
                .map(|p| (
                    p.name_any(),
                    image(p),
                    p.status.as_ref().map(|s| (&s.phase, &s.conditions))
                ))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    deployments
        .delete("plain", &DeleteParams::foreground())
        .await
        .expect("deleting the plain Deployment");
    wait_gone(client, ns, "app=plain", "the plain Deployment's pods gone").await;
}

/// Section 14's template change on a full pool: a plain Deployment stays
/// stuck for 60 s; infergate's service replaces in place (ready replicas
/// never below 1, no pod Pending over 15 s, done within 60 s), and a
/// restart after the first replacement adds no pod; with a third Node the
/// next change surges (never below 2 ready); with `Wait` the Deployment
/// keeps its old template until another service is deleted, then the
/// change completes within 30 s of the room appearing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_change_on_a_full_pool_replaces_in_place_surges_with_room_or_waits() {
    let (cp, client, sched, kubeconfig, _turn) = setup().await;
    let mut pool = Pool::new(&client, sched, "roll", 2).await;
    let ns = cp.fresh_namespace("full-pool").await;

    a_plain_deployment_stays_stuck(&client, sched, &ns, &pool).await;

    let leader = support::short_lease_reconciler(&kubeconfig, "full-pool-first");
    create_service(&client, &ns, "chat", &pool, 2, "v1", json!({})).await;
    wait_all_on(&client, sched, &ns, &primary_selector("chat"), 2, "v1").await;

    // The platform team holds each new pod 15 s before the next replaces
    // (a field infergate leaves to others): the rollout lasts long enough
    // for infergate to stop and another to lead in the middle of it.
    Api::<Deployment>::namespaced(client.clone(), &ns)
        .patch(
            "chat",
            &PatchParams::apply("platform-team"),
            &Patch::Apply(json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "chat"},
                "spec": {"minReadySeconds": 15}
            })),
        )
        .await
        .expect("setting minReadySeconds");

    // infergate is stopped when the team changes the image: the next
    // leader plans the change once it knows the pool's room. Replace (the
    // default): one replica at a time, in place; that leader stops after
    // the first replacement and a third leads before the second.
    leader.stop();
    support::patch_service_spec(
        &client,
        &ns,
        "chat",
        json!({"engine": {"image": format!("{ENGINE}:v2")}}),
    )
    .await;
    let mut leader = support::short_lease_reconciler(&kubeconfig, "full-pool-second");
    let mut led_mid_rollout = false;
    let mut restarted = false;
    let (seen, took) = watch_rollout(
        &client,
        sched,
        &ns,
        ("chat", 2, "v2"),
        Duration::from_secs(60),
        async |ps: &[Pod]| {
            let replaced = ps.iter().any(|p| image(p).ends_with(":v2") && is_ready(p));
            if replaced && !restarted {
                restarted = true;
                let old = std::mem::replace(
                    &mut leader,
                    support::short_lease_reconciler(&kubeconfig, "full-pool-third"),
                );
                old.stop();
            }
            let unfinished = ps.iter().any(|p| image(p).ends_with(":v1"));
            if restarted
                && unfinished
                && support::lease_holder(&client).await.as_deref() == Some("full-pool-third")
            {
                led_mid_rollout = true;
            }
        },
    )
    .await;
    assert!(
        restarted && led_mid_rollout,
        "infergate stopped after the first replacement and another led before the rollout was done"
    );
    assert!(
        seen.min_ready.is_some_and(|m| m >= 1),
        "ready replicas never below 1: {seen:?}"
    );
    assert!(
        seen.max_pods <= 2,
        "no extra pod, before or after the restart: {seen:?}"
    );
    assert!(
        seen.longest_pending() <= Duration::from_secs(15),
        "no pod Pending over 15 s: {seen:?}"
    );
    let replacing = seen
        .capacity
        .iter()
        .find(|c| c.1 == "ReplacingInPlace")
        .unwrap_or_else(|| panic!("RolloutCapacity said it replaces in place: {seen:?}"));
    assert_eq!(replacing.0, "False");
    assert_eq!(
        replacing.2,
        format!(
            "needs 8 nvidia.com/gpu in {}, 0 free: replacing 1 of 2 replicas at a time",
            pool.class
        )
    );
    let done = seen.capacity.last().expect("a last RolloutCapacity");
    assert_eq!(
        (done.0.as_str(), done.1.as_str()),
        ("True", "RolledOut"),
        "{seen:?}"
    );
    eprintln!("replaced in place in {took:?}: {seen:?}");

    // The platform team lets go of minReadySeconds (its apply without it).
    Api::<Deployment>::namespaced(client.clone(), &ns)
        .patch(
            "chat",
            &PatchParams::apply("platform-team"),
            &Patch::Apply(json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "chat"}
            })),
        )
        .await
        .expect("letting go of minReadySeconds");

    // A third Node: the next change surges, never below 2 ready.
    pool.add_node(&client, sched).await;
    support::patch_service_spec(
        &client,
        &ns,
        "chat",
        json!({"engine": {"image": format!("{ENGINE}:v3")}}),
    )
    .await;
    let (seen, _) = watch_rollout(
        &client,
        sched,
        &ns,
        ("chat", 2, "v3"),
        Duration::from_secs(60),
        async |_: &[Pod]| {},
    )
    .await;
    assert_eq!(
        seen.min_ready,
        Some(2),
        "a surge keeps both replicas ready: {seen:?}"
    );
    assert!(
        seen.capacity.iter().all(|c| c.0 == "True"),
        "a change that fits never says otherwise: {seen:?}"
    );
    let d: Deployment = get(&client, &ns, "chat").await.expect("the Deployment");
    assert!(
        d.spec
            .as_ref()
            .and_then(|s| s.strategy.as_ref())
            .and_then(|s| s.rolling_update.as_ref())
            .and_then(|r| r.max_surge.clone())
            != Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(0)),
        "the surge rollout carries no in-place strategy: {:?}",
        d.spec.and_then(|s| s.strategy)
    );

    // Another service takes the free Node; with Wait the change waits on
    // the old template until that service goes.
    create_service(&client, &ns, "filler", &pool, 1, "v1", json!({})).await;
    wait_all_on(&client, sched, &ns, &primary_selector("filler"), 1, "v1").await;
    support::patch_service_spec(
        &client,
        &ns,
        "chat",
        json!({"engine": {"image": format!("{ENGINE}:v4")}, "rollout": {"onFullPool": "Wait"}}),
    )
    .await;
    eventually(
        "RolloutCapacity WaitingForCapacity",
        WAIT,
        async || match condition(&client, &ns, "chat", "RolloutCapacity").await {
            Some(c) if c.1 == "WaitingForCapacity" => Ok(c),
            other => Err(format!("{other:?}")),
        },
    )
    .await;
    let held = Instant::now();
    while held.elapsed() < Duration::from_secs(20) {
        let c = condition(&client, &ns, "chat", "RolloutCapacity")
            .await
            .expect("RolloutCapacity");
        assert_eq!(c.0, "False");
        assert_eq!(c.1, "WaitingForCapacity");
        assert_eq!(
            c.2,
            format!(
                "needs 8 nvidia.com/gpu in {}, 0 free: waiting for room (rollout.onFullPool: Wait)",
                pool.class
            )
        );
        let ps = pods(&client, &ns, &primary_selector("chat")).await;
        let images: BTreeSet<String> = ps.iter().map(image).collect();
        assert_eq!(
            images,
            BTreeSet::from([format!("{ENGINE}:v3")]),
            "only the old template runs"
        );
        let d: Deployment = get(&client, &ns, "chat").await.expect("the Deployment");
        let template = d.spec.as_ref().map(|s| image_of_template(&s.template));
        assert_eq!(
            template.as_deref(),
            Some(format!("{ENGINE}:v3").as_str()),
            "the Deployment keeps its old template"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    Api::<InferenceService>::namespaced(client.clone(), &ns)
        .delete("filler", &DeleteParams::default())
        .await
        .expect("deleting the other service");
    wait_gone(
        &client,
        &ns,
        "infergate.dev/service=filler",
        "the other service's pod gone",
    )
    .await;
    let (seen, took) = watch_rollout(
        &client,
        sched,
        &ns,
        ("chat", 2, "v4"),
        Duration::from_secs(30),
        async |_: &[Pod]| {},
    )
    .await;
    eprintln!("the waiting change completed {took:?} after the room appeared: {seen:?}");
    drop(leader);
}

fn image_of_template(t: &k8s_openapi::api::core::v1::PodTemplateSpec) -> String {
    t.spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}
