//! Ray Serve serving graphs: the protobuf format, DAG validation,
//! `serveConfigV2` generation and fetching over bearer-authenticated HTTPS.

use std::process::ExitCode;

use crate::cli::GraphArgs;

/// Run `infergate graph`.
pub fn run_cli(_args: GraphArgs) -> ExitCode {
    eprintln!("error: `infergate graph` is not built yet");
    ExitCode::from(2)
}
