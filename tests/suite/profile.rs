//! `infergate profile` through the built binary, over configs whose numbers
//! are the published ones (tests/fixtures/models/<org>/<name>/config.json, with
//! the published `metadata.total_size` where the index is there) and over
//! broken input.

use std::path::Path;
use std::process::{Command, Output};

use crate::support::{binary, fixture, run};
use infergate::api::profile::{AttentionKind, AttentionSpec, ModelProfile, ModelProfileSpec};
use infergate::profile::config::{grouped_attention, latent_attention};

fn profile(args: &[&str]) -> Output {
    run(Command::new(binary()).arg("profile").args(args), None)
}

fn model_dir(name: &str) -> String {
    fixture(&format!("models/{name}")).display().to_string()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The printed profile, which must exit 0 and deserialize as a ModelProfile.
fn printed(args: &[&str]) -> ModelProfile {
    let out = profile(args);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    let yaml = String::from_utf8(out.stdout).expect("UTF-8");
    let untyped: serde_json::Value = serde_saphyr::from_str(&yaml).expect("YAML");
    assert_eq!(untyped["apiVersion"], "infergate.dev/v1beta1", "{yaml}");
    assert_eq!(untyped["kind"], "ModelProfile", "{yaml}");
    assert!(untyped["metadata"].get("namespace").is_none(), "{yaml}");
    serde_saphyr::from_str(&yaml).unwrap_or_else(|e| panic!("{e}: {yaml}"))
}

fn gqa(kv_heads: i32, head_dim: i32) -> AttentionSpec {
    grouped_attention(AttentionKind::Gqa, kv_heads, head_dim)
}

fn spec(
    model_ref: &str,
    weight_bytes: i64,
    layers: i32,
    attention: AttentionSpec,
    max_position_embeddings: i64,
) -> ModelProfileSpec {
    ModelProfileSpec {
        model_refs: vec![model_ref.to_owned()],
        weight_bytes,
        layers,
        attention,
        max_position_embeddings,
        kv_cache_bytes_per_element: None,
    }
}

fn assert_profile(p: &ModelProfile, name: &str, want: &ModelProfileSpec) {
    assert_eq!(p.metadata.name.as_deref(), Some(name));
    assert_eq!(&p.spec, want);
    assert_eq!(p.spec.kv_bytes_per_element(), 2);
}

#[test]
fn llama_3_1_70b_is_gqa_with_the_indexed_weights() {
    let p = printed(&[&model_dir("meta-llama/Llama-3.1-70B-Instruct")]);
    assert_profile(
        &p,
        "meta-llama-llama-3-1-70b-instruct",
        &spec(
            "meta-llama/Llama-3.1-70B-Instruct",
            141_107_412_992,
            80,
            gqa(8, 128),
            131_072,
        ),
    );
}

#[test]
fn mistral_7b_without_head_dim_divides_hidden_by_heads() {
    let dir = model_dir("mistralai/Mistral-7B-Instruct-v0.2");
    let want = spec(
        "mistralai/Mistral-7B-Instruct-v0.2",
        14_483_464_192,
        32,
        gqa(8, 128),
        32_768,
    );
    assert_profile(
        &printed(&[&dir]),
        "mistralai-mistral-7b-instruct-v0-2",
        &want,
    );
    // the config file itself reads the same
    let config = format!("{dir}/config.json");
    assert_profile(
        &printed(&[&config]),
        "mistralai-mistral-7b-instruct-v0-2",
        &want,
    );
}

#[test]
fn qwen2_5_7b_is_gqa() {
    let p = printed(&[&model_dir("Qwen/Qwen2.5-7B-Instruct")]);
    assert_profile(
        &p,
        "qwen-qwen2-5-7b-instruct",
        &spec(
            "Qwen/Qwen2.5-7B-Instruct",
            15_231_233_024,
            28,
            gqa(4, 128),
            32_768,
        ),
    );
}

#[test]
fn gemma_2_9b_takes_head_dim_over_hidden_by_heads() {
    // hidden_size / num_attention_heads = 3584 / 16 = 224; head_dim is 256
    let dir = model_dir("google/gemma-2-9b-it");
    let p = printed(&[&dir, "--weight-bytes", "18500000000"]);
    assert_profile(
        &p,
        "google-gemma-2-9b-it",
        &spec(
            "google/gemma-2-9b-it",
            18_500_000_000,
            42,
            gqa(8, 256),
            8192,
        ),
    );
}

#[test]
fn llama_7b_without_kv_heads_is_mha() {
    let dir = model_dir("huggyllama/llama-7b");
    let p = printed(&[&dir, "--weight-bytes", "13500000000"]);
    let attention = grouped_attention(AttentionKind::Mha, 32, 128);
    assert_profile(
        &p,
        "huggyllama-llama-7b",
        &spec("huggyllama/llama-7b", 13_500_000_000, 32, attention, 2048),
    );
}

#[test]
fn deepseek_v3_is_mla() {
    let dir = model_dir("deepseek-ai/DeepSeek-V3");
    let p = printed(&[&dir, "--weight-bytes", "688000000000"]);
    assert_profile(
        &p,
        "deepseek-ai-deepseek-v3",
        &spec(
            "deepseek-ai/DeepSeek-V3",
            688_000_000_000,
            61,
            latent_attention(512, 64),
            163_840,
        ),
    );
}

#[test]
fn deepseek_v2_lite_is_mla() {
    let dir = model_dir("deepseek-ai/DeepSeek-V2-Lite");
    let p = printed(&[&dir, "--weight-bytes", "31000000000"]);
    assert_profile(
        &p,
        "deepseek-ai-deepseek-v2-lite",
        &spec(
            "deepseek-ai/DeepSeek-V2-Lite",
            31_000_000_000,
            27,
            latent_attention(512, 64),
            163_840,
        ),
    );
}

#[test]
fn flags_set_the_name_refs_and_kv_element_size() {
    let dir = model_dir("Qwen/Qwen2.5-7B-Instruct");
    let p = printed(&[
        &dir,
        "--name",
        "qwen-7b",
        "--model-ref",
        "qwen2.5-7b",
        "--model-ref",
        "Qwen/Qwen2.5-7B-Instruct",
        "--kv-cache-bytes-per-element",
        "1",
        "--weight-bytes",
        "7",
    ]);
    assert_eq!(p.metadata.name.as_deref(), Some("qwen-7b"));
    assert_eq!(
        p.spec.model_refs,
        ["qwen2.5-7b", "Qwen/Qwen2.5-7B-Instruct"]
    );
    assert_eq!(p.spec.kv_cache_bytes_per_element, Some(1));
    assert_eq!(p.spec.weight_bytes, 7);
}

#[test]
fn a_single_weights_file_is_sized_on_disk() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("acme").join("tiny");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::copy(
        fixture("models/huggyllama/llama-7b/config.json"),
        dir.join("config.json"),
    )
    .expect("copy");
    std::fs::write(dir.join("model.safetensors"), vec![0u8; 4321]).expect("write");
    let out = profile(&[&dir.display().to_string()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("model.safetensors"),
        "{}",
        stderr(&out)
    );
    let p: ModelProfile =
        serde_saphyr::from_str(&String::from_utf8_lossy(&out.stdout)).expect("YAML");
    assert_eq!(p.spec.weight_bytes, 4321);
    assert_eq!(p.spec.model_refs, ["acme/tiny"]);
    assert_eq!(p.metadata.name.as_deref(), Some("acme-tiny"));
}

/// Exit 2 with `want` in the message.
fn fails(args: &[&str], want: &str) {
    let out = profile(args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains(want), "{args:?} should say {want:?}:\n{err}");
    assert!(out.stdout.is_empty(), "nothing printed on failure");
}

/// A model directory holding `config` as its config.json.
fn model_with(config: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().expect("tempdir");
    std::fs::write(tmp.path().join("config.json"), config).expect("write");
    tmp
}

fn path(dir: &tempfile::TempDir) -> String {
    dir.path().display().to_string()
}

#[test]
fn an_unknown_model_type_is_named() {
    let dir = model_with(r#"{"model_type": "bert", "num_hidden_layers": 12}"#);
    fails(
        &[&path(&dir), "--weight-bytes", "1"],
        "config.json: model_type \"bert\" is not a known model family",
    );
}

#[test]
fn a_missing_field_is_named() {
    let text = std::fs::read_to_string(fixture(
        "models/mistralai/Mistral-7B-Instruct-v0.2/config.json",
    ))
    .expect("read");
    let mut config: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    config
        .as_object_mut()
        .expect("object")
        .remove("num_hidden_layers");
    let dir = model_with(&config.to_string());
    fails(
        &[&path(&dir), "--weight-bytes", "1"],
        "config.json: num_hidden_layers is missing",
    );
    let dir = model_with(r#"{"model_type": "qwen2", "num_hidden_layers": "28"}"#);
    fails(
        &[&path(&dir), "--weight-bytes", "1"],
        "num_hidden_layers must be an integer, not a string",
    );
}

#[test]
fn missing_weights_ask_for_the_flag() {
    fails(&[&model_dir("google/gemma-2-9b-it")], "pass --weight-bytes");
    let dir = model_with(
        &std::fs::read_to_string(fixture("models/huggyllama/llama-7b/config.json")).expect("read"),
    );
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        r#"{"weight_map": {}}"#,
    )
    .expect("write");
    fails(
        &[&path(&dir)],
        "model.safetensors.index.json: metadata.total_size is missing",
    );
}

#[test]
fn invalid_json_names_the_file() {
    let dir = model_with("{\"model_type\": \"llama\",");
    fails(
        &[&path(&dir), "--weight-bytes", "1"],
        "config.json: invalid JSON: ",
    );
    let dir = model_with("");
    fails(
        &[&path(&dir), "--weight-bytes", "1"],
        "config.json: invalid JSON: ",
    );
}

#[test]
fn unreadable_and_oversized_paths_fail() {
    fails(&["/nonexistent/model/dir"], "/nonexistent/model/dir: ");
    let empty = tempfile::tempdir().expect("tempdir");
    fails(&[&path(&empty), "--weight-bytes", "1"], "config.json: ");
    let big = tempfile::tempdir().expect("tempdir");
    let file = std::fs::File::create(big.path().join("config.json")).expect("create");
    file.set_len(16 * 1024 * 1024 + 1).expect("set_len");
    fails(
        &[&path(&big), "--weight-bytes", "1"],
        "larger than 16777216 bytes",
    );
}

#[test]
fn bad_flags_fail() {
    let dir = model_dir("Qwen/Qwen2.5-7B-Instruct");
    fails(&[&dir, "--name", "Not_A_Name"], "--name \"Not_A_Name\": ");
    fails(
        &[&dir, "--model-ref", ""],
        "--model-ref \"\": must be 1 to 253 characters",
    );
    fails(&[&dir, "--weight-bytes", "0"], "--weight-bytes");
    fails(
        &[&dir, "--kv-cache-bytes-per-element", "9"],
        "--kv-cache-bytes-per-element",
    );
}

#[test]
fn help_documents_the_defaults_with_an_example() {
    let out = profile(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    for want in [
        "--weight-bytes",
        "model.safetensors.index.json",
        "size on disk",
        "--model-ref",
        "--name",
        "--kv-cache-bytes-per-element",
        "Examples:",
    ] {
        assert!(help.contains(want), "{want:?} missing from:\n{help}");
    }
    assert!(Path::new(&model_dir("meta-llama/Llama-3.1-70B-Instruct")).is_dir());
}
