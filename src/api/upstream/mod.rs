//! The wire types of the upstream projects infergate writes to and reads
//! from, one module per project: only the fields infergate sets or reads
//! are modelled, each checked against the project's published CRD by
//! `tests/suite/upstream_schema.rs`. The builders that fill them are in
//! `reconcile::children`.
//!
//! - `gateway_api`: Gateway API's HTTPRoute;
//! - `inference_extension`: the Gateway API Inference Extension's InferencePool;
//! - `kuberay`: KubeRay's RayService and RayCluster;
//! - `lws`: LeaderWorkerSet, a replica that spans nodes;
//! - `prometheus_operator`: the Prometheus Operator's PodMonitor.

pub mod gateway_api;
pub mod inference_extension;
pub mod kuberay;
pub mod lws;
pub mod prometheus_operator;
