//! Every ModelProfile known, indexed by the model refs each lists.

use std::collections::BTreeMap;

use crate::api::ModelProfileSpec;

/// ModelProfiles by name, with the model refs they describe.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelProfiles {
    by_name: BTreeMap<String, ModelProfileSpec>,
    /// Model ref -> the first profile (by name) listing it.
    by_ref: BTreeMap<String, String>,
}

impl FromIterator<(String, ModelProfileSpec)> for ModelProfiles {
    /// Profiles from `(name, spec)` pairs.
    fn from_iter<I: IntoIterator<Item = (String, ModelProfileSpec)>>(items: I) -> Self {
        let mut out = Self {
            by_name: items.into_iter().collect(),
            by_ref: BTreeMap::new(),
        };
        out.reindex();
        out
    }
}

impl ModelProfiles {
    /// Add or replace the profile `name`.
    pub fn insert(&mut self, name: String, spec: ModelProfileSpec) {
        self.by_name.insert(name, spec);
        self.reindex();
    }

    /// Remove the profile `name`.
    pub fn remove(&mut self, name: &str) {
        if self.by_name.remove(name).is_some() {
            self.reindex();
        }
    }

    fn reindex(&mut self) {
        self.by_ref.clear();
        // Names in order: the first profile listing a ref describes it.
        for (name, spec) in &self.by_name {
            for r in &spec.model_refs {
                self.by_ref.entry(r.clone()).or_insert_with(|| name.clone());
            }
        }
    }

    /// The profile (name and spec) that lists `model_ref`.
    #[must_use]
    pub fn for_ref(&self, model_ref: &str) -> Option<(&str, &ModelProfileSpec)> {
        let name = self.by_ref.get(model_ref)?;
        self.by_name
            .get_key_value(name)
            .map(|(n, s)| (n.as_str(), s))
    }

    /// Number of profiles.
    #[must_use]
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    /// True when there is no profile.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}
