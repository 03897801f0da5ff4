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
    // Installed as `kubectl-infergate` (a symlink on PATH), the binary is
    // the kubectl plugin.
    let invoked_as = std::env::args_os()
        .next()
        .map(std::path::PathBuf::from)
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_default();
    if invoked_as == "kubectl-infergate" {
        return infergate::cli::plugin::run(infergate::cli::plugin::PluginCli::parse());
    }
    // As `kubectl_complete-infergate`, kubectl's completion of the plugin.
    if invoked_as == "kubectl_complete-infergate" {
        let words: Vec<String> = std::env::args().skip(1).collect();
        return infergate::cli::plugin::complete(&words);
    }
    let cli = infergate::cli::Cli::parse();
    infergate::cli::run(cli)
}
