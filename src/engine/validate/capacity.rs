//! Capacity rules: the engine's memory fields, a curated model catalogue
//! (`limits.requireModelProfile`), whether each model of a service fits
//! its GPUs (the fit of `engine::capacity`), and the ModelProfile itself.

use crate::api::policy::Enforcement;
use crate::api::profile::{AttentionKind, AttentionSpec, ModelProfileSpec};
use crate::api::v1beta1::{InferenceService, InferenceServiceSpec};
use crate::engine::capacity::flags::{FlagField, engine_flags, flag_name};
use crate::engine::capacity::sizing::{
    Misfit, MisfitField, concurrency_note, fit_model, misfit, sizing,
};
use crate::engine::context::Context;
use crate::engine::field_error::FieldError;
use crate::engine::field_path::Path;
use crate::engine::policy::Layer;
use crate::engine::verdict::Verdict;

use super::fields::check_at_least;
use super::fields::check_memory_share;

/// Which model of a service: the spec names the primary and the canary,
/// the rollout's status the versions it moves between.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Primary,
    Canary,
    RolloutStable,
    RolloutTarget,
}

impl Role {
    /// How messages call the model (`None` for the primary).
    fn called(self) -> Option<&'static str> {
        match self {
            Self::Primary => None,
            Self::Canary => Some("the canary's model"),
            Self::RolloutStable => Some("the rollout's stable model"),
            Self::RolloutTarget => Some("the rollout's target model"),
        }
    }

    /// Whether the spec names the model (not only the rollout's status).
    fn in_spec(self) -> bool {
        matches!(self, Self::Primary | Self::Canary)
    }
}

/// One model of a service the fit judges.
struct Model<'s> {
    role: Role,
    model_ref: &'s str,
}

/// The fields that name a service's models: the canary's own, and the
/// primary's (where the rollout's versions come from too).
struct RefPaths<'p> {
    primary: Path<'p>,
    canary: Path<'p>,
}

impl<'p> RefPaths<'p> {
    /// Where the model of `role` is named.
    fn of(&self, role: Role) -> &Path<'p> {
        match role {
            Role::Canary => &self.canary,
            Role::Primary | Role::RolloutStable | Role::RolloutTarget => &self.primary,
        }
    }
}

/// The models of `svc`, each once: the primary, the canary, and the
/// rollout's stable and target versions.
fn models(svc: &InferenceService) -> Vec<Model<'_>> {
    let s = &svc.spec;
    let mut out = vec![Model {
        role: Role::Primary,
        model_ref: s.model.r#ref.as_str(),
    }];
    if let Some(c) = s.canary.as_ref() {
        out.push(Model {
            role: Role::Canary,
            model_ref: c.model.r#ref.as_str(),
        });
    }
    if let Some(r) = svc.status.as_ref().and_then(|st| st.rollout.as_ref()) {
        for (v, role) in [
            (r.stable.as_ref(), Role::RolloutStable),
            (r.target.as_ref(), Role::RolloutTarget),
        ] {
            if let Some(v) = v {
                out.push(Model {
                    role,
                    model_ref: v.model.r#ref.as_str(),
                });
            }
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    out.retain(|m| !m.model_ref.is_empty() && seen.insert(m.model_ref));
    out
}

/// What becomes of a model that does not fit its GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FitJudgement {
    /// An error that denies: a create, or an update that changes the fit's
    /// inputs.
    Deny,
    /// A warning: an update that leaves the fit's inputs as they were
    /// (admission ratchets, as Kubernetes' own validation does: a service
    /// that a later ModelProfile or AcceleratorClass no longer fits can
    /// still be scaled or given a new engine image), and a running service
    /// the reconciler goes on reconciling.
    Warn,
}

impl FitJudgement {
    /// The judgement of `svc` written over `old` (`None`: a create).
    #[must_use]
    pub fn of_update(svc: &InferenceService, old: Option<&InferenceService>) -> Self {
        match old {
            Some(o) if FitInputs::of(&o.spec) == FitInputs::of(&svc.spec) => Self::Warn,
            _ => Self::Deny,
        }
    }
}

/// What the fit reads of a spec: the models, the class, the parallelism,
/// the context and the memory share, the fields and the engine flags.
#[derive(PartialEq)]
struct FitInputs<'s> {
    model: &'s str,
    canary: Option<&'s str>,
    class: Option<&'s str>,
    accelerator: Option<crate::api::AcceleratorType>,
    tensor: Option<i32>,
    pipeline: Option<i32>,
    max_model_len: Option<i64>,
    utilization: Option<f64>,
    flags: (Option<i64>, Option<f64>, Option<Option<i64>>),
}

impl<'s> FitInputs<'s> {
    fn of(s: &'s InferenceServiceSpec) -> Self {
        let engine = s.engine.as_ref();
        let (flags, _) = engine_flags(engine.map_or(&[][..], |e| e.args.as_slice()));
        Self {
            model: &s.model.r#ref,
            canary: s.canary.as_ref().map(|c| c.model.r#ref.as_str()),
            class: s.accelerator.as_ref().and_then(|a| a.class.as_deref()),
            accelerator: s.accelerator.as_ref().and_then(|a| a.r#type),
            tensor: s.parallelism.as_ref().and_then(|p| p.tensor),
            pipeline: s.parallelism.as_ref().and_then(|p| p.pipeline),
            max_model_len: engine.and_then(|e| e.max_model_len),
            utilization: engine.and_then(|e| e.gpu_memory_utilization),
            flags: (
                flags.max_model_len.map(|g| g.value),
                flags.gpu_memory_utilization.map(|g| g.value),
                flags.kv_cache_dtype.map(|g| g.value),
            ),
        }
    }
}

/// What a misfit admitted by the ratchet adds to its warning.
const RATCHETED: &str = "admitted: this update leaves the fit's inputs (model, class, parallelism, context, memory share) as they were; a create, or a change of those, is denied";

/// The capacity rules for `svc` (defaulted, `spec` its spec path); a
/// model that does not fit is judged as `fit` says.
pub(super) fn check_capacity(
    v: &mut Verdict,
    spec: &Path<'_>,
    svc: &InferenceService,
    ctx: &Context,
    layers: &[Layer<'_>],
    fit: FitJudgement,
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
    let (model, canary) = (spec.child("model"), spec.child("canary"));
    let canary_model = canary.child("model");
    let refs = RefPaths {
        primary: model.child("ref"),
        canary: canary_model.child("ref"),
    };
    let models = models(svc);
    require_profiles(v, &refs, &models, ctx, layers);
    check_engine_flags(v, &spec.child("engine"), svc);
    let mut fitted = Verdict::default();
    check_fit(&mut fitted, spec, &refs, &models, svc, ctx);
    v.warnings.append(&mut fitted.warnings);
    match fit {
        FitJudgement::Deny => v.errors.append(&mut fitted.errors),
        FitJudgement::Warn => v
            .warnings
            .extend(fitted.errors.iter().map(|e| format!("{e} ({RATCHETED})"))),
    }
}

/// The models of `svc` (defaulted) that do not fit its GPUs, with the
/// numbers: what the reconciler reports as `NoLongerFits`.
#[must_use]
pub fn misfits(svc: &InferenceService, ctx: &Context) -> Vec<FieldError> {
    let spec = Path::new("spec");
    let (model, canary) = (spec.child("model"), spec.child("canary"));
    let canary_model = canary.child("model");
    let refs = RefPaths {
        primary: model.child("ref"),
        canary: canary_model.child("ref"),
    };
    let mut v = Verdict::default();
    check_fit(&mut v, &spec, &refs, &models(svc), svc, ctx);
    v.errors
}

/// The fit's flags in `engine.args`: a value the fit cannot read, and a
/// flag whose field is also set (the field wins, for the fit and for the
/// engine, whose arguments then carry the field's value), are warnings.
fn check_engine_flags(v: &mut Verdict, engine_at: &Path<'_>, svc: &InferenceService) {
    let Some(e) = svc.spec.engine.as_ref() else {
        return;
    };
    let (flags, bad) = engine_flags(&e.args);
    let args = engine_at.child("args");
    for b in bad {
        v.warnings.push(format!(
            "{}: {} {:?} is not read by the fit: it takes {}",
            args.index(b.index),
            e.args.get(b.index).map_or("", String::as_str),
            b.value,
            b.takes
        ));
    }
    let both = [
        (
            FlagField::MaxModelLen,
            flags.max_model_len.map(|g| (g.index, g.value.to_string())),
            e.max_model_len.map(|n| n.to_string()),
            "maxModelLen",
        ),
        (
            FlagField::GpuMemoryUtilization,
            flags
                .gpu_memory_utilization
                .map(|g| (g.index, g.value.to_string())),
            e.gpu_memory_utilization.map(|u| u.to_string()),
            "gpuMemoryUtilization",
        ),
    ];
    for (field, flag, set, name) in both {
        if let (Some((index, given)), Some(set)) = (flag, set) {
            v.warnings.push(format!(
                "{}: {} {given} is overridden by {} ({set}), which the fit reads and the engine is given",
                args.index(index),
                flag_name(field),
                engine_at.child(name)
            ));
        }
    }
}

/// Whether each model fits the service's GPUs: an error with the numbers
/// when one does not, the concurrency as a warning for the spec's models.
fn check_fit(
    v: &mut Verdict,
    spec: &Path<'_>,
    refs: &RefPaths<'_>,
    models: &[Model<'_>],
    svc: &InferenceService,
    ctx: &Context,
) {
    let Some(sized) = sizing(&svc.spec, ctx.classes) else {
        return;
    };
    let (engine, parallelism) = (spec.child("engine"), spec.child("parallelism"));
    let max_model_len = engine.child("maxModelLen");
    let tensor = parallelism.child("tensor");
    for m in models {
        let Some(fitted) = fit_model(ctx.profiles, m.model_ref, &sized) else {
            continue;
        };
        let called = m.role.called();
        let prefix = called
            .map(|c| format!("{c} {:?}: ", m.model_ref))
            .unwrap_or_default();
        match misfit(&sized, &fitted) {
            Some(Misfit { field, value, why }) => {
                let at = match field {
                    MisfitField::MaxModelLen => &max_model_len,
                    MisfitField::Tensor => &tensor,
                };
                v.errors
                    .push(FieldError::invalid(at, value, &format!("{prefix}{why}")));
            }
            None if m.role.in_spec() => {
                v.warnings.push(format!(
                    "{}: {prefix}{}",
                    refs.of(m.role),
                    concurrency_note(&sized, &fitted)
                ));
            }
            None => {}
        }
    }
}

/// `limits.requireModelProfile`: every model the spec names a ModelProfile lists.
fn require_profiles(
    v: &mut Verdict,
    refs: &RefPaths<'_>,
    models: &[Model<'_>],
    ctx: &Context,
    layers: &[Layer<'_>],
) {
    let requiring = |e: Enforcement| {
        layers.iter().find(|l| {
            l.enforcement == e && l.limits.and_then(|x| x.require_model_profile) == Some(true)
        })
    };
    let Some(layer) = requiring(Enforcement::Deny).or_else(|| requiring(Enforcement::Warn)) else {
        return;
    };
    for m in models.iter().filter(|m| m.role.in_spec()) {
        if ctx.profiles.for_ref(m.model_ref).is_some() {
            continue;
        }
        let e = FieldError::invalid(
            refs.of(m.role),
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
    let spec = Path::new("spec");
    check_model_refs(&mut errs, &spec.child("modelRefs"), &p.model_refs);
    let kv_bytes = spec.child("kvCacheBytesPerElement");
    let attention = spec.child("attention");
    check_at_least(
        &mut errs,
        &spec.child("weightBytes"),
        Some(p.weight_bytes),
        1,
    );
    check_at_least(
        &mut errs,
        &spec.child("layers"),
        Some(i64::from(p.layers)),
        1,
    );
    check_at_least(
        &mut errs,
        &spec.child("maxPositionEmbeddings"),
        Some(p.max_position_embeddings),
        1,
    );
    check_at_least(
        &mut errs,
        &kv_bytes,
        p.kv_cache_bytes_per_element.map(i64::from),
        1,
    );
    check_attention_sizes(&mut errs, &attention, &p.attention);
    if let Some(b) = p.kv_cache_bytes_per_element
        && b > 8
    {
        errs.push(FieldError::invalid(&kv_bytes, b, "must be at most 8"));
    }
    check_attention_kind(&mut errs, &attention, &p.attention);
    Verdict {
        errors: errs,
        warnings: Vec::new(),
    }
}

/// A ModelProfile's `modelRefs` (`at`): at least one, each 1 to 253 characters.
fn check_model_refs(errs: &mut Vec<FieldError>, at: &Path<'_>, refs: &[String]) {
    if refs.is_empty() {
        errs.push(FieldError::required(at, "at least one model ref"));
    }
    for (i, r) in refs.iter().enumerate() {
        if r.is_empty() || r.len() > 253 {
            errs.push(FieldError::invalid(
                &at.index(i),
                format!("{r:?}"),
                "must be 1 to 253 characters",
            ));
        }
    }
}

/// The sizes of a ModelProfile's `attention` (`at`) that are set.
fn check_attention_sizes(errs: &mut Vec<FieldError>, at: &Path<'_>, a: &AttentionSpec) {
    check_at_least(errs, &at.child("kvHeads"), a.kv_heads.map(i64::from), 1);
    check_at_least(errs, &at.child("headDim"), a.head_dim.map(i64::from), 1);
    check_at_least(
        errs,
        &at.child("kvLoraRank"),
        a.kv_lora_rank.map(i64::from),
        1,
    );
    check_at_least(
        errs,
        &at.child("qkRopeHeadDim"),
        a.qk_rope_head_dim.map(i64::from),
        0,
    );
}

/// The sizes the `attention` (`at`) of its kind requires.
fn check_attention_kind(errs: &mut Vec<FieldError>, at: &Path<'_>, a: &AttentionSpec) {
    let (required, why) = match a.kind {
        AttentionKind::Gqa | AttentionKind::Mha => (
            [("kvHeads", a.kv_heads), ("headDim", a.head_dim)],
            "required for GQA and MHA",
        ),
        AttentionKind::Mla => (
            [
                ("kvLoraRank", a.kv_lora_rank),
                ("qkRopeHeadDim", a.qk_rope_head_dim),
            ],
            "required for MLA",
        ),
    };
    for (field, v) in required {
        if v.is_none() {
            errs.push(FieldError::required(&at.child(field), why));
        }
    }
}
