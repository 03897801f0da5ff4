//! The engine flags the fit reads from `engine.args`, where many services
//! pass them instead of the fields: `--max-model-len`,
//! `--gpu-memory-utilization` and `--kv-cache-dtype` (also written
//! `--flag=value`, and with underscores, as vLLM takes them; the last one
//! given counts, as it does for the engine).

/// A flag of `engine.args` the fit reads, with where it was given.
#[derive(Clone, Debug, PartialEq)]
pub struct Given<T> {
    /// Its value.
    pub value: T,
    /// The index in `engine.args` of the flag.
    pub index: usize,
}

/// What `engine.args` says of the fit's inputs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EngineFlags {
    /// `--max-model-len`.
    pub max_model_len: Option<Given<i64>>,
    /// `--gpu-memory-utilization`.
    pub gpu_memory_utilization: Option<Given<f64>>,
    /// `--kv-cache-dtype`, as bytes per element (`None` for `auto`: the
    /// model's own, the profile's `kvCacheBytesPerElement`).
    pub kv_cache_dtype: Option<Given<Option<i64>>>,
}

/// A flag's value the fit cannot read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadFlag {
    /// The index in `engine.args` of the flag.
    pub index: usize,
    /// The value as given.
    pub value: String,
    /// What the flag takes.
    pub takes: &'static str,
}

/// The three flags a fit reads.
const MAX_MODEL_LEN: &str = "--max-model-len";
const GPU_MEMORY_UTILIZATION: &str = "--gpu-memory-utilization";
const KV_CACHE_DTYPE: &str = "--kv-cache-dtype";

/// Whether `arg` names one of the fit's flags: its name (`--max-model-len`,
/// underscores read as dashes) and the value given after `=`, if any.
fn flag_of(arg: &str) -> Option<(&'static str, Option<&str>)> {
    let body = arg.strip_prefix("--")?;
    let (name, value) = match body.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (body, None),
    };
    let same = |flag: &str| {
        flag[2..].len() == name.len()
            && flag[2..]
                .bytes()
                .zip(name.bytes())
                .all(|(f, n)| f == n || (f == b'-' && n == b'_'))
    };
    [MAX_MODEL_LEN, GPU_MEMORY_UTILIZATION, KV_CACHE_DTYPE]
        .into_iter()
        .find(|f| same(f))
        .map(|f| (f, value))
}

/// Bytes per element of a `--kv-cache-dtype` value: `Some(None)` for
/// `auto` (the model's own), `None` for a value the fit does not know.
fn kv_dtype_bytes(value: &str) -> Option<Option<i64>> {
    match value {
        "auto" => Some(None),
        "bfloat16" | "float16" | "half" => Some(Some(2)),
        "float32" | "float" => Some(Some(4)),
        v if v.starts_with("fp8") => Some(Some(1)),
        _ => None,
    }
}

/// A number of tokens as the engine reads `--max-model-len`: digits, or
/// with a suffix, `k`/`m`/`g` in thousands (`25.6k` is 25,600) and
/// `K`/`M`/`G` in powers of 1,024 (`32K` is 32,768).
fn tokens(value: &str) -> Option<i64> {
    let (digits, scale) = match value.char_indices().last()? {
        (i, 'k') => (&value[..i], 1e3),
        (i, 'm') => (&value[..i], 1e6),
        (i, 'g') => (&value[..i], 1e9),
        (i, 'K') => (&value[..i], 1024.0),
        (i, 'M') => (&value[..i], 1_048_576.0),
        (i, 'G') => (&value[..i], 1_073_741_824.0),
        _ => return value.parse().ok(),
    };
    let n: f64 = digits.parse().ok().filter(|n: &f64| n.is_finite())?;
    let whole = (n * scale).round();
    #[allow(clippy::cast_possible_truncation)]
    (1.0..9.0e18).contains(&whole).then_some(whole as i64)
}

/// The fit's flags in `args`, and the values it cannot read.
#[must_use]
pub fn engine_flags(args: &[String]) -> (EngineFlags, Vec<BadFlag>) {
    let mut flags = EngineFlags::default();
    let mut bad = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let Some((flag, inline)) = flag_of(&args[i]) else {
            i += 1;
            continue;
        };
        let index = i;
        let value = match inline {
            Some(v) => v,
            None => {
                i += 1;
                args.get(i).map_or("", String::as_str)
            }
        };
        i += 1;
        let bad_value = |takes| BadFlag {
            index,
            value: value.to_owned(),
            takes,
        };
        match flag {
            MAX_MODEL_LEN => match tokens(value) {
                Some(n) if n >= 1 => flags.max_model_len = Some(Given { value: n, index }),
                _ => bad.push(bad_value("a whole number of tokens, at least 1")),
            },
            GPU_MEMORY_UTILIZATION => match value.parse::<f64>() {
                Ok(u) if u > 0.0 && u <= 1.0 => {
                    flags.gpu_memory_utilization = Some(Given { value: u, index });
                }
                _ => bad.push(bad_value("a share of the device's memory, above 0 and at most 1")),
            },
            _ => match kv_dtype_bytes(value) {
                Some(bytes) => flags.kv_cache_dtype = Some(Given { value: bytes, index }),
                None => bad.push(bad_value(
                    "auto, bfloat16, float16, half, float32 or an fp8 type (fp8, fp8_e4m3, fp8_e5m2, ...)",
                )),
            },
        }
    }
    (flags, bad)
}

/// `args` without `field`'s flag (and the value given after it): the
/// field's own value is given to the engine instead.
#[must_use]
pub fn without(args: &[String], field: FlagField) -> Vec<String> {
    let name = flag_name(field);
    let mut out = Vec::with_capacity(args.len());
    let mut i = 0;
    while i < args.len() {
        match flag_of(&args[i]) {
            Some((flag, inline)) if flag == name => {
                // The value is the next argument unless given after `=`.
                i += if inline.is_some() { 1 } else { 2 };
            }
            _ => {
                out.push(args[i].clone());
                i += 1;
            }
        }
    }
    out
}

/// Whether `args` give `field`'s flag.
#[must_use]
pub fn gives(args: &[String], field: FlagField) -> bool {
    let name = flag_name(field);
    args.iter()
        .any(|a| flag_of(a).is_some_and(|(flag, _)| flag == name))
}

/// The name a flag is spelled with in messages.
#[must_use]
pub fn flag_name(field: FlagField) -> &'static str {
    match field {
        FlagField::MaxModelLen => MAX_MODEL_LEN,
        FlagField::GpuMemoryUtilization => GPU_MEMORY_UTILIZATION,
    }
}

/// A flag that has a field of its own in `spec.engine`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlagField {
    /// `--max-model-len`, `spec.engine.maxModelLen`.
    MaxModelLen,
    /// `--gpu-memory-utilization`, `spec.engine.gpuMemoryUtilization`.
    GpuMemoryUtilization,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_three_flags_are_read_in_every_spelling_the_engine_takes() {
        let (f, bad) = engine_flags(&args(&[
            "--enable-prefix-caching",
            "--max-model-len",
            "8192",
            "--gpu_memory_utilization=0.85",
            "--kv-cache-dtype",
            "fp8_e5m2",
        ]));
        assert!(bad.is_empty(), "{bad:?}");
        assert_eq!(
            f.max_model_len,
            Some(Given {
                value: 8192,
                index: 1
            })
        );
        assert_eq!(
            f.gpu_memory_utilization,
            Some(Given {
                value: 0.85,
                index: 3
            })
        );
        assert_eq!(
            f.kv_cache_dtype,
            Some(Given {
                value: Some(1),
                index: 4
            })
        );
        // The last one given counts; auto is the model's own.
        let (f, _) = engine_flags(&args(&[
            "--max-model-len=4096",
            "--max-model-len=2048",
            "--kv-cache-dtype=auto",
        ]));
        assert_eq!(f.max_model_len.map(|g| g.value), Some(2048));
        for (v, n) in [
            ("32K", 32_768),
            ("25.6k", 25_600),
            ("1m", 1_000_000),
            ("8192", 8192),
        ] {
            assert_eq!(tokens(v), Some(n), "{v}");
        }
        assert_eq!(tokens("k"), None);
        assert_eq!(tokens("1e999k"), None);
        assert_eq!(f.kv_cache_dtype.map(|g| g.value), Some(None));
        // Other flags, and a flag whose name only starts alike, are not read.
        let (f, bad) = engine_flags(&args(&["--max-model-length", "9", "--port", "80"]));
        assert_eq!((f, bad), (EngineFlags::default(), Vec::new()));
    }

    #[test]
    fn a_flag_whose_field_is_set_is_taken_out_with_its_value() {
        let a = args(&[
            "--max-model-len",
            "8192",
            "--enable-prefix-caching",
            "--max_model_len=4096",
            "--gpu-memory-utilization",
            "0.8",
        ]);
        assert!(gives(&a, FlagField::MaxModelLen));
        assert_eq!(
            without(&a, FlagField::MaxModelLen),
            args(&["--enable-prefix-caching", "--gpu-memory-utilization", "0.8"])
        );
        assert_eq!(
            without(&a, FlagField::GpuMemoryUtilization),
            args(&[
                "--max-model-len",
                "8192",
                "--enable-prefix-caching",
                "--max_model_len=4096"
            ])
        );
        assert!(!gives(&args(&["--port", "80"]), FlagField::MaxModelLen));
    }

    #[test]
    fn a_value_the_fit_cannot_read_is_named_with_its_place() {
        let (f, bad) = engine_flags(&args(&[
            "--max-model-len",
            "32 thousand",
            "--gpu-memory-utilization=1.5",
            "--kv-cache-dtype",
        ]));
        assert_eq!(f, EngineFlags::default());
        let found: Vec<(usize, &str)> = bad.iter().map(|b| (b.index, b.value.as_str())).collect();
        assert_eq!(found, [(0, "32 thousand"), (2, "1.5"), (3, "")]);
    }
}
