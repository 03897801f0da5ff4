//! What the fit of a model on its accelerator class defaults: the GPU
//! memory share, the tensor size and the context length.

use crate::api::AcceleratorType;
use crate::api::v1beta1::{EngineSpec, InferenceServiceSpec, ParallelismSpec};
use crate::engine::builtin::DEFAULT_GPU_MEMORY_UTILIZATION;
use crate::engine::capacity::flags::engine_flags;
use crate::engine::capacity::sizing;
use crate::engine::context::Context;

use super::filler::{Filler, SOURCE_BUILT_IN};
use super::paths::SpecPaths;

/// `spec.engine.gpuMemoryUtilization` (on GPUs: a policy's, else 0.9),
/// then the fit's `parallelism.tensor` and `engine.maxModelLen` (see
/// [`sizing::choose`]); the warnings the fit gives.
/// Runs after the accelerator is defaulted, before the built-in tensor.
pub(super) fn default_fit(
    f: &mut Filler<'_, '_>,
    spec: &mut InferenceServiceSpec,
    at: &SpecPaths,
    ctx: &Context,
) -> Vec<String> {
    let on_gpus = spec
        .accelerator
        .as_ref()
        .and_then(|a| a.r#type)
        .is_some_and(|t| t != AcceleratorType::None);
    if !on_gpus {
        return Vec::new();
    }
    {
        let engine = spec.engine.get_or_insert_with(EngineSpec::default);
        // A share given in engine.args is the engine's: the field is not
        // defaulted over it (it would win).
        if engine_flags(&engine.args)
            .0
            .gpu_memory_utilization
            .is_none()
        {
            f.fill(
                &mut engine.gpu_memory_utilization,
                at.engine.gpu_memory_utilization,
                |d| d.engine.as_ref()?.gpu_memory_utilization,
                Some((DEFAULT_GPU_MEMORY_UTILIZATION, SOURCE_BUILT_IN)),
            );
        }
    }
    let Some(choice) = sizing::choose(spec, ctx.classes, ctx.profiles) else {
        return Vec::new();
    };
    let source = format!(
        "fit: ModelProfile/{}, AcceleratorClass/{}",
        choice.profile_name, choice.class_name
    );
    let tensor = i32::try_from(choice.tensor).unwrap_or(i32::MAX);
    spec.parallelism
        .get_or_insert_with(ParallelismSpec::default)
        .tensor = Some(tensor);
    f.record(at.parallelism.tensor, source.clone(), &tensor);
    if let Some(n) = choice.max_model_len {
        spec.engine
            .get_or_insert_with(EngineSpec::default)
            .max_model_len = Some(n);
        f.record(at.engine.max_model_len, source, &n);
    }
    choice
        .warning
        .map(|why| format!("{}: {why}", at.engine.max_model_len))
        .into_iter()
        .collect()
}
