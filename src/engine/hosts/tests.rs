use super::*;

fn p(s: &str) -> HostPattern {
    HostPattern::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
}

#[test]
fn literal_wildcard_and_port_entries_match_as_documented() {
    let lit = p("Graphs.Example.com");
    assert!(lit.is_literal());
    assert!(lit.matches("graphs.example.com", 443));
    assert!(lit.matches("graphs.example.com", 8443), "no port: any port");
    assert!(!lit.matches("x.graphs.example.com", 443));
    assert!(!lit.matches("graphs.example.com.evil.io", 443));

    let port = p("graph-api.ml.svc:8443");
    assert!(port.matches("graph-api.ml.svc", 8443));
    assert!(!port.matches("graph-api.ml.svc", 443));

    let wild = p("*.ml.example.com");
    assert!(!wild.is_literal());
    assert!(wild.matches("a.ml.example.com", 443));
    assert!(wild.matches("a.b.ml.example.com", 443));
    assert!(
        !wild.matches("ml.example.com", 443),
        "not the domain itself"
    );
    assert!(!wild.matches("evilml.example.com", 443));
    assert!(!wild.matches(".ml.example.com", 443));

    let v4 = p("10.0.0.7:8443");
    assert!(v4.matches("10.0.0.7", 8443));
    let v6 = p("[FD00:0::7]:443");
    assert_eq!(v6.to_string(), "[fd00::7]:443");
    assert!(v6.matches("[fd00::7]", 443));
}

#[test]
fn bad_entries_say_why() {
    for (entry, why) in [
        ("", "empty"),
        ("*.", "empty"),
        ("a..b", "label"),
        ("-a.b", "host name"),
        ("a.b:0", "port"),
        ("a.b:http", "port"),
        ("a.b:70000", "port"),
        ("*.10.0.0.1", "addresses"),
        ("[::1", "closing"),
        ("[zz]", "IPv6"),
        ("a/b", "host name"),
        ("user@host", "host name"),
    ] {
        let e = HostPattern::parse(entry).expect_err(entry);
        assert!(e.contains(why), "{entry}: {e}");
    }
    let e = parse_list("a.example.com, b..c").unwrap_err();
    assert!(e.contains("b..c"), "{e}");
    let many = vec!["a.example.com"; MAX_ENTRIES + 1].join(",");
    assert!(parse_list(&many).unwrap_err().contains("more than"));
    assert_eq!(
        parse_list(" a.example.com ,, *.b.example.com:8443 ")
            .expect("list")
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["a.example.com", "*.b.example.com:8443"]
    );
}

#[test]
fn covers_is_narrowing() {
    let outer = p("*.example.com");
    assert!(outer.covers(&p("graphs.example.com")));
    assert!(outer.covers(&p("graphs.example.com:8443")));
    assert!(outer.covers(&p("*.ml.example.com")));
    assert!(outer.covers(&p("*.example.com")));
    assert!(!outer.covers(&p("example.com")));
    assert!(!outer.covers(&p("graphs.example.org")));
    let ported = p("*.example.com:8443");
    assert!(
        !ported.covers(&p("graphs.example.com")),
        "any port is wider"
    );
    assert!(ported.covers(&p("graphs.example.com:8443")));
    let lit = p("graphs.example.com");
    assert!(lit.covers(&p("graphs.example.com:443")));
    assert!(!lit.covers(&p("*.graphs.example.com")));
}

#[test]
fn entries_and_url_hosts_compare_in_one_canonical_form() {
    let mapped = [
        "[::ffff:7f00:1]",
        "[::ffff:127.0.0.1]",
        "[0:0:0:0:0:ffff:7f00:1]",
        "[0000:0000:0000:0000:0000:FFFF:7F00:0001]",
    ];
    for entry in mapped {
        let pattern = p(entry);
        assert_eq!(pattern, p(mapped[0]), "{entry}");
        for host in mapped {
            assert!(pattern.matches(host, 443), "{entry} vs {host}");
            assert!(
                any_matches(std::slice::from_ref(&pattern), host, 443),
                "{entry} vs {host}"
            );
        }
        assert!(!pattern.matches("[::ffff:7f00:2]", 443), "{entry}");
        assert!(
            !pattern.matches("127.0.0.1", 443),
            "{entry}: another family"
        );
    }
    for (entry, host) in [
        ("[2001:DB8:0:0::1]:8443", "[2001:db8::1]"),
        ("[2001:db8::1]", "[2001:0db8:0000::0001]"),
        ("10.0.0.7", "10.0.0.7"),
        ("Graphs.Example.COM.", "graphs.example.com"),
        ("graphs.example.com", "GRAPHS.example.com."),
        ("*.Example.com", "a.example.COM."),
    ] {
        assert!(p(entry).matches(host, 8443), "{entry} vs {host}");
    }
    // A URL's host as the URL parser gives it matches the entry it was
    // written as, in whatever form either was written.
    for (entry, url) in [
        ("[::ffff:7f00:1]", "https://[::ffff:127.0.0.1]/g"),
        ("[::ffff:127.0.0.1]", "https://[0:0:0:0:0:ffff:7f00:1]/g"),
        ("[fd00::7]:8443", "https://[FD00:0:0::7]:8443/g"),
        ("127.1", "https://127.0.0.1/g"),
        ("127.0.0.1", "https://0x7f.1/g"),
    ] {
        let u = url::Url::parse(url).expect(url);
        let host = u.host_str().expect(url);
        let port = u.port_or_known_default().expect(url);
        assert!(p(entry).matches(host, port), "{entry} vs {url} ({host})");
    }
    assert_eq!(p("127.1").to_string(), "127.0.0.1");
    assert_eq!(
        p("[::ffff:7f00:1]:8443").to_string(),
        "[::ffff:127.0.0.1]:8443"
    );
}
