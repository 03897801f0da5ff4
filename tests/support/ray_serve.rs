//! Ray Serve's own config schema: `ray[serve]` at a pinned version in a
//! virtual environment in the cache (`build-ray-serve.sh`, installed when
//! missing), and `validate_serve_config.py` running
//! `ServeDeploySchema.model_validate` on each config.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use super::process::cached_by_script;

/// The virtual environment's python; `INFERGATE_RAY_SERVE_PYTHON` names
/// one installed elsewhere.
pub fn ray_serve_python() -> PathBuf {
    cached_by_script(
        "INFERGATE_RAY_SERVE_PYTHON",
        "build-ray-serve.sh",
        &[],
        "it installs ray[serve] from PyPI into a virtual environment",
    )
}

/// Ray's verdict on one config: `Ok(())` or its error message.
pub type Verdict = Result<(), String>;

/// Validate each `(name, config)` with Ray's schema, in one Python process.
pub fn validate_with_ray(cases: &[(String, Value)]) -> Vec<(String, Verdict)> {
    let input: Vec<Value> = cases
        .iter()
        .map(|(name, config)| json!({"name": name, "config": config}))
        .collect();
    let script = super::fixtures::root().join("tests/support/validate_serve_config.py");
    let mut child = Command::new(ray_serve_python())
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the Serve config validator");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(serde_json::to_string(&input).expect("JSON").as_bytes())
        .expect("write the cases");
    let out = child.wait_with_output().expect("validator output");
    assert!(
        out.status.success(),
        "the validator failed ({})",
        out.status
    );
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), cases.len(), "one answer per case");
    lines
        .into_iter()
        .map(|v| {
            let name = v["name"].as_str().unwrap_or_default().to_owned();
            let verdict = if v["ok"].as_bool() == Some(true) {
                Ok(())
            } else {
                Err(v["error"].as_str().unwrap_or_default().to_owned())
            };
            (name, verdict)
        })
        .collect()
}
