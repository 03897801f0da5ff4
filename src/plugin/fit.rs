//! `kubectl infergate fit MODEL-REF --class CLASS`: whether a model fits a
//! class at each tensor size, from the cluster or from files (`-f`).

use std::path::PathBuf;
use std::process::ExitCode;

use super::client::Connection;

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
}

/// Run `fit`.
pub async fn run(opts: Options) -> ExitCode {
    let _ = opts;
    eprintln!("error: fit is not available in this build");
    ExitCode::from(2)
}
