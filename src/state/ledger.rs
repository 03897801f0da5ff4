//! The GPU budget ledger: what every service of a namespace is charged,
//! kept in one ConfigMap per namespace in infergate's own namespace
//! (`infergate-budget-<namespace>`, labelled [`LEDGER_LABEL`]) so that the
//! API server serialises the charges of every webhook replica: each write
//! carries the `resourceVersion` it was computed from, and a write that
//! lost a race is recomputed from a fresh read ([`Ledger::charge`]).
//! Tenants have no access to infergate's namespace.
//!
//! Reads come from a watch of the ledgers; the API is called only to
//! write, and to read again after a conflict.
//! [`book`] is the data (pure); [`store`] reads and writes it (the I/O).
//! The admission webhook judges a charge on a book
//! ([`crate::webhook::charging`]) and the reconciler corrects it
//! ([`crate::reconcile::accounting`]).

pub mod book;
pub mod store;

#[cfg(test)]
mod tests;

pub use store::{
    CHARGE_DEADLINE, Charged, Judgement, LEDGER_LABEL, LEDGER_LABEL_VALUE, Ledger, MAX_ATTEMPTS,
    NAMESPACE_LABEL, Target, ledger_name,
};
