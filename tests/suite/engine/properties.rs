//! The engine's properties, over generated services and policies: down(up(x))
//! and up(down(x)) are x, the webhook's streaming conversion answers as the
//! typed one, default(default(x)) is default(x) (and the webhook's patch
//! adds only), and every validation error names its field. Proptest
//! replays first the cases that failed once, kept in
//! `tests/proptest-regressions/engine/properties.txt` (its default place for
//! a source below `tests/suite/`, the folder of this binary's `main.rs`).

use std::collections::BTreeMap;

use infergate::api::CONVERSION_DATA_ANNOTATION;
use infergate::api::conversion::{self, V1ALPHA1, V1BETA1};
use infergate::api::v1beta1::InferenceService;
use infergate::engine::{self, NoRoutes, PolicySnapshot};
use proptest::prelude::*;

use super::strategies::{alpha_service, beta_service, snapshot};
use super::{ctx_run, validate};

/// The webhook's patch for `defaulted`, parsed.
fn defaulting_patch(
    before: &InferenceService,
    defaulted: &engine::DefaultedSpec,
) -> json_patch::Patch {
    let text = infergate::webhook::patch::defaulting_patch(before, defaulted).unwrap();
    serde_json::from_slice(&text).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// down(up(x)) == x for every valid v1alpha1 object.
    #[test]
    fn alpha_round_trips(a in alpha_service()) {
        let b = conversion::to_v1beta1(&a).unwrap();
        let back = conversion::to_v1alpha1(&b).unwrap();
        prop_assert_eq!(&back, &a);
        // Metadata changes only in the conversion annotation.
        let mut meta = b.metadata.clone();
        if let Some(an) = meta.annotations.as_mut() {
            an.remove(CONVERSION_DATA_ANNOTATION);
            if an.is_empty() && a.metadata.annotations.is_none() {
                meta.annotations = None;
            }
        }
        prop_assert_eq!(meta, a.metadata.clone());
        // The same through the JSON entry point the webhook uses.
        let json = serde_json::to_value(&a).unwrap();
        let up = conversion::convert(json.clone(), V1BETA1).unwrap();
        prop_assert_eq!(up["apiVersion"].as_str(), Some(V1BETA1));
        let down = conversion::convert(up, V1ALPHA1).unwrap();
        prop_assert_eq!(down, json);
    }

    /// The webhook's one-object-at-a-time path (metadata kept as slices of
    /// the body) answers exactly what the typed conversion of the whole
    /// object does, both ways, the stash annotation included.
    #[test]
    fn the_streaming_path_converts_as_the_typed_one(a in alpha_service(), b in beta_service()) {
        use infergate::webhook::conversion::convert_object;
        for (json, desired) in [
            (serde_json::to_value(&a).unwrap(), V1BETA1),
            (serde_json::to_value(&b).unwrap(), V1ALPHA1),
            (serde_json::to_value(&b).unwrap(), V1BETA1),
        ] {
            let expected = conversion::convert(json.clone(), desired).unwrap();
            let streamed = convert_object(&json.to_string(), desired).unwrap();
            let streamed: serde_json::Value = serde_json::from_slice(&streamed).unwrap();
            prop_assert_eq!(&streamed, &expected);
            // And back again, from the streamed answer.
            let back_to = json["apiVersion"].as_str().unwrap();
            let back = convert_object(&streamed.to_string(), back_to).unwrap();
            let back: serde_json::Value = serde_json::from_slice(&back).unwrap();
            prop_assert_eq!(back, json);
        }
    }

    /// up(down(x)) == x for every valid v1beta1 object, status included.
    #[test]
    fn beta_round_trips(b in beta_service()) {
        let a = conversion::to_v1alpha1(&b).unwrap();
        let back = conversion::to_v1beta1(&a).unwrap();
        prop_assert_eq!(&back, &b);
        let json = serde_json::to_value(&b).unwrap();
        let down = conversion::convert(json.clone(), V1ALPHA1).unwrap();
        prop_assert_eq!(down["apiVersion"].as_str(), Some(V1ALPHA1));
        prop_assert_eq!(&down["metadata"]["name"], &json["metadata"]["name"]);
        let up = conversion::convert(down, V1BETA1).unwrap();
        prop_assert_eq!(up, json);
    }

    /// default(default(x)) == default(x), and the patch for an already
    /// defaulted object is empty; the patch for x turns x into default(x).
    #[test]
    fn defaulting_is_idempotent(svc in beta_service(), policies in snapshot(), tier in any::<bool>()) {
        let mut svc = svc;
        svc.metadata.namespace = Some("team-a".to_owned());
        let labels: BTreeMap<String, String> = if tier {
            BTreeMap::from([("tier".to_owned(), "prod".to_owned())])
        } else {
            BTreeMap::new()
        };
        let (once, twice, spec_once, spec_twice) = ctx_run(&policies, &labels, &NoRoutes, |c| {
            let once = engine::default_service(&svc, c);
            let twice = engine::default_service(&once.object, c);
            // What the mutating webhook patches from: the spec alone.
            let spec_once = engine::default_spec(&svc, c);
            let spec_twice = engine::default_spec(&once.object, c);
            (once, twice, spec_once, spec_twice)
        });
        prop_assert_eq!(&spec_once.spec, &once.object.spec);
        prop_assert_eq!(&spec_once.filled, &once.filled);
        prop_assert_eq!(&twice.object, &once.object);
        prop_assert!(twice.filled.is_empty());
        let j1 = serde_json::to_value(&once.object).unwrap();
        let j2 = serde_json::to_value(&twice.object).unwrap();
        prop_assert!(json_patch::diff(&j1, &j2).0.is_empty());
        let j0 = serde_json::to_value(&svc).unwrap();
        let patch = json_patch::diff(&j0, &j1);
        prop_assert_eq!(patch.0.is_empty(), once.filled.is_empty());
        let mut patched = j0.clone();
        json_patch::patch(&mut patched, &patch).unwrap();
        prop_assert_eq!(&patched, &j1);
        // The webhook's patch, built from what defaulting recorded, does the
        // same with adds only, and is empty for a defaulted object.
        let recorded = defaulting_patch(&svc, &spec_once);
        prop_assert!(recorded.0.iter().all(|op| matches!(op, json_patch::PatchOperation::Add(_))));
        let mut patched = j0.clone();
        json_patch::patch(&mut patched, &recorded).unwrap();
        prop_assert_eq!(&patched, &j1);
        prop_assert!(defaulting_patch(&once.object, &spec_twice).0.is_empty());
        // Replicas the user set, 0 included, are never changed.
        if let Some(r) = svc.spec.replicas {
            prop_assert_eq!(once.object.spec.replicas, Some(r));
        }
    }

    /// Validation never panics and every error names a field.
    #[test]
    fn every_error_names_its_field(svc in beta_service()) {
        let v = validate(&svc, &PolicySnapshot::default());
        for e in &v.errors {
            prop_assert!(e.field.starts_with("spec.") || e.field.starts_with("metadata."), "{}", e);
            let prefix = format!("{}: ", e.field);
            prop_assert!(e.to_string().starts_with(&prefix));
        }
    }
}
