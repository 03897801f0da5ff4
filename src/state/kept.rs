//! The metadata a watch keeps of an object, decoded as far as it is kept:
//! [`kept_metadata!`](kept_metadata) writes the `deserialize_with` function
//! of an object's `metadata` from the list of fields kept.

/// Defines `fn $name`, a serde `deserialize_with` function that decodes an
/// object's `metadata` into an `ObjectMeta` holding its identity (name,
/// namespace, uid, resourceVersion and deletion timestamp) and the fields
/// listed (each an `ObjectMeta` field with its type, camelCase on the wire,
/// with any serde attributes). The rest (the managed fields above all) is
/// skipped as it is read, never allocated.
macro_rules! kept_metadata {
    ($(#[$doc:meta])* $vis:vis fn $name:ident { $($(#[$attr:meta])* $field:ident: $ty:ty),* $(,)? }) => {
        $(#[$doc])*
        $vis fn $name<'de, D: serde::Deserializer<'de>>(
            d: D,
        ) -> Result<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, D::Error> {
            #[derive(serde::Deserialize)]
            #[serde(rename_all = "camelCase")]
            struct Kept {
                name: Option<String>,
                namespace: Option<String>,
                uid: Option<String>,
                resource_version: Option<String>,
                deletion_timestamp: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
                $($(#[$attr])* $field: $ty,)*
            }
            let k = <Kept as serde::Deserialize>::deserialize(d)?;
            Ok(k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: k.name,
                namespace: k.namespace,
                uid: k.uid,
                resource_version: k.resource_version,
                deletion_timestamp: k.deletion_timestamp,
                $($field: k.$field,)*
                ..Default::default()
            })
        }
    };
}

pub(crate) use kept_metadata;
