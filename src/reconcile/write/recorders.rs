//! Event recorders for the reconciler's [`super::writer::Writer`], spread so
//! that publishing one event never walks every service's recent events.

/// How many event recorders the reconciler spreads its services over.
const RECORDER_SHARDS: usize = 64;

/// Event recorders, each service always on the same one (by uid). kube's
/// [`Recorder`](kube::runtime::events::Recorder) keeps what it published in the last six minutes, to publish
/// a repeat as a series, and walks all of it on every publish: with one
/// recorder for the whole reconciler, each event cost work in proportion
/// to every service with a recent event (quadratic when thousands of
/// services are created at once). Spread over [`RECORDER_SHARDS`]
/// recorders, a publish walks a 64th of it. One recorder per service would
/// walk only its own events, but each keeps its own table, and the memory
/// grows with every service (docs/performance.md, "Memory").
pub(super) struct Recorders<R> {
    shards: Vec<R>,
}

impl<R: Clone> Recorders<R> {
    pub(super) fn new(make: impl Fn() -> R) -> Self {
        Recorders {
            shards: (0..RECORDER_SHARDS).map(|_| make()).collect(),
        }
    }

    /// The recorder of the service `key`.
    pub(super) fn get(&self, key: &str) -> R {
        use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
        // A fixed hasher: the same service lands on the same recorder for
        // the life of the process (its repeats are counted there).
        let hash = BuildHasherDefault::<DefaultHasher>::default().hash_one(key);
        self.shards[(hash % self.shards.len() as u64) as usize].clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn services_keep_their_recorder_and_spread_over_all_of_them() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        let made = AtomicUsize::new(0);
        let recorders = Recorders::new(|| Arc::new(made.fetch_add(1, Ordering::Relaxed)));
        assert_eq!(made.load(Ordering::Relaxed), RECORDER_SHARDS);
        let mut per_shard = vec![0usize; RECORDER_SHARDS];
        for i in 0..6_400 {
            let key = format!("6f1e2a3b-0000-4000-8000-{i:012}");
            let shard = recorders.get(&key);
            assert!(
                Arc::ptr_eq(&shard, &recorders.get(&key)),
                "a service always uses the same recorder"
            );
            per_shard[*shard] += 1;
        }
        // 100 services per recorder on average: none left empty, none
        // holding more than twice its share.
        let (min, max) = (
            per_shard.iter().min().copied().unwrap_or_default(),
            per_shard.iter().max().copied().unwrap_or_default(),
        );
        assert!(min > 0 && max < 200, "uneven spread: {min}..{max}");
    }
}
