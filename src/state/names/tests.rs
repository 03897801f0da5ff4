use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::api::v1beta1::InferenceService;
use crate::engine::model_names::claims;

use super::book::{
    Existing, Gateway, Held, Holding, IN_FLIGHT, NameBook, ServicesSeen, Sightings, correct, key,
    names_on,
};
use super::store::ledger_name;

fn svc(ns: &str, name: &str, spec: serde_json::Value) -> InferenceService {
    let mut s: InferenceService = serde_json::from_value(serde_json::json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
        "metadata": {"namespace": ns, "name": name, "uid": format!("uid-{ns}-{name}")},
        "spec": spec,
    }))
    .expect("fixture decodes");
    s.metadata.generation = Some(1);
    s
}

fn by_name(served: &str, adapters: &[&str], hostnames: &[&str]) -> serde_json::Value {
    let adapters: Vec<_> = adapters
        .iter()
        .map(|a| serde_json::json!({"name": a, "source": format!("org/{a}")}))
        .collect();
    serde_json::json!({
        "model": {"ref": "m", "servedName": served, "adapters": adapters},
        "routing": {"match": "ModelName", "hostnames": hostnames,
                    "gateway": {"name": "inference-gw", "namespace": "gateways"}},
    })
}

fn gw() -> Gateway {
    ("gateways".to_owned(), "inference-gw".to_owned())
}

fn held(name: &str) -> BTreeSet<Held> {
    BTreeSet::from([Held {
        name: name.to_owned(),
        hostname: None,
    }])
}

#[test]
fn a_name_held_elsewhere_is_denied_with_its_field_naming_only_a_holder_in_the_namespace() {
    let chat = svc("team-a", "chat", by_name("llama-3-70b", &[], &[]));
    let book = NameBook::of_services(&gw(), [&chat]);
    let same = svc("team-a", "chat2", by_name("llama-3-70b", &[], &[]));
    let e = book
        .judge(&gw(), &key("team-a", "chat2"), &claims(&same), "team-a")
        .expect("denied");
    assert_eq!(e.field, "spec.model.servedName");
    assert_eq!(
        e.to_string(),
        "spec.model.servedName: Duplicate value: \"llama-3-70b\": served through Gateway gateways/inference-gw by team-a/chat"
    );
    let other = svc("team-b", "chat", by_name("llama-3-70b", &[], &[]));
    let e = book
        .judge(&gw(), &key("team-b", "chat"), &claims(&other), "team-b")
        .expect("denied");
    assert!(
        e.to_string().contains("by a service in another namespace"),
        "{e}"
    );
    assert!(!e.to_string().contains("team-a"), "{e}");
    // An adapter named like another service's base name.
    let lora = svc(
        "team-b",
        "lora",
        by_name("base-x", &["sql", "llama-3-70b"], &[]),
    );
    let e = book
        .judge(&gw(), &key("team-b", "lora"), &claims(&lora), "team-b")
        .expect("denied");
    assert_eq!(e.field, "spec.model.adapters[1].name");
    // The service itself is no rival.
    assert!(
        book.judge(&gw(), &key("team-a", "chat"), &claims(&chat), "team-a")
            .is_none()
    );
}

#[test]
fn disjoint_hostnames_and_other_gateways_do_not_clash_but_every_hostname_meets_any() {
    let a = svc("team-a", "a", by_name("m1", &[], &["a.example.com"]));
    let book = NameBook::of_services(&gw(), [&a]);
    let b = svc("team-b", "b", by_name("m1", &[], &["b.example.com"]));
    assert!(
        book.judge(&gw(), &key("team-b", "b"), &claims(&b), "team-b")
            .is_none()
    );
    let every = svc("team-b", "c", by_name("m1", &[], &[]));
    assert!(
        book.judge(&gw(), &key("team-b", "c"), &claims(&every), "team-b")
            .is_some()
    );
    let mut elsewhere = by_name("m1", &[], &[]);
    elsewhere["routing"]["gateway"]["name"] = serde_json::json!("other-gw");
    let d = svc("team-b", "d", elsewhere);
    assert!(names_on(&gw(), &claims(&d)).is_empty());
    // A service routed by path holds nothing.
    let path = svc(
        "team-b",
        "p",
        serde_json::json!({"model": {"ref": "m1"},
        "routing": {"gateway": {"name": "inference-gw", "namespace": "gateways"}}}),
    );
    assert!(claims(&path).is_empty());
    assert!(NameBook::of_services(&gw(), [&path]).entries.is_empty());
}

#[test]
fn a_book_round_trips_through_configmap_data() {
    let a = svc("team-a", "a", by_name("m1", &["x"], &["a.example.com"]));
    let mut book = NameBook::of_services(&gw(), [&a]);
    book = book.with(
        &key("team-b", "b"),
        Holding::admitted(held("m2"), Some("u"), Some(3), "4711"),
    );
    let data = book.to_data();
    assert_eq!(
        data[&key("team-b", "b")],
        r#"{"names":[{"n":"m2"}],"uid":"u","gen":3,"seq":"4711"}"#
    );
    assert_eq!(NameBook::parse(Some(&data)), book);
    let mut bad = data.clone();
    bad.insert("x.y".to_owned(), "not json".to_owned());
    assert_eq!(NameBook::parse(Some(&bad)), book);
}

#[test]
fn ledger_names_are_object_names() {
    assert_eq!(ledger_name(&gw()), "infergate-names-gateways.inference-gw");
    let long = ("gateways".to_owned(), "g".repeat(250));
    let name = ledger_name(&long);
    assert_eq!(name.len(), "infergate-names-".len() + 64);
    assert_ne!(name, ledger_name(&("gateways".to_owned(), "h".repeat(250))));
}

fn existing(uid: &str, generation: i64, names: &str) -> Existing {
    Existing {
        uid: Some(uid.to_owned()),
        generation: Some(generation),
        names: if names.is_empty() {
            BTreeSet::new()
        } else {
            held(names)
        },
    }
}

#[test]
fn a_deleted_services_names_go_at_once_and_a_never_stored_ones_after_the_flight() {
    let t0 = Instant::now();
    let mut sightings = Sightings::default();
    let book = NameBook::default()
        .with("a.gone", Holding::settled(held("m1"), Some("u1")))
        .with(
            "a.never",
            Holding::admitted(held("m2"), Some("u2"), Some(1), "7"),
        )
        .with(
            "a.recreated",
            Holding::admitted(held("m3"), Some("new"), Some(1), "8"),
        );
    let seen = ServicesSeen {
        existing: BTreeMap::new(),
        deleted: BTreeMap::from([
            ("a.gone".to_owned(), BTreeSet::from(["u1".to_owned()])),
            ("a.recreated".to_owned(), BTreeSet::from(["old".to_owned()])),
        ]),
    };
    let next = correct(&book, &seen, &mut sightings, t0).expect("changed");
    assert_eq!(
        next.entries.keys().collect::<Vec<_>>(),
        ["a.never", "a.recreated"],
        "the deleted service's names go; in-flight ones stay"
    );
    let later = t0 + IN_FLIGHT + Duration::from_millis(1);
    let next = correct(&next, &ServicesSeen::default(), &mut sightings, later).expect("changed");
    assert!(next.entries.is_empty(), "{next:?}");
}

#[test]
fn an_in_flight_update_keeps_what_it_recorded_and_a_stored_one_settles() {
    let t0 = Instant::now();
    let mut sightings = Sightings::default();
    // Recorded m2 at generation 2; the service is still stored at 1 with m1.
    let book = NameBook::default().with(
        "a.s",
        Holding::admitted(held("m2"), Some("u"), Some(2), "9"),
    );
    let seen = ServicesSeen {
        existing: BTreeMap::from([("a.s".to_owned(), existing("u", 1, "m1"))]),
        deleted: BTreeMap::new(),
    };
    let next = correct(&book, &seen, &mut sightings, t0).expect("changed");
    let names: Vec<_> = next.entries["a.s"]
        .names
        .iter()
        .map(|h| h.name.as_str())
        .collect();
    assert_eq!(names, ["m1", "m2"]);
    // Stored at 2 with m2: settled.
    let seen = ServicesSeen {
        existing: BTreeMap::from([("a.s".to_owned(), existing("u", 2, "m2"))]),
        deleted: BTreeMap::new(),
    };
    let next = correct(&next, &seen, &mut sightings, t0).expect("changed");
    assert_eq!(next.entries["a.s"], Holding::settled(held("m2"), Some("u")));
    assert!(
        correct(&next, &seen, &mut sightings, t0).is_none(),
        "stable"
    );
    // Moved to routing by path: nothing held any more.
    let seen = ServicesSeen {
        existing: BTreeMap::from([("a.s".to_owned(), existing("u", 3, ""))]),
        deleted: BTreeMap::new(),
    };
    let next = correct(&next, &seen, &mut sightings, t0).expect("changed");
    assert!(next.entries.is_empty());
    // A holder the ledger missed is added.
    let seen = ServicesSeen {
        existing: BTreeMap::from([("b.t".to_owned(), existing("v", 1, "m9"))]),
        deleted: BTreeMap::new(),
    };
    let next = correct(&next, &seen, &mut sightings, t0).expect("changed");
    assert_eq!(next.entries["b.t"], Holding::settled(held("m9"), Some("v")));
}
