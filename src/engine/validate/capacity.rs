//! Capacity rules: the engine's memory fields, a curated model catalogue
//! (`limits.requireModelProfile`), whether each model of a service fits
//! its GPUs (the fit of `engine::capacity`), and the ModelProfile itself.

use crate::api::policy::Enforcement;
use crate::api::profile::{AttentionKind, ModelProfileSpec};
use crate::api::v1beta1::InferenceService;
use crate::engine::capacity::sizing::{concurrency_note, fit_model, misfit, sizing};
use crate::engine::context::Context;
use crate::engine::field_error::FieldError;
use crate::engine::field_path::Path;
use crate::engine::policy::Layer;
use crate::engine::verdict::Verdict;

use super::fields::check_at_least;
use super::fields::check_memory_share;

/// One model of a service the fit judges: where it is named and how
/// messages call it (`None` for the primary).
struct Model<'s> {
    field: &'static str,
    model_ref: &'s str,
    called: Option<&'static str>,
}

/// The models of `svc`, each once: the primary, the canary, and the
/// rollout's stable and target versions.
fn models(svc: &InferenceService) -> Vec<Model<'_>> {
    let s = &svc.spec;
    let mut out = vec![Model {
        field: "spec.model.ref",
        model_ref: s.model.r#ref.as_str(),
        called: None,
    }];
    if let Some(c) = s.canary.as_ref() {
        out.push(Model {
            field: "spec.canary.model.ref",
            model_ref: c.model.r#ref.as_str(),
            called: Some("the canary's model"),
        });
    }
    if let Some(r) = svc.status.as_ref().and_then(|st| st.rollout.as_ref()) {
        for (v, called) in [
            (r.stable.as_ref(), "the rollout's stable model"),
            (r.target.as_ref(), "the rollout's target model"),
        ] {
            if let Some(v) = v {
                out.push(Model {
                    field: "spec.model.ref",
                    model_ref: v.model.r#ref.as_str(),
                    called: Some(called),
                });
            }
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    out.retain(|m| !m.model_ref.is_empty() && seen.insert(m.model_ref));
    out
}

/// The capacity rules for `svc` (defaulted, `spec` its spec path).
pub(super) fn check_capacity(
    v: &mut Verdict,
    spec: &Path<'_>,
    svc: &InferenceService,
    ctx: &Context,
    layers: &[Layer<'_>],
) {
    if let Some(e) = svc.spec.engine.as_ref() {
        let engine = spec.child("engine");
        check_at_least(
            &mut v.errors,
            &engine.child("maxModelLen"),
            e.max_model_len,
            1,
        );
        check_memory_share(
            &mut v.errors,
            &engine.child("gpuMemoryUtilization"),
            e.gpu_memory_utilization,
        );
    }
    let models = models(svc);
    require_profiles(v, &models, ctx, layers);

    let Some(sized) = sizing(&svc.spec, ctx.classes) else {
        return;
    };
    for m in &models {
        let Some(fitted) = fit_model(ctx.profiles, m.model_ref, &sized) else {
            continue;
        };
        let prefix = m
            .called
            .map(|c| format!("{c} {:?}: ", m.model_ref))
            .unwrap_or_default();
        match misfit(&sized, &fitted) {
            Some((field, value, why)) => {
                v.errors
                    .push(FieldError::invalid(field, value, &format!("{prefix}{why}")));
            }
            None if m.called.is_none() || m.field == "spec.canary.model.ref" => {
                v.warnings.push(format!(
                    "{}: {prefix}{}",
                    m.field,
                    concurrency_note(&sized, &fitted)
                ));
            }
            None => {}
        }
    }
}

/// `limits.requireModelProfile`: every model a ModelProfile lists.
fn require_profiles(v: &mut Verdict, models: &[Model<'_>], ctx: &Context, layers: &[Layer<'_>]) {
    let requiring = |e: Enforcement| {
        layers.iter().find(|l| {
            l.enforcement == e && l.limits.and_then(|x| x.require_model_profile) == Some(true)
        })
    };
    let Some(layer) = requiring(Enforcement::Deny).or_else(|| requiring(Enforcement::Warn)) else {
        return;
    };
    for m in models
        .iter()
        .filter(|m| m.field != "spec.model.ref" || m.called.is_none())
    {
        if ctx.profiles.for_ref(m.model_ref).is_some() {
            continue;
        }
        let e = FieldError::invalid(
            m.field,
            format!("{:?}", m.model_ref),
            &format!(
                "no ModelProfile lists this model (limits.requireModelProfile of {})",
                layer.display()
            ),
        );
        match layer.enforcement {
            Enforcement::Deny => v.errors.push(e),
            Enforcement::Warn => v.warnings.push(e.to_string()),
        }
    }
}

/// Validate a ModelProfile's spec as the API server's schema does (CEL).
#[must_use]
pub fn validate_model_profile(p: &ModelProfileSpec) -> Verdict {
    let mut errs = Vec::new();
    if p.model_refs.is_empty() {
        errs.push(FieldError::required(
            "spec.modelRefs",
            "at least one model ref",
        ));
    }
    for (i, r) in p.model_refs.iter().enumerate() {
        if r.is_empty() || r.len() > 253 {
            errs.push(FieldError::invalid(
                format!("spec.modelRefs[{i}]"),
                format!("{r:?}"),
                "must be 1 to 253 characters",
            ));
        }
    }
    let mut at_least = |field: &str, value: Option<i64>, min: i64| {
        if let Some(n) = value
            && n < min
        {
            errs.push(FieldError::invalid(
                field,
                n,
                &format!("must be greater than or equal to {min}"),
            ));
        }
    };
    at_least("spec.weightBytes", Some(p.weight_bytes), 1);
    at_least("spec.layers", Some(i64::from(p.layers)), 1);
    at_least(
        "spec.maxPositionEmbeddings",
        Some(p.max_position_embeddings),
        1,
    );
    at_least(
        "spec.kvCacheBytesPerElement",
        p.kv_cache_bytes_per_element.map(i64::from),
        1,
    );
    let a = &p.attention;
    at_least("spec.attention.kvHeads", a.kv_heads.map(i64::from), 1);
    at_least("spec.attention.headDim", a.head_dim.map(i64::from), 1);
    at_least(
        "spec.attention.kvLoraRank",
        a.kv_lora_rank.map(i64::from),
        1,
    );
    at_least(
        "spec.attention.qkRopeHeadDim",
        a.qk_rope_head_dim.map(i64::from),
        0,
    );
    if let Some(b) = p.kv_cache_bytes_per_element
        && b > 8
    {
        errs.push(FieldError::invalid(
            "spec.kvCacheBytesPerElement",
            b,
            "must be at most 8",
        ));
    }
    match a.kind {
        AttentionKind::Gqa | AttentionKind::Mha => {
            for (field, v) in [
                ("spec.attention.kvHeads", a.kv_heads),
                ("spec.attention.headDim", a.head_dim),
            ] {
                if v.is_none() {
                    errs.push(FieldError::required(field, "required for GQA and MHA"));
                }
            }
        }
        AttentionKind::Mla => {
            for (field, v) in [
                ("spec.attention.kvLoraRank", a.kv_lora_rank),
                ("spec.attention.qkRopeHeadDim", a.qk_rope_head_dim),
            ] {
                if v.is_none() {
                    errs.push(FieldError::required(field, "required for MLA"));
                }
            }
        }
    }
    Verdict {
        errors: errs,
        warnings: Vec::new(),
    }
}
