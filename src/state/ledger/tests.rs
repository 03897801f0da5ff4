use std::collections::BTreeMap;

use jiff::Timestamp;

use super::book::*;
use crate::engine::capacity::charge::{Charge, decimal};

fn ts(s: &str) -> Timestamp {
    s.parse().expect("timestamp")
}

fn gpus(n: i64) -> Charge {
    Charge {
        gpus: n,
        cost: None,
    }
}

fn entry(n: i64, at: &str) -> Entry {
    Entry {
        charge: gpus(n),
        at: ts(at),
    }
}

fn book(entries: &[(&str, Entry)]) -> Book {
    Book {
        entries: entries
            .iter()
            .map(|(n, e)| ((*n).to_owned(), e.clone()))
            .collect(),
    }
}

fn seen(charges: &[(&str, i64)]) -> ServicesSeen {
    ServicesSeen {
        charges: charges
            .iter()
            .map(|(n, g)| ((*n).to_owned(), gpus(*g)))
            .collect(),
        ..ServicesSeen::default()
    }
}

const NOW: &str = "2026-01-01T00:01:00Z";

#[test]
fn entries_round_trip_through_configmap_data() {
    let b = Book::default()
        .with(
            "chat",
            Charge {
                gpus: 8,
                cost: decimal("32.8"),
            },
            ts("2026-01-01T00:00:00Z"),
        )
        .with("embed", gpus(4), ts("2026-01-01T00:00:01Z"));
    let data = b.to_data();
    assert_eq!(
        data["chat"],
        r#"{"gpus":8,"cost":"32.80","at":"2026-01-01T00:00:00Z"}"#
    );
    assert_eq!(data["embed"], r#"{"gpus":4,"at":"2026-01-01T00:00:01Z"}"#);
    assert_eq!(Book::parse(Some(&data)), b);
    assert_eq!(b.gpus(), 12);
}

#[test]
fn a_value_that_does_not_parse_is_left_out() {
    let mut data = BTreeMap::new();
    data.insert("bad".to_owned(), "{".to_owned());
    data.insert(
        "ok".to_owned(),
        r#"{"gpus":1,"at":"2026-01-01T00:00:00Z"}"#.to_owned(),
    );
    let b = Book::parse(Some(&data));
    assert_eq!(b.entries.keys().collect::<Vec<_>>(), ["ok"]);
    assert_eq!(Book::parse(None), Book::default());
}

#[test]
fn recording_counts_a_missing_entry_as_nothing() {
    let b = book(&[("chat", entry(8, NOW))]);
    assert!(b.records_at_least("chat", gpus(8)));
    assert!(b.records_at_least("chat", gpus(2)));
    assert!(!b.records_at_least("chat", gpus(9)));
    assert!(!b.records_at_least("embed", gpus(1)));
    assert!(b.records_at_least("embed", gpus(0)));
    let priced = Charge {
        gpus: 8,
        cost: decimal("1"),
    };
    assert!(!b.records_at_least("chat", priced));
    assert_eq!(b.others("chat"), Vec::<(&str, Charge)>::new());
    assert_eq!(b.others("embed"), vec![("chat", gpus(8))]);
}

#[test]
fn an_existing_service_takes_its_current_charge_once_no_longer_in_flight() {
    let b = book(&[("chat", entry(8, "2026-01-01T00:00:00Z"))]);
    let next = correct(&b, &seen(&[("chat", 4)]), ts(NOW)).expect("lowered");
    assert_eq!(next.entries["chat"].charge, gpus(4));
    assert_eq!(correct(&next, &seen(&[("chat", 4)]), ts(NOW)), None);
}

#[test]
fn an_update_in_flight_keeps_the_larger_charge() {
    let b = book(&[("chat", entry(8, "2026-01-01T00:00:55Z"))]);
    assert_eq!(correct(&b, &seen(&[("chat", 4)]), ts(NOW)), None);
    let next = correct(&b, &seen(&[("chat", 12)]), ts(NOW)).expect("raised");
    assert_eq!(next.entries["chat"].charge, gpus(12));
}

#[test]
fn a_charge_whose_service_never_appeared_goes_once_no_longer_in_flight() {
    let b = book(&[("ghost", entry(1, "2026-01-01T00:00:55Z"))]);
    assert_eq!(correct(&b, &seen(&[]), ts(NOW)), None);
    let b = book(&[("ghost", entry(1, "2026-01-01T00:00:49Z"))]);
    assert_eq!(correct(&b, &seen(&[]), ts(NOW)), Some(Book::default()));
    // A clock ahead of this one's: still in flight.
    let b = book(&[("ghost", entry(1, "2026-01-01T00:01:30Z"))]);
    assert_eq!(correct(&b, &seen(&[]), ts(NOW)), None);
}

#[test]
fn a_deleted_service_goes_at_once_unless_charged_again_since() {
    let mut s = seen(&[]);
    s.deleted
        .insert("chat".to_owned(), ts("2026-01-01T00:00:59Z"));
    let b = book(&[("chat", entry(8, "2026-01-01T00:00:58Z"))]);
    assert_eq!(correct(&b, &s, ts(NOW)), Some(Book::default()));
    // Created again (and charged) after the deletion: kept while in flight.
    let b = book(&[("chat", entry(8, "2026-01-01T00:00:59.5Z"))]);
    assert_eq!(correct(&b, &s, ts(NOW)), None);
}

#[test]
fn a_service_charged_without_an_entry_is_added_and_one_of_nothing_is_not() {
    let next =
        correct(&Book::default(), &seen(&[("chat", 8), ("cpu", 0)]), ts(NOW)).expect("added");
    assert_eq!(next.entries.keys().collect::<Vec<_>>(), ["chat"]);
    assert_eq!(next.entries["chat"], entry(8, NOW));
    // A service whose charge drops to nothing leaves the book.
    let b = book(&[("chat", entry(8, "2026-01-01T00:00:00Z"))]);
    assert_eq!(
        correct(&b, &seen(&[("chat", 0)]), ts(NOW)),
        Some(Book::default())
    );
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
