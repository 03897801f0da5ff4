//! `infergate check`: the engine run offline over manifest files.

use std::process::ExitCode;

use crate::cli::CheckArgs;

/// Run `infergate check`.
pub fn run(_args: CheckArgs) -> ExitCode {
    eprintln!("error: `infergate check` is not built yet");
    ExitCode::from(2)
}
