//! Slots for graph fetches, handed out in the order services asked.
//!
//! At most [`FetchLimits::per_namespace`] fetches of one namespace and
//! [`FetchLimits::total`] in all run at once. A service that finds no free slot
//! takes a place in line and its reconcile ends (it holds no worker while
//! it waits). When a slot frees, it goes to the service that has waited
//! longest among those whose namespace has room: the slot is held for it
//! (a grant) and the service's cache key is sent to the channel given to
//! [`SlotQueue::notify_to`], so the reconciler comes back for it at once.
//! Within a namespace the line is first come, first served: a service
//! never fetched is not passed by others' retries, which join the end of
//! the line when their backoff ends. Across namespaces, one namespace's
//! full slots never hold up another's line.
//!
//! A grant not taken within [`FetchLimits::hold`] goes to the next in line, and
//! a place not asked about again within [`FetchLimits::stale`] is given up (the
//! service was deleted or no longer has a graph).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedSender;

use super::error::GraphError;

/// How many fetches run at once, and how long places and grants are kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FetchLimits {
    /// Fetches of one namespace at once.
    pub per_namespace: usize,
    /// Fetches at once in all.
    pub total: usize,
    /// How long a slot freed for a waiting service is held for it.
    pub hold: Duration,
    /// A place in line not asked about again for this long is given up.
    pub stale: Duration,
}

/// Where a service stands in line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Place {
    /// Services of the same namespace ahead of it.
    pub ahead: usize,
    /// How long it has waited.
    pub waited: Duration,
}

#[derive(Debug)]
struct Waiter {
    key: String,
    namespace: String,
    since: Instant,
    seen: Instant,
}

#[derive(Debug)]
struct Grant {
    namespace: String,
    at: Instant,
}

/// The line and the slots in use; pure, every instant given by the caller.
#[derive(Debug, Default)]
struct Line {
    /// Slots in use per namespace: fetches in flight and grants.
    busy: HashMap<String, usize>,
    /// Slots in use in all.
    total: usize,
    /// Waiting services, longest waiting first.
    waiting: VecDeque<Waiter>,
    /// Slots held for services that have not come for them yet, by cache key.
    granted: HashMap<String, Grant>,
}

impl Line {
    fn has_room(&self, limits: &FetchLimits, namespace: &str) -> bool {
        self.total < limits.total
            && self.busy.get(namespace).copied().unwrap_or(0) < limits.per_namespace
    }

    fn occupy(&mut self, namespace: &str) {
        *self.busy.entry(namespace.to_owned()).or_insert(0) += 1;
        self.total += 1;
    }

    fn free(&mut self, namespace: &str) {
        self.total = self.total.saturating_sub(1);
        if let Some(n) = self.busy.get_mut(namespace) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.busy.remove(namespace);
            }
        }
    }

    /// A slot for `key` now, or its place in line (taken if it had none).
    fn enter(
        &mut self,
        limits: &FetchLimits,
        key: &str,
        namespace: &str,
        now: Instant,
    ) -> Option<Place> {
        if self.granted.remove(key).is_some() {
            return None;
        }
        if let Some(i) = self.waiting.iter().position(|w| w.key == key) {
            let w = &mut self.waiting[i];
            w.seen = now;
            let (namespace, since) = (w.namespace.clone(), w.since);
            let ahead = self
                .waiting
                .iter()
                .take(i)
                .filter(|w| w.namespace == namespace)
                .count();
            return Some(Place {
                ahead,
                waited: now.saturating_duration_since(since),
            });
        }
        let ahead = self
            .waiting
            .iter()
            .filter(|w| w.namespace == namespace)
            .count();
        if ahead == 0 && self.has_room(limits, namespace) {
            self.occupy(namespace);
            return None;
        }
        self.waiting.push_back(Waiter {
            key: key.to_owned(),
            namespace: namespace.to_owned(),
            since: now,
            seen: now,
        });
        Some(Place {
            ahead,
            waited: Duration::ZERO,
        })
    }

    /// Give up stale places and untaken grants, then hold each free slot
    /// for the longest waiting service that may have it; their keys.
    fn dispatch(&mut self, limits: &FetchLimits, now: Instant) -> Vec<String> {
        self.waiting
            .retain(|w| now.saturating_duration_since(w.seen) <= limits.stale);
        let expired: Vec<String> = self
            .granted
            .iter()
            .filter(|(_, g)| now.saturating_duration_since(g.at) > limits.hold)
            .map(|(k, _)| k.clone())
            .collect();
        for key in expired {
            if let Some(g) = self.granted.remove(&key) {
                self.free(&g.namespace);
            }
        }
        let mut woken = Vec::new();
        let mut i = 0;
        while i < self.waiting.len() && self.total < limits.total {
            let namespace = &self.waiting[i].namespace;
            // Earlier waiters of this namespace found no room: neither does this one.
            if self.has_room(limits, namespace) {
                if let Some(w) = self.waiting.remove(i) {
                    self.occupy(&w.namespace);
                    self.granted.insert(
                        w.key.clone(),
                        Grant {
                            namespace: w.namespace,
                            at: now,
                        },
                    );
                    woken.push(w.key);
                }
            } else {
                i += 1;
            }
        }
        woken
    }

    /// Drop `key`'s place or grant.
    fn leave(&mut self, key: &str) {
        self.waiting.retain(|w| w.key != key);
        if let Some(g) = self.granted.remove(key) {
            self.free(&g.namespace);
        }
    }
}

/// The slots of a fetcher and the line for them.
#[derive(Debug)]
pub struct SlotQueue {
    limits: FetchLimits,
    line: Mutex<Line>,
    notify: Mutex<Option<UnboundedSender<String>>>,
}

/// One slot for a fetch; given back (to the next in line) on drop.
#[derive(Debug)]
pub struct Slot {
    queue: Arc<SlotQueue>,
    namespace: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let woken = {
            let mut line = self.queue.line();
            line.free(&self.namespace);
            line.dispatch(&self.queue.limits, Instant::now())
        };
        self.queue.wake(woken);
    }
}

impl SlotQueue {
    /// An empty line with every slot free.
    #[must_use]
    pub fn new(limits: FetchLimits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            line: Mutex::new(Line::default()),
            notify: Mutex::new(None),
        })
    }

    /// The limits in force.
    #[must_use]
    pub fn limits(&self) -> &FetchLimits {
        &self.limits
    }

    fn line(&self) -> MutexGuard<'_, Line> {
        // Nothing panics while holding the lock; a poisoned line is still whole.
        self.line.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wake(&self, keys: Vec<String>) {
        if keys.is_empty() {
            return;
        }
        let notify = self.notify.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(tx) = notify.as_ref() {
            for key in keys {
                let _ = tx.send(key);
            }
        }
    }

    /// Send the cache key of every service a slot is held for to `tx`
    /// (replacing the channel given before).
    pub fn notify_to(&self, tx: UnboundedSender<String>) {
        *self.notify.lock().unwrap_or_else(PoisonError::into_inner) = Some(tx);
    }

    /// A slot for the service `key` of `namespace`: the one held for it,
    /// or a free one if no service of its namespace waits; otherwise its
    /// place in line, kept for the next call ([`GraphError::Queued`]).
    pub fn enter(self: &Arc<Self>, key: &str, namespace: &str) -> Result<Slot, GraphError> {
        let now = Instant::now();
        let (place, woken) = {
            let mut line = self.line();
            let woken = line.dispatch(&self.limits, now);
            (line.enter(&self.limits, key, namespace, now), woken)
        };
        self.wake(woken);
        match place {
            None => Ok(Slot {
                queue: Arc::clone(self),
                namespace: namespace.to_owned(),
            }),
            Some(p) => Err(GraphError::Queued {
                namespace: namespace.to_owned(),
                ahead: p.ahead,
                waited: p.waited,
                per_namespace: self.limits.per_namespace,
                total: self.limits.total,
            }),
        }
    }

    /// Give up `key`'s place or the slot held for it (the service was deleted).
    pub fn leave(&self, key: &str) {
        let woken = {
            let mut line = self.line();
            line.leave(key);
            line.dispatch(&self.limits, Instant::now())
        };
        self.wake(woken);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: FetchLimits = FetchLimits {
        per_namespace: 2,
        total: 3,
        hold: Duration::from_secs(10),
        stale: Duration::from_secs(120),
    };

    fn secs(t0: Instant, s: u64) -> Instant {
        t0 + Duration::from_secs(s)
    }

    /// Fetches of one namespace: `n` services asking at once, each fetch
    /// taking 10 s and failing, each service asking again 5 s after its
    /// failure, a waiting one every 30 s or at once when woken. Returns
    /// when and for whom fetches started.
    fn run(n: usize, fetches: usize) -> Vec<(u64, String)> {
        let t0 = Instant::now();
        let mut line = Line::default();
        let limits = FetchLimits { total: 8, ..LIMITS };
        let mut started = Vec::new();
        // When each service asks next (one reconcile scheduled per service),
        // and when each running fetch ends.
        let mut asks: std::collections::BTreeMap<String, u64> =
            (0..n).map(|i| (format!("ns/s{i:02}"), 0)).collect();
        let mut running: HashMap<String, u64> = HashMap::new();
        for t in 0..10_000u64 {
            if started.len() >= fetches {
                break;
            }
            let done: Vec<String> = running
                .iter()
                .filter(|(_, end)| **end == t)
                .map(|(k, _)| k.clone())
                .collect();
            for key in done {
                running.remove(&key);
                line.free("ns");
                for woken in line.dispatch(&limits, secs(t0, t)) {
                    asks.insert(woken, t);
                }
                asks.insert(key, t + 5);
            }
            let due: Vec<String> = asks
                .iter()
                .filter(|(_, at)| **at <= t)
                .map(|(k, _)| k.clone())
                .collect();
            for key in due {
                if line.enter(&limits, &key, "ns", secs(t0, t)).is_none() {
                    started.push((t, key.clone()));
                    asks.remove(&key);
                    running.insert(key, t + 10);
                } else {
                    asks.insert(key, t + 30);
                }
            }
        }
        started
    }

    #[test]
    fn a_namespace_line_is_first_come_first_served_and_retries_join_its_end() {
        let started = run(30, 40);
        // Every service is tried once, in the order they asked, two at a
        // time, 10 s each, before any retry.
        let first: Vec<&str> = started[..30].iter().map(|(_, k)| k.as_str()).collect();
        let asked: Vec<String> = (0..30).map(|i| format!("ns/s{i:02}")).collect();
        assert_eq!(first, asked);
        assert!(started[29].0 <= 30 * 10 / 2, "{started:?}");
        // Then the first two, whose retries joined the line after everyone.
        let next: Vec<&str> = started[30..32].iter().map(|(_, k)| k.as_str()).collect();
        assert_eq!(next, ["ns/s00", "ns/s01"]);
    }

    #[test]
    fn a_waiting_service_learns_its_place_and_how_long_it_waited() {
        let t0 = Instant::now();
        let mut line = Line::default();
        assert_eq!(line.enter(&LIMITS, "a/1", "a", t0), None);
        assert_eq!(line.enter(&LIMITS, "a/2", "a", t0), None);
        let third = line.enter(&LIMITS, "a/3", "a", t0).expect("queued");
        assert_eq!(third.ahead, 0);
        let fourth = line
            .enter(&LIMITS, "a/4", "a", secs(t0, 1))
            .expect("queued");
        assert_eq!(fourth.ahead, 1);
        // Asking again keeps the place and tells the wait.
        let again = line
            .enter(&LIMITS, "a/4", "a", secs(t0, 12))
            .expect("queued");
        assert_eq!(
            again,
            Place {
                ahead: 1,
                waited: Duration::from_secs(11)
            }
        );
        // A slot frees: held for a/3, which then has it; a/4 moves up.
        line.free("a");
        assert_eq!(line.dispatch(&LIMITS, secs(t0, 13)), ["a/3"]);
        let late = line
            .enter(&LIMITS, "a/5", "a", secs(t0, 13))
            .expect("queued");
        assert_eq!(late.ahead, 1, "a newcomer does not take the held slot");
        assert_eq!(line.enter(&LIMITS, "a/3", "a", secs(t0, 13)), None);
        assert_eq!(
            line.enter(&LIMITS, "a/4", "a", secs(t0, 14))
                .map(|p| p.ahead),
            Some(0)
        );
    }

    #[test]
    fn one_namespace_full_does_not_hold_up_another() {
        let t0 = Instant::now();
        let mut line = Line::default();
        for key in ["a/1", "a/2"] {
            assert_eq!(line.enter(&LIMITS, key, "a", t0), None);
        }
        assert!(line.enter(&LIMITS, "a/3", "a", t0).is_some());
        // b finds the third slot in all although a's line is longer.
        assert_eq!(line.enter(&LIMITS, "b/1", "b", t0), None);
        // All three taken: b waits too, behind nobody of b.
        let b2 = line.enter(&LIMITS, "b/2", "b", t0).expect("queued");
        assert_eq!(b2.ahead, 0);
        // b's slot frees: a is still at its limit, so b/2 has it.
        line.free("b");
        assert_eq!(line.dispatch(&LIMITS, secs(t0, 1)), ["b/2"]);
        // An a slot frees: a/3, the longest waiting of a.
        line.free("a");
        assert_eq!(line.dispatch(&LIMITS, secs(t0, 2)), ["a/3"]);
    }

    #[test]
    fn untaken_grants_and_forgotten_places_are_given_up() {
        let t0 = Instant::now();
        let mut line = Line::default();
        for key in ["a/1", "a/2"] {
            assert_eq!(line.enter(&LIMITS, key, "a", t0), None);
        }
        for key in ["a/3", "a/4", "a/5"] {
            assert!(line.enter(&LIMITS, key, "a", t0).is_some());
        }
        line.free("a");
        assert_eq!(line.dispatch(&LIMITS, secs(t0, 1)), ["a/3"]);
        // a/3 never comes for it: after the hold, the slot is a/4's.
        assert_eq!(line.dispatch(&LIMITS, secs(t0, 5)), Vec::<String>::new());
        assert_eq!(line.dispatch(&LIMITS, secs(t0, 12)), ["a/4"]);
        // a/5 stops asking: its place goes after `stale`; a deleted
        // service leaves at once and its held slot frees.
        line.leave("a/4");
        assert!(line.dispatch(&LIMITS, secs(t0, 200)).is_empty());
        assert!(line.waiting.is_empty());
        assert_eq!(line.busy.get("a"), Some(&1));
        assert_eq!(line.total, 1);
    }

    #[tokio::test]
    async fn a_freed_slot_wakes_the_next_service() {
        let queue = SlotQueue::new(LIMITS);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        queue.notify_to(tx);
        let one = queue.enter("a/1", "a").expect("slot");
        let _two = queue.enter("a/2", "a").expect("slot");
        let e = queue.enter("a/3", "a").unwrap_err();
        assert_eq!(e.reason(), "FetchQueued");
        assert!(e.is_deferral());
        let msg = e.to_string();
        assert!(
            msg.contains("first in namespace a's line") && msg.contains("at most 2 graph fetches"),
            "{msg}"
        );
        drop(one);
        assert_eq!(rx.recv().await.as_deref(), Some("a/3"));
        let _three = queue.enter("a/3", "a").expect("the held slot");
        assert!(queue.enter("a/4", "a").is_err());
        queue.leave("a/4");
        assert!(queue.line().waiting.is_empty());
    }
}
