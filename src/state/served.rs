//! Whether the cluster serves an optional API admission speaks of (the
//! LeaderWorkerSet API, which runs replicas that span nodes), asked of the
//! API server's discovery in the background every [`POLL`], so a review
//! reads the last answer and makes no API call.

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use kube::Client;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::api::upstream::lws;

/// How often discovery is asked again.
pub const POLL: Duration = Duration::from_secs(15);

// 0: not known yet.
const SERVED: u8 = 1;
const NOT_SERVED: u8 = 2;

/// The last answer of discovery about the LeaderWorkerSet API.
#[derive(Debug, Default)]
pub struct Served {
    lws: AtomicU8,
}

impl Served {
    /// Whether the cluster serves `leaderworkersets` at the version
    /// infergate writes: `None` before discovery has answered (or where
    /// nothing asks it: `infergate check`, tests).
    #[must_use]
    pub fn leader_worker_sets(&self) -> Option<bool> {
        match self.lws.load(Ordering::Acquire) {
            SERVED => Some(true),
            NOT_SERVED => Some(false),
            _ => None,
        }
    }

    /// Record discovery's answer.
    pub fn set_leader_worker_sets(&self, served: bool) {
        let v = if served { SERVED } else { NOT_SERVED };
        self.lws.store(v, Ordering::Release);
    }

    /// Ask discovery now and every [`POLL`] until `shutdown`; a failed
    /// ask keeps the last answer.
    pub fn spawn(self: &std::sync::Arc<Self>, client: Client, shutdown: CancellationToken) {
        let served = std::sync::Arc::clone(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(POLL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    _ = tick.tick() => {}
                }
                match client.list_api_group_resources(lws::API_VERSION).await {
                    Ok(list) => served.set_leader_worker_sets(
                        list.resources.iter().any(|r| r.name == lws::PLURAL),
                    ),
                    Err(kube::Error::Api(s)) if s.code == 404 => {
                        served.set_leader_worker_sets(false)
                    }
                    Err(e) => {
                        debug!(error = %e, "discovery of the LeaderWorkerSet API failed; the last answer stays")
                    }
                }
            }
        });
    }
}
