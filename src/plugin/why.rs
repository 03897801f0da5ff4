//! `kubectl infergate why NAME`: why a service is not ready, in sentences.

use std::process::ExitCode;

use super::client::Connection;

/// `why` options.
#[derive(Clone, Debug)]
pub struct Options {
    /// Where to connect.
    pub connection: Connection,
    /// The service.
    pub name: String,
}

/// Run `why`.
pub async fn run(opts: Options) -> ExitCode {
    let _ = opts;
    eprintln!("error: why is not available in this build");
    ExitCode::from(2)
}
