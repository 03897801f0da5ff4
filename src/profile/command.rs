//! `infergate profile DIR|config.json`: reads the model's `config.json` and
//! the weights' size beside it, and prints the ModelProfile as YAML.
//!
//! Exit codes: 0 printed; 2 unreadable or oversized file, invalid JSON, a
//! missing or mistyped field, an unknown `model_type`, no weights size, or
//! a bad `--name` / `--model-ref`.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use kube::core::ObjectMeta;
use serde_json::Value;

use super::config::{self, ConfigError};
use super::names::{MAX_MODEL_REF_LEN, derive_model_ref, derive_name};
use crate::api::profile::{ModelProfile, ModelProfileSpec};
use crate::engine::names::check_dns_subdomain;

/// The config file read from a model directory.
pub const CONFIG_FILE: &str = "config.json";
/// The sharded weights' index whose `metadata.total_size` is the weights' size.
pub const INDEX_FILE: &str = "model.safetensors.index.json";
/// A single-file model's weights, whose size on disk is the fallback.
pub const SINGLE_FILE: &str = "model.safetensors";
/// Largest `config.json` or index read (16 MiB).
pub const MAX_JSON_BYTES: u64 = 16 * 1024 * 1024;
/// Most `spec.modelRefs` entries a profile holds.
pub const MAX_MODEL_REFS: usize = 64;

/// What `infergate profile` reads.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The model's directory, or its `config.json`.
    pub path: PathBuf,
    /// The weights' size; `None` reads it beside the config.
    pub weight_bytes: Option<i64>,
    /// `metadata.name`; `None` derives it from the first model ref.
    pub name: Option<String>,
    /// `spec.modelRefs`; empty derives one from the directory.
    pub model_refs: Vec<String>,
    /// `spec.kvCacheBytesPerElement`; `None` leaves it unset (2).
    pub kv_cache_bytes_per_element: Option<i32>,
}

/// Why no profile was printed (all exit 2).
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// A file or directory could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The path.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A JSON file is larger than [`MAX_JSON_BYTES`].
    #[error("{path}: larger than {MAX_JSON_BYTES} bytes, refused")]
    TooLarge {
        /// The path.
        path: String,
    },
    /// A JSON file does not parse.
    #[error("{path}: invalid JSON: {source}")]
    Json {
        /// The path.
        path: String,
        /// The parser's error.
        source: serde_json::Error,
    },
    /// A field of a JSON file is missing, mistyped or unknown.
    #[error("{path}: {source}")]
    Config {
        /// The path.
        path: String,
        /// What is wrong.
        source: ConfigError,
    },
    /// Neither `--weight-bytes`, an index nor a single weights file.
    #[error("{dir}: no {INDEX_FILE} or {SINGLE_FILE} to size the weights; pass --weight-bytes")]
    NoWeights {
        /// The model's directory.
        dir: String,
    },
    /// No `--model-ref` and none derivable from the directory.
    #[error("{dir}: no model ref can be derived from the directory; pass --model-ref")]
    NoModelRef {
        /// The model's directory.
        dir: String,
    },
    /// A flag's value would not make a valid profile.
    #[error("{flag} {message}")]
    BadFlag {
        /// The flag.
        flag: &'static str,
        /// What is wrong with its value.
        message: String,
    },
    /// `--name` is not a DNS-1123 subdomain.
    #[error("--name {name:?}: {reason}")]
    BadName {
        /// The name given.
        name: String,
        /// Why it is not valid.
        reason: String,
    },
    /// No `--name` and none derivable from the first model ref.
    #[error("no name can be derived from the model ref {0:?}; pass --name")]
    NoName(String),
    /// The profile could not be rendered as YAML.
    #[error("cannot print the profile: {0}")]
    Render(String),
}

/// A profile and where its weights' size came from.
#[derive(Debug, Clone)]
pub struct Profiled {
    /// The profile.
    pub profile: ModelProfile,
    /// Where `spec.weightBytes` came from (`--weight-bytes`, or a file).
    pub weights_from: String,
}

/// Runs `infergate profile`: the YAML on stdout, or the error on stderr.
#[must_use]
pub fn run(options: &Options) -> ExitCode {
    match profile(options).and_then(|p| render(&p.profile).map(|yaml| (p, yaml))) {
        Ok((p, yaml)) => {
            eprintln!(
                "weights: {} bytes from {}",
                p.profile.spec.weight_bytes, p.weights_from
            );
            print!("{yaml}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// The profile as a YAML document.
///
/// # Errors
/// [`ProfileError::Render`] when serialization fails.
pub fn render(profile: &ModelProfile) -> Result<String, ProfileError> {
    serde_saphyr::to_string(profile).map_err(|e| ProfileError::Render(e.to_string()))
}

/// Reads the model at `options.path` into a profile.
///
/// # Errors
/// [`ProfileError`] naming the file and field at fault.
pub fn profile(options: &Options) -> Result<Profiled, ProfileError> {
    let (dir, config_path) = locate(&options.path)?;
    let config_value = read_json(&config_path)?;
    let architecture =
        config::architecture(&config_value).map_err(|source| ProfileError::Config {
            path: config_path.display().to_string(),
            source,
        })?;
    if let Some(n) = options
        .kv_cache_bytes_per_element
        .filter(|n| !(1..=8).contains(n))
    {
        return Err(ProfileError::BadFlag {
            flag: "--kv-cache-bytes-per-element",
            message: format!("{n}: must be between 1 and 8"),
        });
    }
    let (weight_bytes, weights_from) = match options.weight_bytes {
        Some(n) if n < 1 => {
            return Err(ProfileError::BadFlag {
                flag: "--weight-bytes",
                message: format!("{n}: must be at least 1"),
            });
        }
        Some(n) => (n, "--weight-bytes".to_owned()),
        None => weights_beside(&dir)?,
    };
    let model_refs = model_refs(options, &dir)?;
    let name = match &options.name {
        Some(name) => {
            check_dns_subdomain(name).map_err(|reason| ProfileError::BadName {
                name: name.clone(),
                reason,
            })?;
            name.clone()
        }
        None => derive_name(&model_refs[0])
            .ok_or_else(|| ProfileError::NoName(model_refs[0].clone()))?,
    };
    let spec: ModelProfileSpec =
        architecture.into_spec(model_refs, weight_bytes, options.kv_cache_bytes_per_element);
    let profile = ModelProfile {
        metadata: ObjectMeta {
            name: Some(name),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    };
    Ok(Profiled {
        profile,
        weights_from,
    })
}

/// The model's directory and its `config.json`, from a directory or a file.
fn locate(path: &Path) -> Result<(PathBuf, PathBuf), ProfileError> {
    let meta = std::fs::metadata(path).map_err(|source| read_error(path, source))?;
    if meta.is_dir() {
        return Ok((path.to_path_buf(), path.join(CONFIG_FILE)));
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((dir, path.to_path_buf()))
}

fn read_error(path: &Path, source: std::io::Error) -> ProfileError {
    ProfileError::Read {
        path: path.display().to_string(),
        source,
    }
}

/// A JSON file of at most [`MAX_JSON_BYTES`], parsed.
fn read_json(path: &Path) -> Result<Value, ProfileError> {
    let file = std::fs::File::open(path).map_err(|source| read_error(path, source))?;
    let too_large = || ProfileError::TooLarge {
        path: path.display().to_string(),
    };
    if file.metadata().is_ok_and(|m| m.len() > MAX_JSON_BYTES) {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    file.take(MAX_JSON_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| read_error(path, source))?;
    if bytes.len() as u64 > MAX_JSON_BYTES {
        return Err(too_large());
    }
    serde_json::from_slice(&bytes).map_err(|source| ProfileError::Json {
        path: path.display().to_string(),
        source,
    })
}

/// The weights' size from the index beside the config, else the size of a
/// single `model.safetensors`.
fn weights_beside(dir: &Path) -> Result<(i64, String), ProfileError> {
    let index = dir.join(INDEX_FILE);
    if index.exists() {
        let value = read_json(&index)?;
        let size = config::total_size(&value).map_err(|source| ProfileError::Config {
            path: index.display().to_string(),
            source,
        })?;
        return Ok((size, index.display().to_string()));
    }
    let single = dir.join(SINGLE_FILE);
    match std::fs::metadata(&single) {
        Ok(m) if m.is_file() => {
            let size = i64::try_from(m.len()).unwrap_or(i64::MAX);
            if size < 1 {
                return Err(ProfileError::NoWeights {
                    dir: dir.display().to_string(),
                });
            }
            Ok((size, format!("the size of {}", single.display())))
        }
        _ => Err(ProfileError::NoWeights {
            dir: dir.display().to_string(),
        }),
    }
}

/// `--model-ref` values, checked, or the one derived from the directory.
fn model_refs(options: &Options, dir: &Path) -> Result<Vec<String>, ProfileError> {
    if options.model_refs.is_empty() {
        let canonical = std::fs::canonicalize(dir).map_err(|source| read_error(dir, source))?;
        return derive_model_ref(&canonical)
            .map(|r| vec![r])
            .ok_or_else(|| ProfileError::NoModelRef {
                dir: dir.display().to_string(),
            });
    }
    if options.model_refs.len() > MAX_MODEL_REFS {
        return Err(ProfileError::BadFlag {
            flag: "--model-ref",
            message: format!(
                "is given {} times; at most {MAX_MODEL_REFS}",
                options.model_refs.len()
            ),
        });
    }
    if let Some(bad) = options
        .model_refs
        .iter()
        .find(|r| r.is_empty() || r.len() > MAX_MODEL_REF_LEN)
    {
        return Err(ProfileError::BadFlag {
            flag: "--model-ref",
            message: format!("{bad:?}: must be 1 to {MAX_MODEL_REF_LEN} characters"),
        });
    }
    Ok(options.model_refs.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_values_that_make_no_valid_profile_are_refused() {
        let dir = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/models/Qwen/Qwen2.5-7B-Instruct"
        );
        let options = Options {
            path: PathBuf::from(dir),
            ..Options::default()
        };
        let e = |o: Options| profile(&o).expect_err("an error").to_string();
        assert_eq!(
            e(Options {
                weight_bytes: Some(0),
                ..options.clone()
            }),
            "--weight-bytes 0: must be at least 1"
        );
        assert_eq!(
            e(Options {
                kv_cache_bytes_per_element: Some(9),
                ..options.clone()
            }),
            "--kv-cache-bytes-per-element 9: must be between 1 and 8"
        );
        assert_eq!(
            e(Options {
                model_refs: vec!["m".into(); 65],
                ..options.clone()
            }),
            "--model-ref is given 65 times; at most 64"
        );
        let ok = profile(&options).expect("a profile");
        assert_eq!(ok.profile.spec.weight_bytes, 15_231_233_024);
    }
}
