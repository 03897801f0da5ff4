//! "Once per value": the annotations `infergate.dev/rollout-action` and
//! `infergate.dev/graph-refresh` act at most once per value, ever. The
//! values acted on are a set, not the last one: A, B, A acts twice, and a
//! GitOps tool that re-applies an old value of its own changes nothing.
//!
//! Status keeps the last [`KEEP`] values acted on, newest last
//! (`status.rollout.actionsSeen`, `status.graph.refreshesSeen`), each as its
//! [`key`]. A reconcile can read a service whose status does not show this
//! process's latest status write yet (the watch is a moment behind): the
//! writer remembers the lists it wrote ([`Written`]), and a value in either
//! the status or that memory counts as seen.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::ResourceExt;

use crate::api::v1beta1::{InferenceService, InferenceServiceStatus};

/// How many values acted on status keeps, per annotation.
pub const KEEP: usize = 16;
/// Longest value kept as it is; a longer one is kept as its digest.
pub const MAX_KEY: usize = 128;

/// How a value is kept in status: as it is up to [`MAX_KEY`] bytes, else as
/// `sha256:<hex>` of it (so status stays small and the same value is still
/// recognised).
#[must_use]
pub fn key(value: &str) -> String {
    if value.len() <= MAX_KEY {
        value.to_owned()
    } else {
        crate::graph::fetch::digest_of(value.as_bytes())
    }
}

/// Whether `key` was acted on: in `seen`, or the `last` value a status
/// written before `seen` existed recorded (as it was written: a long value
/// in full).
#[must_use]
pub fn contains(seen: &[String], last: Option<&str>, key: &str) -> bool {
    last.is_some_and(|l| self::key(l) == key) || seen.iter().any(|s| s == key)
}

/// Start `seen` from `last` when a status written before `seen` existed
/// has only that.
pub fn seed(seen: &mut Vec<String>, last: Option<&str>) {
    if seen.is_empty()
        && let Some(last) = last
    {
        seen.push(key(last));
    }
}

/// Add `key` as the newest value acted on, keeping the last [`KEEP`].
pub fn remember(seen: &mut Vec<String>, key: String) {
    seen.retain(|s| *s != key);
    seen.push(key);
    trim(seen);
}

/// `remembered` (older, in the order acted on) and then the values of
/// `computed` it lacks, the last [`KEEP`] of them.
#[must_use]
pub fn merged(remembered: &[String], computed: &[String]) -> Vec<String> {
    let mut out = remembered.to_vec();
    for k in computed {
        if !out.contains(k) {
            out.push(k.clone());
        }
    }
    trim(&mut out);
    out
}

fn trim(seen: &mut Vec<String>) {
    if seen.len() > KEEP {
        seen.drain(..seen.len() - KEEP);
    }
}

/// The lists of values acted on that this process last wrote for a service.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lists {
    /// `status.rollout.actionsSeen`.
    pub actions: Vec<String>,
    /// `status.graph.refreshesSeen`.
    pub refreshes: Vec<String>,
}

impl Lists {
    /// The lists of `st`.
    #[must_use]
    pub fn of(st: &InferenceServiceStatus) -> Self {
        Self {
            actions: st
                .rollout
                .as_ref()
                .map(|r| r.actions_seen.clone())
                .unwrap_or_default(),
            refreshes: st
                .graph
                .as_ref()
                .map(|g| g.refreshes_seen.clone())
                .unwrap_or_default(),
        }
    }

    /// Put what this process wrote before into `st`'s lists (a status read
    /// from a watch that is a moment behind would otherwise lose it).
    pub fn fill(&self, st: &mut InferenceServiceStatus) {
        if let Some(r) = st.rollout.as_mut()
            && !self.actions.is_empty()
        {
            r.actions_seen = merged(&self.actions, &r.actions_seen);
        }
        if let Some(g) = st.graph.as_mut()
            && !self.refreshes.is_empty()
        {
            g.refreshes_seen = merged(&self.refreshes, &g.refreshes_seen);
        }
    }
}

/// A service's namespace and name.
type Name = (String, String);

/// The lists each service's last status write held, by namespace and name,
/// for the service's uid.
#[derive(Debug, Default)]
pub struct Written {
    lists: Mutex<HashMap<Name, (Option<String>, Lists)>>,
}

impl Written {
    /// What was written for `svc` (this uid), if anything.
    #[must_use]
    pub fn get(&self, svc: &InferenceService) -> Lists {
        let Ok(m) = self.lists.lock() else {
            return Lists::default();
        };
        m.get(&(svc.namespace().unwrap_or_default(), svc.name_any()))
            .filter(|(uid, _)| *uid == svc.uid())
            .map(|(_, l)| l.clone())
            .unwrap_or_default()
    }

    /// `st` was written for `svc`.
    pub fn wrote(&self, svc: &InferenceService, st: &InferenceServiceStatus) {
        let lists = Lists::of(st);
        if let Ok(mut m) = self.lists.lock() {
            let k = (svc.namespace().unwrap_or_default(), svc.name_any());
            if lists == Lists::default() {
                m.remove(&k);
            } else {
                m.insert(k, (svc.uid(), lists));
            }
        }
    }

    /// Forget `svc` (deleted).
    pub fn forget(&self, svc: &InferenceService) {
        self.forget_key(&svc.namespace().unwrap_or_default(), &svc.name_any());
    }

    /// Forget what was written for the service `name` of `namespace`.
    pub fn forget_key(&self, namespace: &str, name: &str) {
        if let Ok(mut m) = self.lists.lock() {
            m.remove(&(namespace.to_owned(), name.to_owned()));
        }
    }

    /// Services with lists remembered.
    #[must_use]
    pub fn len(&self) -> usize {
        self.lists.lock().map_or(0, |m| m.len())
    }

    /// Whether no list is remembered.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_b_a_is_two_values_and_the_set_keeps_sixteen() {
        let mut seen = Vec::new();
        assert!(!contains(&seen, None, "A"));
        remember(&mut seen, key("A"));
        assert!(!contains(&seen, None, "B"));
        remember(&mut seen, key("B"));
        // A again: seen, whatever came between.
        assert!(contains(&seen, None, "A"));
        for i in 0..KEEP {
            remember(&mut seen, key(&format!("v{i}")));
        }
        assert_eq!(seen.len(), KEEP);
        assert_eq!(seen.last().map(String::as_str), Some("v15"));
        assert!(!contains(&seen, None, "A"), "the oldest go first");
        // A status written before the lists existed: its last value counts,
        // a long one by its digest.
        assert!(contains(&[], Some("old"), "old"));
        let long = "x".repeat(MAX_KEY + 1);
        assert!(contains(&[], Some(&long), &key(&long)));
        let mut seen = Vec::new();
        seed(&mut seen, Some(&long));
        assert_eq!(seen, [key(&long)]);
        seed(&mut seen, Some("other"));
        assert_eq!(seen, [key(&long)], "only an empty list is seeded");
    }

    #[test]
    fn long_values_are_kept_as_digests() {
        let long = "x".repeat(MAX_KEY + 1);
        let k = key(&long);
        assert!(k.starts_with("sha256:") && k.len() == 71, "{k}");
        assert_eq!(key(&long), k);
        assert_eq!(key(&"x".repeat(MAX_KEY)), "x".repeat(MAX_KEY));
    }

    #[test]
    fn merging_keeps_the_order_acted_on() {
        let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
        // Written [A, B]; a reconcile on a status from before B adds C.
        assert_eq!(
            merged(&s(&["A", "B"]), &s(&["A", "C"])),
            s(&["A", "B", "C"])
        );
        let many: Vec<String> = (0..20).map(|i| format!("v{i}")).collect();
        let m = merged(&many[..10], &many);
        assert_eq!(m, many[4..].to_vec());
    }
}
