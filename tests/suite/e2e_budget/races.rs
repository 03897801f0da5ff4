//! The ledger through the races of section 13: a service deleted and
//! created again while another create races it for the room, and a budget
//! that first applies to a namespace whose services already hold most of
//! it. Requests go straight through a kube client, as fast as the API
//! server takes them (kubectl is too slow to reach these windows).

use std::time::{Duration, Instant};

use infergate::api::v1beta1::InferenceService;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};

use super::{budget_denial, charges, env, ledger, service, set_budget};
use crate::support::{WAIT, eventually};

/// The GPUs every stored service of `ns` holds (one per replica).
async fn stored_gpus(client: &Client, ns: &str) -> (i64, Vec<String>) {
    let api: Api<InferenceService> = Api::namespaced(client.clone(), ns);
    let mut total = 0;
    let mut names = Vec::new();
    for svc in api.list(&ListParams::default()).await.unwrap() {
        total += i64::from(svc.spec.replicas.unwrap_or(1));
        names.push(format!(
            "{} {}",
            svc.name_any(),
            svc.spec.replicas.unwrap_or(1)
        ));
    }
    (total, names)
}

/// Create `svc` in `ns`: whether it was admitted (a budget denial is
/// `false`; anything else fails the test).
async fn admitted(api: &Api<InferenceService>, svc: &InferenceService) -> bool {
    match api.create(&PostParams::default(), svc).await {
        Ok(_) => true,
        Err(e) => !budget_denial(&e, 16),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_rounds_of_delete_and_recreate_racing_a_create_never_store_more_than_the_budget() {
    let (cp, client, _) = env().await;
    let ns = cp.fresh_namespace("budget-recreate").await;
    set_budget(&client, &ns, 16).await;
    let api: Api<InferenceService> = Api::namespaced(client.clone(), &ns);
    let pp = PostParams::default();
    api.create(&pp, &service("base", 8, None)).await.unwrap();
    api.create(&pp, &service("cycled", 8, None)).await.unwrap();
    let mut over = Vec::new();
    let mut intruder_won = 0;
    let started = Instant::now();
    for round in 0..50u64 {
        api.delete("cycled", &DeleteParams::default())
            .await
            .unwrap();
        // Created again at once; the intruder tries for the room it
        // leaves, again and again for a moment, from a second client task.
        let again = {
            let api = api.clone();
            tokio::spawn(async move { admitted(&api, &service("cycled", 8, None)).await })
        };
        let intruder = {
            let api = api.clone();
            tokio::spawn(async move {
                let until = Instant::now() + Duration::from_millis(400);
                while Instant::now() < until {
                    if admitted(&api, &service("intruder", 8, None)).await {
                        return true;
                    }
                }
                false
            })
        };
        let (again, intruder) = (again.await.unwrap(), intruder.await.unwrap());
        let (gpus, names) = stored_gpus(&client, &ns).await;
        if gpus > 16 {
            over.push(format!("round {round}: {gpus} GPUs stored: {names:?}"));
        }
        if intruder {
            intruder_won += 1;
            api.delete("intruder", &DeleteParams::default())
                .await
                .unwrap();
        }
        if !again {
            // The intruder took the room; once its charge is released,
            // `cycled` is created again for the next round.
            eventually("cycled to be created again", WAIT, async || {
                admitted(&api, &service("cycled", 8, None))
                    .await
                    .then_some(())
            })
            .await;
        }
    }
    eprintln!(
        "50 rounds in {:?}: the intruder won {intruder_won}, over the budget in {}",
        started.elapsed(),
        over.len()
    );
    assert!(
        over.is_empty(),
        "stored more than 16 GPUs:\n{}",
        over.join("\n")
    );
    // The ledger names the service each charge is for by uid: a deletion
    // releases that service's charge, not its successor's.
    let stored = api.get("cycled").await.unwrap();
    eventually("cycled's entry to name it", WAIT, async || {
        let book = ledger(&client, &ns).await?;
        (book.entries.get("cycled")?.uid == stored.metadata.uid).then_some(())
    })
    .await;
}

/// Set `name`'s replicas (GPUs) to `n`: whether it was admitted.
async fn scaled(api: &Api<InferenceService>, name: &str, n: i32) -> bool {
    let patch = Patch::Merge(serde_json::json!({"spec": {"replicas": n}}));
    match api.patch(name, &PatchParams::default(), &patch).await {
        Ok(_) => true,
        Err(e) => !budget_denial(&e, 16),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_rounds_of_lowering_then_raising_a_charge_racing_a_create_never_store_more_than_the_budget()
 {
    let (cp, client, _) = env().await;
    let ns = cp.fresh_namespace("budget-raise").await;
    set_budget(&client, &ns, 16).await;
    let api: Api<InferenceService> = Api::namespaced(client.clone(), &ns);
    let pp = PostParams::default();
    api.create(&pp, &service("base", 8, None)).await.unwrap();
    api.create(&pp, &service("varied", 8, None)).await.unwrap();
    let mut over = Vec::new();
    let mut intruder_won = 0;
    let started = Instant::now();
    for round in 0..20u64 {
        assert!(scaled(&api, "varied", 4).await, "round {round}: lowering");
        // The ledger lowered by the reconciler: the room a raise must
        // take back under the ledger's precondition, not on a cached 8.
        eventually("varied's charge to be lowered", WAIT, async || {
            (charges(&client, &ns).await.get("varied") == Some(&4)).then_some(())
        })
        .await;
        let raise = {
            let api = api.clone();
            tokio::spawn(async move { scaled(&api, "varied", 8).await })
        };
        let intruder = {
            let api = api.clone();
            tokio::spawn(async move {
                let until = Instant::now() + Duration::from_millis(1500);
                while Instant::now() < until {
                    if admitted(&api, &service("intruder", 4, None)).await {
                        return true;
                    }
                }
                false
            })
        };
        let (raised, intruder) = (raise.await.unwrap(), intruder.await.unwrap());
        let (gpus, names) = stored_gpus(&client, &ns).await;
        if gpus > 16 {
            over.push(format!("round {round}: {gpus} GPUs stored: {names:?}"));
        }
        if intruder {
            intruder_won += 1;
            api.delete("intruder", &DeleteParams::default())
                .await
                .unwrap();
        }
        if !raised {
            eventually("varied to be raised again", WAIT, async || {
                scaled(&api, "varied", 8).await.then_some(())
            })
            .await;
        }
        // The raise settled in the ledger before the next lowering.
        eventually("varied's charge to be settled", WAIT, async || {
            (charges(&client, &ns).await.get("varied") == Some(&8)).then_some(())
        })
        .await;
    }
    eprintln!(
        "20 rounds in {:?}: the intruder won {intruder_won}, over the budget in {}",
        started.elapsed(),
        over.len()
    );
    assert!(
        over.is_empty(),
        "stored more than 16 GPUs:\n{}",
        over.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_budget_applied_to_a_namespace_with_twelve_of_sixteen_gpus_in_use_admits_one_of_two_parallel_creates()
 {
    let (cp, client, _) = env().await;
    for run in 0..5 {
        let ns = cp.fresh_namespace("budget-late").await;
        let api: Api<InferenceService> = Api::namespaced(client.clone(), &ns);
        let pp = PostParams::default();
        api.create(&pp, &service("chat", 8, None)).await.unwrap();
        api.create(&pp, &service("embed", 4, None)).await.unwrap();
        // Known to both servers (a dry run of 17 GPUs denied in a row).
        set_budget(&client, &ns, 16).await;
        let creates = ["one", "two"].map(|name| {
            let api = api.clone();
            tokio::spawn(async move { admitted(&api, &service(name, 4, None)).await })
        });
        let mut admitted_count = 0;
        for create in futures::future::join_all(creates).await {
            admitted_count += usize::from(create.unwrap());
        }
        let (gpus, names) = stored_gpus(&client, &ns).await;
        eprintln!("run {run}: {admitted_count} of 2 admitted; {gpus} GPUs stored: {names:?}");
        assert!(admitted_count <= 1, "run {run}: both admitted: {names:?}");
        assert!(gpus <= 16, "run {run}: {names:?}");
    }
}
