//! The human text of an [`Explanation`], and `why` run from the command
//! line.

use std::fmt::Write as _;
use std::process::ExitCode;

use super::explain::explanation;
use super::finding::Explanation;
use crate::api::vocabulary::ConditionType;
use crate::plugin::client::{Connection, PluginError};
use crate::plugin::facts::gather;
use crate::plugin::term::Output;

/// `why` options.
#[derive(Clone, Debug)]
pub struct Options {
    /// Where to connect.
    pub connection: Connection,
    /// The service.
    pub name: String,
    /// How to print.
    pub output: Output,
}

/// The human text: one sentence for a ready service with nothing to
/// say, else a numbered list with each finding's next command.
#[must_use]
pub fn render(e: &Explanation, ready_message: Option<&str>) -> String {
    let mut out = String::new();
    let who = format!("InferenceService {}/{}", e.namespace, e.name);
    let things = match e.findings.len() {
        1 => "one thing to look at".to_owned(),
        n => format!("{n} things to look at, most telling first"),
    };
    match (e.ready, e.findings.is_empty()) {
        (true, true) => {
            let _ = writeln!(
                out,
                "{who} is ready{}.",
                ready_message.map(|m| format!(": {m}")).unwrap_or_default()
            );
            return out;
        }
        (true, false) => {
            let _ = writeln!(out, "{who} is ready, with {things}:");
        }
        (false, true) => {
            let _ = writeln!(
                out,
                "{who} is not ready, and its status does not say why yet{}.",
                ready_message.map(|m| format!(": {m}")).unwrap_or_default()
            );
            let _ = writeln!(
                out,
                "   next: kubectl infergate status {} -n {} -w",
                e.name, e.namespace
            );
            return out;
        }
        (false, false) => {
            let _ = writeln!(out, "{who} is not ready: {things}:");
        }
    }
    for (i, f) in e.findings.iter().enumerate() {
        let _ = writeln!(out, "\n{}. {}", i + 1, f.sentence);
        if let Some(next) = &f.next {
            let _ = writeln!(out, "   next: {next}");
        }
    }
    out
}

/// Run `why`: 0 when the service is ready, 1 when it is not (the findings
/// printed), 2 when it cannot be told (no such service, no API server).
pub async fn run(opts: Options) -> ExitCode {
    match why(&opts).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

async fn why(opts: &Options) -> Result<bool, PluginError> {
    let target = opts.connection.connect().await?;
    let facts = gather(&target, &opts.name).await?;
    let e = explanation(&facts);
    let ready = facts
        .condition(ConditionType::Ready.as_str())
        .map(|c| c.message.as_str());
    let text = opts
        .output
        .format(&e, |e| render(e, ready))
        .map_err(PluginError::Other)?;
    print!("{text}");
    Ok(e.ready)
}
