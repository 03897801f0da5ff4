use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::book::*;
use crate::engine::capacity::charge::{Charge, decimal};

fn gpus(n: i64) -> Charge {
    Charge {
        gpus: n,
        cost: None,
    }
}

/// An admission's charge for the service of uid `uid`, written as `seq`.
fn admitted(n: i64, uid: &str, seq: &str) -> Entry {
    Entry::admitted(gpus(n), Some(uid), Some(2), seq)
}

/// A charge the reconciler took from the service of uid `uid`.
fn settled(n: i64, uid: &str) -> Entry {
    Entry::settled(gpus(n), Some(uid))
}

fn book(entries: &[(&str, Entry)]) -> Book {
    Book {
        entries: entries
            .iter()
            .map(|(n, e)| ((*n).to_owned(), e.clone()))
            .collect(),
    }
}

/// Services that exist: (name, uid, GPUs).
fn seen(charges: &[(&str, &str, i64)]) -> ServicesSeen {
    ServicesSeen {
        charges: charges
            .iter()
            .map(|(n, uid, g)| {
                let existing = Existing {
                    uid: Some((*uid).to_owned()),
                    generation: Some(1),
                    charge: gpus(*g),
                };
                ((*n).to_owned(), existing)
            })
            .collect(),
        ..ServicesSeen::default()
    }
}

fn deleted(mut s: ServicesSeen, name: &str, uid: &str) -> ServicesSeen {
    s.deleted
        .entry(name.to_owned())
        .or_default()
        .insert(uid.to_owned());
    s
}

const SECOND: Duration = Duration::from_secs(1);

#[test]
fn entries_round_trip_through_configmap_data() {
    let b = Book::default()
        .with(
            "chat",
            Entry::admitted(
                Charge {
                    gpus: 8,
                    cost: decimal("32.8"),
                },
                Some("u-chat"),
                Some(3),
                "4711",
            ),
        )
        .with("embed", settled(4, "u-embed"));
    let data = b.to_data();
    assert_eq!(
        data["chat"],
        r#"{"gpus":8,"cost":"32.80","uid":"u-chat","gen":3,"seq":"4711"}"#
    );
    assert_eq!(data["embed"], r#"{"gpus":4,"uid":"u-embed"}"#);
    assert_eq!(Book::parse(Some(&data)), b);
    assert_eq!(b.gpus(), 12);
}

#[test]
fn a_value_that_does_not_parse_is_left_out_and_an_older_entry_parses_settled() {
    let mut data = BTreeMap::new();
    data.insert("bad".to_owned(), "{".to_owned());
    data.insert(
        "ok".to_owned(),
        r#"{"gpus":1,"at":"2026-01-01T00:00:00Z"}"#.to_owned(),
    );
    let b = Book::parse(Some(&data));
    assert_eq!(b.entries.keys().collect::<Vec<_>>(), ["ok"]);
    assert_eq!(b.entries["ok"], Entry::settled(gpus(1), None));
    assert_eq!(Book::parse(None), Book::default());
    assert_eq!(b.others("ok"), Vec::<(&str, Charge)>::new());
    assert_eq!(b.others("new"), vec![("ok", gpus(1))]);
}

#[test]
fn a_first_ledger_holds_every_service_that_holds_something() {
    let b = Book::of_services([
        ("chat".to_owned(), Some("u1"), gpus(8)),
        ("embed".to_owned(), Some("u2"), gpus(4)),
        ("cpu".to_owned(), Some("u3"), gpus(0)),
    ]);
    assert_eq!(
        b,
        book(&[("chat", settled(8, "u1")), ("embed", settled(4, "u2"))])
    );
}

#[test]
fn an_existing_service_takes_its_current_charge_once_no_longer_in_flight() {
    let t0 = Instant::now();
    let mut sightings = Sightings::default();
    let b = book(&[("chat", admitted(8, "u1", "10"))]);
    let s = seen(&[("chat", "u1", 4)]);
    // In flight from the first time this reconciler saw the write.
    assert_eq!(correct(&b, &s, &mut sightings, t0), None);
    assert_eq!(correct(&b, &s, &mut sightings, t0 + 9 * SECOND), None);
    let next = correct(&b, &s, &mut sightings, t0 + IN_FLIGHT).expect("lowered");
    assert_eq!(next.entries["chat"], settled(4, "u1"));
    assert_eq!(correct(&next, &s, &mut sightings, t0 + IN_FLIGHT), None);
}

#[test]
fn an_update_in_flight_keeps_the_larger_charge() {
    let t0 = Instant::now();
    let mut sightings = Sightings::default();
    let b = book(&[("chat", admitted(8, "u1", "10"))]);
    assert_eq!(
        correct(&b, &seen(&[("chat", "u1", 4)]), &mut sightings, t0),
        None
    );
    let next = correct(&b, &seen(&[("chat", "u1", 12)]), &mut sightings, t0).expect("raised");
    assert_eq!(next.entries["chat"].charge, gpus(12));
    assert_eq!(next.entries["chat"].seq.as_deref(), Some("10"));
}

#[test]
fn an_admission_is_no_longer_in_flight_once_its_service_is_seen_at_its_generation() {
    let t0 = Instant::now();
    let mut sightings = Sightings::default();
    let at = |uid: &str, generation: i64, n: i64| ServicesSeen {
        charges: BTreeMap::from([(
            "chat".to_owned(),
            Existing {
                uid: Some(uid.to_owned()),
                generation: Some(generation),
                charge: gpus(n),
            },
        )]),
        ..ServicesSeen::default()
    };
    // Raised to 8 at generation 2: the service still at generation 1 (4).
    let b = book(&[("chat", admitted(8, "u1", "10"))]);
    assert_eq!(correct(&b, &at("u1", 1, 4), &mut sightings, t0), None);
    // Stored, then lowered again at generation 3: the lowering counts at
    // once, well inside the window.
    assert_eq!(correct(&b, &at("u1", 2, 8), &mut sightings, t0), None);
    let lowered = correct(&b, &at("u1", 3, 4), &mut sightings, t0).expect("lowered");
    assert_eq!(lowered.entries["chat"], settled(4, "u1"));
    // Another service of that name at a later generation is not it.
    assert_eq!(correct(&b, &at("u2", 5, 4), &mut sightings, t0), None);
}

#[test]
fn a_raise_after_a_lowering_is_in_flight_from_its_own_write() {
    let t0 = Instant::now();
    let mut sightings = Sightings::default();
    // Lowered to 4 long ago: settled at 4.
    let b = book(&[("chat", admitted(8, "u1", "10"))]);
    let s = seen(&[("chat", "u1", 4)]);
    assert_eq!(correct(&b, &s, &mut sightings, t0), None);
    let lowered = correct(&b, &s, &mut sightings, t0 + IN_FLIGHT).expect("lowered");
    // Raised to 8 again by a new write: kept while the raise is in
    // flight, though the service still shows 4.
    let raised = lowered.with("chat", admitted(8, "u1", "20"));
    let later = t0 + 2 * IN_FLIGHT;
    assert_eq!(correct(&raised, &s, &mut sightings, later), None);
    assert_eq!(
        correct(&raised, &s, &mut sightings, later + IN_FLIGHT)
            .expect("lowered again")
            .entries["chat"],
        settled(4, "u1")
    );
}

#[test]
fn a_charge_whose_service_never_appeared_goes_once_no_longer_in_flight() {
    let t0 = Instant::now();
    let mut sightings = Sightings::default();
    let b = book(&[("ghost", admitted(1, "u9", "10"))]);
    assert_eq!(correct(&b, &seen(&[]), &mut sightings, t0), None);
    assert_eq!(
        correct(&b, &seen(&[]), &mut sightings, t0 + IN_FLIGHT),
        Some(Book::default())
    );
    // A charge the reconciler itself recorded is never in flight.
    let b = book(&[("ghost", settled(1, "u9"))]);
    assert_eq!(
        correct(&b, &seen(&[]), &mut Sightings::default(), t0),
        Some(Book::default())
    );
}

#[test]
fn a_deleted_service_goes_at_once_and_one_created_again_under_its_name_stays() {
    let t0 = Instant::now();
    let mut sightings = Sightings::default();
    let gone = deleted(seen(&[]), "chat", "u1");
    // The charge of the service deleted, even in flight: released.
    let b = book(&[("chat", admitted(8, "u1", "10"))]);
    assert_eq!(
        correct(&b, &gone, &mut sightings, t0),
        Some(Book::default())
    );
    // Created again (a new uid) and charged before the deletion was seen:
    // kept while in flight.
    let b = book(&[("chat", admitted(8, "u2", "11"))]);
    assert_eq!(correct(&b, &gone, &mut sightings, t0), None);
    // An entry of no known uid goes with any deletion of its name.
    let b = book(&[("chat", Entry::settled(gpus(8), None))]);
    assert_eq!(
        correct(&b, &gone, &mut sightings, t0),
        Some(Book::default())
    );
}

#[test]
fn a_service_charged_without_an_entry_is_added_and_one_of_nothing_is_not() {
    let t0 = Instant::now();
    let mut sightings = Sightings::default();
    let next = correct(
        &Book::default(),
        &seen(&[("chat", "u1", 8), ("cpu", "u2", 0)]),
        &mut sightings,
        t0,
    )
    .expect("added");
    assert_eq!(next, book(&[("chat", settled(8, "u1"))]));
    // A service whose charge drops to nothing leaves the book.
    assert_eq!(
        correct(&next, &seen(&[("chat", "u1", 0)]), &mut sightings, t0),
        Some(Book::default())
    );
}

/// A webhook whose clock is ten minutes behind the reconciler's, and one
/// ten minutes ahead: the corrections are the same as with no clock at
/// all. The entries a webhook writes carry no time (an older ledger's
/// `at`, written by such a clock, is ignored), and an admission's charge
/// is in flight for [`IN_FLIGHT`] of the reconciler's own clock from when
/// it first saw the write.
#[test]
fn a_webhook_clock_ten_minutes_off_changes_no_correction() {
    let leader = jiff::Timestamp::from_second(1_767_225_600).expect("leader's clock");
    let ten_minutes = jiff::SignedDuration::from_mins(10);
    let written = |webhook: jiff::Timestamp| {
        let entry = admitted(8, "u2", "4711");
        let mut data = Book::default().with("chat", entry).to_data();
        let value = data.get_mut("chat").expect("entry");
        // As a webhook stamping its own time would have written it.
        *value = value.replace('}', &format!(r#","at":"{webhook}"}}"#));
        Book::parse(Some(&data))
    };
    let behind = written(leader - ten_minutes);
    let ahead = written(leader + ten_minutes);
    assert_eq!(behind, ahead);
    assert_eq!(behind, book(&[("chat", admitted(8, "u2", "4711"))]));
    let t0 = Instant::now();
    for b in [behind, ahead] {
        let mut sightings = Sightings::default();
        // A CREATE not stored yet (its service not seen, the one of that
        // name before it deleted): kept, neither dropped as stale (a slow
        // clock) nor kept for ever (a fast one).
        let gone = deleted(seen(&[]), "chat", "u1");
        assert_eq!(correct(&b, &gone, &mut sightings, t0), None);
        assert_eq!(correct(&b, &gone, &mut sightings, t0 + 9 * SECOND), None);
        assert_eq!(
            correct(&b, &gone, &mut sightings, t0 + IN_FLIGHT),
            Some(Book::default())
        );
    }
}

#[test]
fn larger_and_covers_compare_gpus_and_cost() {
    let a = Charge {
        gpus: 2,
        cost: decimal("5"),
    };
    let b = Charge {
        gpus: 3,
        cost: None,
    };
    assert_eq!(
        larger(a, b),
        Charge {
            gpus: 3,
            cost: decimal("5")
        }
    );
    assert!(!covers(a, b));
    assert!(!covers(b, a));
    assert!(covers(larger(a, b), a));
    assert!(is_nothing(Charge::default()));
    assert!(!is_nothing(a));
}
