use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use reqwest::Url;

use super::registry::{Rule, V4, V6};
use super::{Form, destination, internal_category};
use crate::graph::fetch::check_url;

fn url(u: &str) -> Url {
    check_url(u).expect("url")
}

fn category(ip: &str) -> Option<&'static str> {
    internal_category(ip.parse().expect(ip)).map(|i| i.category)
}

/// One address per entry of the IANA IPv4 and IPv6 Special-Purpose Address
/// Registries (and the rows added to them here), with the category it has,
/// `None` for a globally reachable entry.
const ENTRIES: &[(&str, Option<&str>)] = &[
    ("0.0.0.0", Some("this host on this network")),
    ("0.1.2.3", Some("this network")),
    ("10.1.2.3", Some("private-use")),
    ("100.64.0.1", Some("shared address space (CGN)")),
    ("100.127.255.255", Some("shared address space (CGN)")),
    ("127.0.0.1", Some("loopback")),
    ("169.254.169.254", Some("link-local")),
    ("172.31.255.255", Some("private-use")),
    ("192.0.0.1", Some("IPv4 service continuity prefix")),
    ("192.0.0.8", Some("IPv4 dummy address")),
    ("192.0.0.9", None),
    ("192.0.0.10", None),
    ("192.0.0.170", Some("NAT64/DNS64 discovery")),
    ("192.0.0.171", Some("NAT64/DNS64 discovery")),
    ("192.0.0.200", Some("IETF protocol assignments")),
    ("192.0.2.1", Some("documentation (TEST-NET-1)")),
    ("192.88.99.1", Some("6to4 relay anycast (deprecated)")),
    ("192.168.1.1", Some("private-use")),
    ("198.19.255.1", Some("benchmarking")),
    ("198.51.100.7", Some("documentation (TEST-NET-2)")),
    ("203.0.113.7", Some("documentation (TEST-NET-3)")),
    ("224.0.0.1", Some("multicast")),
    ("239.255.255.250", Some("multicast")),
    ("255.255.255.255", Some("limited broadcast")),
    ("240.0.0.1", Some("reserved")),
    ("::", Some("unspecified")),
    ("::1", Some("loopback")),
    ("::ffff:10.0.0.1", Some("private-use")),
    ("::127.0.0.1", Some("loopback")),
    ("64:ff9b::a9fe:a9fe", Some("link-local")),
    ("64:ff9b:1::8.8.8.8", Some("NAT64 local-use")),
    ("100::1", Some("discard-only")),
    ("100:0:0:1::1", Some("dummy IPv6 prefix")),
    ("2001:0:4136:e378:8000:63bf:f7f7:f7f7", None),
    ("2001:1::1", None),
    ("2001:1::2", None),
    ("2001:1::3", None),
    ("2001:2::1", Some("benchmarking")),
    ("2001:3::1", None),
    ("2001:4:112::1", None),
    ("2001:10::1", Some("ORCHID (deprecated)")),
    ("2001:20::1", None),
    ("2001:30::1", None),
    ("2001:1::4", Some("IETF protocol assignments")),
    ("2001:db8::1", Some("documentation")),
    ("2002:808:808::1", None),
    ("3fff::1", Some("documentation")),
    ("5f00::1", Some("segment routing (SRv6) SIDs")),
    ("fd00::7", Some("unique local")),
    ("fe80::1", Some("link-local")),
    ("fec0::1", Some("site-local (deprecated)")),
    ("ff02::1", Some("multicast")),
    ("2606:4700::1111", None),
    ("4000::1", Some("reserved by the IETF")),
];

#[test]
fn every_special_purpose_entry_is_named() {
    for (ip, want) in ENTRIES {
        assert_eq!(category(ip), *want, "{ip}");
    }
}

/// The index of the first entry of `table` that holds `ip`, as the lookup
/// takes them.
fn first_entry<T>(table: &[(T, u32, Rule)], ip: T, bits: u32) -> Option<usize>
where
    T: Copy + std::ops::BitXor<Output = T> + std::ops::Shr<u32, Output = T> + PartialEq + From<u8>,
{
    table
        .iter()
        .position(|&(net, len, _)| len == 0 || (ip ^ net) >> (bits - len) == T::from(0))
}

#[test]
fn every_entry_of_the_tables_has_a_row() {
    let (mut v4, mut v6) = (vec![false; V4.len()], vec![false; V6.len()]);
    for (ip, _) in ENTRIES {
        match ip.parse::<IpAddr>().expect(ip) {
            IpAddr::V4(a) => v4[first_entry(V4, a.to_bits(), 32).expect(ip)] = true,
            IpAddr::V6(a) => {
                if let Some(i) = first_entry(V6, a.to_bits(), 128) {
                    v6[i] = true;
                }
            }
        }
    }
    for (i, seen) in v4.iter().enumerate() {
        assert!(
            seen,
            "no row for {}/{}",
            Ipv4Addr::from_bits(V4[i].0),
            V4[i].1
        );
    }
    for (i, seen) in v6.iter().enumerate() {
        assert!(
            seen,
            "no row for {}/{}",
            std::net::Ipv6Addr::from_bits(V6[i].0),
            V6[i].1
        );
    }
}

#[test]
fn embedded_ipv4_addresses_are_judged() {
    for (ip, form, v4, want) in [
        ("::ffff:127.0.0.1", Form::Mapped, "127.0.0.1", "loopback"),
        ("::ffff:7f00:1", Form::Mapped, "127.0.0.1", "loopback"),
        (
            "::a9fe:a9fe",
            Form::Compatible,
            "169.254.169.254",
            "link-local",
        ),
        ("::2", Form::Compatible, "0.0.0.2", "this network"),
        ("64:ff9b::10.0.0.1", Form::Nat64, "10.0.0.1", "private-use"),
        ("2002:7f00:1::", Form::SixToFour, "127.0.0.1", "loopback"),
        (
            "2002:a9fe:a9fe::1",
            Form::SixToFour,
            "169.254.169.254",
            "link-local",
        ),
        (
            "2002:c612:1::",
            Form::SixToFour,
            "198.18.0.1",
            "benchmarking",
        ),
        // Teredo: server 127.0.0.1 (bits 32-64), client 8.8.8.8 (inverted).
        (
            "2001:0:7f00:1::f7f7:f7f7",
            Form::Teredo,
            "127.0.0.1",
            "loopback",
        ),
        // Teredo: server 8.8.8.8, client 10.0.0.1 (inverted: f5ff:fffe).
        (
            "2001:0:808:808::f5ff:fffe",
            Form::Teredo,
            "10.0.0.1",
            "private-use",
        ),
        (
            "2001:0:808:808::f00:0",
            Form::Teredo,
            "240.255.255.255",
            "reserved",
        ),
    ] {
        let got = internal_category(ip.parse().unwrap()).expect(ip);
        assert_eq!(got.category, want, "{ip}");
        assert_eq!(got.embedded, Some((form, v4.parse().unwrap())), "{ip}");
        assert!(
            got.to_string()
                .contains(&format!("embeds {v4}, a {want} address")),
            "{got}"
        );
    }
    for ip in [
        "::ffff:8.8.8.8",
        "::8.8.8.8",
        "64:ff9b::8.8.8.8",
        "2002:808:808::",
        "2001:0:808:808::f7f7:f7f7",
    ] {
        assert_eq!(category(ip), None, "{ip}: 8.8.8.8 wrapped stays allowed");
    }
}

#[test]
fn public_addresses_pass() {
    for ip in [
        "8.8.8.8",
        "1.1.1.1",
        "100.128.0.1",
        "172.32.0.1",
        "192.0.1.1",
        "198.20.0.1",
        "223.255.255.255",
        "2606:4700::1111",
        "2a00:1450:4001::200e",
        "2001:200::1",
    ] {
        assert_eq!(category(ip), None, "{ip}");
    }
}

#[tokio::test]
async fn internal_destinations_need_a_literal_policy_entry() {
    for u in [
        "https://127.0.0.1:8443/g",
        "https://[::1]/g",
        "https://169.254.169.254/latest",
        "https://localhost/g",
        "https://[2002:7f00:1::]/g",
        "https://198.18.0.1/g",
    ] {
        let e = destination(&url(u), false).await.unwrap_err();
        assert_eq!(e.reason(), "DestinationNotAllowed", "{u}: {e}");
        assert!(e.to_string().contains("allowedGraphHosts"), "{e}");
        assert!(destination(&url(u), true).await.is_ok(), "{u}");
    }
    let e = destination(&url("https://[::ffff:7f00:1]/g"), false)
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("an IPv4-mapped address that embeds 127.0.0.1, a loopback address"),
        "{e}"
    );
    let public = destination(&url("https://8.8.8.8/g"), false).await.unwrap();
    assert_eq!(public, vec!["8.8.8.8:443".parse::<SocketAddr>().unwrap()]);
    let e = destination(&url("https://no-such-host.invalid/g"), false)
        .await
        .unwrap_err();
    assert_eq!(e.reason(), "DNSFailure", "{e}");
}
