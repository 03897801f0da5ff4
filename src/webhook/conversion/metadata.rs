//! `metadata` read key by key: only when its bytes may hold the
//! conversion annotation, or the conversion has a stash to add. The typed
//! conversion sees a light copy of it ([`light_metadata`]).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde::de::{self, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::api::CONVERSION_DATA_ANNOTATION;
use crate::api::conversion::ConversionError;

/// Whether some key of this `metadata` may be the conversion annotation:
/// its name appears, or a `\u` escape (`unicode`, seen by the scanner)
/// could spell it. Otherwise the object carries no stash and its metadata
/// can be copied as it is.
pub(super) fn may_hold_stash(metadata: &str, unicode: bool) -> bool {
    use memchr::memmem::Finder;
    use std::sync::LazyLock;
    static NAME: LazyLock<Finder<'static>> = LazyLock::new(|| {
        let name = CONVERSION_DATA_ANNOTATION.rsplit('/').next();
        Finder::new(name.unwrap_or(CONVERSION_DATA_ANNOTATION))
    });
    unicode || NAME.find(metadata.as_bytes()).is_some()
}

/// A JSON object, key by key, values as slices (JSON, checked).
pub(super) type RawMap<'a> = Vec<(Cow<'a, str>, &'a str)>;

/// `metadata` read in the object's one pass: every key with its value as a
/// slice, and `annotations` (when a map) key by key as well.
pub(super) struct Metadata<'a> {
    pub(super) entries: RawMap<'a>,
    pub(super) annotations: Option<RawMap<'a>>,
}

struct RawMapVisitor;

impl<'de> Visitor<'de> for RawMapVisitor {
    type Value = RawMap<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawMap<'de>, A::Error> {
        let mut out = Vec::new();
        while let Some((k, v)) = map.next_entry::<Cow<'de, str>, &'de RawValue>()? {
            out.push((k, v.get()));
        }
        Ok(out)
    }
}

/// `annotations`: a map, or `null`.
struct Annotations<'a>(Option<RawMap<'a>>);

impl<'de: 'a, 'a> Deserialize<'de> for Annotations<'a> {
    fn deserialize<D: de::Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        struct OptionVisitor;
        impl<'de> Visitor<'de> for OptionVisitor {
            type Value = Annotations<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object or null")
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Annotations(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Annotations(None))
            }
            fn visit_some<D: de::Deserializer<'de>>(self, de: D) -> Result<Self::Value, D::Error> {
                de.deserialize_map(RawMapVisitor)
                    .map(|m| Annotations(Some(m)))
            }
        }
        de.deserialize_option(OptionVisitor)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Metadata<'a> {
    fn deserialize<D: de::Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        struct MetadataVisitor;
        impl<'de> Visitor<'de> for MetadataVisitor {
            type Value = Metadata<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Metadata<'de>, A::Error> {
                let mut entries = Vec::new();
                let mut annotations = None;
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    if key == "annotations" {
                        let Annotations(map) = map.next_value()?;
                        annotations = map;
                        // Kept in place (its slice is not needed: it is rewritten).
                        entries.push((key, "null"));
                    } else {
                        entries.push((key, map.next_value::<&'de RawValue>()?.get()));
                    }
                }
                Ok(Metadata {
                    entries,
                    annotations,
                })
            }
        }
        de.deserialize_map(MetadataVisitor)
    }
}

pub(super) fn decode<'a, T: Deserialize<'a>>(
    raw: &'a str,
    what: &str,
) -> Result<T, ConversionError> {
    serde_json::from_str(raw).map_err(|e| ConversionError::Decode(format!("{what}: {e}")))
}

/// `metadata`, key by key.
pub(super) fn read_metadata<'a>(raw: &'a str) -> Result<Metadata<'a>, ConversionError> {
    serde_json::from_str::<Metadata<'a>>(raw)
        .map_err(|e| ConversionError::Decode(format!("metadata: {e}")))
}

/// What the typed conversion reads of `metadata`: whether there is an
/// `annotations` map, whether it holds anything but the conversion
/// annotation, and the value of that annotation.
pub(super) fn light_metadata(
    annotations: Option<&RawMap<'_>>,
) -> Result<ObjectMeta, ConversionError> {
    // Stands for every other annotation: the typed conversion only asks
    // whether there are any.
    use crate::api::vocabulary::names::ANNOTATION_OTHERS as OTHERS;
    let Some(annotations) = annotations else {
        return Ok(ObjectMeta::default());
    };
    let mut light = BTreeMap::new();
    for (k, v) in annotations {
        if k == CONVERSION_DATA_ANNOTATION {
            let stash = decode::<String>(v, "the conversion annotation")?;
            light.insert(CONVERSION_DATA_ANNOTATION.to_owned(), stash);
        } else if !light.contains_key(OTHERS) {
            light.insert(OTHERS.to_owned(), String::new());
        }
    }
    Ok(ObjectMeta {
        annotations: Some(light),
        ..ObjectMeta::default()
    })
}

/// `metadata.name`, for messages.
pub(super) fn name_of(metadata: Option<&str>) -> String {
    metadata
        .and_then(|m| serde_json::from_str::<Metadata<'_>>(m).ok())
        .and_then(|m| {
            m.entries
                .iter()
                .find(|(k, _)| k == "name")
                .and_then(|(_, v)| serde_json::from_str::<String>(v).ok())
        })
        .unwrap_or_default()
}
