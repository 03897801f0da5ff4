//! `kubectl infergate rollout status|promote|pause|resume|abort NAME`.

use std::process::ExitCode;
use std::time::Duration;

use super::client::Connection;

/// What `rollout` does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Wait for the rollout to end (`-w`), or say where it stands.
    Status {
        /// Keep watching until it ends.
        watch: bool,
        /// Give up after this long (exit 2).
        timeout: Option<Duration>,
    },
    /// Write `infergate.dev/rollout-action: VERB/TOKEN` and wait until acted on.
    Act(Verb),
}

/// A rollout action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    /// `promote`.
    Promote,
    /// `pause`.
    Pause,
    /// `resume`.
    Resume,
    /// `abort`.
    Abort,
}

/// `rollout` options.
#[derive(Clone, Debug)]
pub struct Options {
    /// Where to connect.
    pub connection: Connection,
    /// The service.
    pub name: String,
    /// What to do.
    pub action: Action,
}

/// Run `rollout`.
pub async fn run(opts: Options) -> ExitCode {
    let _ = opts;
    eprintln!("error: rollout is not available in this build");
    ExitCode::from(2)
}
