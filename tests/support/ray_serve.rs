//! Ray Serve's own config schema: `ray[serve]` at a pinned version installed
//! by `build-ray-serve.sh` into a virtual environment in the cache (once),
//! and `validate_serve_config.py` run with its Python to check Serve configs
//! with `ray.serve.schema.ServeDeploySchema`.

use std::path::PathBuf;
use std::process::Command;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::fixtures::root;
use super::process::{cached_by_script, run, text};

/// The directory holding the virtual environment `venv/`, whose Python
/// imports `ray.serve.schema` (installed when missing;
/// `INFERGATE_RAY_SERVE_DIR` names one made elsewhere).
pub fn ray_serve_dir() -> PathBuf {
    cached_by_script(
        "INFERGATE_RAY_SERVE_DIR",
        "build-ray-serve.sh",
        &[],
        "it installs ray[serve] from PyPI into a virtual environment and needs python3 with venv and PyPI",
    )
}

/// One config to check: a config object, or a `serveConfigV2` YAML string
/// (parsed by the validator with YAML 1.1 rules, as KubeRay reads it).
#[derive(Serialize, Debug, Clone)]
pub struct ServeCase {
    /// Names the case in the verdicts and in failure messages.
    pub name: String,
    /// The config as an object.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<Value>,
    /// The config as YAML text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub yaml: Option<String>,
}

/// What Ray's schema said of one case.
#[derive(Deserialize, Debug, Clone)]
pub struct ServeVerdict {
    /// The case's name.
    pub name: String,
    /// `ServeDeploySchema.model_validate` accepted it.
    pub ok: bool,
    /// Ray's (pydantic's) error text when it did not.
    pub error: Option<String>,
    /// The config as validated (the YAML case as Python parsed it).
    pub parsed: Option<Value>,
}

/// Check every case with Ray's schema in one Python process; the verdicts
/// in the order of `cases`.
pub fn validate_serve_configs(cases: &[ServeCase]) -> Vec<ServeVerdict> {
    let python = ray_serve_dir().join("venv/bin/python");
    let script = root().join("tests/support/validate_serve_config.py");
    let input = serde_json::to_vec(cases).expect("cases as JSON");
    let out = run(Command::new(&python).arg(&script), Some(&input));
    assert!(
        out.status.success(),
        "{} {} failed ({}):\n{}",
        python.display(),
        script.display(),
        out.status,
        text(&out)
    );
    let verdicts: Vec<ServeVerdict> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("verdict {l:?}: {e}")))
        .collect();
    let names = |v: &mut dyn Iterator<Item = &String>| v.cloned().collect::<Vec<_>>();
    assert_eq!(
        names(&mut verdicts.iter().map(|v| &v.name)),
        names(&mut cases.iter().map(|c| &c.name)),
        "one verdict per case, in order"
    );
    verdicts
}
