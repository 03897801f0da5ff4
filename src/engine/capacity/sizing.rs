//! A service's shape on its AcceleratorClass and the fit of each of its
//! models there: the numbers admission denies with, the tensor size the
//! defaults pick, and what `status.capacity` reports.

use kube_quantity::ParsedQuantity;

use crate::api::profile::ModelProfileSpec;
use crate::api::v1beta1::{CapacityStatus, InferenceServiceSpec};
use crate::api::{AcceleratorClassSpec, AcceleratorType};

use super::super::builtin::{DEFAULT_GPU_MEMORY_UTILIZATION, DEFAULT_PARALLELISM};
use super::super::context::{AcceleratorClasses, ModelProfiles};
use super::charge::{Charge, money};
use super::fit::{Fit, Shape, fit, gib};
use super::flags::engine_flags;

/// A service on its class: what the fit needs besides the model.
#[derive(Clone, Copy, Debug)]
pub struct Sizing<'a> {
    /// The AcceleratorClass's name.
    pub class_name: &'a str,
    /// The AcceleratorClass.
    pub class: &'a AcceleratorClassSpec,
    /// The shape of one replica.
    pub shape: Shape,
    /// `engine.maxModelLen`.
    pub max_model_len: Option<i64>,
}

/// The sizing of `spec`: `None` without a known class, with accelerator
/// `none`, or with a device memory that does not parse.
#[must_use]
pub fn sizing<'c>(
    spec: &InferenceServiceSpec,
    classes: &'c AcceleratorClasses,
) -> Option<Sizing<'c>> {
    let acc = spec.accelerator.as_ref()?;
    if acc.r#type == Some(AcceleratorType::None) {
        return None;
    }
    let (class_name, class) = classes.get_key_value(acc.class.as_deref()?)?;
    let memory = ParsedQuantity::try_from(&class.memory_per_device)
        .ok()?
        .to_bytes_f64()
        .filter(|m| *m > 0.0)?;
    let p = spec.parallelism.as_ref();
    let engine = spec.engine.as_ref();
    // The fields win; a flag in engine.args counts where its field is unset.
    let (flags, _) = engine_flags(engine.map_or(&[][..], |e| e.args.as_slice()));
    Some(Sizing {
        class_name,
        class,
        shape: Shape {
            tensor: i64::from(
                p.and_then(|p| p.tensor)
                    .unwrap_or(DEFAULT_PARALLELISM)
                    .max(1),
            ),
            pipeline: i64::from(
                p.and_then(|p| p.pipeline)
                    .unwrap_or(DEFAULT_PARALLELISM)
                    .max(1),
            ),
            memory_per_device: memory,
            utilization: engine
                .and_then(|e| e.gpu_memory_utilization)
                .or(flags.gpu_memory_utilization.map(|g| g.value))
                .unwrap_or(DEFAULT_GPU_MEMORY_UTILIZATION),
            kv_bytes_per_element: flags.kv_cache_dtype.and_then(|g| g.value),
        },
        max_model_len: engine
            .and_then(|e| e.max_model_len)
            .or(flags.max_model_len.map(|g| g.value)),
    })
}

impl Sizing<'_> {
    /// The same sizing at tensor `t`.
    #[must_use]
    pub fn at_tensor(&self, t: i64) -> Self {
        Self {
            shape: Shape {
                tensor: t,
                ..self.shape
            },
            ..*self
        }
    }

    /// The context the engine serves: `maxModelLen`, else the model's own.
    #[must_use]
    pub fn context(&self, profile: &ModelProfileSpec) -> i64 {
        self.max_model_len
            .unwrap_or(profile.max_position_embeddings)
    }

    /// `2 x h100-80gb (tensor 2)` or `4 x h100-80gb (tensor 2, pipeline 2)`.
    #[must_use]
    pub fn devices(&self) -> String {
        let Shape {
            tensor, pipeline, ..
        } = self.shape;
        let n = tensor.saturating_mul(pipeline);
        if pipeline > 1 {
            format!(
                "{n} x {} (tensor {tensor}, pipeline {pipeline})",
                self.class_name
            )
        } else {
            format!("{n} x {} (tensor {tensor})", self.class_name)
        }
    }

    /// Powers of two from `from` up to the devices of one node (divided by the pipeline).
    pub fn tensors_from(&self, from: i64) -> impl Iterator<Item = i64> {
        let most = i64::from(self.class.devices_per_node.max(1)) / self.shape.pipeline.max(1);
        std::iter::successors(Some(1_i64), |t| t.checked_mul(2))
            .take_while(move |t| *t <= most)
            .filter(move |t| *t >= from)
    }

    /// The smallest tensor (a power of two, at least `from`) at which `ok` holds.
    #[must_use]
    pub fn smallest_tensor(
        &self,
        profile: &ModelProfileSpec,
        from: i64,
        ok: impl Fn(&Fit) -> bool,
    ) -> Option<(i64, Fit)> {
        self.tensors_from(from)
            .map(|t| (t, fit(profile, self.at_tensor(t).shape)))
            .find(|(_, f)| ok(f))
    }
}

/// The fit of one model of a service.
#[derive(Clone, Copy, Debug)]
pub struct ModelFit<'a> {
    /// The ModelProfile's name.
    pub profile_name: &'a str,
    /// The ModelProfile.
    pub profile: &'a ModelProfileSpec,
    /// The numbers.
    pub fit: Fit,
    /// The effective context.
    pub context: i64,
}

/// The fit of `model_ref` on `sizing`, when a profile lists it.
#[must_use]
pub fn fit_model<'p>(
    profiles: &'p ModelProfiles,
    model_ref: &str,
    sizing: &Sizing<'_>,
) -> Option<ModelFit<'p>> {
    let (profile_name, profile) = profiles.for_ref(model_ref)?;
    Some(ModelFit {
        profile_name,
        profile,
        fit: fit(profile, sizing.shape),
        context: sizing.context(profile),
    })
}

/// The field whose value makes a model not fit; the caller knows its path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MisfitField {
    /// `engine.maxModelLen`: the weights fit, the context does not.
    MaxModelLen,
    /// `parallelism.tensor`: the weights leave no room for KV cache.
    Tensor,
}

/// Why a model does not fit: the field to change, its value and the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Misfit {
    /// The field to change.
    pub field: MisfitField,
    /// Its value (the effective context, or the tensor size).
    pub value: i64,
    /// The numbers and what would fit.
    pub why: String,
}

/// Why `m` does not fit `sizing`, with the numbers and what would fit;
/// `None` when it fits. The field is the tensor size when the weights do
/// not fit, else `maxModelLen`.
#[must_use]
pub fn misfit(sizing: &Sizing<'_>, m: &ModelFit<'_>) -> Option<Misfit> {
    let f = &m.fit;
    let t = sizing.shape.tensor;
    if f.weights_fit() && f.kv_tokens >= 1 {
        if f.kv_tokens >= m.context {
            return None;
        }
        let mut msg = format!(
            "{} hold {} tokens of KV cache per replica (weights {} and overhead {} per device); use maxModelLen <= {}",
            sizing.devices(),
            f.kv_tokens,
            gib(f.weights_per_device),
            gib(f.overhead_per_device),
            f.kv_tokens
        );
        if let Some((bigger, _)) = sizing.smallest_tensor(m.profile, t + 1, |g| g.holds(m.context))
        {
            msg.push_str(&format!(" or tensor >= {bigger}"));
        }
        return Some(Misfit {
            field: MisfitField::MaxModelLen,
            value: m.context,
            why: msg,
        });
    }
    let usable = sizing.shape.memory_per_device * sizing.shape.utilization;
    let mut msg = format!(
        "on {} the weights ({} per device) and overhead ({} per device) leave no room for KV cache in the {} each device may use ({} x {})",
        sizing.devices(),
        gib(f.weights_per_device),
        gib(f.overhead_per_device),
        gib(usable),
        sizing.class.memory_per_device.0,
        sizing.shape.utilization
    );
    let whole = sizing.smallest_tensor(m.profile, t + 1, |g| g.holds(m.context));
    let some = || sizing.smallest_tensor(m.profile, t + 1, |g| g.weights_fit() && g.kv_tokens >= 1);
    match (whole, whole.is_none().then(some).flatten()) {
        (Some((bigger, _)), _) => msg.push_str(&format!("; use tensor >= {bigger}")),
        (None, Some((bigger, g))) => msg.push_str(&format!(
            "; use tensor >= {bigger} with maxModelLen <= {}",
            g.kv_tokens
        )),
        (None, None) => msg.push_str(&format!(
            "; no tensor size up to the class's {} devices per node holds it: use an AcceleratorClass with more memory per device",
            sizing.class.devices_per_node
        )),
    }
    Some(Misfit {
        field: MisfitField::Tensor,
        value: t,
        why: msg,
    })
}

/// The concurrency a fit gives: `holds 3.4 requests of the full context at once (...)`.
#[must_use]
pub fn concurrency_note(sizing: &Sizing<'_>, m: &ModelFit<'_>) -> String {
    format!(
        "{} holds {:.1} requests of the full context at once ({} tokens of KV cache per replica, context {})",
        sizing.devices(),
        m.fit.concurrency(m.context),
        m.fit.kv_tokens,
        m.context
    )
}

/// `status.capacity` of a (defaulted) spec with its charge.
#[must_use]
pub fn capacity_status(
    spec: &InferenceServiceSpec,
    classes: &AcceleratorClasses,
    profiles: &ModelProfiles,
    charge: Charge,
) -> CapacityStatus {
    let sized = sizing(spec, classes);
    let fitted = sized
        .as_ref()
        .and_then(|s| fit_model(profiles, &spec.model.r#ref, s).map(|m| (s, m)))
        .filter(|(_, m)| m.fit.weights_fit());
    CapacityStatus {
        gpus_per_replica: Some(super::super::resources::gpus_of(spec)),
        max_gpus: Some(charge.gpus),
        kv_cache_tokens: fitted.map(|(_, m)| m.fit.kv_tokens),
        max_concurrency: fitted.map(|(_, m)| format!("{:.1}", m.fit.concurrency(m.context))),
        cost_per_hour: charge.cost.map(money),
    }
}

/// What the fit picks when no layer sets `parallelism.tensor`.
#[derive(Clone, Debug, PartialEq)]
pub struct FitChoice<'a> {
    /// The tensor size.
    pub tensor: i64,
    /// `engine.maxModelLen`, when the full context fits no tensor size.
    pub max_model_len: Option<i64>,
    /// The ModelProfile used.
    pub profile_name: &'a str,
    /// The AcceleratorClass used.
    pub class_name: &'a str,
    /// Why `max_model_len` was set (the warning after its field's path,
    /// which the caller knows).
    pub warning: Option<String>,
}

/// `maxModelLen` chosen by the fit is a multiple of this.
pub const MAX_MODEL_LEN_STEP: i64 = 256;

/// The fit's choice for a spec whose `parallelism.tensor` is unset: the
/// smallest power of two up to the class's devices per node at which the
/// effective context fits; else the smallest at which the weights fit,
/// with `maxModelLen` the tokens that fit there rounded down to a multiple
/// of 256 (only when `maxModelLen` is unset; when it is set, validation
/// gives the numbers). `None` when the tensor is set, the fit does not
/// apply, or the weights fit nowhere.
#[must_use]
pub fn choose<'a>(
    spec: &InferenceServiceSpec,
    classes: &'a AcceleratorClasses,
    profiles: &'a ModelProfiles,
) -> Option<FitChoice<'a>> {
    if spec.parallelism.as_ref().and_then(|p| p.tensor).is_some() {
        return None;
    }
    let sized = sizing(spec, classes)?;
    let (profile_name, profile) = profiles.for_ref(&spec.model.r#ref)?;
    let context = sized.context(profile);
    let choice = |tensor, max_model_len, warning| FitChoice {
        tensor,
        max_model_len,
        profile_name,
        class_name: sized.class_name,
        warning,
    };
    if let Some((tensor, _)) = sized.smallest_tensor(profile, 1, |f| f.holds(context)) {
        return Some(choice(tensor, None, None));
    }
    let (tensor, f) = sized.smallest_tensor(profile, 1, |f| {
        f.weights_fit() && f.kv_tokens >= MAX_MODEL_LEN_STEP
    })?;
    if sized.max_model_len.is_some() {
        return Some(choice(tensor, None, None));
    }
    let len = f.kv_tokens / MAX_MODEL_LEN_STEP * MAX_MODEL_LEN_STEP;
    let warning = format!(
        "set to {len}: the full context of {:?} ({context} tokens) fits no tensor size on {}; {} hold {} tokens of KV cache per replica",
        spec.model.r#ref,
        sized.class_name,
        sized.at_tensor(tensor).devices(),
        f.kv_tokens
    );
    Some(choice(tensor, Some(len), Some(warning)))
}
