//! The fit at the real API server: with the example AcceleratorClasses and
//! ModelProfiles installed, `kubectl apply --dry-run=server -o json` shows
//! the tensor size (and, where the full context fits nowhere, the
//! `maxModelLen`) the mutating webhook chose, recorded as the fit's, and
//! kubectl prints the fit's warnings.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fit_chooses_the_tensor_and_a_dry_run_shows_it() {
    let cp = control_plane().await;
    webhook().await;
    let good = root().join("examples/good");
    for file in ["accelerator-classes.yaml", "model-profiles.yaml"] {
        must_apply(cp, &std::fs::read_to_string(good.join(file)).unwrap());
    }
    let ns = cp.fresh_namespace("fit").await;
    // The example takes its engine image from team-a's policies; here it is given.
    let fitted = std::fs::read_to_string(good.join("fitted-70b.yaml"))
        .unwrap()
        .replace("team-a", &ns)
        + &format!("  engine: {{image: {ENGINE_IMAGE}}}\n");
    // The profiles reach the webhook's cache through its watch.
    dry_run_until(cp, &fitted, "the fit picks tensor 4", |v, all| {
        let tensor = &v["spec"]["parallelism"]["tensor"];
        let from: Value = v["metadata"]["annotations"]["infergate.dev/defaulted-from"]
            .as_str()
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or(Value::Null);
        if tensor != 4 {
            return Err(format!("tensor {tensor}"));
        }
        assert_eq!(
            from["spec.parallelism.tensor"],
            "fit: ModelProfile/llama-3-1-70b-instruct, AcceleratorClass/h100-80gb"
        );
        assert!(v["spec"]["engine"].get("maxModelLen").is_none(), "{v}");
        assert_eq!(v["spec"]["engine"]["gpuMemoryUtilization"], 0.9);
        // The validating webhook's warning states the concurrency.
        assert!(
            all.contains("4 x h100-80gb (tensor 4) holds 3.5 requests of the full context at once"),
            "{all}"
        );
        Ok(())
    })
    .await;

    // One L4 holds the 8B model's weights but not its full context: the
    // fit shortens the context to what fits, rounded down to 256.
    let short = service_yaml(
        &ns,
        "short",
        &format!(
            "  model: {{ref: meta-llama/Llama-3.1-8B-Instruct}}\n  accelerator: {{class: l4-24gb}}\n  engine: {{image: {ENGINE_IMAGE}}}\n"
        ),
    );
    dry_run_until(cp, &short, "the fit shortens the context", |v, all| {
        let spec = &v["spec"];
        if spec["engine"]["maxModelLen"] != 29440 {
            return Err(format!("{spec}"));
        }
        assert_eq!(spec["parallelism"]["tensor"], 1);
        let from: Value = serde_json::from_str(
            v["metadata"]["annotations"]["infergate.dev/defaulted-from"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            from["spec.engine.maxModelLen"],
            "fit: ModelProfile/llama-3-1-8b-instruct, AcceleratorClass/l4-24gb"
        );
        assert!(
            all.contains("spec.engine.maxModelLen: set to 29440"),
            "{all}"
        );
        Ok(())
    })
    .await;

    // A context that cannot fit is denied at the API server with the numbers.
    let denied = service_yaml(
        &ns,
        "denied",
        &format!(
            "  model: {{ref: meta-llama/Llama-3.1-70B-Instruct}}\n  accelerator: {{class: h100-80gb}}\n  parallelism: {{tensor: 2}}\n  engine: {{image: {ENGINE_IMAGE}}}\n"
        ),
    );
    let out = cp.kubectl_stdin(&["apply", "--dry-run=server", "-f", "-"], &denied);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("spec.engine.maxModelLen: Invalid value: 131072: 2 x h100-80gb (tensor 2) hold 4628 tokens of KV cache per replica"),
        "{}",
        text(&out)
    );
}
