//! The connection workers of the TLS listener.

use tokio_util::sync::CancellationToken;

/// Connection workers: `n` threads, each running a single-threaded runtime.
/// Every accepted connection is handed to one of them in turn and stays
/// there from the TLS handshake to the close, so a request never crosses
/// threads and no work is stolen back and forth: on a small machine this
/// serves more requests per core than a work-stealing pool. Work that takes
/// long (large bodies) leaves them: see [`crate::webhook::limits::Offload`].
pub(super) struct Workers {
    handles: Vec<tokio::runtime::Handle>,
    threads: Vec<std::thread::JoinHandle<()>>,
    next: usize,
    stop: CancellationToken,
}

impl Workers {
    pub(super) fn start(n: usize) -> std::io::Result<Self> {
        let stop = CancellationToken::new();
        let mut workers = Workers {
            handles: Vec::with_capacity(n),
            threads: Vec::with_capacity(n),
            next: 0,
            stop: stop.clone(),
        };
        for i in 0..n.max(1) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            workers.handles.push(runtime.handle().clone());
            let stop = stop.clone();
            let thread = std::thread::Builder::new()
                .name(format!("webhook-{i}"))
                .spawn(move || runtime.block_on(stop.cancelled()))?;
            workers.threads.push(thread);
        }
        Ok(workers)
    }

    /// Run `task` on the next worker.
    pub(super) fn spawn(&mut self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        let handle = &self.handles[self.next % self.handles.len()];
        self.next = self.next.wrapping_add(1);
        drop(handle.spawn(task));
    }

    /// Stop the workers (dropping any connection still open) and wait for them.
    pub(super) async fn stop(mut self) {
        self.stop.cancel();
        let threads = std::mem::take(&mut self.threads);
        let joined = tokio::task::spawn_blocking(move || {
            for t in threads {
                let _ = t.join();
            }
        });
        if let Err(e) = joined.await {
            tracing::warn!(error = %e, "failed to join the connection workers");
        }
    }
}

/// Workers dropped without [`Workers::stop`] (a failed start, or the serving
/// future dropped before it returns) still end their threads.
impl Drop for Workers {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Whether a task spawned on `handle` still runs (its runtime is alive).
    async fn alive(handle: &tokio::runtime::Handle) -> bool {
        handle.spawn(async {}).await.is_ok()
    }

    #[tokio::test]
    async fn workers_end_when_stopped_or_dropped() {
        let mut workers = Workers::start(2).unwrap();
        assert_eq!(workers.handles.len(), 2);
        let handles = workers.handles.clone();
        for h in &handles {
            assert!(alive(h).await);
        }
        // Connections go round the workers.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for _ in 0..4 {
            let tx = tx.clone();
            workers.spawn(async move {
                let _ = tx.send(std::thread::current().name().map(str::to_owned));
            });
        }
        let mut names = Vec::new();
        for _ in 0..4 {
            names.push(rx.recv().await.unwrap().unwrap());
        }
        names.sort();
        assert_eq!(names, ["webhook-0", "webhook-0", "webhook-1", "webhook-1"]);

        workers.stop().await;
        for h in &handles {
            assert!(!alive(h).await, "stopped worker still runs tasks");
        }

        let workers = Workers::start(1).unwrap();
        let handle = workers.handles[0].clone();
        drop(workers);
        let mut ended = false;
        for _ in 0..200 {
            if !alive(&handle).await {
                ended = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(ended, "a dropped worker's thread did not end");
    }
}
