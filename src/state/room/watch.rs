//! The two watches that fill [`Room`]: every Node, and the Pods that are
//! bound and have not finished, cluster-wide (the API server filters them
//! with a field selector, as kube-scheduler's own pod watch does; a pod
//! that finishes leaves the selection and arrives as deleted). Both list
//! in pages; neither counts towards the state's sync (an install without
//! the right to list nodes still serves, and [`Room::free`] stays `None`).

use std::sync::Arc;

use futures::StreamExt;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;

use super::decode::{RoomNode, RoomPod};
use super::index::Room;
use crate::state::scope;
use crate::state::watching::{log_watch_error, next_until};

/// The pods whose devices are taken: bound to a node, not finished.
pub const POD_FIELDS: &str = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed";

/// Start both watches over the whole cluster, until `shutdown`.
pub fn spawn(room: &Arc<Room>, client: &Client, shutdown: &CancellationToken) {
    room.set_watched();
    let nodes = watcher(Api::<RoomNode>::all(client.clone()), scope::list_in_pages());
    let r = Arc::clone(room);
    tokio::spawn(drive("Node", nodes.boxed(), shutdown.clone(), move |e| {
        node_event(&r, e);
    }));
    let pods = watcher(
        Api::<RoomPod>::all(client.clone()),
        scope::list_in_pages().fields(POD_FIELDS),
    );
    let r = Arc::clone(room);
    tokio::spawn(drive("Pod", pods.boxed(), shutdown.clone(), move |e| {
        pod_event(&r, e);
    }));
}

/// One node watch event into `room`.
pub fn node_event(room: &Room, event: Event<RoomNode>) {
    match event {
        Event::Apply(n) => room.apply_node(&n),
        Event::Delete(n) => room.delete_node(&n),
        Event::Init => room.nodes_listing(),
        Event::InitApply(n) => room.list_node(&n),
        Event::InitDone => room.nodes_listed(),
    }
}

/// One pod watch event into `room`.
pub fn pod_event(room: &Room, event: Event<RoomPod>) {
    match event {
        Event::Apply(p) => room.apply_pod(&p),
        Event::Delete(p) => room.delete_pod(&p),
        Event::Init => room.pods_listing(),
        Event::InitApply(p) => room.list_pod(&p),
        Event::InitDone => room.pods_listed(),
    }
}

async fn drive<K: Send + 'static>(
    kind: &'static str,
    stream: futures::stream::BoxStream<'static, watcher::Result<Event<K>>>,
    shutdown: CancellationToken,
    mut on_event: impl FnMut(Event<K>) + Send,
) {
    let stream = stream.default_backoff();
    futures::pin_mut!(stream);
    let mut listed = false;
    while let Some(event) = next_until(&mut stream, &shutdown).await {
        match event {
            Ok(event) => {
                let done = matches!(event, Event::InitDone);
                on_event(event);
                if done && !listed {
                    listed = true;
                    tracing::info!(kind, "free-device watch listed");
                }
            }
            Err(e) => log_watch_error(kind, &e, "free-device watch"),
        }
    }
}
