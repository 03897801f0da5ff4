//! `kubectl infergate fit MODEL-REF --class CLASS`: whether a model fits a
//! class at each tensor size up to the class's devices per node, and the
//! KV tokens and full-context requests it holds there: from the cluster's
//! ModelProfiles and AcceleratorClasses, or from files (`-f`, offline).
//! The numbers are admission's (`engine::capacity::fit`).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use kube::Api;
use kube::api::ListParams;
use kube_quantity::ParsedQuantity;
use serde::Serialize;

use super::client::{Connection, PluginError};
use super::term::Output;
use crate::api::profile::ModelProfile;
use crate::api::{AcceleratorClass, AcceleratorClassSpec};
use crate::engine::builtin::DEFAULT_GPU_MEMORY_UTILIZATION;
use crate::engine::capacity::fit::{GIB, Shape, fit};
use crate::engine::{AcceleratorClasses, ModelProfiles};
use crate::state::files::{DocumentKind, classify, expand_paths, read_documents};

/// `fit` options.
#[derive(Clone, Debug)]
pub struct Options {
    /// Where to connect (unless `files` are given).
    pub connection: Connection,
    /// The model ref (as in `spec.model.ref`).
    pub model: String,
    /// The AcceleratorClass.
    pub class: String,
    /// The context to hold (default: the profile's).
    pub max_model_len: Option<i64>,
    /// ModelProfile and AcceleratorClass manifests: offline.
    pub files: Vec<PathBuf>,
    /// How to print.
    pub output: Output,
}

/// One tensor size.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FitRow {
    /// Tensor parallel size (pipeline 1).
    pub tensor: i64,
    /// The weights and the full context fit.
    pub fits: bool,
    /// The weights fit (the context may not).
    pub weights_fit: bool,
    /// Weights per device, GiB.
    pub weights_per_device_gib: f64,
    /// Tokens of KV cache one replica holds.
    pub kv_tokens: i64,
    /// Requests of the full context one replica holds at once.
    pub concurrency: f64,
}

/// The fit of a model on a class.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FitReport {
    /// The model ref asked about.
    pub model: String,
    /// The ModelProfile listing it.
    pub profile: String,
    /// The AcceleratorClass.
    pub class: String,
    /// Devices per node of the class.
    pub devices_per_node: i32,
    /// Memory per device of the class.
    pub memory_per_device: String,
    /// The context each request may use.
    pub context: i64,
    /// One row per tensor size: 1, 2, 4, ... up to the devices per node.
    pub rows: Vec<FitRow>,
}

impl FitReport {
    /// The smallest tensor size at which the model fits, if any.
    #[must_use]
    pub fn smallest(&self) -> Option<i64> {
        self.rows.iter().find(|r| r.fits).map(|r| r.tensor)
    }
}

/// Run `fit`: 0 when the model fits at some tensor size, 1 when at none,
/// 2 when the profile or class is missing or nothing could be read.
pub async fn run(opts: Options) -> ExitCode {
    let loaded = if opts.files.is_empty() {
        from_cluster(&opts.connection).await
    } else {
        from_files(&opts.files)
    };
    let report = loaded.and_then(|(classes, profiles)| {
        report(
            &opts.model,
            &opts.class,
            opts.max_model_len,
            &classes,
            &profiles,
        )
        .map_err(PluginError::Other)
    });
    let report = match report {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let text = opts.output.format(&report, render);
    match text {
        Ok(t) => print!("{t}"),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    }
    if report.smallest().is_some() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

async fn from_cluster(c: &Connection) -> Result<(AcceleratorClasses, ModelProfiles), PluginError> {
    let target = c.connect().await?;
    let lp = ListParams::default();
    let classes = Api::<AcceleratorClass>::all(target.client.clone())
        .list(&lp)
        .await?
        .items
        .into_iter()
        .filter_map(|c| Some((c.metadata.name?, c.spec)))
        .collect();
    let profiles = Api::<ModelProfile>::all(target.client.clone())
        .list(&lp)
        .await?
        .items
        .into_iter()
        .filter_map(|p| Some((p.metadata.name?, p.spec)))
        .collect();
    Ok((classes, profiles))
}

fn from_files(paths: &[PathBuf]) -> Result<(AcceleratorClasses, ModelProfiles), PluginError> {
    let mut classes = AcceleratorClasses::new();
    let mut profiles = Vec::new();
    let files = expand_paths(paths).map_err(|e| PluginError::Other(e.to_string()))?;
    for f in files {
        for doc in read_documents(&f).map_err(|e| PluginError::Other(e.to_string()))? {
            match classify(&doc).map_err(|e| PluginError::Other(e.to_string()))? {
                (_, DocumentKind::Class(c)) => {
                    if let Some(name) = c.metadata.name.clone() {
                        classes.insert(name, c.spec);
                    }
                }
                (_, DocumentKind::Profile(p)) => {
                    if let Some(name) = p.metadata.name.clone() {
                        profiles.push((name, p.spec));
                    }
                }
                (label, DocumentKind::Invalid(e)) => {
                    return Err(PluginError::Other(format!("{} {label}: {e}", doc.origin)));
                }
                _ => {}
            }
        }
    }
    Ok((classes, profiles.into_iter().collect()))
}

/// The fit of `model` on `class_name` at each tensor size.
pub fn report(
    model: &str,
    class_name: &str,
    max_model_len: Option<i64>,
    classes: &AcceleratorClasses,
    profiles: &ModelProfiles,
) -> Result<FitReport, String> {
    let (profile_name, profile) = profiles
        .for_ref(model)
        .ok_or_else(|| format!("no ModelProfile lists the model {model:?}"))?;
    let class: &AcceleratorClassSpec = classes
        .get(class_name)
        .ok_or_else(|| format!("AcceleratorClass {class_name:?} does not exist"))?;
    let memory = ParsedQuantity::try_from(&class.memory_per_device)
        .ok()
        .and_then(|q| q.to_bytes_f64())
        .filter(|m| *m > 0.0)
        .ok_or_else(|| {
            format!(
                "AcceleratorClass {class_name:?} has no usable memoryPerDevice ({:?})",
                class.memory_per_device.0
            )
        })?;
    let context = max_model_len.unwrap_or(profile.max_position_embeddings);
    let most = i64::from(class.devices_per_node.max(1));
    let rows = std::iter::successors(Some(1_i64), |t| t.checked_mul(2))
        .take_while(|t| *t <= most)
        .map(|tensor| {
            let f = fit(
                profile,
                Shape {
                    tensor,
                    pipeline: 1,
                    memory_per_device: memory,
                    utilization: DEFAULT_GPU_MEMORY_UTILIZATION,
                    kv_bytes_per_element: None,
                },
            );
            FitRow {
                tensor,
                fits: f.holds(context),
                weights_fit: f.weights_fit(),
                weights_per_device_gib: (f.weights_per_device / GIB * 10.0).round() / 10.0,
                kv_tokens: f.kv_tokens,
                concurrency: f.concurrency(context),
            }
        })
        .collect();
    Ok(FitReport {
        model: model.to_owned(),
        profile: profile_name.to_owned(),
        class: class_name.to_owned(),
        devices_per_node: class.devices_per_node,
        memory_per_device: class.memory_per_device.0.clone(),
        context,
        rows,
    })
}

/// The table.
#[must_use]
pub fn render(r: &FitReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} (ModelProfile {}) on {} ({} devices per node, {} each), {} tokens of context per request",
        r.model, r.profile, r.class, r.devices_per_node, r.memory_per_device, r.context
    );
    out.push('\n');
    let _ = writeln!(
        out,
        "{:<8}{:<14}{:<14}{:<12}FULL-CONTEXT REQUESTS",
        "TENSOR", "FITS", "WEIGHTS/GPU", "KV TOKENS"
    );
    for row in &r.rows {
        let fits = if row.fits {
            "yes"
        } else if row.weights_fit {
            "weights only"
        } else {
            "no"
        };
        let _ = writeln!(
            out,
            "{:<8}{:<14}{:<14}{:<12}{:.1}",
            row.tensor,
            fits,
            format!("{:.1} GiB", row.weights_per_device_gib),
            row.kv_tokens,
            row.concurrency
        );
    }
    out.push('\n');
    match r.smallest() {
        Some(t) => {
            let _ = writeln!(
                out,
                "Smallest fit: tensor {t} (spec.parallelism.tensor: {t}); admission defaults to it when neither the service nor a policy sets the tensor size."
            );
        }
        None => {
            let _ = writeln!(
                out,
                "No tensor size up to {} holds the weights and {} tokens: choose a larger class, or a smaller spec.engine.maxModelLen.",
                r.devices_per_node, r.context
            );
        }
    }
    out
}
