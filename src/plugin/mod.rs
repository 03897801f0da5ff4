//! `kubectl infergate`: the kubectl plugin. The `infergate` binary answers
//! as the plugin when it runs under the name `kubectl-infergate` (a symlink
//! on `PATH`, found by kubectl's plugin mechanism).
//!
//! - [`client`]: the kubeconfig, context and namespace, read like kubectl;
//! - [`facts`]: what one service is, gathered from the API server (the
//!   service, its Deployments, its route, its namespace's budget);
//! - [`names`]: the names a service serves and whether each is routed;
//! - [`status`]: one screen of those facts, redrawn on every watch event
//!   with `-w`, or as JSON or YAML for scripts;
//! - [`rollout`]: `rollout status` (waits, with kubectl's exit codes) and
//!   the actions `promote|pause|resume|abort`;
//! - [`why`]: why a service is not ready, in sentences, with the next command;
//! - [`fit`] and [`headroom`] (`budget`): a model on a class at each tensor size; each
//!   namespace's GPU budget;
//! - [`term`]: colours and redraws only on a terminal; [`watch`]: the
//!   watch events `-w` redraws on.

pub mod client;
pub mod facts;
pub mod fit;
pub mod headroom;
pub mod names;
pub mod rollout;
pub mod status;
pub mod term;
pub mod watch;
pub mod why;
