//! Which child events the reconciler caused itself. Every write of a
//! child comes back through the child's watch; that echo is no news to
//! the reconcile that wrote it (it has the API server's answer) and must
//! not reconcile the service again. The writer says when a write of a
//! child begins and what it left ([`Echoes::begin`], [`Echoes::end`]); the
//! watch asks whether an event is such an echo ([`Echoes::absorbs`]).
//!
//! An event that arrives while its child's write is under way is held
//! until the write ends: if it shows what the write left, it was the echo;
//! if it shows anything else, someone else changed the child meanwhile and
//! the service is reconciled again (through the retrigger channel).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use futures::channel::mpsc::UnboundedSender;
use kube::runtime::reflector::ObjectRef;

use crate::api::v1beta1::InferenceService;

/// (kind, namespace, name) of a child.
pub type ChildKey = (&'static str, String, String);

/// What a watch event shows of a child, or what a write left.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChildSeen {
    /// The object at this resourceVersion.
    Version(String),
    /// The object of this uid is gone.
    Gone(String),
}

#[derive(Debug)]
enum Remembered {
    /// A write is under way; the latest event meanwhile.
    Writing {
        owner: ObjectRef<InferenceService>,
        seen: Option<ChildSeen>,
    },
    /// The write left this; its event is an echo.
    Left {
        owner: ObjectRef<InferenceService>,
        seen: ChildSeen,
    },
}

/// The writes of children whose echoes are still to come.
#[derive(Debug)]
pub struct Echoes {
    entries: Mutex<HashMap<ChildKey, Remembered>>,
    retrigger: Option<UnboundedSender<ObjectRef<InferenceService>>>,
}

impl Echoes {
    /// Echoes whose unattributable events reconcile their service again
    /// through `retrigger`.
    #[must_use]
    pub fn new(retrigger: UnboundedSender<ObjectRef<InferenceService>>) -> Self {
        Self {
            entries: Mutex::default(),
            retrigger: Some(retrigger),
        }
    }

    /// Echoes of a writer no watch follows (tests, tools): nothing to
    /// retrigger.
    #[must_use]
    pub fn detached() -> Self {
        Self {
            entries: Mutex::default(),
            retrigger: None,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<ChildKey, Remembered>> {
        // Every holder leaves the map consistent.
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A write of `key`, a child of `owner`, begins.
    pub fn begin(&self, key: &ChildKey, owner: ObjectRef<InferenceService>) {
        self.lock()
            .insert(key.clone(), Remembered::Writing { owner, seen: None });
    }

    /// [`Echoes::begin`], ended when the returned guard is: by
    /// [`Write::left`], or (the write failed, or its future was dropped)
    /// with nothing left.
    pub fn write<'a>(&'a self, key: &'a ChildKey, owner: ObjectRef<InferenceService>) -> Write<'a> {
        self.begin(key, owner);
        Write {
            echoes: self,
            key,
            done: false,
        }
    }

    /// The write of `key` ended: `left` is what it left (`None`: it
    /// failed, or left nothing to expect).
    pub fn end(&self, key: &ChildKey, left: Option<ChildSeen>) {
        let mut entries = self.lock();
        let Some(Remembered::Writing { owner, seen }) = entries.remove(key) else {
            return;
        };
        match (seen, left) {
            (None, Some(left)) => {
                entries.insert(key.clone(), Remembered::Left { owner, seen: left });
            }
            (None, None) => {}
            // The echo came while the write was under way.
            (Some(seen), Some(left)) if seen == left => {}
            // Something the write did not leave: someone else's change.
            (Some(_), _) => {
                drop(entries);
                if let Some(tx) = &self.retrigger {
                    let _ = tx.unbounded_send(owner);
                }
            }
        }
    }

    /// Whether a watch event of `key` showing `seen` is an echo of a write
    /// (or arrives while one is under way, and waits for its end). An
    /// expected echo is looked for in the next event only: a later one
    /// means the echo was passed over.
    pub fn absorbs(&self, key: &ChildKey, seen: ChildSeen) -> bool {
        let mut entries = self.lock();
        match entries.get_mut(key) {
            Some(Remembered::Writing { seen: s, .. }) => {
                *s = Some(seen);
                true
            }
            Some(Remembered::Left { seen: left, .. }) => {
                let echo = *left == seen;
                entries.remove(key);
                echo
            }
            None => false,
        }
    }

    /// Writes whose echoes are still to come (for tests and metrics).
    #[must_use]
    pub fn pending(&self) -> usize {
        self.lock().len()
    }

    /// Forget the echoes still to come of `owner`'s children (the service
    /// is gone; a watch gap may have swallowed their events). A write
    /// under way keeps its entry until it ends.
    pub fn forget(&self, owner: &ObjectRef<InferenceService>) {
        self.lock()
            .retain(|_, r| !matches!(r, Remembered::Left { owner: o, .. } if o == owner));
    }
}

/// A write under way ([`Echoes::write`]).
pub struct Write<'a> {
    echoes: &'a Echoes,
    key: &'a ChildKey,
    done: bool,
}

impl Write<'_> {
    /// The write ended and left `left`.
    pub fn left(mut self, left: Option<ChildSeen>) {
        self.done = true;
        self.echoes.end(self.key, left);
    }
}

impl Drop for Write<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.echoes.end(self.key, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;

    fn key(name: &str) -> ChildKey {
        ("Deployment", "team".to_owned(), name.to_owned())
    }

    fn owner() -> ObjectRef<InferenceService> {
        ObjectRef::new("chat").within("team")
    }

    fn v(rv: &str) -> ChildSeen {
        ChildSeen::Version(rv.to_owned())
    }

    #[test]
    fn the_echo_of_a_write_is_absorbed_once_and_others_are_not() {
        let echoes = Echoes::detached();
        // Nothing written: an event is news.
        assert!(!echoes.absorbs(&key("chat"), v("1")));
        echoes.begin(&key("chat"), owner());
        echoes.end(&key("chat"), Some(v("7")));
        assert!(echoes.absorbs(&key("chat"), v("7")));
        // Once: the next event is news again.
        assert!(!echoes.absorbs(&key("chat"), v("7")));
        // Another version than the write left: news, and the wait ends.
        echoes.begin(&key("chat"), owner());
        echoes.end(&key("chat"), Some(v("9")));
        assert!(!echoes.absorbs(&key("chat"), v("10")));
        assert_eq!(echoes.pending(), 0);
        // A failed write expects nothing.
        echoes.begin(&key("chat"), owner());
        echoes.end(&key("chat"), None);
        assert!(!echoes.absorbs(&key("chat"), v("11")));
        // A deletion's echo is the uid gone.
        echoes.begin(&key("chat"), owner());
        echoes.end(&key("chat"), Some(ChildSeen::Gone("u-1".into())));
        assert!(echoes.absorbs(&key("chat"), ChildSeen::Gone("u-1".into())));
        // A write whose future is dropped half-way waits for nothing.
        let k = key("chat");
        drop(echoes.write(&k, owner()));
        assert_eq!(echoes.pending(), 0);
        assert!(!echoes.absorbs(&k, v("12")));
        echoes.write(&k, owner()).left(Some(v("13")));
        assert!(echoes.absorbs(&k, v("13")));
    }

    #[tokio::test]
    async fn an_event_during_a_write_waits_for_its_end() {
        let (tx, mut rx) = futures::channel::mpsc::unbounded();
        let echoes = Echoes::new(tx);
        // The echo before the write's answer: absorbed, nothing retriggered.
        echoes.begin(&key("chat"), owner());
        assert!(echoes.absorbs(&key("chat"), v("7")));
        echoes.end(&key("chat"), Some(v("7")));
        assert_eq!(echoes.pending(), 0);
        // Someone else's version meanwhile: the service again.
        echoes.begin(&key("chat"), owner());
        assert!(echoes.absorbs(&key("chat"), v("8")));
        echoes.end(&key("chat"), Some(v("9")));
        // A failed write with an event meanwhile: the service again.
        echoes.begin(&key("chat-canary"), owner());
        assert!(echoes.absorbs(&key("chat-canary"), v("3")));
        echoes.end(&key("chat-canary"), None);
        drop(echoes);
        let again: Vec<_> = rx.by_ref().collect().await;
        assert_eq!(again, [owner(), owner()]);
    }
}
