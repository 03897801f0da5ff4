//! The `infergate` command line: the only module that knows clap.
//!
//! Each subcommand's arguments are parsed here and turned into the plain
//! options struct of the module that does the work ([`crate::app::Options`],
//! [`crate::check::Options`], [`crate::webhook::tls::certs::Options`],
//! [`crate::check::graph::Options`], [`crate::profile::Options`]); nothing below sees clap.

mod args;
mod into_options;
pub mod plugin;
mod run;

#[cfg(test)]
mod tests;

pub use args::{
    CertsArgs, CheckArgs, Cli, Command, CrdsArgs, GraphArgs, LogFormatArg, OutputFormatArg,
    ProfileArgs, ServeArgs,
};
pub use run::run;
