//! `infergate serve`.

use std::process::ExitCode;

use crate::cli::ServeArgs;

/// Run `infergate serve` until a shutdown signal.
pub fn run(_args: ServeArgs) -> ExitCode {
    eprintln!("error: `infergate serve` is not built yet");
    ExitCode::from(2)
}
