//! Every integration test of infergate, as one test binary: a module per
//! concern, one link, and one control plane per module that needs one
//! (started on first use, stopped when the module's last test ends; see
//! `support::control_plane`).
//!
//! Modules named `e2e_*` run against a real control plane (etcd,
//! kube-apiserver, kube-controller-manager on 127.0.0.1); the others need
//! none: the engine, the webhook router in process, `infergate check`, the
//! built binary, the repository's own files.
//!
//! Run one module with `cargo test --test suite e2e_rollout::`, one test
//! by its name.

#[path = "../support/mod.rs"]
mod support;

/// Counts allocations for `webhook::cost`; the system allocator otherwise.
#[global_allocator]
static ALLOCATOR: support::alloc_count::Counting = support::alloc_count::Counting;

#[path = "../../benches/common/reviews.rs"]
mod reviews;

mod capacity;
mod check;
mod docs_paths;
mod e2e_budget;
mod e2e_canary;
mod e2e_churn;
mod e2e_citizen;
mod e2e_deploy;
mod e2e_drain;
mod e2e_drift;
mod e2e_foundation;
mod e2e_full_pool;
mod e2e_inferencepool;
mod e2e_kuberay;
mod e2e_lws;
mod e2e_lws_later;
mod e2e_model_route;
mod e2e_multi_node;
mod e2e_names;
mod e2e_optional;
mod e2e_plugin;
mod e2e_plugin_rollout;
mod e2e_plugin_why;
mod e2e_podmonitor;
mod e2e_ray_pods;
mod e2e_rayservice;
mod e2e_reconcile;
mod e2e_rollout;
mod e2e_room;
mod e2e_scheduling;
mod e2e_tenancy;
mod e2e_webhook;
mod engine;
mod fit_inputs;
mod fuzz_corpus;
mod graph;
mod helm_chart;
mod hostile;
mod layout;
mod placement;
mod policy_files;
mod profile;
mod ray_serve_schema;
mod upstream_schema;
mod webhook;
