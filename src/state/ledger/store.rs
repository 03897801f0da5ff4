//! The ledgers' store: one ConfigMap per namespace in infergate's own
//! namespace, read from a watch and written with the `resourceVersion` each
//! write was computed from; a write that lost a race is recomputed from a
//! fresh read ([`Ledger::charge`]). Every charge is such a write, also one
//! the watched copy already shows: a copy may be behind the ledger, and
//! only a write under its precondition proves the book it was judged on is
//! the current one. A namespace without a ledger yet has its first one
//! built from its services (the caller's `seed`) and created with the
//! charge (a create fails when another writer created it first: read it and
//! judge again). Within one process the writes of one namespace wait for
//! each other (they would only conflict).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams, Preconditions};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio_util::sync::CancellationToken;

use crate::api::v1beta1::InferenceService;
use crate::engine::capacity::charge::Charge;
use crate::metrics::Metrics;
use crate::state::watching::{log_watch_error, next_until};

use super::book::{Book, Entry};

/// The label every ledger carries (value [`LEDGER_LABEL_VALUE`]).
pub use crate::api::vocabulary::names::LABEL_LEDGER as LEDGER_LABEL;
/// The value of [`LEDGER_LABEL`].
pub const LEDGER_LABEL_VALUE: &str = "budget";
/// The label naming the namespace a ledger counts.
pub use crate::api::vocabulary::names::LABEL_NAMESPACE as NAMESPACE_LABEL;
/// How long one admission may spend charging the ledger at most, waits
/// for this process's other writes included (the caller may give less:
/// what is left of the webhook's 5 s timeout after the access reviews).
pub const CHARGE_DEADLINE: Duration = Duration::from_secs(3);
/// Writes one admission tries before it gives up.
pub const MAX_ATTEMPTS: usize = 16;

/// The ledger of `namespace`'s name.
#[must_use]
pub fn ledger_name(namespace: &str) -> String {
    format!("infergate-budget-{namespace}")
}

/// The service a charge is for.
#[derive(Clone, Copy, Debug)]
pub struct Target<'a> {
    /// Its namespace (whose ledger records the charge).
    pub namespace: &'a str,
    /// Its name.
    pub name: &'a str,
    /// Its uid (the API server's, set before validating admission).
    pub uid: Option<&'a str>,
    /// The `metadata.generation` the write stores (also set before
    /// validating admission).
    pub generation: Option<i64>,
}

/// What the caller decides about a charge on the book it is shown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Judgement {
    /// No budget applies to the namespace: no ledger work at all.
    Unbudgeted,
    /// A Deny budget would be broken (the messages).
    Deny(Vec<String>),
    /// Record the charge; the Warn budgets it breaks.
    Charge(Vec<String>),
}

/// What charging came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Charged {
    /// Nothing to write: no budget.
    Unchanged,
    /// Recorded, with the Warn budgets it breaks.
    Written(Vec<String>),
    /// Refused by a Deny budget (the messages).
    Denied(Vec<String>),
    /// Not recorded in time, or the API server refused the write.
    Failed(String),
}

/// The ledgers of every namespace with a budget (see the module docs).
/// The default has no API server: every charge fails.
#[derive(Clone, Default)]
pub struct Ledger {
    inner: Option<Arc<Inner>>,
}

struct Inner {
    api: Api<ConfigMap>,
    /// Where a namespace's first ledger learns its services (a quorum
    /// list, not a watch cache that may lag behind a create).
    client: kube::Client,
    store: Store<ConfigMap>,
    /// Per tenant namespace: this process's writes wait for each other,
    /// and the last object this process wrote or read.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<ConfigMap>>>>>,
    metrics: Metrics,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger")
            .field("watching", &self.inner.is_some())
            .finish()
    }
}

impl Ledger {
    /// Watch the ledgers in `own_namespace` until `shutdown`, and write
    /// them through `client`.
    #[must_use]
    pub fn start(
        client: kube::Client,
        own_namespace: &str,
        metrics: Metrics,
        shutdown: CancellationToken,
    ) -> Self {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), own_namespace);
        let (store, writer) = reflector::store();
        let config =
            watcher::Config::default().labels(&format!("{LEDGER_LABEL}={LEDGER_LABEL_VALUE}"));
        let stream =
            reflector::reflector(writer, watcher::watcher(api.clone(), config)).default_backoff();
        tokio::spawn(async move {
            futures::pin_mut!(stream);
            while let Some(event) = next_until(&mut stream, &shutdown).await {
                if let Err(e) = event {
                    log_watch_error("ConfigMap", &e, "ledger watch");
                }
            }
        });
        Self {
            inner: Some(Arc::new(Inner {
                api,
                client,
                store,
                locks: Mutex::new(HashMap::new()),
                metrics,
            })),
        }
    }

    /// The book of `namespace` as the watch last saw it; `None` when the
    /// watch holds no ledger for it.
    #[must_use]
    pub fn cached(&self, namespace: &str) -> Option<Book> {
        let cm = self.inner.as_ref().and_then(|i| i.cached(namespace))?;
        Some(Book::parse(cm.data.as_ref()))
    }

    /// Whether the watch holds a ledger for `namespace`.
    #[must_use]
    pub fn has(&self, namespace: &str) -> bool {
        self.inner
            .as_ref()
            .is_some_and(|i| i.store.get(&i.key(namespace)).is_some())
    }

    /// Every ledger the watch holds, by the namespace it counts.
    #[must_use]
    pub fn namespaces(&self) -> Vec<String> {
        let Some(inner) = &self.inner else {
            return Vec::new();
        };
        inner
            .store
            .state()
            .iter()
            .filter_map(|cm| cm.metadata.labels.as_ref()?.get(NAMESPACE_LABEL).cloned())
            .collect()
    }

    /// Charge the service `name` (of uid `uid`) in `namespace` with
    /// `charge` as `judge` decides on the book (recomputed on every fresh
    /// read), within `within` and at most [`CHARGE_DEADLINE`]. Without a
    /// ledger the book judged is `seed`'s of the namespace's services, as
    /// a quorum list of the API server gives them (a watch cache may not
    /// have seen a service stored a moment ago), and the ledger is created
    /// with it.
    pub async fn charge(
        &self,
        target: Target<'_>,
        charge: Charge,
        within: Duration,
        judge: impl Fn(&Book) -> Judgement,
        seed: impl Fn(&[Arc<InferenceService>]) -> Book,
    ) -> Charged {
        let Some(inner) = &self.inner else {
            return Charged::Failed("no API server to record the charge with".to_owned());
        };
        let deadline = within.min(CHARGE_DEADLINE);
        let work = inner.charge(target, charge, judge, seed);
        let charged = tokio::time::timeout(deadline, work)
            .await
            .unwrap_or_else(|_| Charged::Failed(format!("not recorded within {deadline:?}")));
        inner.metrics.ledger_write(match &charged {
            Charged::Unchanged => return charged,
            Charged::Written(_) => "written",
            Charged::Denied(_) => "denied",
            Charged::Failed(_) => "failed",
        });
        charged
    }

    /// Correct the ledger of `namespace`: `f` gives the next book from the
    /// current one (`None`: leave it). One write, with the precondition; a
    /// conflict waits for the next correction. `delete` removes the ledger
    /// instead (its namespace has no budget any more).
    pub async fn correct(
        &self,
        namespace: &str,
        delete: bool,
        f: impl FnOnce(&Book, bool) -> Option<Book>,
    ) -> Result<bool, kube::Error> {
        let Some(inner) = &self.inner else {
            return Ok(false);
        };
        let lock = inner.lock(namespace);
        let mut slot = lock.lock().await;
        let base = newer(slot.clone(), inner.cached(namespace));
        if delete {
            if let Some(rv) = base
                .as_ref()
                .and_then(|b| b.metadata.resource_version.clone())
            {
                let params = DeleteParams {
                    preconditions: Some(Preconditions {
                        resource_version: Some(rv),
                        uid: None,
                    }),
                    ..DeleteParams::default()
                };
                *slot = None;
                inner.api.delete(&ledger_name(namespace), &params).await?;
                return Ok(true);
            }
            return Ok(false);
        }
        let book = Book::parse(base.as_ref().and_then(|c| c.data.as_ref()));
        let Some(next) = f(&book, base.is_some()) else {
            return Ok(false);
        };
        match inner.write(namespace, base.as_ref(), &next).await {
            Ok(cm) => {
                *slot = Some(cm);
                inner.metrics.ledger_write("corrected");
                Ok(true)
            }
            Err(e) => {
                *slot = None;
                Err(e)
            }
        }
    }
}

impl Inner {
    fn key(&self, namespace: &str) -> ObjectRef<ConfigMap> {
        let ns = self.api.namespace().unwrap_or_default();
        ObjectRef::new(&ledger_name(namespace)).within(ns)
    }

    fn cached(&self, namespace: &str) -> Option<ConfigMap> {
        self.store.get(&self.key(namespace)).map(|c| (*c).clone())
    }

    fn lock(&self, namespace: &str) -> Arc<tokio::sync::Mutex<Option<ConfigMap>>> {
        let mut locks = self
            .locks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(locks.entry(namespace.to_owned()).or_default())
    }

    async fn charge(
        &self,
        target: Target<'_>,
        charge: Charge,
        judge: impl Fn(&Book) -> Judgement,
        seed: impl Fn(&[Arc<InferenceService>]) -> Book,
    ) -> Charged {
        let Target {
            namespace,
            name,
            uid,
            generation,
        } = target;
        let lock = self.lock(namespace);
        let mut slot = lock.lock().await;
        let mut current = newer(slot.clone(), self.cached(namespace));
        for _ in 0..MAX_ATTEMPTS {
            let book = match &current {
                Some(cm) => Book::parse(cm.data.as_ref()),
                None => {
                    let services: Api<InferenceService> =
                        Api::namespaced(self.client.clone(), namespace);
                    match services.list(&ListParams::default()).await {
                        Ok(list) => {
                            let listed: Vec<_> = list.items.into_iter().map(Arc::new).collect();
                            seed(&listed)
                        }
                        Err(e) => {
                            return Charged::Failed(format!(
                                "listing the namespace's services for its first ledger: {e}"
                            ));
                        }
                    }
                }
            };
            let warnings = match judge(&book) {
                Judgement::Unbudgeted => return Charged::Unchanged,
                Judgement::Deny(messages) => return Charged::Denied(messages),
                Judgement::Charge(warnings) => warnings,
            };
            // The write is named by the version it was judged on: unique
            // among this ledger's writes, and no clock's reading.
            let seq = current
                .as_ref()
                .and_then(|c| c.metadata.resource_version.as_deref())
                .unwrap_or("0");
            let next = book.with(name, Entry::admitted(charge, uid, generation, seq));
            match self.write(namespace, current.as_ref(), &next).await {
                Ok(cm) => {
                    *slot = Some(cm);
                    return Charged::Written(warnings);
                }
                // A create answered 404: infergate's own namespace is missing.
                Err(kube::Error::Api(s)) if s.code == 404 && current.is_none() => {
                    return Charged::Failed(format!(
                        "the ledger cannot be created in infergate's namespace: {}",
                        s.message
                    ));
                }
                Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {
                    self.metrics.ledger_write("conflict");
                    match self.api.get_opt(&ledger_name(namespace)).await {
                        Ok(fresh) => {
                            slot.clone_from(&fresh);
                            current = fresh;
                        }
                        Err(e) => return Charged::Failed(format!("reading the ledger: {e}")),
                    }
                }
                Err(e) => return Charged::Failed(format!("writing the ledger: {e}")),
            }
        }
        Charged::Failed(format!("{MAX_ATTEMPTS} conflicting writes in a row"))
    }

    /// Write `book` over `base` (create when there is none), with `base`'s
    /// resourceVersion as precondition.
    async fn write(
        &self,
        namespace: &str,
        base: Option<&ConfigMap>,
        book: &Book,
    ) -> Result<ConfigMap, kube::Error> {
        let labels = BTreeMap::from([
            (
                "app.kubernetes.io/managed-by".to_owned(),
                "infergate".to_owned(),
            ),
            (LEDGER_LABEL.to_owned(), LEDGER_LABEL_VALUE.to_owned()),
            (NAMESPACE_LABEL.to_owned(), namespace.to_owned()),
        ]);
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(ledger_name(namespace)),
                labels: Some(labels),
                resource_version: base.and_then(|b| b.metadata.resource_version.clone()),
                ..ObjectMeta::default()
            },
            data: Some(book.to_data()),
            ..ConfigMap::default()
        };
        let params = PostParams::default();
        match base {
            Some(_) => {
                self.api
                    .replace(&ledger_name(namespace), &params, &cm)
                    .await
            }
            None => self.api.create(&params, &cm).await,
        }
    }
}

/// The later of two reads of one object: by resourceVersion when both
/// parse as numbers (etcd's), else the watch's.
fn newer(a: Option<ConfigMap>, b: Option<ConfigMap>) -> Option<ConfigMap> {
    let rv = |c: &Option<ConfigMap>| {
        c.as_ref()
            .and_then(|c| c.metadata.resource_version.as_deref()?.parse::<u64>().ok())
    };
    match (rv(&a), rv(&b)) {
        (Some(x), Some(y)) if x > y => a,
        (Some(_), None) if b.is_none() => a,
        _ => b.or(a),
    }
}
