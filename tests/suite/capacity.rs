//! Capacity (`docs/capacity.md`) without a cluster: the fit of a model on
//! its GPUs, judged by admission against a reference implementation of the
//! formula written here (not a call to the code under test) over a grid of
//! models x classes x tensor x pipeline x maxModelLen; the fit's defaults;
//! the curated catalogue; a service's charge and the budget's message.

use std::collections::BTreeMap;

use infergate::api::ModelProfileSpec;
use infergate::api::v1beta1::InferenceService;
use infergate::api::{AcceleratorClassSpec, ClusterInferencePolicy};
use infergate::engine::capacity::budget::{budget_of, overruns};
use infergate::engine::capacity::charge::{Charge, charge_of};
use infergate::engine::policy::layers;
use infergate::engine::{
    self, AcceleratorClasses, Context, ModelProfiles, NoRoutes, PolicySnapshot, ServerDefaults,
    Verdict,
};
use serde_json::{Value, json};

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// A model's shape, as its published config gives it.
#[derive(Clone, Copy, Debug)]
enum Attention {
    Gqa { kv_heads: i64, head_dim: i64 },
    Mla { rank: i64, rope: i64 },
}

#[derive(Clone, Copy, Debug)]
struct Model {
    name: &'static str,
    model_ref: &'static str,
    weight_bytes: i64,
    layers: i64,
    attention: Attention,
    context: i64,
}

const MODELS: &[Model] = &[
    Model {
        name: "llama-3-1-70b",
        model_ref: "meta-llama/Llama-3.1-70B-Instruct",
        weight_bytes: 141_107_412_992,
        layers: 80,
        attention: Attention::Gqa {
            kv_heads: 8,
            head_dim: 128,
        },
        context: 131_072,
    },
    Model {
        name: "llama-3-1-8b",
        model_ref: "meta-llama/Llama-3.1-8B-Instruct",
        weight_bytes: 16_060_522_496,
        layers: 32,
        attention: Attention::Gqa {
            kv_heads: 8,
            head_dim: 128,
        },
        context: 131_072,
    },
    // Four KV heads: at tensor 8 each rank still holds a whole head.
    Model {
        name: "qwen2-5-7b",
        model_ref: "Qwen/Qwen2.5-7B-Instruct",
        weight_bytes: 15_231_233_024,
        layers: 28,
        attention: Attention::Gqa {
            kv_heads: 4,
            head_dim: 128,
        },
        context: 32_768,
    },
    // Multi-head attention: as many KV heads as heads.
    Model {
        name: "llama-2-7b",
        model_ref: "meta-llama/Llama-2-7b-hf",
        weight_bytes: 13_476_839_424,
        layers: 32,
        attention: Attention::Gqa {
            kv_heads: 32,
            head_dim: 128,
        },
        context: 4_096,
    },
    Model {
        name: "deepseek-v2-lite",
        model_ref: "deepseek-ai/DeepSeek-V2-Lite-Chat",
        weight_bytes: 31_412_543_488,
        layers: 27,
        attention: Attention::Mla {
            rank: 512,
            rope: 64,
        },
        context: 163_840,
    },
    // Weights that fit no node of any class here.
    Model {
        name: "deepseek-v3",
        model_ref: "deepseek-ai/DeepSeek-V3",
        weight_bytes: 688_586_727_753,
        layers: 61,
        attention: Attention::Mla {
            rank: 512,
            rope: 64,
        },
        context: 163_840,
    },
];

/// `(name, memory in GiB, devices per node)`.
const CLASSES: &[(&str, f64, i64)] = &[
    ("h100-80gb", 80.0, 8),
    ("a100-40gb", 40.0, 8),
    ("l4-24gb", 24.0, 4),
    // One device per node: long contexts must be shortened.
    ("l4-24gb-single", 24.0, 1),
    ("a10-24gb-pair", 24.0, 2),
    ("mi300x-192gb", 192.0, 8),
];

fn profile(m: &Model) -> ModelProfileSpec {
    let attention = match m.attention {
        Attention::Gqa { kv_heads, head_dim } => {
            json!({"kind": "GQA", "kvHeads": kv_heads, "headDim": head_dim})
        }
        Attention::Mla { rank, rope } => {
            json!({"kind": "MLA", "kvLoraRank": rank, "qkRopeHeadDim": rope})
        }
    };
    serde_json::from_value(json!({
        "modelRefs": [m.model_ref],
        "weightBytes": m.weight_bytes,
        "layers": m.layers,
        "attention": attention,
        "maxPositionEmbeddings": m.context,
    }))
    .expect("profile")
}

pub(crate) fn profiles() -> ModelProfiles {
    MODELS
        .iter()
        .map(|m| (m.name.to_owned(), profile(m)))
        .collect()
}

pub(crate) fn classes() -> AcceleratorClasses {
    CLASSES
        .iter()
        .map(|(name, gib, devices)| {
            let vendor = if name.starts_with("mi300") {
                "amd"
            } else {
                "nvidia"
            };
            let spec: AcceleratorClassSpec = serde_json::from_value(json!({
                "vendor": vendor,
                "memoryPerDevice": format!("{gib}Gi"),
                "devicesPerNode": devices,
                "costPerDeviceHour": "4.10",
            }))
            .expect("class");
            ((*name).to_owned(), spec)
        })
        .collect()
}

// ---- The reference: the formula, written out again. ----

/// KV tokens per replica, `None` when weights and overhead leave no room.
fn reference_tokens(m: &Model, memory_gib: f64, t: i64, p: i64, u: f64) -> Option<i64> {
    let ceil = |a: i64, b: i64| (a + b - 1) / b;
    let w = m.weight_bytes as f64 / (t * p) as f64;
    let overhead = 2.3 * GIB + 0.05 * w;
    let room = memory_gib * GIB * u - w - overhead;
    if room <= 0.0 {
        return None;
    }
    let per_token = match m.attention {
        Attention::Gqa { kv_heads, head_dim } => {
            2 * ceil(m.layers, p) * ceil(kv_heads, t) * head_dim * 2
        }
        Attention::Mla { rank, rope } => ceil(m.layers, p) * (rank + rope) * 2,
    };
    Some((room / per_token as f64).floor() as i64)
}

#[derive(Debug, PartialEq)]
enum Expect {
    Fits { tokens: i64 },
    ContextTooLong { tokens: i64, context: i64 },
    WeightsDoNotFit,
}

fn reference(m: &Model, memory_gib: f64, t: i64, p: i64, u: f64, max_len: Option<i64>) -> Expect {
    let context = max_len.unwrap_or(m.context);
    match reference_tokens(m, memory_gib, t, p, u) {
        None | Some(0) => Expect::WeightsDoNotFit,
        Some(tokens) if tokens < context => Expect::ContextTooLong { tokens, context },
        Some(tokens) => Expect::Fits { tokens },
    }
}

// ---- Admission, as the webhook runs it. ----

pub(crate) fn service(spec: Value) -> InferenceService {
    let mut spec = spec;
    spec["engine"]["image"] = json!("registry.example.com/vllm:0.9");
    serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
        "metadata": {"name": "chat", "namespace": "team-a"},
        "spec": spec,
    }))
    .expect("service")
}

pub(crate) fn with<R>(policies: &PolicySnapshot, f: impl FnOnce(&Context) -> R) -> R {
    let labels = BTreeMap::new();
    let classes = classes();
    let profiles = profiles();
    f(&Context {
        namespace: "team-a",
        namespace_labels: &labels,
        policies,
        classes: &classes,
        profiles: &profiles,
        server: &ServerDefaults::default(),
        routes: &NoRoutes,
    })
}

fn admit(svc: &InferenceService, policies: &PolicySnapshot) -> (engine::Defaulted, Verdict) {
    with(policies, |ctx| {
        let d = engine::default_service(svc, ctx);
        let v = engine::validate_service(&d.object, None, ctx);
        (d, v)
    })
}

fn capacity_errors(v: &Verdict) -> Vec<(String, String)> {
    v.errors
        .iter()
        .filter(|e| e.field == "spec.engine.maxModelLen" || e.field == "spec.parallelism.tensor")
        .map(|e| (e.field.clone(), e.to_string()))
        .collect()
}

#[test]
fn admission_agrees_with_the_reference_over_the_grid() {
    let mut seen = BTreeMap::new();
    for m in MODELS {
        for (class, memory, devices) in CLASSES {
            for t in [1_i64, 2, 4, 8] {
                for p in [1_i64, 2] {
                    if t * p > *devices {
                        continue;
                    }
                    for max_len in [None, Some(4_096_i64), Some(32_768)] {
                        for u in [None, Some(0.95)] {
                            let mut engine = json!({});
                            if let Some(n) = max_len {
                                engine["maxModelLen"] = json!(n);
                            }
                            if let Some(u) = u {
                                engine["gpuMemoryUtilization"] = json!(u);
                            }
                            let svc = service(json!({
                                "model": {"ref": m.model_ref},
                                "engine": engine,
                                "accelerator": {"class": class},
                                "parallelism": {"tensor": t, "pipeline": p},
                            }));
                            let (_, v) = admit(&svc, &PolicySnapshot::default());
                            let want = reference(m, *memory, t, p, u.unwrap_or(0.9), max_len);
                            let errs = capacity_errors(&v);
                            let at = format!(
                                "{} on {class} t={t} p={p} len={max_len:?} u={u:?}",
                                m.name
                            );
                            match &want {
                                Expect::Fits { tokens } => {
                                    assert!(errs.is_empty(), "{at}: {errs:?}");
                                    let context = max_len.unwrap_or(m.context);
                                    let conc =
                                        ((*tokens as f64 / context as f64) * 10.0).floor() / 10.0;
                                    let note = format!(
                                        "holds {conc:.1} requests of the full context at once ({tokens} tokens of KV cache per replica, context {context})"
                                    );
                                    assert!(
                                        v.warnings.iter().any(|w| w.contains(&note)),
                                        "{at}: no {note:?} in {:?}",
                                        v.warnings
                                    );
                                    *seen.entry("fits").or_insert(0) += 1;
                                }
                                Expect::ContextTooLong { tokens, context } => {
                                    assert_eq!(errs.len(), 1, "{at}: {errs:?}");
                                    let (field, msg) = &errs[0];
                                    assert_eq!(field, "spec.engine.maxModelLen", "{at}");
                                    let devices_text = if p > 1 {
                                        format!("{} x {class} (tensor {t}, pipeline {p})", t * p)
                                    } else {
                                        format!("{t} x {class} (tensor {t})")
                                    };
                                    let head = format!(
                                        "spec.engine.maxModelLen: Invalid value: {context}: {devices_text} hold {tokens} tokens of KV cache per replica"
                                    );
                                    assert!(msg.starts_with(&head), "{at}: {msg} !~ {head}");
                                    assert!(
                                        msg.contains(&format!("use maxModelLen <= {tokens}")),
                                        "{at}: {msg}"
                                    );
                                    *seen.entry("context").or_insert(0) += 1;
                                }
                                Expect::WeightsDoNotFit => {
                                    assert_eq!(errs.len(), 1, "{at}: {errs:?}");
                                    assert_eq!(errs[0].0, "spec.parallelism.tensor", "{at}");
                                    assert!(
                                        errs[0].1.contains(&format!("Invalid value: {t}:")),
                                        "{at}: {}",
                                        errs[0].1
                                    );
                                    *seen.entry("weights").or_insert(0) += 1;
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    // The grid reaches every outcome, many times.
    for outcome in ["fits", "context", "weights"] {
        assert!(
            seen.get(outcome).copied().unwrap_or(0) >= 10,
            "{outcome}: {seen:?}"
        );
    }
}

#[test]
fn the_seventy_billion_model_on_two_h100s_is_denied_with_the_numbers() {
    let svc = service(json!({
        "model": {"ref": "meta-llama/Llama-3.1-70B-Instruct"},
        "accelerator": {"class": "h100-80gb"},
        "parallelism": {"tensor": 2},
    }));
    let (_, v) = admit(&svc, &PolicySnapshot::default());
    assert_eq!(
        capacity_errors(&v),
        [(
            "spec.engine.maxModelLen".to_owned(),
            "spec.engine.maxModelLen: Invalid value: 131072: 2 x h100-80gb (tensor 2) hold 4628 tokens of KV cache per replica (weights 65.7 GiB and overhead 5.6 GiB per device); use maxModelLen <= 4628 or tensor >= 4".to_owned()
        )]
    );
}

#[test]
fn weights_that_fit_no_node_say_so() {
    let svc = service(json!({
        "model": {"ref": "deepseek-ai/DeepSeek-V3"},
        "accelerator": {"class": "h100-80gb"},
        "parallelism": {"tensor": 8},
    }));
    let (_, v) = admit(&svc, &PolicySnapshot::default());
    let errs = capacity_errors(&v);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0]
            .1
            .contains("no tensor size up to the class's 8 devices per node holds it"),
        "{}",
        errs[0].1
    );
}

#[test]
fn the_canary_is_fitted_with_its_own_model() {
    let svc = service(json!({
        "model": {"ref": "meta-llama/Llama-3.1-8B-Instruct"},
        "accelerator": {"class": "a100-40gb"},
        "parallelism": {"tensor": 1},
        "canary": {"model": {"ref": "meta-llama/Llama-3.1-70B-Instruct"}, "weight": 10},
    }));
    let (_, v) = admit(&svc, &PolicySnapshot::default());
    let errs = capacity_errors(&v);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].1.contains(
            "the canary's model \"meta-llama/Llama-3.1-70B-Instruct\": on 1 x a100-40gb (tensor 1)"
        ),
        "{}",
        errs[0].1
    );
}

/// The fit's choice, from the reference: the smallest power of two up to
/// the node at which the full context fits, else the smallest at which 256
/// tokens fit, with maxModelLen those tokens rounded down to 256.
fn reference_choice(m: &Model, memory: f64, devices: i64) -> Option<(i64, Option<i64>)> {
    let tensors: Vec<i64> = [1, 2, 4, 8].into_iter().filter(|t| *t <= devices).collect();
    for &t in &tensors {
        if let Some(tokens) = reference_tokens(m, memory, t, 1, 0.9)
            && tokens >= m.context
        {
            return Some((t, None));
        }
    }
    for &t in &tensors {
        if let Some(tokens) = reference_tokens(m, memory, t, 1, 0.9)
            && tokens >= 256
        {
            return Some((t, Some(tokens / 256 * 256)));
        }
    }
    None
}

#[test]
fn without_a_tensor_the_fit_picks_it_and_the_context_records_why() {
    let mut shortened = 0;
    for m in MODELS {
        for (class, memory, devices) in CLASSES {
            let svc = service(json!({
                "model": {"ref": m.model_ref},
                "accelerator": {"class": class},
            }));
            let (d, v) = admit(&svc, &PolicySnapshot::default());
            let at = format!("{} on {class}", m.name);
            let spec = &d.object.spec;
            let tensor = spec.parallelism.as_ref().and_then(|p| p.tensor);
            let len = spec.engine.as_ref().and_then(|e| e.max_model_len);
            let provenance = engine::default::provenance_of(&d.object);
            match reference_choice(m, *memory, *devices) {
                Some((t, want_len)) => {
                    assert_eq!(tensor, Some(t as i32), "{at}");
                    assert_eq!(len, want_len, "{at}");
                    let source = format!("fit: ModelProfile/{}, AcceleratorClass/{class}", m.name);
                    assert_eq!(
                        provenance.get("spec.parallelism.tensor"),
                        Some(&source),
                        "{at}"
                    );
                    if want_len.is_some() {
                        shortened += 1;
                        assert_eq!(
                            provenance.get("spec.engine.maxModelLen"),
                            Some(&source),
                            "{at}"
                        );
                        assert!(
                            d.warnings
                                .iter()
                                .any(|w| w.starts_with("spec.engine.maxModelLen: set to")),
                            "{at}: {:?}",
                            d.warnings
                        );
                    }
                    // What the fit chose is admitted.
                    assert!(capacity_errors(&v).is_empty(), "{at}: {:?}", v.errors);
                }
                None => {
                    // The built-in tensor, and a denial with the numbers.
                    assert_eq!(tensor, Some(1), "{at}");
                    assert_eq!(
                        provenance
                            .get("spec.parallelism.tensor")
                            .map(String::as_str),
                        Some("built-in"),
                        "{at}"
                    );
                    assert!(!capacity_errors(&v).is_empty(), "{at}");
                }
            }
            // Idempotent: defaulting the defaulted object fills nothing.
            let (again, _) = admit(&d.object, &PolicySnapshot::default());
            assert!(again.filled.is_empty(), "{at}: {:?}", again.filled);
            assert_eq!(again.object, d.object, "{at}");
        }
    }
    assert!(
        shortened >= 2,
        "the grid shortens some contexts: {shortened}"
    );
}

#[test]
fn a_tensor_set_by_the_service_is_kept() {
    let svc = service(json!({
        "model": {"ref": "meta-llama/Llama-3.1-70B-Instruct"},
        "accelerator": {"class": "h100-80gb"},
        "parallelism": {"tensor": 2},
    }));
    let (d, _) = admit(&svc, &PolicySnapshot::default());
    assert_eq!(d.object.spec.parallelism.unwrap().tensor, Some(2));
    assert_eq!(d.object.spec.engine.unwrap().max_model_len, None);
}

fn cluster_policy(spec: Value) -> ClusterInferencePolicy {
    serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "ClusterInferencePolicy",
        "metadata": {"name": "platform"}, "spec": spec
    }))
    .expect("policy")
}

#[test]
fn a_curated_catalogue_denies_models_no_profile_lists() {
    for (enforcement, denied) in [("Deny", true), ("Warn", false)] {
        let policies = PolicySnapshot {
            cluster: vec![cluster_policy(json!({
                "enforcement": enforcement,
                "limits": {"requireModelProfile": true}
            }))],
            namespaced: Vec::new(),
        };
        let svc = service(json!({"model": {"ref": "someone/unlisted-model"}}));
        let (_, v) = admit(&svc, &policies);
        let msg = "spec.model.ref: Invalid value: \"someone/unlisted-model\": no ModelProfile lists this model (limits.requireModelProfile of ClusterInferencePolicy \"platform\")";
        if denied {
            assert_eq!(
                v.errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
                [msg]
            );
        } else {
            assert!(v.allowed());
            assert!(v.warnings.iter().any(|w| w == msg), "{:?}", v.warnings);
        }
        let listed = service(json!({"model": {"ref": "meta-llama/Llama-3.1-8B-Instruct"}}));
        let (_, v) = admit(&listed, &policies);
        assert!(
            v.allowed() && !v.warnings.iter().any(|w| w.contains("requireModelProfile")),
            "{v:?}"
        );
    }
}

#[test]
fn a_charge_is_the_worst_case_of_every_track() {
    let classes = classes();
    let spec = |v: Value| service(v).spec;
    let on_h100 = |mut v: Value| {
        v["model"] = json!({"ref": "m"});
        v["accelerator"] = json!({"type": "nvidia", "class": "h100-80gb"});
        v["parallelism"] = json!({"tensor": 4});
        v
    };
    // 4 GPUs x max(2, 6) replicas.
    let c = charge_of(
        &spec(on_h100(
            json!({"replicas": 2, "autoscaling": {"minReplicas": 2, "maxReplicas": 6}}),
        )),
        &classes,
    );
    assert_eq!(c.gpus, 24);
    assert_eq!(c.cost.map(|d| d.to_string()), Some("98.40".to_owned()));
    // A manual canary with 2 replicas.
    let c = charge_of(
        &spec(on_h100(
            json!({"replicas": 3, "canary": {"model": {"ref": "n"}, "weight": 10, "replicas": 2}}),
        )),
        &classes,
    );
    assert_eq!(c.gpus, 4 * (3 + 2));
    // A progressive rollout: the canary at the largest step (ceil(4 x 50%) = 2).
    let c = charge_of(
        &spec(on_h100(
            json!({"replicas": 4, "rollout": {"strategy": "Canary", "steps": [10, 50]}}),
        )),
        &classes,
    );
    assert_eq!(c.gpus, 4 * (4 + 2));
    // A RayService: GPUs per worker x workers; no canary track.
    let c = charge_of(
        &spec(on_h100(
            json!({"backend": "RayService", "replicas": 3, "graph": {"url": "https://g.example.com/g.pb"}}),
        )),
        &classes,
    );
    assert_eq!(c.gpus, 12);
    // No accelerator: nothing.
    let c = charge_of(
        &spec(json!({"model": {"ref": "m"}, "accelerator": {"type": "none"}, "replicas": 5})),
        &classes,
    );
    assert_eq!(c, Charge::default());
}

#[test]
fn an_overrun_lists_every_charge() {
    let policies = PolicySnapshot {
        cluster: vec![cluster_policy(json!({
            "limits": {"maxGPUsPerNamespace": 16, "maxCostPerHourPerNamespace": "120.50"}
        }))],
        namespaced: Vec::new(),
    };
    let dec = |s: &str| infergate::engine::capacity::charge::decimal(s);
    with(&policies, |ctx| {
        let layers = layers(ctx);
        let budget = budget_of(&layers);
        assert_eq!(budget.max_gpus(), Some(16));
        let others = [
            (
                "chat",
                Charge {
                    gpus: 8,
                    cost: dec("32.80"),
                },
            ),
            (
                "embed",
                Charge {
                    gpus: 4,
                    cost: dec("16.40"),
                },
            ),
        ];
        let this = Charge {
            gpus: 8,
            cost: dec("32.80"),
        };
        let got: Vec<String> = overruns(&budget, "team-a", &others, this)
            .into_iter()
            .map(|o| o.message)
            .collect();
        assert_eq!(
            got,
            [
                "team-a uses 12 of 16 GPUs: chat 8, embed 4; this service needs 8 (ClusterInferencePolicy \"platform\")"
            ]
        );
        let pricey = Charge {
            gpus: 4,
            cost: dec("80.00"),
        };
        let got: Vec<String> = overruns(&budget, "team-a", &others, pricey)
            .into_iter()
            .map(|o| o.message)
            .collect();
        assert_eq!(
            got,
            [
                "team-a uses 49.20 of 120.50 per hour: chat 32.80, embed 16.40; this service needs 80.00 (ClusterInferencePolicy \"platform\")"
            ]
        );
        assert!(
            overruns(
                &budget,
                "team-a",
                &others,
                Charge {
                    gpus: 4,
                    cost: None
                }
            )
            .is_empty()
        );
    });
}

#[test]
fn both_versions_of_a_rollout_are_fitted() {
    // Mid-rollout the primary still runs the stable version with the
    // spec's parallelism: a change of tensor size must fit it too.
    let mut svc = service(json!({
        "model": {"ref": "meta-llama/Llama-3.1-8B-Instruct"},
        "accelerator": {"class": "h100-80gb"},
        "parallelism": {"tensor": 2},
        "rollout": {"strategy": "Canary", "steps": [10, 50]},
    }));
    svc.status = Some(
        serde_json::from_value(json!({"rollout": {
            "phase": "Progressing",
            "stable": {"model": {"ref": "meta-llama/Llama-3.1-70B-Instruct"}},
            "target": {"model": {"ref": "meta-llama/Llama-3.1-8B-Instruct"}},
        }}))
        .expect("status"),
    );
    let (_, v) = admit(&svc, &PolicySnapshot::default());
    let errs = capacity_errors(&v);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].1.starts_with("spec.engine.maxModelLen: Invalid value: 131072: the rollout's stable model \"meta-llama/Llama-3.1-70B-Instruct\": 2 x h100-80gb (tensor 2) hold 4628 tokens"),
        "{}",
        errs[0].1
    );
}

#[test]
fn capacity_fields_are_validated_in_services_and_policies() {
    let svc = service(json!({
        "model": {"ref": "m"},
        "accelerator": {"type": "nvidia"},
        "engine": {"maxModelLen": 0, "gpuMemoryUtilization": 1.5},
    }));
    let (_, v) = admit(&svc, &PolicySnapshot::default());
    let errs: Vec<String> = v.errors.iter().map(ToString::to_string).collect();
    assert!(
        errs.contains(
            &"spec.engine.maxModelLen: Invalid value: 0: must be greater than or equal to 1"
                .to_owned()
        ),
        "{errs:?}"
    );
    assert!(
        errs.contains(
            &"spec.engine.gpuMemoryUtilization: Invalid value: 1.5: must be above 0 and at most 1"
                .to_owned()
        ),
        "{errs:?}"
    );

    let policy = cluster_policy(json!({
        "defaults": {"engine": {"gpuMemoryUtilization": 0}},
        "limits": {"maxGPUsPerNamespace": -1, "maxCostPerHourPerNamespace": "12,50"}
    }));
    let errs: Vec<String> = engine::validate_cluster_policy(&policy)
        .errors
        .iter()
        .map(ToString::to_string)
        .collect();
    for want in [
        "spec.limits.maxGPUsPerNamespace: Invalid value: -1: must be greater than or equal to 0",
        "spec.limits.maxCostPerHourPerNamespace: Invalid value: \"12,50\": must be a decimal such as \"120.50\"",
        "spec.defaults.engine.gpuMemoryUtilization: Invalid value: 0: must be above 0 and at most 1",
    ] {
        assert!(errs.iter().any(|e| e == want), "{want} not in {errs:?}");
    }
}

#[test]
fn a_model_profile_is_validated_as_its_schema_says() {
    let bad: ModelProfileSpec = serde_json::from_value(json!({
        "modelRefs": [],
        "weightBytes": 0,
        "layers": 80,
        "attention": {"kind": "MLA", "kvLoraRank": 512},
        "maxPositionEmbeddings": 4096,
        "kvCacheBytesPerElement": 9,
    }))
    .expect("profile");
    let errs: Vec<String> = engine::validate_model_profile(&bad)
        .errors
        .iter()
        .map(ToString::to_string)
        .collect();
    for field in [
        "spec.modelRefs: Required value",
        "spec.weightBytes: Invalid value: 0",
        "spec.kvCacheBytesPerElement: Invalid value: 9",
        "spec.attention.qkRopeHeadDim: Required value",
    ] {
        assert!(
            errs.iter().any(|e| e.starts_with(field)),
            "{field} not in {errs:?}"
        );
    }
    for m in MODELS {
        assert!(
            engine::validate_model_profile(&profile(m)).allowed(),
            "{}",
            m.name
        );
    }
}
