//! Running a watch: its next event until shutdown, and how its errors are
//! logged (every watch of `state` uses both).

use futures::StreamExt;
use kube::runtime::watcher;
use tokio_util::sync::CancellationToken;

/// The next item of `stream`, or `None` once it ends or `shutdown` fires.
pub(crate) async fn next_until<S: futures::Stream + Unpin>(
    stream: &mut S,
    shutdown: &CancellationToken,
) -> Option<S::Item> {
    tokio::select! {
        () = shutdown.cancelled() => None,
        item = stream.next() => item,
    }
}

/// Whether a watch error is the API server saying the watch's revision has
/// left its window (410 Expired/Gone): routine under a high write rate or
/// after a long disconnection; the watcher lists again and carries on.
#[must_use]
fn watch_expired(error: &watcher::Error) -> bool {
    matches!(error, watcher::Error::WatchError(status) if status.code == 410)
}

/// Log a watch error of `kind` (`what`: which watch): an expired watch at
/// info (the watcher lists again, nothing is lost), anything else as a
/// warning.
pub(crate) fn log_watch_error(kind: &str, error: &watcher::Error, what: &str) {
    if watch_expired(error) {
        tracing::info!(kind = %kind, error = %error, "{what} expired; listing again");
    } else {
        tracing::warn!(kind = %kind, error = %error, "{what} failed; retrying");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_expired_watch_counts_as_routine() {
        use kube::core::Status;
        let status = |code: u16, reason: &str| {
            watcher::Error::WatchError(Box::new(
                Status::failure("too old resource version: 17176 (17182)", reason).with_code(code),
            ))
        };
        assert!(watch_expired(&status(410, "Expired")));
        assert!(watch_expired(&status(410, "Gone")));
        assert!(!watch_expired(&status(403, "Forbidden")));
        assert!(!watch_expired(&status(500, "InternalError")));
        assert!(!watch_expired(&watcher::Error::NoResourceVersion));
    }
}
