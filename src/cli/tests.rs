use clap::Parser;

use super::*;
use std::path::PathBuf;

use crate::app;
use crate::check::{self, OutputFormat};
use crate::telemetry::LogFormat;
use crate::webhook::tls::certs;

fn parse(args: &[&str]) -> Command {
    Cli::try_parse_from(std::iter::once("infergate").chain(args.iter().copied()))
        .expect("arguments parse")
        .command
}

#[test]
fn serve_without_flags_gives_the_default_options() {
    let Command::Serve(args) = parse(&["serve"]) else {
        panic!("serve expected");
    };
    let got: app::Options = (*args).into();
    let want = app::Options::default();
    assert_eq!(got.listen, want.listen);
    assert_eq!(got.probe_listen, want.probe_listen);
    assert_eq!(got.namespace, want.namespace);
    assert_eq!(got.reconcile, want.reconcile);
    assert_eq!(got.certificates, None);
    assert_eq!(got.log_format, want.log_format);
}

#[test]
fn serve_flags_become_options() {
    let Command::Serve(args) = parse(&[
        "serve",
        "--self-signed",
        "--cert-dns=infergate.example",
        "--no-reconcile",
        "--default-replicas=3",
        "--log-format=json",
        "--namespaces=team-b,team-a",
        "--service-account=infergate-scoped",
    ]) else {
        panic!("serve expected");
    };
    let got: app::Options = (*args).into();
    assert_eq!(
        got.certificates,
        Some(app::Certificates::SelfSigned {
            dns_names: vec!["infergate.example".to_owned()],
            ips: Vec::new(),
        })
    );
    assert!(!got.reconcile);
    assert_eq!(got.server_defaults.replicas, Some(3));
    assert_eq!(got.log_format, LogFormat::Json);
    assert_eq!(got.namespaces, ["team-b", "team-a"]);
    assert_eq!(got.service_account, "infergate-scoped");
}

#[test]
fn other_commands_default_like_their_options() {
    let Command::Certs(args) = parse(&["certs"]) else {
        panic!("certs expected");
    };
    let got: certs::Options = args.into();
    assert_eq!(got.days, certs::Options::default().days);
    assert_eq!(got.out_dir, certs::Options::default().out_dir);
    let Command::Graph(args) = parse(&["graph", "g.pb"]) else {
        panic!("graph expected");
    };
    let got: check::graph::Options = args.into();
    assert_eq!(
        got.route_prefix,
        check::graph::Options::default().route_prefix
    );
    let Command::Check(args) = parse(&["check", "-f", "x.yaml", "-o", "json"]) else {
        panic!("check expected");
    };
    let got: check::Options = args.into();
    assert_eq!(got.output, Some(OutputFormat::Json));
    assert!(!got.explain);
}

#[test]
fn profile_flags_become_options() {
    let Command::Profile(args) = parse(&[
        "profile",
        "models/m",
        "--weight-bytes=7",
        "--model-ref=a/b",
        "--model-ref=c",
        "--kv-cache-bytes-per-element=1",
    ]) else {
        panic!("profile expected");
    };
    let got: crate::profile::Options = args.into();
    assert_eq!(got.path, PathBuf::from("models/m"));
    assert_eq!(got.weight_bytes, Some(7));
    assert_eq!(got.model_refs, ["a/b", "c"]);
    assert_eq!(got.name, None);
    assert_eq!(got.kv_cache_bytes_per_element, Some(1));
    for bad in ["--weight-bytes=0", "--kv-cache-bytes-per-element=9"] {
        assert!(Cli::try_parse_from(["infergate", "profile", "m", bad]).is_err());
    }
}

#[test]
fn the_plugin_completes_subcommands_and_flags() {
    use super::plugin::candidates;
    let w = |s: &[&str]| s.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    assert_eq!(candidates(&w(&["st"])), ["status"]);
    assert_eq!(
        candidates(&w(&[""])),
        ["status", "rollout", "why", "fit", "budget", "completion"]
    );
    assert_eq!(
        candidates(&w(&["rollout", ""])),
        ["status", "promote", "pause", "resume", "abort"]
    );
    assert_eq!(candidates(&w(&["status", "chat", "--w"])), ["--watch"]);
    assert!(candidates(&w(&["fit", "m", "--"])).contains(&"--max-model-len".to_owned()));
    assert!(candidates(&w(&["fit", "m", "--"])).contains(&"--context".to_owned()));
    // A flag's value is not completed with subcommands.
    assert!(candidates(&w(&["-n", ""])).is_empty());
    assert_eq!(candidates(&w(&["-n", "team-a", "wh"])), ["why"]);
}
