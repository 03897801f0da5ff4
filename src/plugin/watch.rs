//! Changes of one service and of what it owns, from watches (no timer):
//! the InferenceService itself, its Deployments and its HTTPRoute.

use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};

use super::client::Target;
use crate::api::upstream::gateway_api::HTTPRoute;
use crate::api::v1beta1::InferenceService;
use crate::api::vocabulary::names::LABEL_SERVICE;

/// One item per change (and one for each watch's initial list); an error
/// ends nothing: the watches retry with backoff (a kind that is not
/// served, a watch that is forbidden, stay quiet).
pub fn changes(target: &Target, name: &str) -> impl Stream<Item = ()> + Send + 'static {
    let ns = target.namespace.as_str();
    let by_name = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let by_label = watcher::Config::default().labels(&format!("{LABEL_SERVICE}={name}"));
    let service = watcher::watcher(
        Api::<InferenceService>::namespaced(target.client.clone(), ns),
        by_name,
    )
    .default_backoff()
    .map(relevant)
    .boxed();
    let deployments = watcher::watcher(
        Api::<Deployment>::namespaced(target.client.clone(), ns),
        by_label.clone(),
    )
    .default_backoff()
    .map(relevant)
    .boxed();
    let routes = watcher::watcher(
        Api::<HTTPRoute>::namespaced(target.client.clone(), ns),
        by_label,
    )
    .default_backoff()
    .map(relevant)
    .boxed();
    futures::stream::select_all([service, deployments, routes]).filter_map(std::future::ready)
}

/// `Some(())` for an event that can change what is shown: an object
/// applied or deleted, or an initial list complete. Errors (a kind not
/// served, a forbidden watch) are skipped.
fn relevant<K>(e: Result<Event<K>, watcher::Error>) -> Option<()> {
    match e {
        Ok(Event::Apply(_) | Event::Delete(_) | Event::InitDone) => Some(()),
        Ok(Event::Init | Event::InitApply(_)) | Err(_) => None,
    }
}
