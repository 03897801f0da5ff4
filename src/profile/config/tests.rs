use serde_json::{Value, json};

use super::families::known_model_types;
use super::*;
use crate::api::profile::AttentionKind;

fn err(config: &Value) -> String {
    architecture(config).expect_err("an error").to_string()
}

#[test]
fn gqa_without_head_dim_divides_hidden_by_heads() {
    // mistralai/Mistral-7B-Instruct-v0.2
    let a = architecture(&json!({
        "model_type": "mistral", "hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 8, "num_hidden_layers": 32, "max_position_embeddings": 32768,
        "sliding_window": null
    }))
    .expect("profile");
    assert_eq!(a.layers, 32);
    assert_eq!(a.max_position_embeddings, 32768);
    assert_eq!(a.attention, grouped_attention(AttentionKind::Gqa, 8, 128));
    assert_eq!(a.model_type, "mistral");
}

#[test]
fn head_dim_wins_over_hidden_by_heads() {
    // google/gemma-2-9b-it: 3584 / 16 = 224, but head_dim is 256.
    let a = architecture(&json!({
        "model_type": "gemma2", "hidden_size": 3584, "head_dim": 256,
        "num_attention_heads": 16, "num_key_value_heads": 8, "num_hidden_layers": 42,
        "max_position_embeddings": 8192
    }))
    .expect("profile");
    assert_eq!(a.attention, grouped_attention(AttentionKind::Gqa, 8, 256));
}

#[test]
fn absent_kv_heads_is_mha() {
    let config = json!({
        "model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
        "num_hidden_layers": 32, "max_position_embeddings": 2048
    });
    let a = architecture(&config).expect("profile");
    assert_eq!(a.attention, grouped_attention(AttentionKind::Mha, 32, 128));
    // as are as many kv heads as heads, and a null head_dim is derived
    let mut equal = config;
    equal["num_key_value_heads"] = json!(32);
    equal["head_dim"] = Value::Null;
    assert_eq!(
        architecture(&equal).expect("profile").attention,
        grouped_attention(AttentionKind::Mha, 32, 128)
    );
}

#[test]
fn mla_reads_the_latent_rank_and_rope_dim() {
    // deepseek-ai/DeepSeek-V3
    let a = architecture(&json!({
        "model_type": "deepseek_v3", "hidden_size": 7168, "num_attention_heads": 128,
        "num_key_value_heads": 128, "num_hidden_layers": 61, "kv_lora_rank": 512,
        "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
        "max_position_embeddings": 163840
    }))
    .expect("profile");
    assert_eq!(a.attention, latent_attention(512, 64));
    assert_eq!(a.layers, 61);
    // kv_lora_rank makes a known GQA family MLA too; qk_rope_head_dim may be 0
    let a = architecture(&json!({
        "model_type": "llama", "num_hidden_layers": 2, "kv_lora_rank": 64,
        "qk_rope_head_dim": 0, "max_position_embeddings": 16
    }))
    .expect("profile");
    assert_eq!(a.attention, latent_attention(64, 0));
    assert_eq!(
        err(
            &json!({"model_type": "deepseek_v2", "num_hidden_layers": 27,
            "kv_lora_rank": 512, "max_position_embeddings": 163840})
        ),
        "qk_rope_head_dim is missing"
    );
}

#[test]
fn a_multimodal_config_is_read_from_its_text_config() {
    let a = architecture(&json!({
        "model_type": "gemma3",
        "text_config": {
            "model_type": "gemma3_text", "hidden_size": 2560, "head_dim": 256,
            "num_attention_heads": 8, "num_key_value_heads": 4, "num_hidden_layers": 34,
            "max_position_embeddings": 131072
        },
        "vision_config": {"model_type": "siglip_vision_model"}
    }))
    .expect("profile");
    assert_eq!(a.model_type, "gemma3_text");
    assert_eq!(a.attention, grouped_attention(AttentionKind::Gqa, 4, 256));
    // a field missing there is named with its prefix; the root's type serves
    assert_eq!(
        err(&json!({"model_type": "mistral3", "text_config": {"num_hidden_layers": 40}})),
        "text_config.num_attention_heads is missing"
    );
    assert_eq!(
        err(&json!({"model_type": "llava", "text_config": {}})),
        format!(
            "model_type \"llava\" is not a known model family (known: {})",
            known_model_types()
        )
    );
}

#[test]
fn errors_name_the_field() {
    let base = json!({
        "model_type": "qwen2", "hidden_size": 3584, "num_attention_heads": 28,
        "num_key_value_heads": 4, "num_hidden_layers": 28, "max_position_embeddings": 32768
    });
    let without = |field: &str| {
        let mut c = base.clone();
        c.as_object_mut().expect("object").remove(field);
        err(&c)
    };
    assert_eq!(without("num_hidden_layers"), "num_hidden_layers is missing");
    assert_eq!(
        without("max_position_embeddings"),
        "max_position_embeddings is missing"
    );
    assert_eq!(
        without("num_attention_heads"),
        "num_attention_heads is missing"
    );
    assert_eq!(without("hidden_size"), "hidden_size is missing");
    assert_eq!(without("model_type"), "model_type is missing");
    let with = |field: &str, value: Value| {
        let mut c = base.clone();
        c[field] = value;
        err(&c)
    };
    assert_eq!(
        with("num_hidden_layers", json!("28")),
        "num_hidden_layers must be an integer, not a string"
    );
    assert_eq!(
        with("num_hidden_layers", json!(28.5)),
        "num_hidden_layers must be an integer, not a fractional number"
    );
    assert_eq!(
        with("num_hidden_layers", json!(0)),
        "num_hidden_layers must be between 1 and 2147483647, not 0"
    );
    assert_eq!(
        with("num_hidden_layers", json!(u64::MAX)),
        format!(
            "num_hidden_layers must be between 1 and 2147483647, not {}",
            u64::MAX
        )
    );
    assert_eq!(
        with("model_type", json!(7)),
        "model_type must be a string, not an integer"
    );
    assert_eq!(
        with("hidden_size", json!(3585)),
        "hidden_size 3585 is not a multiple of num_attention_heads 28 and head_dim is missing"
    );
    assert_eq!(
        with("num_key_value_heads", json!(29)),
        "num_key_value_heads 29 is more than num_attention_heads 28"
    );
    assert_eq!(
        with("text_config", json!([])),
        "text_config must be an object, not an array"
    );
    assert!(with("model_type", json!("bert")).starts_with("model_type \"bert\" is not a known"));
    assert_eq!(err(&json!([1, 2])), "not a JSON object");
    // a whole float is read as an integer
    assert_eq!(
        architecture(&{
            let mut c = base.clone();
            c["num_hidden_layers"] = json!(28.0);
            c
        })
        .expect("profile")
        .layers,
        28
    );
}

#[test]
fn total_size_is_the_index_metadata() {
    assert_eq!(
        total_size(&json!({"metadata": {"total_size": 15231233024_i64}, "weight_map": {}})),
        Ok(15_231_233_024)
    );
    let e = |v: Value| total_size(&v).expect_err("an error").to_string();
    assert_eq!(
        e(json!({"weight_map": {}})),
        "metadata.total_size is missing"
    );
    assert_eq!(e(json!({"metadata": {}})), "metadata.total_size is missing");
    assert_eq!(
        e(json!({"metadata": {"total_size": 0}})),
        format!(
            "metadata.total_size must be between 1 and {}, not 0",
            i64::MAX
        )
    );
    assert_eq!(
        e(json!({"metadata": "x"})),
        "metadata must be an object, not a string"
    );
    assert_eq!(e(json!(null)), "not a JSON object");
}

#[test]
fn the_spec_carries_refs_weights_and_kv_bytes() {
    let spec = architecture(&json!({
        "model_type": "llama", "hidden_size": 8192, "num_attention_heads": 64,
        "num_key_value_heads": 8, "num_hidden_layers": 80, "max_position_embeddings": 131072
    }))
    .expect("profile")
    .into_spec(
        vec!["meta-llama/Llama-3.1-70B-Instruct".into()],
        141_107_412_992,
        Some(1),
    );
    assert_eq!(spec.weight_bytes, 141_107_412_992);
    assert_eq!(spec.kv_cache_bytes_per_element, Some(1));
    assert_eq!(spec.model_refs, ["meta-llama/Llama-3.1-70B-Instruct"]);
    assert_eq!(
        spec.attention,
        grouped_attention(AttentionKind::Gqa, 8, 128)
    );
}

#[test]
fn no_input_panics() {
    for v in [
        json!(null),
        json!("x"),
        json!({"model_type": null}),
        json!({"model_type": "llama", "num_hidden_layers": -1}),
        json!({"model_type": "llama", "num_hidden_layers": 1, "num_attention_heads": 1,
            "hidden_size": 9_223_372_036_854_775_807_i64, "max_position_embeddings": 1}),
        json!({"model_type": "llama", "num_hidden_layers": 1, "num_attention_heads": 0,
            "hidden_size": 8, "max_position_embeddings": 1}),
        json!({"text_config": {"model_type": "deepseek_v3", "kv_lora_rank": null}}),
    ] {
        let _ = architecture(&v);
        let _ = total_size(&v);
    }
}
