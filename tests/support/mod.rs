//! Support shared by the tests (`tests/suite/`, which declares it as
//! `crate::support`) and the benches that include it (each bench is its own
//! crate and compiles this module with `mod support;`, so a helper a bench
//! does not use is dead code there).
//!
//! - [`control_plane`]: etcd, kube-apiserver and kube-controller-manager on
//!   loopback, kubeconfigs, kubectl, namespaces;
//! - [`classes`]: the AcceleratorClasses the tests share;
//! - [`crds`]: infergate's CRDs and the published HTTPRoute, RayService and PodMonitor CRDs;
//! - [`wait`]: [`eventually`] and the waits built on it;
//! - [`timeline`]: a namespace's routes, Deployments and Services watched
//!   together, in revision order (route first, always);
//! - [`servers`]: ports, certificates, TLS server and client, the graph server;
//!   [`tarpit`] a server that accepts and never answers;
//! - [`router`]: the webhook's router in process: review fixtures, requests,
//!   answers and patches;
//! - [`app`]: infergate in process (webhook state, `serve`, reconciler) and as
//!   the built binary;
//! - [`webhooks`]: its webhooks registered with the apiserver by URL;
//! - [`kuberay`]: the real KubeRay operator, built from its Go module;
//! - [`lws`]: the real LeaderWorkerSet controller, built from its Go
//!   module, its webhooks registered by URL;
//! - [`plugin`]: the kubectl plugin on `PATH`, and its recorded outputs;
//! - [`ray_serve`]: Ray Serve's own config schema, from `ray[serve]` in a virtual environment;
//! - [`process`] and [`fixtures`]: child processes, repository files;
//! - [`alloc_count`]: allocations of one thread counted (the test binary's allocator).
#![allow(dead_code)]

pub mod alloc_count;
pub mod app;
pub mod classes;
pub mod control_plane;
pub mod crds;
pub mod fixtures;
pub mod kuberay;
pub mod lws;
pub mod plugin;
pub mod process;
pub mod ray_serve;
pub mod router;
pub mod scheduler;
pub mod servers;
pub mod tarpit;
pub mod timeline;
pub mod wait;
pub mod webhooks;

// A file that uses nothing of a module would warn about its re-export.
#[allow(unused_imports)]
pub use app::*;
#[allow(unused_imports)]
pub use control_plane::*;
#[allow(unused_imports)]
pub use crds::*;
#[allow(unused_imports)]
pub use fixtures::*;
#[allow(unused_imports)]
pub use kuberay::*;
#[allow(unused_imports)]
pub use plugin::*;
#[allow(unused_imports)]
pub use process::*;
#[allow(unused_imports)]
pub use ray_serve::*;
#[allow(unused_imports)]
pub use router::*;
#[allow(unused_imports)]
pub use servers::*;
#[allow(unused_imports)]
pub use wait::*;
#[allow(unused_imports)]
pub use webhooks::*;
