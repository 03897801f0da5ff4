//! The names ledgers: which service holds each (Gateway, hostname, served
//! name), kept in one ConfigMap per Gateway in infergate's own namespace
//! (`infergate-names-<namespace>.<name>`, labelled
//! `infergate.dev/ledger=names`, the Gateway in the annotation
//! [`GATEWAY_ANNOTATION`]) so that the API server serialises the records
//! of every webhook replica, as it does the GPU budget ledger's charges
//! ([`crate::state::ledger`]): each write carries the `resourceVersion` it
//! was judged on. Tenants have no access to infergate's namespace.
//!
//! Only services routed by name hold names
//! ([`crate::engine::model_names::claims`]); a service routed by path
//! costs admission nothing here. Reads come from a watch of the ledgers;
//! the API is called only to write, to read again after a conflict, and
//! to list the services once for a Gateway's first ledger.
//! [`book`] is the data (pure); [`store`] reads and writes it;
//! [`correction`] corrects it from the services (the reconciler's leader);
//! the admission webhook judges and records names
//! ([`crate::webhook::naming`]).

pub mod book;
pub mod correction;
pub mod store;

#[cfg(test)]
mod tests;

pub use book::{Gateway, NameBook};
pub use correction::{Deletion, TICK, correct_names};
pub use store::{
    GATEWAY_ANNOTATION, Holder, NAMES_LABEL_VALUE, NamesLedger, Recorded, ledger_name,
};
