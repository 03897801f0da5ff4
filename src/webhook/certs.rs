//! Certificates: rcgen generation, rotation, caBundle injection.

use std::process::ExitCode;

use crate::cli::CertsArgs;

/// Run `infergate certs`.
pub fn run_cli(_args: CertsArgs) -> ExitCode {
    eprintln!("error: `infergate certs` is not built yet");
    ExitCode::from(2)
}
