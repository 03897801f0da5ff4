#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // One crypto provider for the whole process, installed before any TLS use.
    if rustls::crypto::ring::default_provider()
        .install_default()
        .is_err()
    {
        eprintln!("error: a rustls crypto provider was already installed");
        return ExitCode::from(2);
    }
    let cli = infergate::cli::Cli::parse();
    infergate::cli::run(cli)
}
