//! Leader election: every replica competes for one Lease, and only its
//! holder runs the controller.

use std::time::Duration;

use kube_lease_manager::{LeaseCreateMode, LeaseManagerBuilder};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::config::Config;
use super::controller;
use super::error::Error;
use super::watch::discovery;

/// Name of the Lease the replicas compete for.
pub const LEASE_NAME: &str = "infergate-reconciler";

/// Run the controller with leader election until `shutdown` is cancelled.
///
/// Fails fast (with instructions) when infergate's CRDs are missing. Retries
/// leader election and API errors otherwise; on shutdown the lease is released
/// so another replica takes over at once.
pub async fn run(
    client: kube::Client,
    config: Config,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    discovery::preflight(&client, &config.scope).await?;
    let mut config = config;
    let state = match &config.state {
        Some(state) => std::sync::Arc::clone(state),
        None => {
            let state = std::sync::Arc::new(crate::state::ClusterState::default());
            state.spawn_watches(client.clone(), &config.scope, true, shutdown.clone());
            state
        }
    };
    if config.graph_fetcher.is_none() && config.graph_ca_file.is_some() {
        // A bad --graph-ca-file fails at start-up, not at the first graph.
        let fetcher = crate::graph::fetch::GraphFetcher::from_ca_file(
            crate::graph::fetch::FetchOptions::default(),
            config.graph_ca_file.as_deref(),
        )?;
        config.graph_fetcher = Some(std::sync::Arc::new(fetcher));
    }
    let timing = config.lease;
    if timing.duration_seconds == 0 || timing.grace_seconds >= timing.duration_seconds {
        return Err(Error::Lease(format!(
            "lease grace ({}s) must be shorter than its duration ({}s)",
            timing.grace_seconds, timing.duration_seconds
        )));
    }
    let mut delay = Duration::from_secs(1);
    let manager = loop {
        let built = LeaseManagerBuilder::new(client.clone(), LEASE_NAME)
            .with_namespace(config.namespace.clone())
            .with_create_mode(LeaseCreateMode::AutoCreate)
            .with_identity(config.identity.clone())
            .with_field_manager(format!("infergate-lease-{}", config.identity))
            .with_duration(timing.duration_seconds)
            .with_grace(timing.grace_seconds)
            .build();
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            built = built => match built {
                Ok(m) => break m,
                Err(e) => {
                    warn!(error = %e, namespace = %config.namespace, lease = LEASE_NAME, "cannot set up the leader-election lease; retrying");
                }
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            () = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(Duration::from_secs(30));
    };
    let (mut leader, lease_task) = manager.watch().await;
    info!(identity = %config.identity, lease = LEASE_NAME, "waiting for leadership");
    let mut result = Ok(());
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            changed = leader.wait_for(|is_leader| *is_leader) => {
                if changed.is_err() {
                    result = Err(Error::Lease("the lease manager stopped".to_owned()));
                    break;
                }
            }
        }
        info!(identity = %config.identity, "acquired the lease; starting the reconciler");
        let term = shutdown.child_token();
        let mut session = tokio::spawn(controller::run_controller(
            client.clone(),
            config.clone(),
            std::sync::Arc::clone(&state),
            term.clone(),
        ));
        let lost = tokio::select! {
            () = shutdown.cancelled() => false,
            changed = leader.wait_for(|is_leader| !*is_leader) => {
                if changed.is_err() {
                    result = Err(Error::Lease("the lease manager stopped".to_owned()));
                }
                true
            }
            ended = &mut session => {
                match ended {
                    Ok(Ok(())) => warn!("reconciler ended on its own; restarting it while the lease is held"),
                    Ok(Err(e)) => error!(error = %e, "reconciler failed; restarting it while the lease is held"),
                    Err(e) => error!(error = %e, "reconciler task panicked; restarting it while the lease is held"),
                }
                false
            }
        };
        term.cancel();
        if !session.is_finished() {
            let _ = session.await;
        }
        if lost {
            warn!(identity = %config.identity, "lost the lease; reconciler stopped");
        }
        if shutdown.is_cancelled() || result.is_err() {
            break;
        }
        if !lost {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    // Closing the channel makes the lease task release the lease and end.
    drop(leader);
    match lease_task.await {
        Ok(Ok(_)) => info!(identity = %config.identity, "released the lease"),
        Ok(Err(e)) => warn!(error = %e, "failed to release the lease"),
        Err(e) => warn!(error = %e, "lease task failed"),
    }
    result
}
