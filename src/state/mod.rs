//! The watched state of the cluster, kept once per process.
//!
//! One reflector per kind (ClusterInferencePolicy, InferencePolicy,
//! Namespace metadata, InferenceService) feeds everything that reads them:
//! the admission webhooks answer from [`ClusterState`] without an API call,
//! and the reconciler takes its service store, service events and policy
//! changes from the same watches instead of running its own.
//!
//! - [`routes`]: the one route index, updated per event;
//! - [`context`]: the one place the engine's `Context` is assembled, from
//!   the watched cluster, the reconciler's view of it, or files;
//! - [`files`]: the one reader of manifest files (`serve --policy-file`,
//!   `infergate check`);
//! - [`cluster`]: [`ClusterState`] and the watches that fill it;
//! - [`namespace`]: the name label every namespace carries;
//! - [`scope`]: which namespaces are watched;
//! - [`ledger`]: the per-namespace GPU budget ledgers, watched in
//!   infergate's namespace and written by admission and the reconciler;
//! - [`foreign`]: the exact header matches of HTTPRoutes infergate does
//!   not own, from a watch started once the API is served;
//! - [`names`]: the per-Gateway names ledgers (one owner per served
//!   name), written by admission and corrected by the reconciler;
//! - [`room`]: free devices per AcceleratorClass, from watches of nodes
//!   and of the pods that request devices;
//! - [`served`]: whether the cluster serves an optional API admission
//!   speaks of, from discovery in the background;
//! - `kept`: the metadata a watch keeps, decoded as far as it is kept;
//! - `watching`: a watch's next event until shutdown, and its errors logged.

pub mod cluster;
pub mod context;
pub mod files;
pub mod foreign;
pub(crate) mod kept;
pub mod ledger;
pub mod names;
pub mod namespace;
pub mod room;
pub mod routes;
pub mod scope;
pub mod served;
pub(crate) mod watching;

pub use cluster::{ClusterState, SERVICE_EVENT_BUFFER, ServiceEvent};
pub use context::{ContextSource, with_context};
pub use namespace::NAMESPACE_NAME_LABEL;
pub use room::Room;
pub use routes::{OlderClaims, RouteTable};
pub use scope::Scope;
