//! Forty parallel creates of services serving one name on one Gateway,
//! sent through the round-robin proxy to both servers: exactly one is
//! admitted, five runs out of five. Requests go straight through a kube
//! client, as fast as the API server takes them.

use std::sync::atomic::Ordering;
use std::time::Instant;

use infergate::api::v1beta1::InferenceService;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};

use super::{HANDED, by_name, env, gateway, ledger};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forty_parallel_creates_serving_one_name_admit_exactly_one_five_times_out_of_five() {
    let (cp, client) = env().await;
    let handed_before = [0, 1].map(|i| HANDED[i].load(Ordering::Relaxed));
    for run in 0..5 {
        // Twenty in each of two namespaces; a Gateway of the run's own.
        let namespaces = [
            cp.fresh_namespace("names-race-a").await,
            cp.fresh_namespace("names-race-b").await,
        ];
        let gw = gateway(&format!("gw-race-{run}"));
        let started = Instant::now();
        let creates = (0..40).map(|i| {
            let ns = namespaces[i % 2].clone();
            let api: Api<InferenceService> = Api::namespaced(client.clone(), &ns);
            let svc = by_name(&format!("svc-{i:02}"), &gw, "llama-3-70b", &[], &[]);
            tokio::spawn(async move {
                // Names the ledger could not record in time are denied with
                // "try again" (a loaded machine); a client tries again.
                let mut tries = 0;
                loop {
                    match api.create(&PostParams::default(), &svc).await {
                        Err(kube::Error::Api(s))
                            if tries < 5
                                && s.message.contains("could not record")
                                && s.message.contains("try again") =>
                        {
                            tries += 1;
                        }
                        other => break other.map(|s| format!("{ns}/{}", s.name_any())),
                    }
                }
            })
        });
        let mut admitted = Vec::new();
        for create in futures::future::join_all(creates).await {
            match create.unwrap() {
                Ok(name) => admitted.push(name),
                Err(kube::Error::Api(s)) => assert!(
                    s.message
                        .contains("spec.model.servedName: Duplicate value: \"llama-3-70b\""),
                    "run {run}: not a clash: {}",
                    s.message
                ),
                Err(e) => panic!("run {run}: {e}"),
            }
        }
        eprintln!(
            "run {run}: {} of 40 admitted in {:?}: {admitted:?}",
            admitted.len(),
            started.elapsed()
        );
        assert_eq!(admitted.len(), 1, "run {run}: admitted {admitted:?}");
        let mut stored = 0;
        for ns in &namespaces {
            let api: Api<InferenceService> = Api::namespaced(client.clone(), ns);
            stored += api.list(&ListParams::default()).await.unwrap().items.len();
        }
        assert_eq!(stored, 1, "run {run}");
        let book = ledger(&client, &gw).await.expect("a names ledger");
        assert_eq!(book.entries.len(), 1, "run {run}: {book:?}");
    }
    for (i, before) in handed_before.into_iter().enumerate() {
        let after = HANDED[i].load(Ordering::Relaxed);
        eprintln!("server {i}: {} connections", after - before);
        assert!(after > before, "server {i} was handed no connection");
    }
}

/// The stored services of `namespaces` serving `served`.
async fn holders(client: &kube::Client, namespaces: &[String], served: &str) -> Vec<String> {
    let mut out = Vec::new();
    for ns in namespaces {
        let api: Api<InferenceService> = Api::namespaced(client.clone(), ns);
        for svc in api.list(&ListParams::default()).await.unwrap() {
            if svc.spec.model.served_name.as_deref() == Some(served) {
                out.push(format!("{ns}/{}", svc.name_any()));
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_rounds_of_delete_and_recreate_racing_another_namespaces_create_never_store_two_holders()
 {
    let (cp, client) = env().await;
    let namespaces = [
        cp.fresh_namespace("names-cycle").await,
        cp.fresh_namespace("names-intruder").await,
    ];
    let gw = gateway("gw-cycle");
    let cycled = by_name("cycled", &gw, "gemma-3", &[], &[]);
    let intruder = by_name("intruder", &gw, "gemma-3", &[], &[]);
    let api: Api<InferenceService> = Api::namespaced(client.clone(), &namespaces[0]);
    let other: Api<InferenceService> = Api::namespaced(client.clone(), &namespaces[1]);
    let pp = PostParams::default();
    api.create(&pp, &cycled).await.unwrap();
    let mut twice = Vec::new();
    let mut intruder_won = 0;
    for round in 0..20 {
        api.delete("cycled", &Default::default()).await.unwrap();
        let again = {
            let (api, svc) = (api.clone(), cycled.clone());
            tokio::spawn(async move { api.create(&PostParams::default(), &svc).await.is_ok() })
        };
        let took = {
            let (other, svc) = (other.clone(), intruder.clone());
            tokio::spawn(async move {
                let until = Instant::now() + std::time::Duration::from_millis(400);
                while Instant::now() < until {
                    if other.create(&PostParams::default(), &svc).await.is_ok() {
                        return true;
                    }
                }
                false
            })
        };
        let (again, took) = (again.await.unwrap(), took.await.unwrap());
        let stored = holders(&client, &namespaces, "gemma-3").await;
        if stored.len() > 1 {
            twice.push(format!("round {round}: {stored:?}"));
        }
        if took {
            intruder_won += 1;
            other.delete("intruder", &Default::default()).await.unwrap();
        }
        if !again {
            crate::support::eventually(
                "cycled to be created again",
                crate::support::WAIT,
                async || api.create(&PostParams::default(), &cycled).await.ok(),
            )
            .await;
        }
    }
    eprintln!(
        "20 rounds: the intruder won {intruder_won}, two holders in {}",
        twice.len()
    );
    assert!(
        twice.is_empty(),
        "two holders stored:\n{}",
        twice.join("\n")
    );
}
