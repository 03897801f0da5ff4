//! Logging and tracing set-up.
