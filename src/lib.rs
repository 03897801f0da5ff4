//! infergate: admission, conversion and reconciliation for model-serving
//! workloads on Kubernetes.
//!
//! `api` and `engine` are pure (no I/O, no async, no `kube::Client`);
//! `webhook` and `reconcile` are the transports around them; `app` composes
//! them into the running process and `cli` turns the command line into
//! options. `docs/architecture.md` shows how data flows through them.
#![forbid(unsafe_code)]

pub mod api;
pub mod app;
pub mod check;
pub mod cli;
pub mod crdgen;
pub mod engine;
pub mod graph;
pub mod metrics;
pub mod plugin;
pub mod profile;
pub mod reconcile;
pub mod state;
pub mod telemetry;
pub mod webhook;
