//! The names `infergate profile` derives when no flag gives them: the model
//! ref from the model's directory, the profile's name from the model ref.
//! Paths are only taken apart here, never read.

use std::path::{Component, Path};

/// Longest `spec.modelRefs` entry.
pub const MAX_MODEL_REF_LEN: usize = 253;

/// Longest object name (a DNS-1123 subdomain).
pub const MAX_NAME_LEN: usize = 253;

/// The model ref a directory names: `org/name` from a Hugging Face cache
/// directory `models--org--name` (e.g. `.../models--org--name/snapshots/SHA`),
/// else its last two path components (`org/name`), else its last one.
#[must_use]
pub fn derive_model_ref(dir: &Path) -> Option<String> {
    let parts: Vec<&str> = dir
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => s.to_str(),
            _ => None,
        })
        .collect();
    if let Some(cached) = parts.iter().rev().find_map(|p| p.strip_prefix("models--")) {
        let r = cached.replace("--", "/");
        return (!r.is_empty()).then_some(r);
    }
    let r = match parts.as_slice() {
        [] => return None,
        [one] => (*one).to_owned(),
        [.., org, name] => format!("{org}/{name}"),
    };
    (r.len() <= MAX_MODEL_REF_LEN).then_some(r)
}

/// A DNS-1123 name for a model ref: lowercase, every character other than a
/// letter or digit (`.`, `_`, `/`, ...) turned into `-`, runs of `-` merged,
/// none at either end, at most 253 characters. `None` when nothing is left.
#[must_use]
pub fn derive_name(model_ref: &str) -> Option<String> {
    let mut name = String::with_capacity(model_ref.len());
    for c in model_ref.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            name.push(c);
        } else if !name.is_empty() && !name.ends_with('-') {
            name.push('-');
        }
    }
    name.truncate(MAX_NAME_LEN);
    let name = name.trim_end_matches('-').to_owned();
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::names::check_dns_subdomain;

    #[test]
    fn names_are_derived_from_refs() {
        assert_eq!(
            derive_name("meta-llama/Llama-3.1-70B-Instruct").as_deref(),
            Some("meta-llama-llama-3-1-70b-instruct")
        );
        assert_eq!(
            derive_name("Qwen/Qwen2.5-7B-Instruct").as_deref(),
            Some("qwen-qwen2-5-7b-instruct")
        );
        assert_eq!(derive_name("__a__b__").as_deref(), Some("a-b"));
        assert_eq!(derive_name("._/"), None);
        let long = derive_name(&"a.".repeat(300)).expect("a name");
        assert!(long.len() <= 253);
        assert!(check_dns_subdomain(&long).is_ok());
    }

    #[test]
    fn refs_are_derived_from_directories() {
        let r = |p: &str| derive_model_ref(Path::new(p));
        assert_eq!(
            r("/models/meta-llama/Llama-3.1-70B-Instruct").as_deref(),
            Some("meta-llama/Llama-3.1-70B-Instruct")
        );
        assert_eq!(r("/gemma").as_deref(), Some("gemma"));
        assert_eq!(r("/"), None);
        assert_eq!(
            r("/home/u/.cache/huggingface/hub/models--Qwen--Qwen2.5-7B-Instruct/snapshots/a1b2")
                .as_deref(),
            Some("Qwen/Qwen2.5-7B-Instruct")
        );
    }
}
