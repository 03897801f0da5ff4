//! Scaling, canaries, rollouts and budgets of a service whose replicas are
//! groups: the HPA scales whole groups through the LeaderWorkerSet's scale
//! subresource, a canary is a LeaderWorkerSet of its own routed by weight,
//! an engine image change on a full pool replaces groups in place
//! (`maxSurge: 0` on the LeaderWorkerSet), and a budget charges
//! `tensor x pipeline` per replica.

use kube::api::{Patch, PatchParams};

use super::*;

async fn create(s: &Setup, ns: &str, svc: &InferenceService) {
    Api::<InferenceService>::namespaced(s.client.clone(), ns)
        .create(&PostParams::default(), svc)
        .await
        .expect("admitted");
}

/// Wait until `n` pods of `selector` are ready, every one running `image`.
async fn ready_pods(s: &Setup, ns: &str, selector: &str, n: usize, image: &str) -> Vec<Pod> {
    eventually(
        &format!("{n} ready pods of {selector} on {image}"),
        RUN_WAIT,
        async || {
            s.sched.ensure_running();
            let ps = pods(&s.client, ns, selector).await;
            let on = |p: &Pod| {
                p.spec
                    .as_ref()
                    .and_then(|s| s.containers.first())
                    .and_then(|c| c.image.as_deref())
                    == Some(image)
            };
            let ready = |p: &Pod| pod_condition(p, "Ready").is_some_and(|(st, _, _)| st == "True");
            if ps.len() == n && ps.iter().all(|p| on(p) && ready(p)) {
                Ok(ps)
            } else {
                Err(format!(
                    "{:?}",
                    ps.iter()
                        .map(|p| (p.name_any(), on(p), ready(p)))
                        .collect::<Vec<_>>()
                ))
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hpa_scales_whole_groups_through_the_leaderworkersets_scale() {
    let s = setup().await;
    let class = pool(&s, "lws-scale", 4).await;
    let ns = s.cp.fresh_namespace("multi-node").await;
    let _reconciler = support::short_lease_reconciler(&s.kubeconfig, "multi-node-scale");
    let mut svc = service_json("chat", &class, 1);
    svc.spec.replicas = None;
    svc.spec.autoscaling = serde_json::from_value(json!({"minReplicas": 1, "maxReplicas": 2})).ok();
    create(&s, &ns, &svc).await;
    let hpa = eventually("HPA chat", WAIT, async || {
        get::<k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler>(&s.client, &ns, "chat")
            .await
            .ok_or("not yet")
    })
    .await;
    let target = hpa.spec.scale_target_ref;
    assert_eq!(
        (
            target.api_version.as_deref(),
            target.kind.as_str(),
            target.name.as_str()
        ),
        (
            Some("leaderworkerset.x-k8s.io/v1"),
            "LeaderWorkerSet",
            "chat-lws"
        )
    );
    ready_pods(&s, &ns, "infergate.dev/service=chat", 2, ENGINE).await;
    // What the autoscaler does: a change of the scale's replicas.
    let lws_api = leaderworkersets(&s.client, &ns);
    lws_api
        .patch_scale(
            "chat-lws",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .expect("scaling the LeaderWorkerSet");
    let ps = ready_pods(&s, &ns, "infergate.dev/service=chat", 4, ENGINE).await;
    let groups: BTreeSet<&str> = ps
        .iter()
        .filter_map(|p| label(p, "leaderworkerset.sigs.k8s.io/group-index"))
        .collect();
    assert_eq!(groups, BTreeSet::from(["0", "1"]), "a whole group more");
    eventually("chat reports 2 ready groups", WAIT, async || {
        let svc: InferenceService = get(&s.client, &ns, "chat").await.ok_or("gone")?;
        match svc.status.and_then(|st| st.ready_replicas) {
            Some(2) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    // infergate leaves the replicas to the autoscaler.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let lws = lws_api.get("chat-lws").await.expect("lws");
    assert_eq!(lws.data["spec"]["replicas"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_is_a_group_of_its_own_routed_by_weight() {
    let s = setup().await;
    s.cp.install_crd_file(support::httproute_crd()).await;
    let class = pool(&s, "lws-canary", 4).await;
    let ns = s.cp.fresh_namespace("multi-node").await;
    let _reconciler = support::short_lease_reconciler(&s.kubeconfig, "multi-node-canary");
    let mut svc = service_json("chat", &class, 1);
    let v2 = format!("{ENGINE}-v2");
    svc.spec.routing =
        serde_json::from_value(json!({"gateway": {"name": "gw", "namespace": "gateways"}})).ok();
    svc.spec.canary = serde_json::from_value(json!({
        "model": {"ref": "meta-llama/Llama-3.1-405B-Instruct-FP8"},
        "engineImage": v2, "weight": 20, "replicas": 1
    }))
    .ok();
    create(&s, &ns, &svc).await;
    let canary = eventually("LeaderWorkerSet chat-canary-lws", WAIT, async || {
        let conditions = || async {
            let svc: Option<InferenceService> = get(&s.client, &ns, "chat").await;
            format!("{:?}", svc.and_then(|s| s.status).map(|st| st.conditions))
        };
        match leaderworkersets(&s.client, &ns)
            .get_opt("chat-canary-lws")
            .await
        {
            Ok(Some(l)) => Ok(l),
            other => Err(format!("{:?}; {}", other.map(|_| ()), conditions().await)),
        }
    })
    .await;
    assert_eq!(canary.data["spec"]["leaderWorkerTemplate"]["size"], 2);
    ready_pods(
        &s,
        &ns,
        "infergate.dev/service=chat,infergate.dev/track=canary",
        1,
        &v2,
    )
    .await;
    ready_pods(
        &s,
        &ns,
        "infergate.dev/service=chat,infergate.dev/worker-of=canary",
        1,
        &v2,
    )
    .await;
    eventually("the route splits 80/20", WAIT, async || {
        let backends = support::timeline::route_backends(&s.client, &ns, "chat").await;
        if backends == [("chat".to_owned(), 80), ("chat-canary".to_owned(), 20)] {
            Ok(())
        } else {
            Err(format!("{backends:?}"))
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_image_change_on_a_full_pool_replaces_groups_in_place() {
    let s = setup().await;
    let class = pool(&s, "lws-full", 4).await;
    let ns = s.cp.fresh_namespace("multi-node").await;
    let _reconciler = support::short_lease_reconciler(&s.kubeconfig, "multi-node-full");
    create(&s, &ns, &service_json("chat", &class, 2)).await;
    ready_pods(&s, &ns, "infergate.dev/service=chat", 4, ENGINE).await;
    // Every node is taken: a new group has no room, so groups are
    // replaced one at a time.
    let v2 = format!("{ENGINE}-v2");
    Api::<InferenceService>::namespaced(s.client.clone(), &ns)
        .patch(
            "chat",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"engine": {"image": v2}}})),
        )
        .await
        .expect("patching the image");
    let lws_api = leaderworkersets(&s.client, &ns);
    let rolling = eventually("the LeaderWorkerSet replaces in place", WAIT, async || {
        let lws = lws_api.get("chat-lws").await.map_err(|e| e.to_string())?;
        let r = lws.data["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"].clone();
        if r["maxSurge"] == 0 && r["maxUnavailable"] == 1 {
            Ok(r)
        } else {
            Err(format!("{r}"))
        }
    })
    .await;
    assert_eq!(rolling["partition"], 0);
    let ps = ready_pods(&s, &ns, "infergate.dev/service=chat", 4, &v2).await;
    let nodes: BTreeSet<String> = ps
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    assert_eq!(nodes.len(), 4);
    let (status, _, message) =
        eventually(
            "RolloutCapacity says it is done",
            WAIT,
            async || match condition(&s.client, &ns, "chat", "RolloutCapacity").await {
                Some(c) if c.0 == "True" => Ok(c),
                other => Err(format!("{other:?}")),
            },
        )
        .await;
    assert_eq!(status, "True", "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_charges_tensor_times_pipeline_per_replica() {
    let s = setup().await;
    let class = pool(&s, "lws-budget", 1).await;
    let ns = s.cp.fresh_namespace("multi-node").await;
    let policy: infergate::api::InferencePolicy = serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "InferencePolicy",
        "metadata": {"name": "budget"},
        "spec": {"enforcement": "Deny", "limits": {"maxGPUsPerNamespace": 24}}
    }))
    .expect("policy");
    Api::<infergate::api::InferencePolicy>::namespaced(s.client.clone(), &ns)
        .create(&PostParams::default(), &policy)
        .await
        .expect("budget");
    let services: Api<InferenceService> = Api::namespaced(s.client.clone(), &ns);
    let err = eventually(
        "a 32-GPU service denied under a 24-GPU budget",
        WAIT,
        async || match services
            .create(&PostParams::default(), &service_json("chat", &class, 2))
            .await
        {
            Err(kube::Error::Api(e)) if e.message.contains("24") => Ok(e.message),
            other => Err(format!("{other:?}")),
        },
    )
    .await;
    assert!(err.contains("32"), "the charge is listed: {err}");
    // One replica (16 GPUs) fits.
    services
        .create(&PostParams::default(), &service_json("chat", &class, 1))
        .await
        .expect("16 GPUs under 24");
}
