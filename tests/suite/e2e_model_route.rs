//! End-to-end: a service routed by model name, against a real
//! kube-apiserver with the Gateway API's own HTTPRoute CRD (standard
//! channel): its route has one rule per served name (the base and each
//! LoRA adapter) matching the model name header exactly, with the
//! canary's weights, the timeout and `spec.hostnames`, and the API server
//! accepts it; both tracks' engines carry the served name and the LoRA
//! flags; a change of the adapters changes the pod template, so it rolls
//! the engine as any template change does.

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use crate::support::timeline::route_backends;
use crate::support::{Reconciler, WAIT, eventually, get, mark_pods_ready, merge_patch};
use infergate::api::v1beta1::InferenceService;
use infergate::reconcile::children::httproute::HTTPRoute;
use infergate::reconcile::children::{ANNOTATION_TEMPLATE, CONTAINER_NAME};

use crate::support;

fn args_of(d: &Deployment) -> Vec<String> {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.containers.iter().find(|c| c.name == CONTAINER_NAME))
        .and_then(|c| c.args.clone())
        .unwrap_or_default()
}

fn digest_of(d: &Deployment) -> Option<String> {
    d.metadata
        .annotations
        .as_ref()?
        .get(ANNOTATION_TEMPLATE)
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_by_model_name_is_accepted_and_adapters_roll_the_engine() {
    let (cp, client, kubeconfig) = support::reconciler_setup(&[support::httproute_crd()]).await;
    let _reconciler = Reconciler::start(kubeconfig, support::reconcile_config("model-route"));
    let ns = cp.fresh_namespace("model-route").await;
    let svc: InferenceService = serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
        "metadata": {"name": "chat", "namespace": ns},
        "spec": {
            "model": {"ref": "meta-llama/Llama-3.1-70B-Instruct", "servedName": "llama-3-70b",
                      "adapters": [{"name": "sql-lora", "source": "org/sql-lora"},
                                   {"name": "support-lora", "source": "org/support-lora"}]},
            "engine": {"image": "registry.example.com/vllm:0.11.1"},
            "replicas": 1,
            "canary": {"model": {"ref": "meta-llama/Llama-3.1-70B-Instruct"},
                       "engineImage": "registry.example.com/vllm:0.11.2", "weight": 20, "replicas": 1},
            "routing": {"match": "Both", "hostnames": ["api.example.com"], "requestTimeout": "2m",
                        "gateway": {"name": "inference-gw", "namespace": "gateways"}}
        }
    }))
    .expect("service");
    Api::<InferenceService>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &svc)
        .await
        .expect("create");
    mark_pods_ready(&client, &ns, "chat", "primary", 1).await;
    mark_pods_ready(&client, &ns, "chat", "canary", 1).await;
    eventually("the route splits 80/20", WAIT, async || {
        let b = route_backends(&client, &ns, "chat").await;
        // Three rules (path, base, two adapters: four), each 80/20.
        let split = [("chat".to_owned(), 80), ("chat-canary".to_owned(), 20)];
        if b.len() == 8 && b.chunks(2).all(|c| c == split) {
            Ok(())
        } else {
            Err(format!("{b:?}"))
        }
    })
    .await;
    // As the API server stored it (the Gateway API's CRD validated it).
    let route: HTTPRoute = get(&client, &ns, "chat").await.expect("route");
    let stored = serde_json::to_value(&route.spec).expect("json");
    assert_eq!(stored["hostnames"], json!(["api.example.com"]));
    let rules = stored["rules"].as_array().expect("rules");
    assert_eq!(rules.len(), 4);
    assert_eq!(rules[0]["matches"][0]["path"]["type"], "PathPrefix");
    let names: Vec<Value> = rules[1..]
        .iter()
        .map(|r| r["matches"][0]["headers"][0].clone())
        .collect();
    assert_eq!(
        names,
        ["llama-3-70b", "sql-lora", "support-lora"]
            .iter()
            .map(|n| json!({"type": "Exact", "name": "X-Gateway-Model-Name", "value": n}))
            .collect::<Vec<_>>()
    );
    for r in rules {
        assert_eq!(r["timeouts"]["request"], "2m");
    }
    // Both tracks serve the base's names and load the adapters.
    for name in ["chat", "chat-canary"] {
        let d: Deployment = get(&client, &ns, name).await.expect("deployment");
        let args = args_of(&d);
        let joined = args.join(" ");
        assert!(
            joined.contains("--served-model-name llama-3-70b"),
            "{name}: {joined}"
        );
        assert!(
            joined.contains("--enable-lora --max-loras 2 --max-lora-rank 16 --lora-modules"),
            "{name}: {joined}"
        );
        assert!(
            args.contains(
                &r#"{"base_model_name":"llama-3-70b","name":"sql-lora","path":"org/sql-lora"}"#
                    .to_owned()
            ),
            "{name}: {joined}"
        );
    }
    // A third adapter: a new pod template for the primary (a rollout).
    let before: Deployment = get(&client, &ns, "chat").await.expect("deployment");
    let services: Api<InferenceService> = Api::namespaced(client.clone(), &ns);
    merge_patch(
        &services,
        "chat",
        json!({"spec": {"model": {"adapters": [
            {"name": "sql-lora", "source": "org/sql-lora"},
            {"name": "support-lora", "source": "org/support-lora"},
            {"name": "legal-lora", "source": "org/legal-lora"}]}}}),
        "a third adapter",
    )
    .await;
    let after = eventually("the primary's template changed", WAIT, async || {
        let d: Deployment = get(&client, &ns, "chat").await.ok_or("gone")?;
        if digest_of(&d) != digest_of(&before) && args_of(&d).join(" ").contains("--max-loras 3") {
            Ok(d)
        } else {
            Err("not yet".to_owned())
        }
    })
    .await;
    assert!(after.metadata.generation > before.metadata.generation);
    eventually("the route has the new adapter's rule", WAIT, async || {
        let route: HTTPRoute = get(&client, &ns, "chat").await.ok_or("gone")?;
        if route.spec.rules.len() == 5 {
            Ok(())
        } else {
            Err(format!("{} rules", route.spec.rules.len()))
        }
    })
    .await;
}
