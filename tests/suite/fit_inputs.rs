//! What the fit reads and how admission judges it over time
//! (`docs/capacity.md`): the engine flags a service passes in
//! `engine.args`, and the ratchet that lets a service a later ModelProfile
//! or AcceleratorClass no longer fits be scaled or given a new image, while
//! a create, or an update of the fit's inputs, is judged as before.

use infergate::api::v1beta1::InferenceService;
use infergate::engine::{self, Context, PolicySnapshot, Verdict};
use serde_json::{Value, json};

use super::capacity::{service, with};

/// The 70B model on H100s at tensor 2: it fits a 4,096-token context, and
/// with its full context (131,072 tokens) it does not.
fn seventy_b(engine: Value) -> InferenceService {
    service(json!({
        "model": {"ref": "meta-llama/Llama-3.1-70B-Instruct"},
        "engine": engine,
        "accelerator": {"class": "h100-80gb"},
        "parallelism": {"tensor": 2},
    }))
}

/// A change of one of the fit's inputs.
type Change = fn(&mut InferenceService);

fn defaulted(svc: &InferenceService, ctx: &Context) -> InferenceService {
    engine::default_service(svc, ctx).object
}

fn fit_errors(v: &Verdict) -> Vec<String> {
    v.errors
        .iter()
        .filter(|e| e.field == "spec.engine.maxModelLen" || e.field == "spec.parallelism.tensor")
        .map(ToString::to_string)
        .collect()
}

#[test]
fn the_fit_reads_the_engine_flags_a_service_passes_in_its_args() {
    with(&PolicySnapshot::default(), |ctx| {
        // The full context does not fit at tensor 1 on an L4 ...
        let eight_b = |args: Value| {
            service(json!({
                "model": {"ref": "meta-llama/Llama-3.1-8B-Instruct"},
                "engine": {"args": args},
                "accelerator": {"class": "l4-24gb-single"},
                "parallelism": {"tensor": 1},
            }))
        };
        let full = defaulted(&eight_b(json!([])), ctx);
        let v = engine::validate_service(&full, None, ctx);
        assert_eq!(fit_errors(&v).len(), 1, "{v:?}");
        // ... a context given as --max-model-len does, as the engine reads it.
        for args in [
            json!(["--max-model-len", "8192"]),
            json!(["--max-model-len=8192"]),
            json!(["--max_model_len", "8K"]),
        ] {
            let svc = defaulted(&eight_b(args.clone()), ctx);
            let v = engine::validate_service(&svc, None, ctx);
            assert!(fit_errors(&v).is_empty(), "{args}: {v:?}");
            // The flag is the context: the fit does not default the field over it.
            assert_eq!(
                svc.spec.engine.as_ref().and_then(|e| e.max_model_len),
                None,
                "{args}"
            );
            assert!(
                v.warnings.iter().any(|w| w.contains("context 8192)")),
                "{args}: {:?}",
                v.warnings
            );
        }
        // --gpu-memory-utilization counts where the field is unset (the
        // defaults leave the field alone then), and --kv-cache-dtype fp8
        // halves the KV bytes of a token: twice the tokens.
        let tokens = |args: Value| {
            let svc = defaulted(&eight_b(args), ctx);
            let v = engine::validate_service(&svc, None, ctx);
            let w = v
                .warnings
                .iter()
                .find(|w| w.contains("tokens of KV cache per replica"))
                .cloned()
                .unwrap_or_else(|| panic!("no concurrency note: {v:?}"));
            let at = w.find(" tokens of KV cache").expect("tokens");
            let digits: String = w[..at]
                .chars()
                .rev()
                .take_while(char::is_ascii_digit)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            (svc, digits.parse::<i64>().expect("a number"))
        };
        let (_, at_default) = tokens(json!(["--max-model-len", "4096"]));
        let (svc, at_95) = tokens(json!([
            "--max-model-len",
            "4096",
            "--gpu-memory-utilization",
            "0.95"
        ]));
        assert_eq!(
            svc.spec
                .engine
                .as_ref()
                .and_then(|e| e.gpu_memory_utilization),
            None
        );
        assert!(at_95 > at_default, "{at_95} > {at_default}");
        let (_, fp8) = tokens(json!([
            "--max-model-len",
            "4096",
            "--kv-cache-dtype",
            "fp8"
        ]));
        assert!(
            (fp8 - 2 * at_default).abs() <= 2,
            "fp8 {fp8} is twice {at_default}"
        );
        // Field and flag both: the field wins, and a warning says so.
        let both = service(json!({
            "model": {"ref": "meta-llama/Llama-3.1-8B-Instruct"},
            "engine": {"maxModelLen": 4096, "args": ["--max-model-len", "8192"]},
            "accelerator": {"class": "l4-24gb-single"},
            "parallelism": {"tensor": 1},
        }));
        let v = engine::validate_service(&defaulted(&both, ctx), None, ctx);
        assert!(
            v.warnings.iter().any(|w| w
                == "spec.engine.args[0]: --max-model-len 8192 is overridden by spec.engine.maxModelLen (4096), which the fit reads and the engine is given"),
            "{:?}",
            v.warnings
        );
        assert!(v.warnings.iter().any(|w| w.contains("context 4096)")));
    });
}

#[test]
fn an_update_that_keeps_the_fits_inputs_is_admitted_with_a_warning() {
    with(&PolicySnapshot::default(), |ctx| {
        // Stored while a shorter context was the rule; now it does not fit.
        let old = defaulted(&seventy_b(json!({"maxModelLen": 131_072})), ctx);
        let create = engine::validate_service(&old, None, ctx);
        let misfit = fit_errors(&create);
        assert_eq!(misfit.len(), 1, "a create is judged: {create:?}");

        // A scale and a new engine image: the fit's inputs are as they were.
        let mut scaled = old.clone();
        scaled.spec.replicas = Some(5);
        scaled.spec.engine.as_mut().unwrap().image = Some("registry.example.com/vllm:1.0".into());
        let v = engine::validate_service(&scaled, Some(&old), ctx);
        assert!(v.allowed(), "{v:?}");
        assert!(
            v.warnings
                .iter()
                .any(|w| w.starts_with(&misfit[0]) && w.contains("leaves the fit's inputs")),
            "{:?}",
            v.warnings
        );

        // An update of the fit's inputs is judged as a create: each input.
        let changes: [(&str, Change); 4] = [
            ("context", |s| {
                s.spec.engine.as_mut().unwrap().max_model_len = Some(200_000);
            }),
            ("memory share", |s| {
                s.spec.engine.as_mut().unwrap().gpu_memory_utilization = Some(0.8);
            }),
            ("tensor", |s| {
                s.spec.parallelism.as_mut().unwrap().tensor = Some(1);
            }),
            ("flag in args", |s| {
                s.spec.engine.as_mut().unwrap().args =
                    vec!["--kv-cache-dtype".into(), "auto".into()];
            }),
        ];
        for (what, change) in changes {
            let mut changed = old.clone();
            change(&mut changed);
            let v = engine::validate_service(&changed, Some(&old), ctx);
            assert!(!fit_errors(&v).is_empty(), "{what}: {v:?}");
        }
        // The reconciler's own judgement of the running service: a warning,
        // and the misfit told apart.
        let running = engine::validate_running(&old, ctx);
        assert!(running.allowed(), "{running:?}");
        let told: Vec<String> = engine::misfits(&old, ctx)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(told, misfit);
    });
}
