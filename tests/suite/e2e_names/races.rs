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
                api.create(&PostParams::default(), &svc)
                    .await
                    .map(|s| format!("{ns}/{}", s.name_any()))
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
