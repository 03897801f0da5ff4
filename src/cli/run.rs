//! A parsed command line run.

use std::process::ExitCode;

use super::args::{Cli, Command};
use crate::app;
use crate::check;
use crate::webhook::tls::certs;

/// Run a parsed command line.
pub fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Crds(args) => match if args.reference {
            crate::crdgen::reference_markdown()
        } else {
            crate::crdgen::all_yaml()
        } {
            Ok(yaml) => {
                print!("{yaml}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        },
        Command::Serve(args) => app::run((*args).into()),
        Command::Check(args) => check::run(args.into()),
        Command::Certs(args) => certs::run(args.into()),
        Command::Graph(args) => check::graph::run(args.into()),
        Command::Profile(args) => crate::profile::run(&args.into()),
    }
}
