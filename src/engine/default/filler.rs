//! Filling one field: from the first policy layer that sets it, else a
//! fallback (a server flag, a built-in value), recording where it came from.

use crate::api::policy::PolicyDefaults;
use crate::engine::defaulted::{Provenance, Source};
use crate::engine::policy::{Layer, first_default};

/// Provenance of a server flag.
pub const SOURCE_FLAG: &str = "flag";
/// Provenance of a built-in value.
pub const SOURCE_BUILT_IN: &str = "built-in";

/// The layers a service's defaults come from, and the fields filled so far.
pub(super) struct Filler<'l, 'a> {
    pub(super) layers: &'l [Layer<'a>],
    /// Each layer's provenance source, written on first use.
    sources: Vec<Option<Source>>,
    pub(super) filled: Vec<Provenance>,
    /// The filled values as JSON text, one after another.
    pub(super) values: Vec<u8>,
}

impl<'l, 'a> Filler<'l, 'a> {
    pub(super) fn new(layers: &'l [Layer<'a>]) -> Self {
        Self {
            layers,
            sources: vec![None; layers.len()],
            // A service written whole by defaulting fills about 30 fields.
            filled: Vec::with_capacity(32),
            values: Vec::with_capacity(512),
        }
    }

    /// Fill `slot` when empty: policy layers, then `fallback` (value, source).
    pub(super) fn fill<T: serde::Serialize>(
        &mut self,
        slot: &mut Option<T>,
        field: &'static str,
        from_policy: impl Fn(&'a PolicyDefaults) -> Option<T>,
        fallback: Option<(T, &'static str)>,
    ) {
        if slot.is_some() {
            return;
        }
        let found = match self.first(from_policy) {
            Some(found) => Some(found),
            None => fallback.map(|(v, src)| (v, Source::Fixed(src))),
        };
        if let Some((v, source)) = found {
            let value = self.write_value(&v);
            *slot = Some(v);
            self.filled.push(Provenance {
                field,
                source,
                value,
            });
        }
    }

    /// The value of the first policy layer that sets one, and its source.
    pub(super) fn first<T>(
        &mut self,
        from_policy: impl Fn(&'a PolicyDefaults) -> Option<T>,
    ) -> Option<(T, Source)> {
        let (v, i) = first_default(self.layers, from_policy)?;
        let layer = &self.layers[i];
        let source = self.sources[i].get_or_insert_with(|| Source::from(layer.source()));
        Some((v, source.clone()))
    }

    /// Fill `slot` when empty with the built-in `value`.
    pub(super) fn built_in<T: serde::Serialize>(
        &mut self,
        slot: &mut Option<T>,
        field: &'static str,
        value: T,
    ) {
        self.fill(slot, field, |_| None, Some((value, SOURCE_BUILT_IN)));
    }

    /// Record that `field` was filled with `value` from `source` (a value
    /// that comes from neither a policy nor a built-in).
    pub(super) fn record<T: serde::Serialize>(
        &mut self,
        field: &'static str,
        source: impl Into<Source>,
        value: &T,
    ) {
        let value = self.write_value(value);
        self.filled.push(Provenance {
            field,
            source: source.into(),
            value,
        });
    }

    /// Append `value` as JSON text to the values; where it is.
    fn write_value<T: serde::Serialize>(&mut self, value: &T) -> Option<std::ops::Range<usize>> {
        let start = self.values.len();
        match serde_json::to_writer(&mut self.values, value) {
            Ok(()) => Some(start..self.values.len()),
            Err(_) => {
                self.values.truncate(start);
                None
            }
        }
    }

    /// Whether any layer's defaults satisfy `set`.
    pub(super) fn any_policy(&self, set: impl Fn(&PolicyDefaults) -> bool) -> bool {
        self.layers.iter().any(|l| l.defaults.is_some_and(&set))
    }
}
