//! infergate: admission, conversion and reconciliation for model-serving
//! workloads on Kubernetes.
//!
//! `api` and `engine` are pure (no I/O, no async, no `kube::Client`);
//! `webhook` and `reconcile` are the transports around them.
#![forbid(unsafe_code)]

pub mod api;
pub mod check;
pub mod cli;
pub mod crdgen;
pub mod engine;
pub mod graph;
pub mod metrics;
pub mod reconcile;
pub mod telemetry;
pub mod webhook;
