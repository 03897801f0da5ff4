//! Logging and tracing set-up.
//!
//! `RUST_LOG` selects what is logged (default `info` for infergate, `warn`
//! for everything else); `--log-format` chooses human-readable text or one
//! JSON object per line.

use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// The filter used when `RUST_LOG` is unset.
pub const DEFAULT_FILTER: &str = "warn,infergate=info";

/// Install the global tracing subscriber. Calling it twice (tests) is harmless:
/// the second call leaves the first subscriber in place.
pub fn init(format: LogFormat) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.with_target(true).try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    };
}
