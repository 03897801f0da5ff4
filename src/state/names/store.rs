//! The names ledgers' store: one ConfigMap per Gateway in infergate's own
//! namespace, read from a watch and written with the `resourceVersion`
//! each write was computed from, exactly as the GPU budget ledger's store
//! ([`crate::state::ledger::store`]): every record is such a write, also
//! one the watched copy already shows; a write that lost a race is judged
//! again on a fresh read; a Gateway without a ledger yet has its first one
//! built from the services a quorum list gives (not a watch cache, which
//! may not have seen a service stored a moment ago) and created with the
//! record. Within one process the writes of one Gateway wait for each other.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio_util::sync::CancellationToken;

use crate::api::v1beta1::InferenceService;
use crate::engine::FieldError;
use crate::engine::model_names::Claim;
use crate::state::ledger::{CHARGE_DEADLINE, LEDGER_LABEL, MAX_ATTEMPTS};
use crate::state::scope::Scope;
use crate::state::watching::{log_watch_error, next_until};

use super::book::{Gateway, Holding, NameBook, key, names_on};

/// The value of [`LEDGER_LABEL`] on a names ledger.
pub const NAMES_LABEL_VALUE: &str = "names";
/// The annotation naming the Gateway a names ledger counts (`ns/name`).
pub const GATEWAY_ANNOTATION: &str = "infergate.dev/gateway";
/// How a names ledger's name begins.
pub const PREFIX: &str = "infergate-names-";

/// The name of `gateway`'s ledger: `infergate-names-<ns>.<name>` (a
/// namespace holds no dot), or, when that is longer than an object name
/// may be, `infergate-names-` and the SHA-256 of `<ns>/<name>` in hex.
#[must_use]
pub fn ledger_name(gateway: &Gateway) -> String {
    let plain = format!("{PREFIX}{}.{}", gateway.0, gateway.1);
    if plain.len() <= 253 {
        return plain;
    }
    let digest = ring::digest::digest(
        &ring::digest::SHA256,
        format!("{}/{}", gateway.0, gateway.1).as_bytes(),
    );
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("{PREFIX}{hex}")
}

/// The service names are recorded for.
#[derive(Clone, Copy, Debug)]
pub struct Holder<'a> {
    /// Its namespace.
    pub namespace: &'a str,
    /// Its name.
    pub name: &'a str,
    /// Its uid (set before validating admission).
    pub uid: Option<&'a str>,
    /// The generation the write stores.
    pub generation: Option<i64>,
}

/// What recording came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// Recorded.
    Written,
    /// Another service holds a name (the denial).
    Denied(FieldError),
    /// Not recorded in time, or the API server refused the write.
    Failed(String),
}

/// The names ledgers of every Gateway a service routed by name uses (see
/// the module docs). The default has no API server: every record fails.
#[derive(Clone, Default)]
pub struct NamesLedger {
    inner: Option<Arc<Inner>>,
}

struct Inner {
    api: Api<ConfigMap>,
    client: kube::Client,
    /// Where a first ledger's quorum list of services looks.
    scope: Scope,
    store: Store<ConfigMap>,
    /// Per Gateway ledger name: this process's writes wait for each other,
    /// and the last object this process wrote or read.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<ConfigMap>>>>>,
    /// The last book parsed from each watched ledger, by its name, with
    /// the resourceVersion it was parsed at: admission reads a ledger
    /// once per change, not once per request.
    parsed: Mutex<HashMap<String, (String, Arc<NameBook>)>>,
}

impl std::fmt::Debug for NamesLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamesLedger")
            .field("watching", &self.inner.is_some())
            .finish()
    }
}

impl NamesLedger {
    /// Watch the names ledgers in `own_namespace` until `shutdown`, and
    /// write them through `client`; first ledgers list services in `scope`.
    #[must_use]
    pub fn start(
        client: kube::Client,
        own_namespace: &str,
        scope: Scope,
        shutdown: CancellationToken,
    ) -> Self {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), own_namespace);
        let (store, writer) = reflector::store();
        let config =
            watcher::Config::default().labels(&format!("{LEDGER_LABEL}={NAMES_LABEL_VALUE}"));
        let stream =
            reflector::reflector(writer, watcher::watcher(api.clone(), config)).default_backoff();
        tokio::spawn(async move {
            futures::pin_mut!(stream);
            while let Some(event) = next_until(&mut stream, &shutdown).await {
                if let Err(e) = event {
                    log_watch_error("ConfigMap", &e, "names ledger watch");
                }
            }
        });
        Self {
            inner: Some(Arc::new(Inner {
                api,
                client,
                scope,
                store,
                locks: Mutex::new(HashMap::new()),
                parsed: Mutex::new(HashMap::new()),
            })),
        }
    }

    /// The book of `gateway` as the watch last saw it; `None` when the
    /// watch holds no ledger for it.
    #[must_use]
    pub fn cached(&self, gateway: &Gateway) -> Option<Arc<NameBook>> {
        let inner = self.inner.as_ref()?;
        let cm = inner.cached(gateway)?;
        let rv = cm.metadata.resource_version.clone().unwrap_or_default();
        let name = ledger_name(gateway);
        let mut parsed = inner
            .parsed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((at, book)) = parsed.get(&name)
            && *at == rv
            && !rv.is_empty()
        {
            return Some(Arc::clone(book));
        }
        let book = Arc::new(NameBook::parse(cm.data.as_ref()));
        parsed.insert(name, (rv, Arc::clone(&book)));
        Some(book)
    }

    /// Every Gateway the watch holds a ledger for.
    #[must_use]
    pub fn gateways(&self) -> Vec<Gateway> {
        let Some(inner) = &self.inner else {
            return Vec::new();
        };
        inner
            .store
            .state()
            .iter()
            .filter_map(|cm| {
                let gw = cm.metadata.annotations.as_ref()?.get(GATEWAY_ANNOTATION)?;
                let (ns, name) = gw.split_once('/')?;
                Some((ns.to_owned(), name.to_owned()))
            })
            .collect()
    }

    /// Record `mine` (the claims of `holder`, all on one Gateway) in that
    /// Gateway's ledger, judged on every fresh read of it, within `within`
    /// and at most the budget ledger's deadline.
    pub async fn record(&self, holder: Holder<'_>, mine: &[Claim], within: Duration) -> Recorded {
        let Some(inner) = &self.inner else {
            return Recorded::Failed("no API server to record the names with".to_owned());
        };
        let Some(first) = mine.first() else {
            return Recorded::Written;
        };
        let gateway = (first.gateway_namespace.clone(), first.gateway.clone());
        let deadline = within.min(CHARGE_DEADLINE);
        tokio::time::timeout(deadline, inner.record(&gateway, holder, mine))
            .await
            .unwrap_or_else(|_| Recorded::Failed(format!("not recorded within {deadline:?}")))
    }

    /// Correct the ledger of `gateway`: `f` gives the next book from the
    /// current one and whether the ledger exists (`None`: leave it). One
    /// write, with the precondition; a conflict waits for the next
    /// correction.
    pub async fn correct(
        &self,
        gateway: &Gateway,
        f: impl FnOnce(&NameBook, bool) -> Option<NameBook>,
    ) -> Result<bool, kube::Error> {
        let Some(inner) = &self.inner else {
            return Ok(false);
        };
        let lock = inner.lock(gateway);
        let mut slot = lock.lock().await;
        let base = newer(slot.clone(), inner.cached(gateway));
        let book = NameBook::parse(base.as_ref().and_then(|c| c.data.as_ref()));
        let Some(next) = f(&book, base.is_some()) else {
            return Ok(false);
        };
        match inner.write(gateway, base.as_ref(), &next).await {
            Ok(cm) => {
                *slot = Some(cm);
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
    fn cached(&self, gateway: &Gateway) -> Option<ConfigMap> {
        let ns = self.api.namespace().unwrap_or_default();
        let key = ObjectRef::new(&ledger_name(gateway)).within(ns);
        self.store.get(&key).map(|c| (*c).clone())
    }

    fn lock(&self, gateway: &Gateway) -> Arc<tokio::sync::Mutex<Option<ConfigMap>>> {
        let mut locks = self
            .locks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(locks.entry(ledger_name(gateway)).or_default())
    }

    /// The services of the scope, as a quorum list gives them.
    async fn list_services(&self) -> Result<Vec<InferenceService>, kube::Error> {
        let lp = ListParams::default();
        match &self.scope {
            Scope::All => Ok(Api::<InferenceService>::all(self.client.clone())
                .list(&lp)
                .await?
                .items),
            Scope::Namespaces(list) => {
                let mut out = Vec::new();
                for ns in list.iter() {
                    let api: Api<InferenceService> = Api::namespaced(self.client.clone(), ns);
                    out.extend(api.list(&lp).await?.items);
                }
                Ok(out)
            }
        }
    }

    async fn record(&self, gateway: &Gateway, holder: Holder<'_>, mine: &[Claim]) -> Recorded {
        let me = key(holder.namespace, holder.name);
        let names = names_on(gateway, mine);
        let lock = self.lock(gateway);
        let mut slot = lock.lock().await;
        let mut current = newer(slot.clone(), self.cached(gateway));
        for _ in 0..MAX_ATTEMPTS {
            let book = match &current {
                Some(cm) => NameBook::parse(cm.data.as_ref()),
                None => match self.list_services().await {
                    Ok(listed) => NameBook::of_services(gateway, &listed),
                    Err(e) => {
                        return Recorded::Failed(format!(
                            "listing the services for the Gateway's first names ledger: {e}"
                        ));
                    }
                },
            };
            if let Some(denial) = book.judge(gateway, &me, mine, holder.namespace) {
                return Recorded::Denied(denial);
            }
            let seq = current
                .as_ref()
                .and_then(|c| c.metadata.resource_version.as_deref())
                .unwrap_or("0");
            let entry = Holding::admitted(names.clone(), holder.uid, holder.generation, seq);
            let next = book.with(&me, entry);
            match self.write(gateway, current.as_ref(), &next).await {
                Ok(cm) => {
                    *slot = Some(cm);
                    return Recorded::Written;
                }
                Err(kube::Error::Api(s)) if s.code == 404 && current.is_none() => {
                    return Recorded::Failed(format!(
                        "the names ledger cannot be created in infergate's namespace: {}",
                        s.message
                    ));
                }
                Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {
                    match self.api.get_opt(&ledger_name(gateway)).await {
                        Ok(fresh) => {
                            slot.clone_from(&fresh);
                            current = fresh;
                        }
                        Err(e) => {
                            return Recorded::Failed(format!("reading the names ledger: {e}"));
                        }
                    }
                }
                Err(e) => return Recorded::Failed(format!("writing the names ledger: {e}")),
            }
        }
        Recorded::Failed(format!("{MAX_ATTEMPTS} conflicting writes in a row"))
    }

    /// Write `book` over `base` (create when there is none), with `base`'s
    /// resourceVersion as precondition.
    async fn write(
        &self,
        gateway: &Gateway,
        base: Option<&ConfigMap>,
        book: &NameBook,
    ) -> Result<ConfigMap, kube::Error> {
        let labels = BTreeMap::from([
            (
                "app.kubernetes.io/managed-by".to_owned(),
                "infergate".to_owned(),
            ),
            (LEDGER_LABEL.to_owned(), NAMES_LABEL_VALUE.to_owned()),
        ]);
        let annotations = BTreeMap::from([(
            GATEWAY_ANNOTATION.to_owned(),
            format!("{}/{}", gateway.0, gateway.1),
        )]);
        let name = ledger_name(gateway);
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(labels),
                annotations: Some(annotations),
                resource_version: base.and_then(|b| b.metadata.resource_version.clone()),
                ..ObjectMeta::default()
            },
            data: Some(book.to_data()),
            ..ConfigMap::default()
        };
        let params = PostParams::default();
        match base {
            Some(_) => self.api.replace(&name, &params, &cm).await,
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
